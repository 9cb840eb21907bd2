//! [`MemberLink`]: how the rest of the manager talks to the writer of this instance's member
//! record (`member_record`, protocol Q8 rules 1 and 6) — its settings and what the watcher
//! tells it — and the presence TTL (a leaf: no driver code).

use std::time::Duration;

use async_nats::jetstream::kv::Entry;
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use crate::codec::member::MemberEntry;
use crate::names::InstanceId;
use crate::placement::MEMBER_PREFIX;

/// The default shortest presence TTL (protocol Q8 rule 1): a refresh every 100 s, so that a
/// fleet of 100 instances gets 100 refresh deliveries per second.
pub(crate) const MIN_PRESENCE_TTL: Duration = Duration::from_secs(300);

/// The presence TTL is this many times the longest session TTL (at least
/// [`MIN_PRESENCE_TTL`]).
const PRESENCE_TTL_FACTOR: u32 = 10;

/// The presence TTL of an instance whose longest session TTL is `longest`: `max(configured
/// or 5 min, 10 × longest)` (protocol Q8 rule 1). The record is rewritten every third of it.
#[must_use]
pub(crate) fn presence_ttl(longest: Duration, configured: Option<Duration>) -> Duration {
    longest
        .saturating_mul(PRESENCE_TTL_FACTOR)
        .max(configured.unwrap_or(MIN_PRESENCE_TTL))
}

/// Another process deleted or replaced this instance's record (seen by the watcher).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gone {
    /// The revision of the entry that deleted or replaced it.
    pub(crate) revision: u64,
    /// When this instance saw it.
    pub(crate) seen_at: Instant,
}

/// The manager's side of the member record's writer: its settings and what the watcher tells
/// it. Every manager has one (`Shared::member`).
#[derive(Debug)]
pub(crate) struct MemberLink {
    /// `member.<instance>`.
    pub(crate) key: String,
    incarnation: Uuid,
    /// The member heartbeat period: the record's `heartbeat_ms`, and at most one rewrite
    /// after a delete or replacement per period (protocol Q8 rule 6).
    pub(crate) heartbeat: Duration,
    /// Longest wait for one write or read of the record.
    pub(crate) operation_timeout: Duration,
    /// Advertised HTTP address (the record's `http`).
    pub(crate) http: Option<String>,
    /// When this manager started (RFC 3339), for the record.
    pub(crate) started_at: String,
    /// The presence TTL asked for (`RoleManagerBuilder::presence_ttl`).
    pub(crate) presence_ttl: Option<Duration>,
    /// The last delete or replacement of the record the watcher saw (writer: the watcher,
    /// through [`MemberLink::observe`]).
    gone: watch::Sender<Option<Gone>>,
    /// The bytes of the last records the writer sent (newest last; the writer pushes each
    /// before sending it): a record of this incarnation with other bytes was written by
    /// another client (a forged copy) and counts as a replacement.
    sent: std::sync::Mutex<std::collections::VecDeque<bytes::Bytes>>,
}

/// How many of the writer's last records [`MemberLink::observe`] recognises as its own (a
/// watcher entry may arrive after the next write was sent).
const SENT_KEPT: usize = 3;

impl MemberLink {
    /// The link of `instance`'s writer.
    pub(crate) fn new(
        instance: &InstanceId,
        incarnation: Uuid,
        heartbeat: Duration,
        operation_timeout: Duration,
        http: Option<String>,
        presence_ttl: Option<Duration>,
    ) -> Self {
        Self {
            key: format!("{MEMBER_PREFIX}{instance}"),
            incarnation,
            heartbeat,
            operation_timeout,
            http,
            started_at: crate::value::now_rfc3339(),
            presence_ttl,
            gone: watch::Sender::new(None),
            sent: std::sync::Mutex::new(std::collections::VecDeque::new()),
        }
    }

    /// The watcher saw a `member.` entry (every one: it picks this instance's own). A delete,
    /// purge or expiry marker of this instance's key, a value there that is not a record of
    /// it, or a record of another incarnation (another process with this instance id) means
    /// the record is gone: the writer writes it again under protocol Q8 rule 6 (after a
    /// session renewal sent after this moment, at most once per member heartbeat). Returns
    /// whether it was such an entry.
    pub(crate) fn observe(&self, entry: &Entry) -> bool {
        if entry.key != self.key {
            return false;
        }
        let gone = match crate::codec::member::watched(entry) {
            // Another incarnation's record, or one of ours with bytes this process never
            // sent (another client's forged copy).
            MemberEntry::Record(record) => {
                record.incarnation != self.incarnation || !self.was_sent(&entry.value)
            }
            MemberEntry::Foreign { .. } | MemberEntry::Gone { .. } => true,
            MemberEntry::NotAnInstance => false,
        };
        if gone {
            self.gone_at(entry.revision);
        }
        gone
    }

    /// The writer is about to send `bytes` as this instance's record.
    pub(crate) fn note_sent(&self, bytes: bytes::Bytes) {
        let mut sent = self
            .sent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if sent.back() != Some(&bytes) {
            sent.push_back(bytes);
        }
        while sent.len() > SENT_KEPT {
            sent.pop_front();
        }
    }

