//! Short renderings of configured values for problem messages.

use crate::names::NameError;

/// `value` for an error message, shortened if it is long.
pub(super) fn shorten(value: &str) -> String {
    const SHOWN: usize = 64;
    if value.chars().count() <= SHOWN {
        format!("{value:?}")
    } else {
        let head: String = value.chars().take(SHOWN).collect();
        format!("{head:?}...")
    }
}

/// The message for a name that `RoleName` / `InstanceId` refused.
pub(super) fn name_message(what: &str, value: &str, err: &NameError) -> String {
    format!("invalid {what} {}: {err}", shorten(value))
}
