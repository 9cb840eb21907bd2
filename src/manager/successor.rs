//! A successor's duties (protocol Q8 rules 4 and 5): every [`TICK`] it asks the session book
//! which followed members were seen to end a session their record lists and deletes those
//! records (CAS on the record's revision), and it reads the session keys of the members it is
//! the second tier of from the stream leader once per backstop period, deleting the record of
//! one whose session ended. A record's delete decides no vacancy: it makes every instance
//! with a role value naming the member follow it, and the herd ranking and placement drop it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};
use uuid::Uuid;

use super::shared::Shared;
use crate::core::presence::{session_ended, shown_ttl};
use crate::core::{FailureKind, SessionKeyState, WriteOutcome};
use crate::names::InstanceId;
use crate::placement::MEMBER_PREFIX;

/// How often the book is asked for ended members and the second tier is looked at.
const TICK: Duration = Duration::from_millis(250);

/// Timeout of one delete or read.
const IO_TIMEOUT: Duration = Duration::from_secs(1);

/// What the second tier knows of one member it reads.
#[derive(Debug, Default)]
struct Polled {
    /// When to read its keys next.
    next_at: Option<Instant>,
    /// Each listed key's last entry read and when that revision was first read.
    keys: HashMap<String, (SessionKeyState, Instant)>,
    /// A read in flight.
    reading: bool,
}

/// How long a failed record delete waits before it is asked for again.
const DELETE_RETRY: Duration = Duration::from_secs(1);

enum Done {
    Deleted(InstanceId, u64, WriteOutcome),
    /// A failed delete's pause is over.
    Retry(InstanceId, u64),
    Read {
        member: InstanceId,
        record: u64,
        reads: Vec<(String, Uuid, Result<SessionKeyState, FailureKind>)>,
    },
}

/// Runs the successor's duties until `cancel`.
pub(crate) async fn run(shared: Arc<Shared>, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut io: FuturesUnordered<BoxFuture<'static, Done>> = FuturesUnordered::new();
    let mut polled: BTreeMap<InstanceId, Polled> = BTreeMap::new();
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            Some(done) = io.next(), if !io.is_empty() => finished(&shared, done, &mut polled, &mut io),
            _ = tick.tick() => on_tick(&shared, &mut polled, &mut io),
        }
    }
}

fn on_tick(
    shared: &Arc<Shared>,
    polled: &mut BTreeMap<InstanceId, Polled>,
    io: &mut FuturesUnordered<BoxFuture<'static, Done>>,
) {
    let now = Instant::now();
    let mut book = shared.reports.book();
    for (member, revision) in book.ended_members(now) {
        io.push(delete(shared, member, revision));
    }
    let Some(wanted) = book.wanted(now) else {
        return;
    };
    polled.retain(|m, _| wanted.poll.contains(m));
    for member in &wanted.poll {
        let Some(record) = book.member(member) else {
            continue;
        };
        let p = polled.entry(member.clone()).or_default();
        if p.reading || p.next_at.is_some_and(|t| now < t) {
            continue;
        }
        // Once per period of what the listed keys showed at the last read (the record's
        // claimed classes are not trusted: `shown_ttl`).
        let period = record
            .sessions
            .keys()
            .map(|ttl_ms| {
                let key = crate::value::session_key(member, *ttl_ms);
                book.period(
                    p.keys
                        .get(&key)
                        .map_or(Duration::ZERO, |(s, _)| shown_ttl(s)),
                )
            })
            .max()
            .unwrap_or(Duration::ZERO);
        // The first read is spread over a period, so that a member that becomes live in many
        // second tiers at once is not read by all of them together.
        let Some(next) = p.next_at else {
            p.next_at =
                Some(now + period.mul_f64(crate::core::presence::first_read_spread(member)));
            continue;
        };
        p.next_at = Some(next.max(now) + period);
        p.reading = true;
        let keys: Vec<(String, Uuid)> = record
            .sessions
            .iter()
            .map(|(ttl_ms, uuid)| (crate::value::session_key(member, *ttl_ms), *uuid))
            .collect();
        let store = shared.store.clone();
        let member = member.clone();
        let record = record.revision;
        io.push(Box::pin(async move {
            let mut reads = Vec::with_capacity(keys.len());
            for (key, uuid) in keys {
                let r = store.read_session(&key, IO_TIMEOUT).await;
                reads.push((key, uuid, r));
            }
            Done::Read {
                member,
                record,
                reads,
            }
        }));
    }
}

fn finished(
    shared: &Arc<Shared>,
    done: Done,
    polled: &mut BTreeMap<InstanceId, Polled>,
    io: &mut FuturesUnordered<BoxFuture<'static, Done>>,
) {
    match done {
        Done::Deleted(member, revision, outcome) => match outcome {
            WriteOutcome::Ok { .. } => info!(
                %member,
                revision,
                "deleted the member record of an instance whose session ended (protocol Q8)"
            ),
            // Somebody changed the record: judged again as it is now.
            WriteOutcome::Conflict => {}
            other => {
                debug!(%member, revision, outcome = ?other, "member record not deleted; retrying");
                io.push(Box::pin(async move {
                    tokio::time::sleep(DELETE_RETRY).await;
                    Done::Retry(member, revision)
                }));
            }
        },
        Done::Retry(member, revision) => {
            shared.reports.book().end_not_done(&member, revision);
        }
        Done::Read {
            member,
            record,
            reads,
        } => {
            let now = Instant::now();
            let Some(p) = polled.get_mut(&member) else {
                return;
            };
            p.reading = false;
            let mut ended = false;
            for (key, uuid, read) in reads {
                let Ok(state) = read else {
                    continue; // unknown: judged at the next read
                };
                // By the class of what the key shows, not of what the record claims.
                let period = shared.reports.book().period(shown_ttl(&state));
                let seen_at = match p.keys.get(&key) {
                    Some((known, at)) if known.revision() == state.revision() => *at,
                    _ => now,
                };
                ended |= session_ended(uuid, &state, seen_at, now, period);
                p.keys.insert(key, (state, seen_at));
            }
            if ended
                && shared
                    .reports
                    .book()
                    .member(&member)
                    .is_some_and(|r| r.revision == record)
            {
                io.push(delete(shared, member, record));
            }
        }
    }
}

/// Deletes `member`'s record if it is still at `revision`.
fn delete(shared: &Arc<Shared>, member: InstanceId, revision: u64) -> BoxFuture<'static, Done> {
    let store = shared.store.clone();
    Box::pin(async move {
        let key = format!("{MEMBER_PREFIX}{member}");
        let outcome = store
            .cas(&key, revision, None, bytes::Bytes::new(), true, IO_TIMEOUT)
            .await;
        Done::Deleted(member, revision, outcome)
    })
}
