//! The writer of this instance's member record `member.<instance>` (protocol P10, Q8 rules 1,
//! 5 and 6, Q9), run by every manager: with placement the full record, without it a
//! *presence record* (`placement: false`, no roles). Both list the instance's live sessions
//! (`sessions`: TTL class → uuid), are written only while one of them is live, carry the
//! presence TTL (`Nats-TTL`, [`presence_ttl`]) and are rewritten unchanged every third of it.
//! `member_link::MemberLink` is what the rest of the manager tells the writer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::member_link::{Gone, presence_ttl};
use super::placement_link::{PlacementLink, Written};
use super::session_link::{SessionClock, SessionView};
use super::shared::Shared;
use crate::core::{FailureKind, KeyState, SessionUpdate, WriteOutcome};
use crate::placement::controller::RecordRoles;
use crate::placement::{MEMBER_VERSION, MemberRecord};

/// The placement part of the writer: the record's placement fields and the flags it
/// publishes back.
pub(crate) struct PlacementPart {
    pub(crate) link: Arc<PlacementLink>,
    /// The flags of the last record written (`PlacementLink::drain_and_wait`).
    pub(crate) written: watch::Sender<Option<Written>>,
}

/// Runs the member record's writer of a manager until `cancel`, then deletes the record.
pub(crate) fn spawn(
    tasks: &tokio_util::task::TaskTracker,
    shared: &Arc<Shared>,
    placement: Option<PlacementPart>,
    cancel: &CancellationToken,
    span: &tracing::Span,
) {
    use tracing::Instrument;
    let writer = Writer {
        shared: shared.clone(),
        placement,
        views: BTreeMap::new(),
        renewals: BTreeMap::new(),
        clocks: BTreeMap::new(),
        closed: BTreeSet::new(),
        rev: None,
        known: None,
        permit: false,
        stored: None,
        written_at: None,
        gone: None,
        retry_at: None,
        last_rewrite: None,
        failing: None,
    };
    tasks.spawn(writer.run(cancel.clone()).instrument(span.clone()));
}

/// What woke the writer.
enum Wake {
    Stop,
    /// A session's view changed (`false`: its task ended).
    View(u64, bool),
    Gone,
    Other,
}

/// The writer's state (one task).
struct Writer {
    shared: Arc<Shared>,
    placement: Option<PlacementPart>,
    /// The views of this instance's sessions, by TTL class (ms).
    views: BTreeMap<u64, watch::Receiver<SessionView>>,
    /// Their renewal counters (followed while a rewrite waits for a renewal, rule 6).
    renewals: BTreeMap<u64, watch::Receiver<u64>>,
    clocks: BTreeMap<u64, Arc<SessionClock>>,
    /// Classes whose session task ended (fail-stop): not live.
    closed: BTreeSet<u64>,
    /// Revision of our last write; `None`: read the key first.
    rev: Option<u64>,
    /// Revision of our last acknowledged write, kept when `rev` is not (`None`: this process
    /// has not written the record yet).
    known: Option<u64>,
    /// A rewrite after a delete or replacement passed rule 6's checks: the next write may
    /// go over whatever the key holds.
    permit: bool,
    /// The record as last stored.
    stored: Option<MemberRecord>,
    /// Send time of the last write (the next unchanged rewrite is a third of the TTL later).
    written_at: Option<Instant>,
    /// A delete or replacement seen (when), not yet answered by a rewrite (rule 6).
    gone: Option<Instant>,
    /// A retry after a failed write.
    retry_at: Option<Instant>,
    /// The last rewrite after a delete or replacement (at most one per heartbeat).
    last_rewrite: Option<Instant>,
    /// The persistent failure of the record's writes, warned of once.
    failing: Option<FailureKind>,
}

impl Writer {
    async fn run(mut self, cancel: CancellationToken) {
        let mut added = self.shared.managed.classes_added();
        let mut gone = self.shared.member.gone();
        let mut counts = self.shared.groups.counts_changed();
        let mut inputs = self.placement.as_ref().map(|p| Inputs::new(&p.link));
        loop {
            self.take_classes();
            let wake_at = self.step().await;
            let waiting = self.gone.is_some();
            let wake = tokio::select! {
                biased;
                () = cancel.cancelled() => Wake::Stop,
                Ok(()) = added.changed() => Wake::Other,
                Ok(()) = counts.changed() => Wake::Other,
                Ok(()) = gone.changed() => Wake::Gone,
                (class, open) = any_changed(&mut self.views, &self.closed) => Wake::View(class, open),
                _ = any_changed(&mut self.renewals, &self.closed), if waiting => Wake::Other,
                () = Inputs::changed(inputs.as_mut()) => Wake::Other,
                () = sleep_until_opt(wake_at) => Wake::Other,
            };
            match wake {
                Wake::Stop => break,
                Wake::View(class, false) => {
                    self.closed.insert(class);
                }
                Wake::Gone => {
                    let seen = *gone.borrow_and_update();
                    if let Some(seen) = seen {
                        self.on_gone(seen);
                    }
                }
                Wake::View(_, true) | Wake::Other => {}
            }
        }
        self.delete().await;
    }

