//! How `nats-roles exec` waits for its role: one stderr line naming the holder it waits for
//! (again only when the holder changes), one when it got the role after waiting, and when it
//! gives up — at once under `--no-wait` when another holds the role, after `--wait`.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::status::RoleState;
use crate::{InstanceId, RoleName, RoleStatus};

/// Exit status of `exec` when it did not get the role (`--no-wait`, `--wait`):
/// `EX_TEMPFAIL` of sysexits.h, as FreeBSD's `lockf` uses for a lock held elsewhere; apart
/// from 0, 1, 2, 126, 127 and 128 + N. `--conflict-exit-code` changes it.
pub(crate) const EXIT_NOT_ACQUIRED: u8 = 75;

/// Who holds the role, as far as `exec` waits for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Holder {
    /// The holder's instance id (`None`: a value nats-roles cannot read).
    id: Option<InstanceId>,
    /// Its term.
    term: Option<u64>,
}

impl Holder {
    /// The holder another process is, from the role's status: `None` while this instance
    /// holds it, contends for it or does not know yet, and while the holder is this
    /// instance's id (its own earlier lease, which it takes back) unless another live process
    /// uses the same id.
    fn of(status: &RoleStatus, me: &InstanceId) -> Option<Self> {
        if status.state != RoleState::Follower {
            return None;
        }
        if status.foreign_holder {
            return Some(Self {
                id: None,
                term: status.term,
            });
        }
        let id = status.leader_id.clone()?;
        if &id == me && !status.duplicate_instance {
            return None;
        }
        Some(Self {
            id: Some(id),
            term: status.term,
        })
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.id {
            Some(id) => write!(f, "{id}")?,
            None => f.write_str("a value nats-roles cannot read")?,
        }
        match self.term {
            Some(term) => write!(f, " (term {term})"),
            None => Ok(()),
        }
    }
}

/// What `exec` follows while it waits: the role's status; for a role with `slots` (Q15) one
/// status standing for every slot — a slot held by another process only while every slot
/// is (then `--no-wait` gives up), otherwise a slot this process may still get.
pub(super) fn status_of(
    manager: &crate::RoleManager,
    role: &RoleName,
    slots: u32,
    me: &InstanceId,
) -> Option<tokio::sync::watch::Receiver<RoleStatus>> {
    if slots <= 1 {
        return manager.role(role).map(|h| h.watch());
    }
    let mut each: Vec<tokio::sync::watch::Receiver<RoleStatus>> = (0..slots)
        .filter_map(|k| RoleName::for_slot(role, k).ok())
        .filter_map(|slot| manager.role(&slot).map(|h| h.watch()))
        .collect();
    let first = each.first()?.borrow().clone();
    let (tx, rx) = tokio::sync::watch::channel(first);
    let me = me.clone();
    tokio::spawn(async move {
        loop {
            let statuses: Vec<RoleStatus> = each
                .iter_mut()
                .map(|r| r.borrow_and_update().clone())
                .collect();
            let open = statuses.iter().find(|s| Holder::of(s, &me).is_none());
            let summary = open.unwrap_or(&statuses[0]).clone();
            if tx.send(summary).is_err() {
                return;
            }
            let changed =
                futures_util::future::select_all(each.iter_mut().map(|r| Box::pin(r.changed())))
                    .await;
            if changed.0.is_err() {
                return;
            }
        }
    });
    Some(rx)
}

/// What to do after a status change.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Keep waiting.
    Wait,
    /// Give up (`--no-wait`, another holds the role), with the message for stderr.
    GiveUp(String),
}

/// The wait of one `exec` for its role.
#[derive(Debug)]
pub(super) struct Wait {
    role: RoleName,
    /// The role's slots (1: none): with slots, the wait is for any one of them.
    slots: u32,
    me: InstanceId,
    no_wait: bool,
    timeout: Option<Duration>,
    began: Instant,
    /// The holder of the last waiting line printed.
    shown: Option<Holder>,
    /// The holder last seen (for the message when the timeout expires).
    last: Option<Holder>,
}

impl Wait {
    /// Waiting from now on.
    pub(super) fn new(
        role: RoleName,
        me: InstanceId,
        no_wait: bool,
        timeout: Option<Duration>,
    ) -> Self {
        Self {
            role,
            slots: 1,
            me,
            no_wait,
            timeout,
            began: Instant::now(),
            shown: None,
            last: None,
        }
    }

    /// The wait is for any one of the role's `slots` (protocol Q15).
    pub(super) fn with_slots(mut self, slots: u32) -> Self {
        self.slots = slots;
        self
    }

    /// The role, and who holds it, in a message: `role R … by H`, or with slots `every slot
    /// of role R … (one by H)`.
    fn held(&self, holder: &Holder) -> String {
        if self.slots > 1 {
            format!(
                "all {} slots of role {} are held (one by {holder})",
                self.slots, self.role
            )
        } else {
            format!("role {} is held by {holder}", self.role)
        }
    }

