//! The YAML parser's options (resource budgets, strict booleans) and its location numbers,
//! shared by the typed parse (`load`) and the location map (`locate`).

use super::MAX_CONFIG_BYTES;

/// The options of every configuration parse: resource budgets sized to [`MAX_CONFIG_BYTES`].
pub(super) fn parse_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_events: 100_000,
            max_aliases: 1_000,
            max_anchors: 1_000,
            max_depth: 32,
            flow_nesting_limit: 32,
            max_documents: 1,
            max_nodes: 50_000,
            max_total_scalar_bytes: MAX_CONFIG_BYTES,
            max_total_comment_bytes: MAX_CONFIG_BYTES,
            max_merge_keys: 1_000,
            max_recorded_anchor_events: 100_000,
            max_recorded_anchor_bytes: MAX_CONFIG_BYTES,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 100_000,
            max_replay_stack_depth: 16,
        },
        strict_booleans: true,
        with_snippet: false,
    }
}

pub(super) fn to_usize(n: u64) -> Option<usize> {
    usize::try_from(n).ok().filter(|n| *n > 0)
}