    /// Follows the session classes added since the last look; forgets those taken out (at
    /// shutdown).
    fn take_classes(&mut self) {
        let sessions = self.shared.managed.sessions();
        for (class, session) in sessions.iter() {
            if !self.views.contains_key(class) {
                self.views.insert(*class, session.view.clone());
                self.renewals.insert(*class, session.clock.subscribe());
                self.clocks.insert(*class, session.clock.clone());
            }
        }
        self.views.retain(|c, _| sessions.contains_key(c));
        self.renewals.retain(|c, _| sessions.contains_key(c));
        self.clocks.retain(|c, _| sessions.contains_key(c));
    }

    /// The uuid of every session that is live now, by TTL class.
    fn live(&mut self) -> BTreeMap<u64, Uuid> {
        let closed = &self.closed;
        self.views
            .iter_mut()
            .filter(|(class, _)| !closed.contains(class))
            .filter_map(|(class, view)| match view.borrow_and_update().update {
                Some(SessionUpdate::Live { uuid, .. }) => Some((*class, uuid)),
                _ => None,
            })
            .collect()
    }

    /// Whether every session of `live` has an acknowledged write sent after `since` (rule 6:
    /// a session that ended cannot renew).
    fn renewed_since(&mut self, live: &BTreeMap<u64, Uuid>, since: Instant) -> bool {
        for renewals in self.renewals.values_mut() {
            renewals.borrow_and_update();
        }
        live.iter().all(|(class, uuid)| {
            self.clocks
                .get(class)
                .and_then(|c| c.latest())
                .is_some_and(|r| r.uuid == *uuid && r.acked_sent_at > since)
        })
    }

    /// The presence TTL of this instance now (its longest session TTL class).
    fn ttl(&self) -> Duration {
        let longest = self.views.keys().max().copied().unwrap_or(0);
        presence_ttl(
            Duration::from_millis(longest),
            self.shared.member.presence_ttl,
        )
    }

    /// A delete or replacement of the record, seen by the watcher.
    fn on_gone(&mut self, gone: Gone) {
        // The first write reads the key and writes over whatever it holds; an entry not newer
        // than our last write was answered by it.
        if self.known.is_none_or(|mine| gone.revision <= mine) {
            return;
        }
        debug!(
            revision = gone.revision,
            "this instance's member record was deleted or replaced"
        );
        self.gone = Some(self.gone.map_or(gone.seen_at, |g| g.max(gone.seen_at)));
        self.rev = None;
        self.stored = None;
    }

    /// Writes the record if it is due; when to look again without news.
    async fn step(&mut self) -> Option<Instant> {
        let live = self.live();
        if live.is_empty() {
            // Nothing to say before the first session is live; after a loss, the next
            // session's start rewrites the record.
            return None;
        }
        let record = self.record(&live)?;
        let now = Instant::now();
        let heartbeat = self.shared.member.heartbeat;
        if let Some(seen) = self.gone {
            if !self.renewed_since(&live, seen) {
                // Woken by the next renewal.
                return None;
            }
            let allowed = self.last_rewrite.map_or(now, |t| t + heartbeat);
            if allowed > now {
                return Some(allowed);
            }
            self.gone = None;
            self.permit = true;
            self.last_rewrite = Some(now);
        }
        if let Some(at) = self.retry_at.filter(|at| *at > now) {
            return Some(at);
        }
        self.retry_at = None;
        let ttl = self.ttl();
        let refresh_at = self.written_at.map(|t| t + ttl / 3);
        let changed = self.rev.is_none() || self.stored.as_ref() != Some(&record);
        if !changed && refresh_at.is_some_and(|t| t > now) {
            return refresh_at;
        }
        self.write(record, ttl).await;
        self.retry_at.or(self.written_at.map(|t| t + ttl / 3))
    }

