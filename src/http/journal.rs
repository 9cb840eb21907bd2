//! [`EventJournal`]: the last [`JOURNAL_CAPACITY`] transitions this instance saw, numbered, so
//! a dashboard opened now lists what happened before it (`GET /api/events?since=…`) and the
//! event stream carries the same numbers (SSE `id:`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::watch;

use crate::inspect::{EventView, TransitionTracker, format_time};
use crate::manager::RoleEvent;
use crate::names::InstanceId;
use crate::placement::Frozen;

/// How many events the journal keeps (the oldest are dropped first).
pub const JOURNAL_CAPACITY: usize = 256;
/// Longest text an event keeps in its free-text fields (`error`, `detail`), in bytes; longer
/// text is cut and ends in `…`. With names capped too (128 bytes), the journal's memory is
/// bounded whatever the bucket or the server says.
pub const MAX_EVENT_TEXT: usize = 512;

/// One journal entry: its sequence number and the event (`{"seq": 7, "type": "holder", …}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JournalEntry {
    /// Strictly increasing from 1, per process (a restarted instance starts again at 1).
    pub seq: u64,
    /// The event (its `at` is when this instance saw it, RFC 3339).
    #[serde(flatten)]
    pub event: EventView,
}

/// `GET /api/events?since=N`: the journal's events after `since`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EventPage {
    /// The answering instance.
    pub instance: String,
    /// The bucket.
    pub bucket: String,
    /// The cursor asked with.
    pub since: u64,
    /// The events with `seq > since` still kept, oldest first.
    pub events: Vec<JournalEntry>,
    /// The newest `seq` recorded (`0`: none yet): pass it as `since` next time.
    pub cursor: u64,
    /// The oldest `seq` still kept (`None`: the journal is empty).
    pub oldest: Option<u64>,
    /// Whether events after `since` were dropped already (the journal keeps the last
    /// `capacity`): `events` does not connect to what the caller has.
    pub truncated: bool,
    /// How many events the journal keeps.
    pub capacity: usize,
}

/// The recent transitions of one instance, numbered. Cheap to clone.
///
/// [`Api::new`](super::Api::new) makes one that follows the manager from then on; to include
/// what happens while the manager starts, make one before and follow
/// [`RoleManagerBuilder::events`](crate::RoleManagerBuilder::events) (what `nats-roles run`
/// does), then hand it to [`Api::with_journal`](super::Api::with_journal).
#[derive(Clone)]
pub struct EventJournal {
    inner: Arc<Inner>,
}

struct Inner {
    ring: Mutex<Ring>,
    /// The newest `seq` (woken streams read the ring after it).
    latest: watch::Sender<u64>,
}

struct Ring {
    entries: VecDeque<JournalEntry>,
    /// The newest `seq` handed out (`0`: none).
    last: u64,
    capacity: usize,
}

/// What the journal holds after a cursor.
#[derive(Debug)]
pub(crate) struct After {
    pub(crate) events: Vec<JournalEntry>,
    pub(crate) cursor: u64,
    pub(crate) oldest: Option<u64>,
    /// Events after the cursor that were dropped already.
    pub(crate) missed: u64,
}

/// A cursor ahead of the newest event: never handed out by this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CursorAhead {
    pub(crate) latest: u64,
}

impl std::fmt::Debug for EventJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ring = self.ring();
        f.debug_struct("EventJournal")
            .field("last", &ring.last)
            .field("kept", &ring.entries.len())
            .finish_non_exhaustive()
    }
}

impl Default for EventJournal {
    fn default() -> Self {
        Self::new()
    }
}

impl EventJournal {
    /// An empty journal keeping the last [`JOURNAL_CAPACITY`] events.
    #[must_use]
    pub fn new() -> Self {
        Self::with_capacity(JOURNAL_CAPACITY)
    }

