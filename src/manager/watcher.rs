//! The one bucket watcher: dispatches role-key changes to role runners by key prefix and keeps
//! the observer view of every role's holder.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::kv::{Entry, Store};
use futures_util::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use super::events::{HolderInfo, RoleEvent};
use super::probe::{Inbox, answering};
use super::role_input::RoleInput;
use super::session_link::SessionInput;
use super::shared::Shared;
use crate::codec::presence::PresenceEntry;
use crate::core::{KeyState, SessionKeyState, Verdict};
use crate::names::{InstanceId, RoleName};
use crate::store::ROLE_PREFIX;
use crate::tap::WatcherEvent;
use crate::value::{SESSION_PREFIX, parse_session_key};

/// Runs the watcher until `cancel`; recreates it after errors (a new watcher replays the
/// current value of every key; role runners ignore revisions they already know). Answers
/// liveness probes (`RoleManager::probe`) in its loop and while it waits for the server.
pub(crate) async fn run(
    shared: Arc<Shared>,
    kv: Store,
    bucket: BucketRecovery,
    mut probes: Inbox,
    cancel: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    let mut epoch = bucket.epoch;
    let mut first = true;
    let mut last_check: Option<tokio::time::Instant> = None;
    let mut deferred_check: Option<tokio::time::Instant> = None;
    loop {
        if !std::mem::take(&mut first) {
            let now = answering(&mut probes, check_bucket(&shared, &bucket, epoch)).await;
            if now == epoch {
                // A new watcher replays what the bucket holds: not a record purged meanwhile.
                refresh_groups(&shared);
            }
            epoch = now;
        }
        let watch = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            // Q8: only the prefixes the manager needs (role data is not fanned out).
            w = answering(&mut probes, kv.watch_many_with_history(WATCHED)) => w,
        };
        match watch {
            Ok(mut entries) => {
                debug!("bucket watcher started");
                // An empty bucket delivers nothing: it is caught up at once.
                if answering(&mut probes, fresh_info(&bucket))
                    .await
                    .is_ok_and(|i| i.state.messages == 0)
                {
                    let first = shared
                        .bucket
                        .caught_up
                        .send_if_modified(|c| !std::mem::replace(c, true));
                    if first {
                        sessions_to_placement(&shared);
                    }
                }
                backoff = Duration::from_millis(100);
                loop {
                    let next = tokio::select! {
                        biased;
                        () = cancel.cancelled() => return,
                        Some(reply) = probes.recv() => {
                            let _ = reply.send(());
                            continue;
                        }
                        () = async {
                            match deferred_check {
                                Some(at) => tokio::time::sleep_until(at).await,
                                None => shared.bucket.check_asked().await,
                            }
                        } => {
                            // Failing writes ask again and again: check at most every second,
                            // and a request within that second is deferred, not dropped (a
                            // dropped one left a recreated bucket unnoticed until the next
                            // request, which may never come).
                            if let Some(t) = last_check.filter(|t| t.elapsed() < Duration::from_secs(1)) {
                                deferred_check = Some(t + Duration::from_secs(1));
                                continue;
                            }
                            deferred_check = None;
                            last_check = Some(tokio::time::Instant::now());
                            let now =
                                answering(&mut probes, check_bucket(&shared, &bucket, epoch)).await;
                            if now == epoch {
                                // The same bucket: a purge may have removed count records
                                // without a marker (Q14).
                                refresh_groups(&shared);
                                continue;
                            }
                            // A new bucket: its state must be replayed by a new watcher.
                            epoch = now;
                            break;
                        }
                        n = entries.next() => n,
                    };
                    match next {
                        Some(Ok(entry)) => {
                            // Dispatch first: whoever waits for `caught_up` must find the
                            // last entry of the replay in the holders already.
                            dispatch(&shared, &entry, epoch).await;
                            report_delivery(&shared, &entry);
                            if entry.seen_current || entry.delta == 0 {
                                let first = shared
                                    .bucket
                                    .caught_up
                                    .send_if_modified(|c| !std::mem::replace(c, true));
                                if first {
                                    sessions_to_placement(&shared);
                                }
                            }
                        }
                        Some(Err(err)) => {
                            shared
                                .tap
                                .watcher(&shared.instance, WatcherEvent::Restarted);
                            warn!(error = %err, "bucket watcher failed; recreating it");
                            break;
                        }
                        None => {
                            shared
                                .tap
                                .watcher(&shared.instance, WatcherEvent::Restarted);
                            warn!("bucket watcher ended; recreating it");
                            break;
                        }
                    }
                }
            }
            Err(err) => {
                shared
                    .tap
                    .watcher(&shared.instance, WatcherEvent::Restarted);
                warn!(error = %err, "cannot create the bucket watcher; retrying");
            }
        }
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            () = answering(&mut probes, tokio::time::sleep(backoff)) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Reads the obeyed count records again and re-asserts the slot count records, on tasks of
/// their own (the watcher does not wait).
fn refresh_groups(shared: &Arc<Shared>) {
    // The slot count records too (protocol Q15): written again where the bucket lost them.
    super::slot_count::reassert(shared, None);
    if shared.groups.is_empty() {
        return;
    }
    let (groups, store) = (shared.groups.clone(), shared.store.clone());
    tokio::spawn(async move { groups.refresh(&store, REFRESH_TIMEOUT).await });
}

/// How long [`refresh_groups`] waits for each record.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(2);

/// The key prefixes the watcher follows (Q8): not `session.>` — the sessions that matter are
/// followed one instance at a time (`manager::follower`).
const WATCHED: [&str; 3] = ["role.>", "member.>", "control.>"];

/// What the watcher needs to notice a deleted or recreated bucket.
pub(crate) struct BucketRecovery {
    pub(crate) js: async_nats::jetstream::Context,
    pub(crate) config: crate::core::BucketSettings,
    pub(crate) epoch: u64,
}

/// After a watcher failure: is the bucket still there, and still the same one (P1 epoch)?
/// A recreated bucket restarts revisions, so every role is reset to the new epoch.
async fn check_bucket(shared: &Shared, bucket: &BucketRecovery, epoch: u64) -> u64 {
    shared
        .bucket
        .checks
        .send_modify(|(started, _)| *started += 1);
    let now = check_bucket_once(shared, bucket, epoch).await;
    shared.bucket.checks.send_modify(|(_, done)| *done += 1);
    now
}

async fn check_bucket_once(shared: &Shared, bucket: &BucketRecovery, epoch: u64) -> u64 {
    match fresh_info(bucket).await {
        Ok(info) => {
            let now = u64::try_from(info.created.unix_timestamp_nanos()).unwrap_or(0);
            if now != epoch {
                warn!(bucket = %bucket.config.name, "bucket was recreated; resetting all roles");
                let born = super::bucket::born(&bucket.js, &bucket.config.name).await;
                // Read before the book is reset: the old bucket's holders act until their
                // deadlines, whatever their TTL (Q6).
                let old_ttl = shared.reports.book().longest_session_ttl();
                shared.reset_epoch(now, born, old_ttl);
                shared.reports.book().reset();
                shared.bucket.moves().clear();
                // The old bucket's count records are gone with it (the new one's, if any, are
                // delivered by the new watch): the configured counts apply until then.
                shared.groups.forget_records();
                // The holders map restarts too: the new bucket's revisions start again at 1.
                for tx in shared.bucket.holders().values() {
                    tx.send_if_modified(|cur| cur.take().is_some());
                }
                if let Some(p) = &shared.placement {
                    p.forget_drain_record();
                    p.bucket_reset();
                }
            }
            now
        }
        Err(err) => {
            let missing = crate::codec::jetstream_code(&err)
                == Some(async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND);
            if missing && bucket.config.auto_create {
                warn!(bucket = %bucket.config.name, "bucket is missing; recreating it (auto_create)");
                if let Err(e) = super::bucket::create(&bucket.js, &bucket.config).await {
                    error!(error = %e, "cannot recreate the bucket");
                }
            } else if missing {
                error!(
                    bucket = %bucket.config.name,
                    "bucket is missing; roles cannot be held until it is created again"
                );
            } else {
                debug!(error = %err, "cannot read bucket status");
            }
            epoch
        }
    }
}

/// The bucket stream's current info, asked of the server (`kv::Store::status()` returns the
/// info cached when the bucket was opened, which never shows a deleted or recreated bucket).
async fn fresh_info(
    bucket: &BucketRecovery,
) -> Result<async_nats::jetstream::stream::Info, async_nats::jetstream::context::GetStreamError> {
    let stream = bucket
        .js
        .get_stream(format!("KV_{}", bucket.config.name))
        .await?;
    Ok(stream.cached_info().clone())
}

/// Reports the watcher's backlog and delivery lag to the tap sinks.
fn report_delivery(shared: &Shared, entry: &Entry) {
    if !shared.tap.is_active() {
        return;
    }
    let created: SystemTime = entry.created.into();
    shared.tap.watcher(
        &shared.instance,
        WatcherEvent::Delivered {
            pending: entry.delta,
            lag: SystemTime::now().duration_since(created).ok(),
        },
    );
}

async fn dispatch(shared: &Arc<Shared>, entry: &Entry, epoch: u64) {
    if epoch == shared.bucket.epoch() {
        shared.bucket.saw_revision(entry.revision);
    }
    if entry.key.starts_with(SESSION_PREFIX) {
        return; // not watched here (Q8): the follower's consumers deliver session keys
    }
    if entry.key == crate::placement::FREEZE_KEY {
        if let Some(p) = &shared.placement {
            p.observe_freeze(entry);
        }
        return;
    }
    if entry.key.starts_with(crate::moves::MOVE_PREFIX) {
        super::moves::observe(shared, entry);
        return;
    }
    if entry.key.starts_with(crate::groups::GROUP_PREFIX) {
        shared.groups.observe(entry);
        return;
    }
    if entry.key.starts_with(super::slot_count::SLOTS_PREFIX) {
        super::slot_count::observe(shared, entry);
        return;
    }
    if let Some(named) = entry.key.strip_prefix(crate::placement::DRAIN_PREFIX) {
        if named == shared.instance.as_str()
            && let Some(p) = &shared.placement
        {
            p.observe_drain(entry);
        }
        return;
    }
    if entry.key.starts_with(crate::placement::MEMBER_PREFIX) {
        observe_presence(shared, entry);
        // This instance's own record deleted or replaced: written again (Q8 rule 6).
        shared.member.observe(entry);
        if let Some(p) = &shared.placement {
            p.observe_member(entry.clone()).await;
        }
        return;
    }
    let Some(name) = entry.key.strip_prefix(ROLE_PREFIX) else {
        return; // other prefixes (role data) are not leases
    };
    let Ok(role) = RoleName::from_key_name(name) else {
        debug!(key = %entry.key, "ignoring a key that is not a valid role name");
        return;
    };
    let state = crate::codec::role::watched(entry);
    let now = tokio::time::Instant::now();
    shared.role_moved(&role, state.revision());
    if role.slot().is_none()
        && let Some(v) = state.lease()
    {
        // A role run here with slots held elsewhere as one role (Q15): logged.
        super::slot_count::plain_key_held(shared, &role, &v.holder, state.revision());
    }
    if let Some(v) = state.lease()
        && v.holder == shared.instance
    {
        release_foreign_value(shared, &role, v, state.revision());
    }
    let holder = state
        .lease()
        .map(|v| (v.session_key.as_str(), v.session, v.holder.clone()));
    let foreign_holder = holder
        .as_ref()
        .is_some_and(|(_, _, h)| *h != shared.instance);
    // Rings the follower when the value names a session not followed or nobody (Q8).
    let verdict = shared.reports.role(&role, holder, state.revision(), now);
    let gone = verdict == Verdict::Gone || (foreign_holder && shared.backend.ignores_sessions());
    let info =
        HolderInfo::from_state(&role, &state, epoch, Some(entry.created.into())).filter(|_| !gone);
    measure_vacancy(shared, &role, &state, gone, now);
    if !gone
        && let Some(v) = state.lease()
        && v.holder == shared.instance
    {
        super::moves::took(shared, &role, state.revision());
    }
    let changed = update_holder(shared, &role, state.revision(), info);
    let revision = state.revision();
    shared.send(&role, RoleInput::Observed(state));
    if gone {
        shared.send(&role, RoleInput::HolderGone(revision));
    }
    if changed && let Some(p) = &shared.placement {
        // The plan depends on who holds what: the controller re-plans (on its own task, so
        // the watcher goes on dispatching at once).
        p.changed();
    }
}

/// A role value at `revision` names this instance (protocol Q4): if it names one of its live
/// sessions and no role runner of this process campaigns for the role in that session's TTL
/// class, nobody here acts on it (somebody else wrote it) — the session lists it as released
/// (Q5 rule 5), so the role is vacant for every candidate. A role runner of that class decides
/// itself (its own term, an acquire in flight, or a takeover by CAS).
fn release_foreign_value(
    shared: &Shared,
    role: &RoleName,
    value: &crate::value::LeaseValue,
    revision: u64,
) {
    let Some((_, class)) = parse_session_key(&value.session_key) else {
        return;
    };
    let live = shared.managed.sessions().get(&class).is_some_and(|c| {
        matches!(c.view.borrow().update,
            Some(crate::core::SessionUpdate::Live { uuid, .. }) if uuid == value.session)
    });
    if !live || shared.managed.roles().get(role).and_then(|s| s.class) == Some(class) {
        return;
    }
    if shared.managed.stopping().contains(role) {
        // Its task is stopping and may still hold this very term (an acquire that completed
        // during a shutdown): it releases the term itself, and the session ends after it.
        return;
    }
    warn!(
        %role,
        revision,
        "a role value names this instance's live session but nobody here acts on it (another \
         client wrote it): releasing it through the session"
    );
    shared.release_term(Some(class), value.session, role, revision);
}

/// Starts or ends the vacancy of `role` this instance measures (`manager::vacancy`).
fn measure_vacancy(
    shared: &Shared,
    role: &RoleName,
    state: &KeyState,
    gone: bool,
    now: tokio::time::Instant,
) {
    if !shared.managed.roles().contains_key(role) {
        return; // only roles this instance takes part in are measured here
    }
    match state {
        KeyState::Vacant { expired: true, .. } => shared.reports.vacancies.crashed(role, now),
        _ if gone => shared.reports.vacancies.crashed(role, now),
        KeyState::Vacant { revision, .. } => shared.reports.vacancies.deleted(role, *revision, now),
        KeyState::Held { revision, .. } => {
            if let Some(holder) = state.lease().map(|v| &v.holder)
                && let Some((cause, took)) =
                    shared
                        .reports
                        .vacancies
                        .held(role, holder, *revision, &shared.instance, now)
            {
                record_vacancy(shared, role, cause, took);
            }
        }
        _ => {}
    }
}

/// A vacancy this instance measured ended after `took`.
pub(crate) fn record_vacancy(
    shared: &Shared,
    role: &RoleName,
    cause: super::vacancy::VacancyCause,
    took: std::time::Duration,
) {
    shared.tap.record(
        &shared.instance,
        role,
        crate::tap::TapEvent::VacancyEnded {
            cause: cause.as_str(),
            took,
        },
    );
}

/// A `member.` entry: the session book learns which sessions the member lists, or that its
/// record is gone (Q8 rule 1); the follower re-reads whom to follow, placement whom is live.
fn observe_presence(shared: &Shared, entry: &Entry) {
    match crate::codec::presence::presence(entry) {
        PresenceEntry::Ignored => return,
        PresenceEntry::Record(id, record) => shared.reports.book().member_put(id, record),
        PresenceEntry::Gone(id, revision) => shared.reports.book().member_gone(&id, revision),
    }
    shared.reports.follow.notify_one();
    if *shared.bucket.caught_up.borrow() {
        sessions_to_placement(shared);
    }
}

/// A session key's entry (from the consumer of its instance, `manager::follower`): the
/// session book learns it (roles resting on a session that is now gone become vacant), and
/// this instance's own session task hears of its key.
pub(crate) fn dispatch_session(shared: &Shared, entry: &Entry) {
    // Only the canonical spelling names a session (Q1): a look-alike key changes nothing.
    let Some((instance, ttl_ms)) = parse_session_key(&entry.key) else {
        debug!(key = %entry.key, "ignoring a key that is not a session key");
        return;
    };
    let state = crate::codec::session::watched(entry);
    if instance == shared.instance
        && let Some(class) = shared.managed.sessions().get(&ttl_ms)
    {
        let _ = class.inbox.send(SessionInput::Observed(state.clone()));
    }
    if matches!(state, SessionKeyState::Value { .. }) {
        session_renewed(shared, &instance, entry.created.into());
    }
    let gone = shared
        .reports
        .book()
        .observe(&entry.key, state, tokio::time::Instant::now());
    holders_gone(shared, gone);
    if *shared.bucket.caught_up.borrow() {
        sessions_to_placement(shared);
    }
}

/// Placement learns which instances have a live session (protocol Q9: a member is live while
/// its session is); only changes go out.
fn sessions_to_placement(shared: &Shared) {
    if let Some(p) = &shared.placement {
        p.sessions(shared.reports.book().live_instances());
    }
}

/// A session of `instance` was renewed at `at`: in protocol v2 that, not a role key write, is
/// when its holders were last heard of (`HolderInfo::renewed_at`, the renewal ages of the API
/// and dashboard, filled in by `RoleManager::holders`). One entry per instance: a renewal
/// costs the same whatever the instance holds (issue 27).
fn session_renewed(shared: &Shared, instance: &InstanceId, at: SystemTime) {
    let mut renewals = shared.bucket.renewals();
    let last = renewals.entry(instance.clone()).or_insert(at);
    if *last < at {
        *last = at;
    }
}

/// Roles whose holder's session is gone (Q5): vacant for the role runners and the observer view.
pub(crate) fn holders_gone(shared: &Shared, gone: Vec<(RoleName, u64)>) {
    let mut any = false;
    let now = tokio::time::Instant::now();
    for (role, revision) in gone {
        shared.reports.vacancies.crashed(&role, now);
        shared.send(&role, RoleInput::HolderGone(revision));
        any |= clear_holder(shared, &role, revision);
    }
    if any && let Some(p) = &shared.placement {
        p.changed();
    }
}

/// The holder of `role` at `revision` is gone: the observer view shows the role vacant.
fn clear_holder(shared: &Shared, role: &RoleName, revision: u64) -> bool {
    let holders = shared.bucket.holders();
    let Some(tx) = holders.get(role) else {
        return false;
    };
    let cleared = tx.send_if_modified(|cur| {
        if cur.as_ref().is_some_and(|c| c.revision == revision) {
            *cur = None;
            true
        } else {
            false
        }
    });
    drop(holders);
    if cleared {
        shared.emit(RoleEvent::HolderChanged(HolderInfo {
            role: role.clone(),
            holder: None,
            foreign: false,
            term: None,
            revision,
            priority: 0,
            meta: Default::default(),
            since: SystemTime::now(),
            token: None,
            renewed_at: None,
            acquired_at: None,
            ttl: None,
        }));
    }
    cleared
}

/// Records the holder of `role`; true when the term changed (a new holder or a vacancy).
fn update_holder(
    shared: &Shared,
    role: &RoleName,
    revision: u64,
    info: Option<HolderInfo>,
) -> bool {
    let mut holders = shared.bucket.holders();
    let tx = holders
        .entry(role.clone())
        .or_insert_with(|| watch::channel(None).0);
    let mut changed = None;
    tx.send_if_modified(|cur| {
        let cur_rev = cur.as_ref().map_or(0, |c| c.revision);
        if revision <= cur_rev && cur.is_some() {
            return false;
        }
        let same_term = match (cur.as_ref(), info.as_ref()) {
            (Some(a), Some(b)) => a.same_term(b),
            (None, None) => true,
            _ => false,
        };
        let mut next = info.clone();
        if same_term && let (Some(n), Some(c)) = (next.as_mut(), cur.as_ref()) {
            // A renewal: keep when the term was first seen, and its start time if the renewal
            // does not repeat it.
            n.since = c.since;
            n.acquired_at = n.acquired_at.or(c.acquired_at);
        }
        *cur = next;
        if !same_term {
            changed = Some(cur.clone());
        }
        !same_term || cur.is_some()
    });
    drop(holders);
    let term_changed = changed.is_some();
    if let Some(now) = changed {
        let info = now.unwrap_or(HolderInfo {
            role: role.clone(),
            holder: None,
            foreign: false,
            term: None,
            revision,
            priority: 0,
            meta: Default::default(),
            since: SystemTime::now(),
            token: None,
            renewed_at: None,
            acquired_at: None,
            ttl: None,
        });
        shared.emit(RoleEvent::HolderChanged(info));
    }
    term_changed
}
