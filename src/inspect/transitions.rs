//! One JSON event per transition, with the previous holder, for `GET /api/events` (its stream
//! and its journal) and `nats-roles watch`.

use std::collections::HashMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::redact::redact_token;
use super::view::format_time;
use crate::manager::{HolderInfo, RoleEvent};
use crate::names::{InstanceId, RoleName};

/// A transition, as sent on `GET /api/events` (one SSE `data:` line each) and printed by
/// `nats-roles watch --json`. Tokens are redacted; `at` is when it was seen (RFC 3339).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventView {
    /// First event of every stream: who is answering.
    Hello {
        /// The answering instance (`None` from the CLI).
        instance: Option<String>,
        /// The bucket.
        bucket: String,
        /// The instance's event journal: the sequence number of the newest event recorded
        /// when the stream opened (`0`: none yet). Events up to it are in
        /// `GET /api/events?since=…`, later ones come on the stream (`None` from the CLI).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cursor: Option<u64>,
        /// Whether the answering instance has admin actions configured (an admin token),
        /// so a dashboard can tell "no token typed" from "admin actions are off here"
        /// (`None` from the CLI).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        admin: Option<bool>,
        /// When.
        at: String,
    },
    /// The holder of a role at the start of `nats-roles watch`.
    Current {
        /// The role.
        role: String,
        /// The holder (`None`: foreign value).
        holder: Option<String>,
        /// The term.
        term: Option<u64>,
        /// The redacted token.
        token: Option<String>,
        /// When.
        at: String,
    },
    /// A role got a new holder (a new term), seen through the bucket.
    Holder {
        /// The role.
        role: String,
        /// The new holder (`None`: a foreign value).
        holder: Option<String>,
        /// The holder before (across a vacancy), if known.
        previous: Option<String>,
        /// Whether the role moved from one instance to another.
        handover: bool,
        /// The new term.
        term: Option<u64>,
        /// The redacted token of the new term.
        token: Option<String>,
        /// When.
        at: String,
    },
    /// A role became vacant (released, evicted or expired).
    Vacant {
        /// The role.
        role: String,
        /// The holder until now, if known.
        previous: Option<String>,
        /// When.
        at: String,
    },
    /// The answering instance became the holder.
    Promoted {
        /// The role.
        role: String,
        /// The answering instance.
        instance: String,
        /// The new term.
        term: u64,
        /// When.
        at: String,
    },
    /// The answering instance stopped holding a role.
    Demoted {
        /// The role.
        role: String,
        /// The answering instance.
        instance: String,
        /// The term that ended.
        term: u64,
        /// Why (`shutdown`, `released`, `evicted`, `deadline_expired`, ...).
        reason: String,
        /// When.
        at: String,
    },
    /// Another live process uses the answering instance's id.
    DuplicateInstance {
        /// The role where it was seen.
        role: String,
        /// The answering instance.
        instance: String,
        /// When.
        at: String,
    },
    /// A role of the answering instance cannot campaign or renew because of a failure (it
    /// keeps retrying).
    Failed {
        /// The role.
        role: String,
        /// The answering instance.
        instance: String,
        /// The error (`permission_denied`, `server_error 10047 (…)`, ...).
        error: String,
        /// When.
        at: String,
    },
    /// The failure last reported for a role of the answering instance is over.
    Recovered {
        /// The role.
        role: String,
        /// The answering instance.
        instance: String,
        /// When.
        at: String,
    },
    /// Voluntary placement moves were frozen, or the freeze changed (its cause or details).
    Frozen {
        /// `operator` (the freeze record), `member` (a member's configuration) or `storm`
        /// (the storm breaker).
        cause: String,
        /// The freeze in words: the operator's reason and who froze, the members whose
        /// configuration freezes, or how many members vanished.
        detail: String,
        /// When the answering instance saw it.
        at: String,
    },
    /// The answering instance's part in a role group changed (protocol Q14): the count it
    /// acts on, or the members it holds.
    Group {
        /// The group.
        group: String,
        /// The count the answering instance acts on.
        count: u32,
        /// The indexes of the members it holds now.
        held: Vec<u32>,
        /// When.
        at: String,
    },
    /// Voluntary placement moves are no longer frozen.
    Unfrozen {
        /// When the answering instance saw it.
        at: String,
    },
    /// Events were lost (a slow reader); re-read `GET /api/roles`.
    Resync {
        /// How many events were lost.
        missed: u64,
        /// When.
        at: String,
    },
}