    /// This instance's record as it should be stored now, with the sessions `live`; `None`
    /// while placement has not taken in the roles this manager started with.
    fn record(&self, live: &BTreeMap<u64, Uuid>) -> Option<MemberRecord> {
        let link = &self.shared.member;
        let heartbeat_ms = u64::try_from(link.heartbeat.as_millis()).unwrap_or(u64::MAX);
        let mut record = match &self.placement {
            Some(p) => {
                placement_record(&self.shared, &p.link, p.link.record_roles.borrow().clone()?)
            }
            None => MemberRecord {
                v: MEMBER_VERSION,
                instance: self.shared.instance.clone(),
                incarnation: self.shared.incarnation,
                weight: 1,
                priority: 0,
                roles: BTreeMap::new(),
                pinned: BTreeSet::new(),
                unavailable: BTreeSet::new(),
                draining: false,
                healthy: true,
                http: link.http.clone(),
                started_at: Some(link.started_at.clone()),
                zone: None,
                capacity: None,
                max_roles: None,
                version: None,
                costs: BTreeMap::new(),
                prepares: BTreeSet::new(),
                prepared: BTreeSet::new(),
                prepare_failed: BTreeSet::new(),
                parked: BTreeMap::new(),
                settings: None,
                frozen: false,
                heartbeat_ms,
                sessions: BTreeMap::new(),
                placement: false,
                groups: BTreeMap::new(),
            },
        };
        record.heartbeat_ms = heartbeat_ms;
        record.sessions.clone_from(live);
        record.groups = self.shared.groups.counts();
        Some(record)
    }

    /// Writes `record` with the presence TTL `ttl` by CAS on our revision (read first when
    /// unknown). A key found changed since our last acknowledged write (a write of ours with
    /// an unknown outcome was followed by a cut link, and another process deleted the record
    /// meanwhile) counts as deleted by another process: written only under rule 6.
    async fn write(&mut self, record: MemberRecord, ttl: Duration) {
        let shared = self.shared.clone();
        let link = &shared.member;
        let timeout = link.operation_timeout.min(link.heartbeat);
        let expected = match self.rev {
            Some(r) => r,
            None => match shared.store.read(&link.key, timeout).await {
                Ok(KeyState::Absent) if self.known.is_none() || self.permit => 0,
                Ok(KeyState::Absent) => {
                    // Our record was there: purged since.
                    self.gone = Some(Instant::now());
                    return;
                }
                Ok(
                    KeyState::Vacant { revision, .. }
                    | KeyState::Held { revision, .. }
                    | KeyState::Unknown { revision },
                ) if self.known.is_some_and(|k| k != revision) && !self.permit => {
                    debug!(revision, "the member record changed since our last write");
                    self.gone = Some(Instant::now());
                    return;
                }
                Ok(
                    KeyState::Vacant { revision, .. }
                    | KeyState::Held { revision, .. }
                    | KeyState::Unknown { revision },
                ) => revision,
                Err(kind) => {
                    self.failed(kind, ttl, link.heartbeat / 2);
                    return;
                }
            },
        };
        let flags = Written {
            draining: record.draining,
            healthy: record.healthy,
        };
        let body = record.to_bytes();
        link.note_sent(body.clone());
        let sent = Instant::now();
        let outcome = shared
            .store
            .cas(&link.key, expected, Some(ttl), body, false, timeout)
            .await;
        match outcome {
            WriteOutcome::Ok { revision } => {
                if self.failing.take().is_some() {
                    info!("this instance's member record is written again");
                }
                self.rev = Some(revision);
                self.known = Some(revision);
                self.permit = false;
                self.stored = Some(record);
                self.written_at = Some(sent);
                if let Some(p) = &self.placement {
                    p.written.send_replace(Some(flags));
                }
            }
            WriteOutcome::Conflict => {
                // Another process wrote the key between our read (or last write) and this one.
                warn!(
                    "the member record of this instance id was written by another process; \
                     writing it again after a session renewal (instance ids must be unique)"
                );
                self.rev = None;
                self.stored = None;
                self.gone = Some(Instant::now());
            }
            WriteOutcome::Failed(kind) => {
                self.rev = None;
                self.failed(kind, ttl, link.heartbeat / 4);
            }
            other => {
                debug!(outcome = ?other, "member record write failed; retrying");
                self.rev = None;
                self.retry_at = Some(Instant::now() + link.heartbeat / 4);
            }
        }
    }