    /// An empty journal keeping the last `capacity` events (at least 1).
    #[must_use]
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                ring: Mutex::new(Ring {
                    entries: VecDeque::with_capacity(capacity.clamp(1, JOURNAL_CAPACITY)),
                    last: 0,
                    capacity: capacity.max(1),
                }),
                latest: watch::channel(0).0,
            }),
        }
    }

    fn ring(&self) -> MutexGuard<'_, Ring> {
        self.inner
            .ring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records the transitions of `events` from now on (a task; it ends when the manager's
    /// channel closes or the journal is dropped): `tracker` knows the holders before (use
    /// [`TransitionTracker::new`] with [`RoleManager::holders`](crate::RoleManager::holders)
    /// read after subscribing), `instance` is the manager's id. Each event is stamped when
    /// the task receives it. Outside a Tokio runtime nothing is recorded (a warning says so).
    pub fn follow(
        &self,
        events: broadcast::Receiver<RoleEvent>,
        instance: InstanceId,
        tracker: TransitionTracker,
    ) {
        let journal = Arc::downgrade(&self.inner);
        spawn(follow_events(journal, events, instance, tracker));
    }

    /// Records the freezes of voluntary placement moves, and their end, from `changes`.
    pub(crate) fn follow_freezes(&self, changes: crate::manager::FreezeChanges) {
        let journal = Arc::downgrade(&self.inner);
        spawn(follow_freezes(journal, changes));
    }

    /// Records each change of `group`'s assignment on this instance (its count, the members
    /// it holds).
    pub(crate) fn follow_group(&self, group: crate::manager::GroupHandle) {
        let journal = Arc::downgrade(&self.inner);
        spawn(follow_group(journal, group));
    }

    /// Appends `event` (its free text capped at [`MAX_EVENT_TEXT`]); its `seq`.
    #[cfg(test)]
    pub(crate) fn record(&self, event: EventView) -> u64 {
        record(&self.inner, event)
    }

    /// The newest `seq` recorded (`0`: none yet).
    pub(crate) fn latest(&self) -> u64 {
        self.ring().last
    }

    /// Wakes on every new event (its value: the newest `seq`).
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.latest.subscribe()
    }

    /// The events after `since` still kept; an error for a cursor ahead of the newest event.
    pub(crate) fn after(&self, since: u64) -> Result<After, CursorAhead> {
        let ring = self.ring();
        if since > ring.last {
            return Err(CursorAhead { latest: ring.last });
        }
        let oldest = ring.entries.front().map(|e| e.seq);
        let first_kept = oldest.unwrap_or(ring.last.saturating_add(1));
        let missed = first_kept.saturating_sub(since.saturating_add(1));
        let events = ring
            .entries
            .iter()
            .filter(|e| e.seq > since)
            .cloned()
            .collect();
        Ok(After {
            events,
            cursor: ring.last,
            oldest,
            missed,
        })
    }

    /// How many events it keeps.
    pub(crate) fn capacity(&self) -> usize {
        self.ring().capacity
    }
}

fn record(inner: &Inner, event: EventView) -> u64 {
    let entry_event = bounded(event);
    let seq = {
        let mut ring = inner
            .ring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ring.last = ring.last.saturating_add(1);
        let seq = ring.last;
        ring.entries.push_back(JournalEntry {
            seq,
            event: entry_event,
        });
        while ring.entries.len() > ring.capacity {
            ring.entries.pop_front();
        }
        seq
    };
    inner.latest.send_replace(seq);
    seq
}

/// Runs `task` on the current Tokio runtime, if there is one.
fn spawn(task: impl Future<Output = ()> + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(task);
        }
        Err(_) => {
            tracing::warn!("no Tokio runtime: the event journal of GET /api/events records nothing")
        }
    }
}

async fn follow_events(
    journal: Weak<Inner>,
    mut events: broadcast::Receiver<RoleEvent>,
    instance: InstanceId,
    mut tracker: TransitionTracker,
) {
    loop {
        let view = match events.recv().await {
            Ok(event) => match tracker.event(&event, &instance) {
                Some(view) => view,
                None => continue,
            },
            Err(RecvError::Lagged(missed)) => {
                // The previous holders are unknown from here on.
                tracker = TransitionTracker::default();
                EventView::Resync {
                    missed,
                    at: format_time(SystemTime::now()),
                }
            }
            Err(RecvError::Closed) => return,
        };
        let Some(inner) = journal.upgrade() else {
            return;
        };
        record(&inner, view);
    }
}

async fn follow_freezes(journal: Weak<Inner>, mut changes: crate::manager::FreezeChanges) {
    let mut last: Option<(String, String)> = None;
    loop {
        let now = changes.frozen().as_ref().map(describe);
        if now != last {
            let Some(inner) = journal.upgrade() else {
                return;
            };
            let at = format_time(SystemTime::now());
            let view = match &now {
                Some((cause, detail)) => EventView::Frozen {
                    cause: cause.clone(),
                    detail: detail.clone(),
                    at,
                },
                None => EventView::Unfrozen { at },
            };
            record(&inner, view);
            last = now;
        }
        if !changes.changed().await {
            return;
        }
    }
}

async fn follow_group(journal: Weak<Inner>, group: crate::manager::GroupHandle) {
    let mut assigned = group.assigned();
    loop {
        let view = {
            let now = assigned.borrow_and_update();
            EventView::Group {
                group: group.name().to_string(),
                count: now.count,
                held: now.held.iter().copied().collect(),
                at: format_time(SystemTime::now()),
            }
        };
        let Some(inner) = journal.upgrade() else {
            return;
        };
        record(&inner, view);
        drop(inner);
        if assigned.changed().await.is_err() {
            return;
        }
        // A burst (a group's members won at start, a count change) is one event.
        tokio::time::sleep(GROUP_SETTLE).await;
    }
}

/// How long a group's assignment is left to settle before its change is recorded.
const GROUP_SETTLE: std::time::Duration = std::time::Duration::from_millis(250);

