//! Operator tooling (cargo feature `tooling`, part of the default `cli` feature): election
//! histories — the recorder, the checker of `docs/reliability.md`'s invariants and the HTML
//! timeline — reading and evicting leases straight from the bucket, and the lease value format.
//! The `nats-roles` binary is built on it; an embedding application does not need it.

/// Election histories: recording, loading, checking and rendering (`docs/reliability.md`).
pub mod history {
    pub use crate::history::{
        Event, Failover, FaultSpan, HistoryRecorder, Invariant, LoadError, Loaded, OpKind,
        OpResult, Phase, Record, Report, Source, Stats, TermSpan, TrialInfo, Vacancy, Violation,
        check, check_loaded, load_paths, mono_now_ns, real_mono_now_ns, render_html,
    };
}

/// Reading a bucket's leases and members, following its transitions, and evicting a holder,
/// straight from NATS (what `nats-roles status`, `watch` and `evict` and the HTTP API use).
pub mod inspect {
    pub use crate::inspect::{
        Candidates, EventView, EvictError, Evicted, Expect, HeldRole, HolderState, HolderUpdate,
        Inspector, InstanceList, InstanceView, LocalView, MAX_SHOWN_KEY, MAX_SHOWN_META,
        MAX_SHOWN_VALUE, RoleList, RoleView, TransitionTracker, Violation, format_time, instances,
        redact_token, shown_meta,
    };
}

/// The lease value stored under `role.<name>` (`docs/protocol.md`, P2).
pub mod value {
    pub use crate::value::{
        HolderValue, LeaseValue, MAX_RELEASED, MAX_TTL_MS, ReleasedTerm, SESSION_PREFIX,
        SessionValue, VALUE_VERSION, now_rfc3339, parse_session_key, session_key,
    };
}

/// Who follows whose sessions (`docs/protocol.md`, Q8): the successor order of a member.
pub mod presence {
    pub use crate::core::presence::{SUCCESSORS, follow_order};
}
