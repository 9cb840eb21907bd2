//! What `run` tells systemd about its roles: the one-line `STATUS=` summary and when the
//! instance is ready (`READY=1`), both from a [`Snapshot`] of the manager (pure, unit-tested).

use std::collections::BTreeSet;

use crate::names::RoleName;
use crate::placement::Frozen;
use crate::status::RoleState;

/// The longest `STATUS=` line sent, in bytes (a longer one is cut and ends with `…`).
pub(crate) const MAX_LEN: usize = 400;

/// The longest failure text quoted for a failing role, in bytes.
const MAX_ERROR_LEN: usize = 120;

/// One managed role as the summary sees it.
#[derive(Debug, Clone)]
pub(crate) struct RoleLine {
    pub(crate) role: RoleName,
    pub(crate) state: RoleState,
    /// Whether this instance campaigns for it (`campaign: false`: observed only).
    pub(crate) campaign: bool,
    /// What keeps it from campaigning or renewing (the role keeps retrying).
    pub(crate) error: Option<String>,
    /// Another live process uses this instance id.
    pub(crate) duplicate: bool,
}

/// The manager's state as far as systemd is told.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    /// Every managed role, sorted by name.
    pub(crate) roles: Vec<RoleLine>,
    pub(crate) connected: bool,
    /// The bucket watcher has delivered the bucket's current state.
    pub(crate) caught_up: bool,
    pub(crate) frozen: Option<Frozen>,
    pub(crate) draining: bool,
    /// Released its roles for ill health (the health check fails or it cools down).
    pub(crate) unhealthy: bool,
}

impl Snapshot {
    /// Whether the instance is ready for systemd (`READY=1`): connected to NATS, the bucket
    /// watcher has delivered the bucket's current state (so every role knows its holder or
    /// that it is vacant), and every configured role takes part: campaigning (`CANDIDATE`,
    /// also while it waits out a young bucket or retries a failure), held (`LEADER`),
    /// followed or observed (`FOLLOWER`), or released and cooling down (`DEMOTED`) — none
    /// still `INIT` or `STOPPED`.
    pub(crate) fn ready(&self, configured: &BTreeSet<RoleName>) -> bool {
        self.connected
            && self.caught_up
            && configured.iter().all(|name| {
                self.roles.iter().any(|r| {
                    r.role == *name
                        && matches!(
                            r.state,
                            RoleState::Candidate
                                | RoleState::Leader
                                | RoleState::Follower
                                | RoleState::Demoted
                        )
                })
            })
    }

    /// The one-line summary: `holding 3 of 10 roles, observing 2` followed by what is
    /// wrong or special, each after `; ` — `not connected to NATS`, `waiting for the bucket
    /// watcher`, `1 releasing or cooling down`, `2 failing (scheduler: …)`, `unhealthy (roles
    /// released)`, `draining`, `placement frozen by …`, `another process uses this instance
    /// id`. Nothing in it counts time, so it changes only when the state does.
    pub(crate) fn line(&self) -> String {
        let campaigning = self.roles.iter().filter(|r| r.campaign).count();
        let held = self
            .roles
            .iter()
            .filter(|r| r.state == RoleState::Leader)
            .count();
        let observed = self.roles.len() - campaigning;
        let mut line = format!(
            "holding {held} of {campaigning} role{}",
            if campaigning == 1 { "" } else { "s" }
        );
        if observed > 0 {
            line.push_str(&format!(", observing {observed}"));
        }
        let mut parts: Vec<String> = Vec::new();
        if !self.connected {
            parts.push("not connected to NATS".to_owned());
        }
        if !self.caught_up {
            parts.push("waiting for the bucket watcher".to_owned());
        }
        let releasing = self
            .roles
            .iter()
            .filter(|r| r.state == RoleState::Demoted)
            .count();
        if releasing > 0 {
            parts.push(format!("{releasing} releasing or cooling down"));
        }
        let failing: Vec<&RoleLine> = self.roles.iter().filter(|r| r.error.is_some()).collect();
        if let Some(first) = failing.first() {
            let error = cut(first.error.as_deref().unwrap_or_default(), MAX_ERROR_LEN);
            parts.push(format!(
                "{} failing ({}: {error})",
                failing.len(),
                first.role
            ));
        }
        if self.unhealthy {
            parts.push("unhealthy (roles released)".to_owned());
        }
        if self.draining {
            parts.push("draining".to_owned());
        }
        if let Some(frozen) = &self.frozen {
            parts.push(frozen_text(frozen));
        }
        if self.roles.iter().any(|r| r.duplicate) {
            parts.push("another process uses this instance id".to_owned());
        }
        for part in parts {
            line.push_str("; ");
            line.push_str(&part);
        }
        one_line(&line)
    }
}