    fn was_sent(&self, bytes: &[u8]) -> bool {
        self.sent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|b| b.as_ref() == bytes)
    }

    /// Follows the deletes and replacements the watcher saw (the writer).
    pub(crate) fn gone(&self) -> watch::Receiver<Option<Gone>> {
        self.gone.subscribe()
    }

    /// This instance's record was deleted or replaced at `revision`, seen now (see
    /// [`MemberLink::observe`]).
    pub(crate) fn gone_at(&self, revision: u64) {
        self.gone.send_replace(Some(Gone {
            revision,
            seen_at: Instant::now(),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The link of instance `node-a`, incarnation `incarnation`.
    fn link_of_node_a(incarnation: Uuid) -> MemberLink {
        let me = InstanceId::new("node-a").expect("valid");
        MemberLink::new(
            &me,
            incarnation,
            Duration::from_millis(250),
            Duration::from_secs(1),
            None,
            None,
        )
    }

    /// The watcher hands every `member.` entry over: only this instance's record deleted,
    /// expired or replaced (a foreign value, another incarnation) asks for a rewrite, with the
    /// entry's revision; this process's own writes and other instances' keys do not.
    #[test]
    fn only_this_instance_s_record_gone_or_replaced_asks_for_a_rewrite() {
        use async_nats::jetstream::kv::Operation;

        let incarnation = Uuid::from_u128(7);
        let link = link_of_node_a(incarnation);
        let gone = link.gone();
        let mut ours = crate::placement::test_record("node-a", &[], 250);
        ours.incarnation = incarnation;
        let entry = |key: &str, revision, op, value: &[u8]| {
            crate::codec::test_entry(key, revision, op, value)
        };
        link.note_sent(ours.to_bytes());
        assert!(!link.observe(&entry("member.node-a", 3, Operation::Put, &ours.to_bytes())));
        let mut theirs = crate::placement::test_record("node-b", &[], 250);
        theirs.incarnation = Uuid::from_u128(8);
        assert!(!link.observe(&entry("member.node-b", 4, Operation::Delete, b"")));
        assert!(!link.observe(&entry(
            "member.node-b",
            5,
            Operation::Put,
            &theirs.to_bytes()
        )));
        assert_eq!(*gone.borrow(), None);
        let mut other = ours.clone();
        other.incarnation = Uuid::from_u128(9);
        for (revision, op, value) in [
            (6, Operation::Delete, Vec::new()),
            (7, Operation::Purge, Vec::new()),
            (8, Operation::Put, b"garbage".to_vec()),
            (9, Operation::Put, other.to_bytes().to_vec()),
        ] {
            assert!(
                link.observe(&entry("member.node-a", revision, op, &value)),
                "{revision}"
            );
            assert_eq!(gone.borrow().map(|g| g.revision), Some(revision));
        }
    }

    /// A record of this incarnation with bytes the writer never sent (another client's forged
    /// copy, here without sessions) is a replacement; the writer's last few records are not,
    /// whichever of them the watcher delivers last.
    #[test]
    fn a_record_of_this_incarnation_this_process_never_sent_is_a_replacement() {
        use async_nats::jetstream::kv::Operation;

        let incarnation = Uuid::from_u128(7);
        let link = link_of_node_a(incarnation);
        let mut first = crate::placement::test_record("node-a", &[], 250);
        first.incarnation = incarnation;
        first.sessions.insert(3000, Uuid::from_u128(1));
        let mut second = first.clone();
        second.sessions.insert(3000, Uuid::from_u128(2));
        link.note_sent(first.to_bytes());
        link.note_sent(second.to_bytes());
        let entry = |revision, value: &[u8]| {
            crate::codec::test_entry("member.node-a", revision, Operation::Put, value)
        };
        assert!(!link.observe(&entry(3, &first.to_bytes())));
        assert!(!link.observe(&entry(4, &second.to_bytes())));
        let mut forged = second.clone();
        forged.sessions.clear();
        assert!(link.observe(&entry(5, &forged.to_bytes())));
        assert_eq!(link.gone().borrow().map(|g| g.revision), Some(5));
    }

    #[test]
    fn the_presence_ttl_is_ten_ttls_and_at_least_five_minutes_or_what_was_asked() {
        assert_eq!(presence_ttl(Duration::ZERO, None), MIN_PRESENCE_TTL);
        assert_eq!(presence_ttl(Duration::from_secs(2), None), MIN_PRESENCE_TTL);
        assert_eq!(
            presence_ttl(Duration::from_secs(60), None),
            Duration::from_secs(600)
        );
        let asked = Some(Duration::from_secs(30));
        assert_eq!(
            presence_ttl(Duration::from_secs(2), asked),
            Duration::from_secs(30)
        );
        assert_eq!(
            presence_ttl(Duration::from_secs(5), asked),
            Duration::from_secs(50)
        );
    }
}