    /// A read or write of the record failed for `kind`: retried after `soon`, or — a persistent
    /// failure, such as a permission the NATS user lacks — every third of the presence TTL
    /// `ttl`, with one warning (other instances then follow this one as an orphan, Q8 rule 3).
    fn failed(&mut self, kind: FailureKind, ttl: Duration, soon: Duration) {
        if kind.is_permanent() {
            if self.failing != Some(kind) {
                warn!(
                    error = %self.shared.store.describe(kind),
                    "cannot write this instance's member record; retrying every {:?} (the \
                     other instances follow this one as an orphan meanwhile)",
                    ttl / 3
                );
            }
            self.failing = Some(kind);
            self.retry_at = Some(Instant::now() + ttl / 3);
        } else {
            debug!(
                error = kind.as_str(),
                "member record read or write failed; retrying"
            );
            self.retry_at = Some(Instant::now() + soon);
        }
    }

    /// Graceful stop: deletes the record at our revision (anything else is not ours to
    /// delete).
    async fn delete(&self) {
        let Some(r) = self.rev else {
            return;
        };
        let link = &self.shared.member;
        let timeout = link.operation_timeout.min(link.heartbeat);
        let outcome = self
            .shared
            .store
            .cas(&link.key, r, None, bytes::Bytes::new(), true, timeout)
            .await;
        debug!(?outcome, "member record deleted");
    }
}

/// The placement flags and roles the record follows.
struct Inputs {
    draining: watch::Receiver<bool>,
    healthy: watch::Receiver<bool>,
    frozen: watch::Receiver<bool>,
    roles: watch::Receiver<Option<RecordRoles>>,
}

impl Inputs {
    fn new(p: &PlacementLink) -> Self {
        Self {
            draining: p.draining.subscribe(),
            healthy: p.healthy.subscribe(),
            frozen: p.frozen.subscribe(),
            roles: p.record_roles.clone(),
        }
    }

    /// One of them changed (never without placement).
    async fn changed(inputs: Option<&mut Self>) {
        let Some(i) = inputs else {
            return std::future::pending().await;
        };
        tokio::select! {
            Ok(()) = i.draining.changed() => {}
            Ok(()) = i.healthy.changed() => {}
            Ok(()) = i.frozen.changed() => {}
            // Not after the driver stopped (a dropped sender answers at once, forever).
            Ok(()) = i.roles.changed() => {}
            else => std::future::pending().await,
        }
    }
}

/// The next change of any receiver of `rxs` not in `skip`: its class and whether its sender
/// is still there. Never, with none.
async fn any_changed<T: Send + Sync>(
    rxs: &mut BTreeMap<u64, watch::Receiver<T>>,
    skip: &BTreeSet<u64>,
) -> (u64, bool) {
    let waits: Vec<_> = rxs
        .iter_mut()
        .filter(|(class, _)| !skip.contains(class))
        .map(|(class, rx)| {
            let class = *class;
            Box::pin(async move { (class, rx.changed().await.is_ok()) })
        })
        .collect();
    if waits.is_empty() {
        return std::future::pending().await;
    }
    futures_util::future::select_all(waits).await.0
}

/// This instance's placement record as it should be stored now (without its sessions).
fn placement_record(shared: &Shared, p: &PlacementLink, roles: RecordRoles) -> MemberRecord {
    MemberRecord {
        v: MEMBER_VERSION,
        instance: shared.instance.clone(),
        incarnation: shared.incarnation,
        weight: p.settings.config.weight,
        priority: p.settings.priority,
        roles: roles.roles,
        pinned: roles.pinned,
        unavailable: roles.unavailable,
        draining: *p.draining.borrow(),
        healthy: *p.healthy.borrow(),
        http: shared.member.http.clone(),
        started_at: Some(shared.member.started_at.clone()),
        zone: p.settings.config.zone.clone(),
        capacity: p.settings.config.capacity,
        max_roles: p.settings.config.max_roles,
        version: p.settings.config.version.as_ref().map(ToString::to_string),
        costs: roles.costs,
        settings: Some(p.settings.config.digest()),
        parked: roles.parked,
        prepares: roles.prepares,
        prepared: roles.prepared,
        prepare_failed: roles.prepare_failed,
        frozen: *p.frozen.borrow(),
        heartbeat_ms: 0,
        sessions: BTreeMap::new(),
        placement: true,
        groups: BTreeMap::new(),
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