    /// When `--wait` gives up.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.timeout.map(|t| self.began + t)
    }

    /// The role's status changed while waiting: the line to print, if any, and the verdict.
    pub(super) fn observe(&mut self, status: &RoleStatus) -> (Option<String>, Verdict) {
        let Some(holder) = Holder::of(status, &self.me) else {
            return (None, Verdict::Wait);
        };
        self.last = Some(holder.clone());
        if self.no_wait {
            return (
                None,
                Verdict::GiveUp(format!("{}; not waiting (--no-wait)", self.held(&holder))),
            );
        }
        if self.shown.as_ref() == Some(&holder) {
            return (None, Verdict::Wait);
        }
        let line = match (self.timeout, self.slots > 1) {
            (Some(t), false) => format!(
                "waiting up to {} for role {} held by {holder}…",
                humantime::format_duration(t),
                self.role
            ),
            (None, false) => format!("waiting for role {} held by {holder}…", self.role),
            (Some(t), true) => format!(
                "waiting up to {} for a slot: {}…",
                humantime::format_duration(t),
                self.held(&holder)
            ),
            (None, true) => format!("waiting for a slot: {}…", self.held(&holder)),
        };
        self.shown = Some(holder);
        (Some(line), Verdict::Wait)
    }

    /// The command is about to start in `term`: the line to print when `exec` said it waits.
    pub(super) fn got(&self, term: u64) -> Option<String> {
        self.shown.as_ref()?;
        Some(format!(
            "got role {} (term {term}) after {:.1}s",
            self.role,
            self.began.elapsed().as_secs_f64()
        ))
    }

    /// The message when `--wait` expired.
    pub(super) fn timed_out(&self) -> String {
        let waited = humantime::format_duration(self.timeout.unwrap_or_default());
        match &self.last {
            Some(holder) => format!(
                "gave up waiting for role {} after {waited}: held by {holder}",
                self.role
            ),
            None => format!("did not get role {} within {waited}", self.role),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: RoleState, holder: Option<&str>, term: Option<u64>) -> RoleStatus {
        let mut s = RoleStatus::new(
            RoleName::new("lock").expect("name"),
            true,
            crate::store::TtlMode::PerKey,
        );
        s.state = state;
        s.leader_id = holder.map(|h| InstanceId::new(h).expect("id"));
        s.term = term;
        s
    }

    fn wait(no_wait: bool, timeout: Option<Duration>) -> Wait {
        Wait::new(
            RoleName::new("lock").expect("name"),
            InstanceId::new("me").expect("id"),
            no_wait,
            timeout,
        )
    }

    #[tokio::test]
    async fn one_line_per_holder_then_one_when_it_got_the_role() {
        let mut w = wait(false, None);
        assert_eq!(w.got(3), None, "no line when it did not wait");
        assert_eq!(
            w.observe(&status(RoleState::Candidate, None, None)),
            (None, Verdict::Wait)
        );
        let held = status(RoleState::Follower, Some("node-b"), Some(41));
        assert_eq!(
            w.observe(&held),
            (
                Some("waiting for role lock held by node-b (term 41)…".into()),
                Verdict::Wait
            )
        );
        assert_eq!(w.observe(&held), (None, Verdict::Wait), "said once");
        let (line, _) = w.observe(&status(RoleState::Follower, Some("node-c"), Some(44)));
        assert!(line.is_some_and(|l| l.contains("node-c (term 44)")));
        let got = w.got(45).expect("a line after waiting");
        assert!(got.starts_with("got role lock (term 45) after "), "{got}");
    }

    /// With slots the lines say that every slot is held (the status `exec` follows stands
    /// for all of them: held by another only while every slot is).
    #[tokio::test]
    async fn with_slots_the_lines_name_every_slot() {
        let held = status(RoleState::Follower, Some("node-b"), Some(41));
        let mut w = wait(false, None).with_slots(2);
        let (line, _) = w.observe(&held);
        assert_eq!(
            line.as_deref(),
            Some(
                "waiting for a slot: all 2 slots of role lock are held (one by node-b (term 41))…"
            )
        );
        let mut w = wait(true, None).with_slots(2);
        assert_eq!(
            w.observe(&held).1,
            Verdict::GiveUp(
                "all 2 slots of role lock are held (one by node-b (term 41)); not waiting \
                 (--no-wait)"
                    .into()
            )
        );
    }

    #[tokio::test]
    async fn no_wait_gives_up_only_when_another_holds_the_role() {
        let mut w = wait(true, None);
        assert_eq!(
            w.observe(&status(RoleState::Candidate, None, None)).1,
            Verdict::Wait
        );
        assert_eq!(
            w.observe(&status(RoleState::Follower, Some("me"), Some(3)))
                .1,
            Verdict::Wait,
            "its own earlier lease, which it takes back"
        );
        let (line, verdict) = w.observe(&status(RoleState::Follower, Some("node-b"), Some(41)));
        assert_eq!(line, None);
        assert_eq!(
            verdict,
            Verdict::GiveUp(
                "role lock is held by node-b (term 41); not waiting (--no-wait)".into()
            )
        );
    }

    #[tokio::test]
    async fn the_timeout_message_names_the_last_holder() {
        let mut w = wait(false, Some(Duration::from_secs(30)));
        assert_eq!(w.timed_out(), "did not get role lock within 30s");
        let (line, _) = w.observe(&status(RoleState::Follower, Some("node-b"), Some(41)));
        assert_eq!(
            line.as_deref(),
            Some("waiting up to 30s for role lock held by node-b (term 41)…")
        );
        assert_eq!(
            w.timed_out(),
            "gave up waiting for role lock after 30s: held by node-b (term 41)"
        );
    }
}