/// Why voluntary moves are frozen, without the storm breaker's countdown.
fn frozen_text(frozen: &Frozen) -> String {
    match frozen {
        Frozen::Operator { reason, by, .. } => {
            let mut text = "placement frozen".to_owned();
            if !by.is_empty() {
                text.push_str(&format!(" by {by}"));
            }
            if !reason.is_empty() {
                text.push_str(&format!(": {reason}"));
            }
            text
        }
        Frozen::Member { members } => {
            let names: Vec<&str> = members.iter().map(|m| m.as_str()).collect();
            format!(
                "placement frozen by the configuration of {}",
                names.join(", ")
            )
        }
        Frozen::Storm { vanished, of, .. } => {
            format!("placement frozen by the storm breaker ({vanished} of {of} members vanished)")
        }
    }
}

/// `text` as one line of at most [`MAX_LEN`] bytes: control characters (a newline in an
/// operator's freeze reason or a server's error) become spaces.
pub(crate) fn one_line(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    cut(&flat, MAX_LEN)
}

/// `text` cut to at most `max` bytes on a character boundary, ending with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let ellipsis = '…';
    let mut end = max.saturating_sub(ellipsis.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::InstanceId;

    fn role(name: &str, state: RoleState) -> RoleLine {
        RoleLine {
            role: RoleName::new(name).expect("role"),
            state,
            campaign: true,
            error: None,
            duplicate: false,
        }
    }

    fn snapshot(roles: Vec<RoleLine>) -> Snapshot {
        Snapshot {
            roles,
            connected: true,
            caught_up: true,
            ..Snapshot::default()
        }
    }

    fn names(names: &[&str]) -> BTreeSet<RoleName> {
        names
            .iter()
            .map(|n| RoleName::new(*n).expect("role"))
            .collect()
    }

    #[test]
    fn the_line_counts_held_campaigning_and_observed_roles() {
        let mut roles: Vec<RoleLine> = (0..10)
            .map(|i| {
                role(
                    &format!("r{i}"),
                    if i < 3 {
                        RoleState::Leader
                    } else {
                        RoleState::Follower
                    },
                )
            })
            .collect();
        assert_eq!(snapshot(roles.clone()).line(), "holding 3 of 10 roles");
        roles.push(RoleLine {
            campaign: false,
            ..role("watched", RoleState::Follower)
        });
        assert_eq!(snapshot(roles).line(), "holding 3 of 10 roles, observing 1");
        assert_eq!(
            snapshot(vec![role("a", RoleState::Candidate)]).line(),
            "holding 0 of 1 role"
        );
    }

    #[test]
    fn the_line_says_what_is_wrong_and_why_placement_is_frozen() {
        let mut s = snapshot(vec![
            role("a", RoleState::Leader),
            RoleLine {
                error: Some("permission denied\non role.b".to_owned()),
                ..role("b", RoleState::Candidate)
            },
            role("c", RoleState::Demoted),
        ]);
        s.connected = false;
        s.frozen = Some(Frozen::Operator {
            reason: "upgrade\nto 0.2".to_owned(),
            by: "alice".to_owned(),
            at: "2026-01-01T00:00:00Z".to_owned(),
        });
        s.draining = true;
        assert_eq!(
            s.line(),
            "holding 1 of 3 roles; not connected to NATS; 1 releasing or cooling down; \
             1 failing (b: permission denied on role.b); draining; \
             placement frozen by alice: upgrade to 0.2"
        );
        s.frozen = Some(Frozen::Storm {
            vanished: 3,
            of: 5,
            stable_in_ms: 1234,
        });
        assert!(
            s.line()
                .ends_with("placement frozen by the storm breaker (3 of 5 members vanished)"),
            "{}",
            s.line()
        );
        s.frozen = Some(Frozen::Member {
            members: vec![InstanceId::new("node-b").expect("id")],
        });
        assert!(
            s.line()
                .ends_with("placement frozen by the configuration of node-b")
        );
    }

    #[test]
    fn the_line_is_one_bounded_line() {
        let mut s = snapshot(vec![role("a", RoleState::Leader)]);
        s.frozen = Some(Frozen::Operator {
            reason: "é".repeat(600),
            by: String::new(),
            at: String::new(),
        });
        let line = s.line();
        assert!(line.len() <= MAX_LEN, "{}", line.len());
        assert!(line.ends_with('…'));
        assert!(!line.contains('\n'));
    }

    #[test]
    fn ready_needs_the_connection_the_watcher_and_every_configured_role_taking_part() {
        let all = names(&["a", "b"]);
        let s = snapshot(vec![
            role("a", RoleState::Leader),
            role("b", RoleState::Candidate),
        ]);
        assert!(s.ready(&all));
        for state in [RoleState::Follower, RoleState::Demoted] {
            assert!(snapshot(vec![role("a", state), role("b", state)]).ready(&all));
        }
        for state in [RoleState::Init, RoleState::Stopped] {
            assert!(
                !snapshot(vec![role("a", RoleState::Leader), role("b", state)]).ready(&all),
                "{state}"
            );
        }
        // A configured role the manager does not report yet.
        assert!(!snapshot(vec![role("a", RoleState::Leader)]).ready(&all));
        let mut down = s.clone();
        down.connected = false;
        assert!(!down.ready(&all));
        let mut replaying = s;
        replaying.caught_up = false;
        assert!(!replaying.ready(&all));
        // No roles at all: ready once connected and caught up.
        assert!(snapshot(Vec::new()).ready(&BTreeSet::new()));
    }
}