#[derive(Debug, Clone, Default)]
struct Last {
    /// The last holder (kept across a vacancy, to report hand-overs).
    holder: Option<String>,
    term: Option<u64>,
    foreign: bool,
    vacant: bool,
}

/// Turns holder observations into transitions: drops renewals (same holder, same term) and
/// remembers the previous holder across a vacancy, so `A → vacant → B` reads as a hand-over
/// from A to B.
#[derive(Debug, Clone, Default)]
pub struct TransitionTracker {
    roles: HashMap<RoleName, Last>,
}

impl TransitionTracker {
    /// A tracker that knows the current holders.
    #[must_use]
    pub fn new<'a>(current: impl IntoIterator<Item = &'a HolderInfo>) -> Self {
        let mut tracker = Self::default();
        for info in current {
            let _ = tracker.holder(&info.role, Some(info), SystemTime::now());
        }
        tracker
    }

    /// Records the state of a role key (`None`: vacant); the transition, if it is one.
    pub fn holder(
        &mut self,
        role: &RoleName,
        info: Option<&HolderInfo>,
        at: SystemTime,
    ) -> Option<EventView> {
        let last = self.roles.entry(role.clone()).or_default();
        let at = format_time(at);
        match info {
            Some(info) if info.holder.is_none() && !info.foreign => {
                // A vacancy as the manager reports it (HolderChanged without a holder).
                self.vacant(role, at)
            }
            Some(info) => {
                let holder = info.holder.as_ref().map(ToString::to_string);
                if !last.vacant
                    && last.holder == holder
                    && last.term == info.term
                    && last.foreign == info.foreign
                    && (last.holder.is_some() || last.foreign)
                {
                    return None; // a renewal
                }
                let previous = last.holder.clone();
                let handover = previous.is_some() && holder.is_some() && previous != holder;
                *last = Last {
                    holder: holder.clone(),
                    term: info.term,
                    foreign: info.foreign,
                    vacant: false,
                };
                Some(EventView::Holder {
                    role: role.to_string(),
                    holder,
                    previous,
                    handover,
                    term: info.term,
                    token: info.token.as_ref().map(redact_token),
                    at,
                })
            }
            None => self.vacant(role, at),
        }
    }

    fn vacant(&mut self, role: &RoleName, at: String) -> Option<EventView> {
        let last = self.roles.entry(role.clone()).or_default();
        if last.vacant {
            return None;
        }
        last.vacant = true;
        Some(EventView::Vacant {
            role: role.to_string(),
            previous: last.holder.clone(),
            at,
        })
    }

    /// The view of a manager event (`instance`: the manager's id); `None` for events that are
    /// no transition (renewals never are events).
    pub fn event(&mut self, event: &RoleEvent, instance: &InstanceId) -> Option<EventView> {
        let now = SystemTime::now();
        let at = format_time(now);
        let instance = instance.to_string();
        match event {
            RoleEvent::Promoted { role, term } => Some(EventView::Promoted {
                role: role.to_string(),
                instance,
                term: *term,
                at,
            }),
            RoleEvent::Demoted { role, term, reason } => Some(EventView::Demoted {
                role: role.to_string(),
                instance,
                term: *term,
                reason: reason.as_str().to_owned(),
                at,
            }),
            RoleEvent::HolderChanged(info) => self.holder(&info.role, Some(info), now),
            RoleEvent::DuplicateInstance { role } => Some(EventView::DuplicateInstance {
                role: role.to_string(),
                instance,
                at,
            }),
            RoleEvent::Failed { role, kind } => Some(EventView::Failed {
                role: role.to_string(),
                instance,
                error: kind.to_string(),
                at,
            }),
            RoleEvent::Recovered { role } => Some(EventView::Recovered {
                role: role.to_string(),
                instance,
                at,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::KeyState;
    use crate::value::{HolderValue, LeaseValue};
    use uuid::Uuid;

    fn held(role: &str, holder: &str, term: u64, revision: u64) -> HolderInfo {
        let value = LeaseValue {
            v: crate::value::VALUE_VERSION,
            holder: InstanceId::new(holder).unwrap(),
            incarnation: Uuid::nil(),
            session: uuid::Uuid::nil(),
            session_key: crate::value::session_key(&InstanceId::new(holder).unwrap(), 3000),
            nonce: Uuid::from_u128(u128::from(term)),
            term: Some(term),
            priority: 0,
            ttl_ms: 3000,
            meta: Default::default(),
            acquired_at: None,
            renewed_at: None,
        };
        let state = KeyState::Held {
            revision,
            value: HolderValue::Lease(Box::new(value)),
        };
        HolderInfo::from_state(&RoleName::new(role).unwrap(), &state, 1, None).unwrap()
    }

    fn kind(e: &Option<EventView>) -> String {
        match e {
            None => "-".into(),
            Some(EventView::Holder {
                holder,
                previous,
                handover,
                ..
            }) => format!("holder {holder:?} from {previous:?} handover={handover}"),
            Some(EventView::Vacant { previous, .. }) => format!("vacant from {previous:?}"),
            Some(other) => format!("{other:?}"),
        }
    }

    #[test]
    fn renewals_are_dropped_and_hand_overs_span_vacancies() {
        let r = RoleName::new("scheduler").unwrap();
        let now = SystemTime::now();
        let mut t = TransitionTracker::new(&[held("scheduler", "node-a", 5, 5)]);
        assert_eq!(
            kind(&t.holder(&r, Some(&held("scheduler", "node-a", 5, 6)), now)),
            "-"
        );
        assert_eq!(
            kind(&t.holder(&r, None, now)),
            "vacant from Some(\"node-a\")"
        );
        assert_eq!(kind(&t.holder(&r, None, now)), "-");
        assert_eq!(
            kind(&t.holder(&r, Some(&held("scheduler", "node-b", 8, 8)), now)),
            "holder Some(\"node-b\") from Some(\"node-a\") handover=true"
        );
        // The same instance winning again is a new term, not a hand-over.
        let _ = t.holder(&r, None, now);
        assert_eq!(
            kind(&t.holder(&r, Some(&held("scheduler", "node-b", 10, 10)), now)),
            "holder Some(\"node-b\") from Some(\"node-b\") handover=false"
        );
        // A direct takeover (no vacancy seen).
        assert_eq!(
            kind(&t.holder(&r, Some(&held("scheduler", "node-c", 12, 12)), now)),
            "holder Some(\"node-c\") from Some(\"node-b\") handover=true"
        );
        // A role never seen before.
        let other = RoleName::new("gc").unwrap();
        assert_eq!(
            kind(&t.holder(&other, Some(&held("gc", "node-a", 3, 3)), now)),
            "holder Some(\"node-a\") from None handover=false"
        );
    }

    #[test]
    fn events_serialise_with_a_type_tag() {
        let mut t = TransitionTracker::default();
        let me = InstanceId::new("node-a").unwrap();
        let ev = t
            .event(
                &RoleEvent::Promoted {
                    role: RoleName::new("x").unwrap(),
                    term: 4,
                },
                &me,
            )
            .unwrap();
        let json = serde_json::to_value(&ev).unwrap();
        assert_eq!(json["type"], "promoted");
        assert_eq!(json["term"], 4);
        assert_eq!(json["instance"], "node-a");
        let back: EventView = serde_json::from_value(json).unwrap();
        assert_eq!(back, ev);
    }
}