/// A freeze as `(cause, detail)`: what makes two views the same freeze (the storm breaker's
/// countdown is left out).
fn describe(frozen: &Frozen) -> (String, String) {
    match frozen {
        Frozen::Operator { reason, by, .. } => (
            "operator".to_owned(),
            if reason.is_empty() {
                format!("by {by}, no reason given")
            } else {
                format!("by {by}: {reason}")
            },
        ),
        Frozen::Member { members } => (
            "member".to_owned(),
            format!(
                "by the configuration of {}",
                members
                    .iter()
                    .map(InstanceId::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Frozen::Storm { vanished, of, .. } => (
            "storm".to_owned(),
            format!("storm breaker: {vanished} of {of} members vanished"),
        ),
    }
}

/// `event` with its free text cut to [`MAX_EVENT_TEXT`].
fn bounded(mut event: EventView) -> EventView {
    match &mut event {
        EventView::Failed { error: text, .. } | EventView::Frozen { detail: text, .. } => {
            cut(text, MAX_EVENT_TEXT);
        }
        _ => {}
    }
    event
}

/// Cuts `text` to at most `max` bytes on a character boundary, ending in `…`.
fn cut(text: &mut String, max: usize) {
    const MORE: char = '…';
    if text.len() <= max {
        return;
    }
    let mut end = max.saturating_sub(MORE.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push(MORE);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vacant(role: &str) -> EventView {
        EventView::Vacant {
            role: role.to_owned(),
            previous: None,
            at: String::new(),
        }
    }

    fn seqs(after: &After) -> Vec<u64> {
        after.events.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn cursors_return_only_newer_events() {
        let j = EventJournal::with_capacity(8);
        assert_eq!(
            j.after(0).map(|a| (seqs(&a), a.cursor, a.missed)).ok(),
            Some((vec![], 0, 0))
        );
        for i in 0..3 {
            assert_eq!(j.record(vacant(&format!("r{i}"))), i + 1);
        }
        let all = j.after(0).expect("cursor 0");
        assert_eq!(
            (seqs(&all), all.cursor, all.oldest, all.missed),
            (vec![1, 2, 3], 3, Some(1), 0)
        );
        let newer = j.after(2).expect("cursor 2");
        assert_eq!(seqs(&newer), vec![3]);
        let none = j.after(3).expect("cursor 3");
        assert!(none.events.is_empty() && none.missed == 0);
        assert_eq!(j.after(4).err(), Some(CursorAhead { latest: 3 }));
        assert_eq!(j.after(u64::MAX).err(), Some(CursorAhead { latest: 3 }));
    }

    #[test]
    fn the_ring_keeps_the_last_events_and_says_what_was_dropped() {
        let j = EventJournal::with_capacity(4);
        for i in 0..10 {
            j.record(vacant(&format!("r{i}")));
        }
        assert_eq!(j.ring().entries.len(), 4);
        let all = j.after(0).expect("cursor 0");
        assert_eq!(
            (seqs(&all), all.oldest, all.missed),
            (vec![7, 8, 9, 10], Some(7), 6)
        );
        // The cursor just before the oldest kept event connects: nothing missed.
        let connected = j.after(6).expect("cursor 6");
        assert_eq!((seqs(&connected), connected.missed), (vec![7, 8, 9, 10], 0));
        let behind = j.after(5).expect("cursor 5");
        assert_eq!(behind.missed, 1);
    }

    #[test]
    fn memory_is_bounded_whatever_the_input() {
        let j = EventJournal::new();
        let huge = "é".repeat(100_000);
        for _ in 0..(3 * JOURNAL_CAPACITY) {
            j.record(EventView::Failed {
                role: "r".to_owned(),
                instance: "node-a".to_owned(),
                error: huge.clone(),
                at: String::new(),
            });
            j.record(EventView::Frozen {
                cause: "operator".to_owned(),
                detail: huge.clone(),
                at: String::new(),
            });
        }
        let ring = j.ring();
        assert_eq!(ring.entries.len(), JOURNAL_CAPACITY);
        assert_eq!(ring.last, 6 * JOURNAL_CAPACITY as u64);
        for e in &ring.entries {
            let text = match &e.event {
                EventView::Failed { error, .. } => error,
                EventView::Frozen { detail, .. } => detail,
                other => panic!("{other:?}"),
            };
            assert!(
                text.len() <= MAX_EVENT_TEXT && text.ends_with('…'),
                "{}",
                text.len()
            );
        }
    }

    #[test]
    fn entries_serialise_flat_with_their_sequence_number() {
        let j = EventJournal::new();
        j.record(vacant("scheduler"));
        let entry = j.after(0).expect("cursor").events.remove(0);
        let json = serde_json::to_value(&entry).expect("JSON");
        assert_eq!(json["seq"], 1);
        assert_eq!(json["type"], "vacant");
        assert_eq!(json["role"], "scheduler");
        let back: JournalEntry = serde_json::from_value(json).expect("parse");
        assert_eq!(back, entry);
    }

    #[test]
    fn freezes_are_described_without_the_countdown() {
        let a = describe(&Frozen::Storm {
            vanished: 2,
            of: 3,
            stable_in_ms: 100,
        });
        let b = describe(&Frozen::Storm {
            vanished: 2,
            of: 3,
            stable_in_ms: 5,
        });
        assert_eq!(a, b);
        assert_eq!(a.0, "storm");
    }
}
