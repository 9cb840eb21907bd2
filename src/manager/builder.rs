//! [`RoleManagerBuilder`]: the connection, bucket and defaults of a manager, its roles and
//! sinks; `start()` opens the bucket and spawns the watcher, the role runners and the health task.

use super::backend::RoleBackend;
use super::shared::{self, Shared};
use super::startup::{StartProgress, StartStep, Starter};
use super::{
    RoleEvent, RoleManager, RoleSpec, bucket, connection, health_task, placement_link,
    placement_tasks, watcher,
};
use crate::config::Config;
use crate::core::{RetryPolicy, StartRetry, Timing};
use crate::error::Error;
use crate::health::{HealthChecker, HealthPolicy, HealthState};
use crate::metrics::{PerRole, RoleSeries};
use crate::names::{InstanceId, RoleName};
use crate::placement::PlacementSettings;
use crate::store::ServerErrors;
use crate::tap::{Tap, TapSink};
use placement_link::PlacementLink;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info};
use uuid::Uuid;

/// Builds a [`RoleManager`].
#[must_use = "a builder does nothing until start() is called"]
pub struct RoleManagerBuilder {
    pub(super) client: async_nats::Client,
    pub(super) server_errors: ServerErrors,
    pub(super) instance: InstanceId,
    pub(super) bucket: crate::core::BucketSettings,
    pub(super) priority: i32,
    pub(super) meta: BTreeMap<String, String>,
    pub(super) retry: RetryPolicy,
    pub(super) drain_timeout: Duration,
    /// The presence TTL of the member record (protocol Q8 rule 1); `None`: the default.
    pub(super) presence_ttl: Option<Duration>,
    pub(super) validation_interval: Option<Duration>,
    pub(super) health: Option<(Arc<dyn HealthChecker>, HealthPolicy)>,
    pub(super) roles: Vec<RoleSpec>,
    pub(super) groups: Vec<super::GroupSpec>,
    pub(super) events: broadcast::Sender<RoleEvent>,
    pub(super) observers: Vec<super::shared::EventObserver>,
    pub(super) tap_sinks: Vec<Arc<dyn TapSink>>,
    pub(super) meter: Option<opentelemetry::metrics::Meter>,
    pub(super) role_series: RoleSeries,
    pub(super) placement: Option<PlacementSettings>,
    pub(super) start_retry: StartRetry,
    pub(super) start_progress: watch::Sender<Option<StartProgress>>,
    #[cfg(feature = "negative-controls")]
    pub(super) negative: Option<super::negative::NegativeControl>,
}

// The manager's constructors live here, next to what they construct, so the manager's own
// module does not depend on its builder.
impl RoleManager {
    /// A builder using an existing connection (the application owns it).
    pub fn builder(client: async_nats::Client, instance: InstanceId) -> RoleManagerBuilder {
        RoleManagerBuilder {
            client,
            server_errors: ServerErrors::default(),
            instance,
            bucket: crate::core::BucketSettings::default(),
            priority: 0,
            meta: BTreeMap::new(),
            retry: RetryPolicy::default(),
            drain_timeout: Duration::from_secs(5),
            presence_ttl: None,
            validation_interval: None,
            health: None,
            roles: Vec::new(),
            groups: Vec::new(),
            events: broadcast::channel(1024).0,
            observers: Vec::new(),
            tap_sinks: Vec::new(),
            meter: None,
            role_series: RoleSeries::default(),
            placement: None,
            start_retry: StartRetry::default(),
            start_progress: watch::channel(None).0,
            #[cfg(feature = "negative-controls")]
            negative: None,
        }
    }

    /// A builder from a validated configuration: bucket, instance, retry, health, fencing,
    /// shutdown and every declared role (without callbacks; add them with
    /// [`RoleManagerBuilder::role`] instead, or use [`RoleHandle::watch`](super::RoleHandle::watch)).
    ///
    /// # Errors
    /// [`Error::Config`] when the configuration is invalid or has no instance id.
    pub fn from_config(
        client: async_nats::Client,
        config: &Config,
        server_errors: ServerErrors,
    ) -> Result<RoleManagerBuilder, Error> {
        config.validate()?;
        let instance = config.require_instance_id()?.clone();
        let mut builder = Self::builder(client, instance)
            .server_errors(server_errors)
            .meta(config.instance.meta.clone())
            .retry(config.retry)
            .drain_timeout(config.shutdown.drain_timeout)
            .validation_interval(config.fencing.validation_interval)
            .role_metrics(config.telemetry.role_metrics.clone());
        builder.bucket = config.bucket_settings();
        builder.presence_ttl = config.instance.presence_ttl;
        builder = builder
            .priority(config.instance.priority)
            .placement(PlacementSettings {
                member_ttl: Some(config.member_ttl()),
                zone: config.instance.effective_zone().map(str::to_owned),
                capacity: config.instance.capacity,
                max_roles: config.instance.max_roles,
                // Validated above.
                version: config
                    .instance
                    .version
                    .as_deref()
                    .and_then(|v| crate::placement::Version::parse(v).ok()),
                ..config.placement.clone()
            });
        if let Some(argv) = &config.health.command
            && let Some(checker) = crate::health::CommandHealthChecker::new(argv.clone())
        {
            builder = builder.health_checker(checker, config.health.policy);
        }
        for role in &config.roles {
            builder = builder.role(RoleSpec::from_config(role, config));
        }
        for group in &config.groups {
            builder = builder.group(super::GroupSpec::from_config(group, config));
        }
        Ok(builder)
    }
}

impl RoleManagerBuilder {
    /// Records the manager's metrics (names and labels in `docs/observability.md`) with `meter` instead of
    /// `opentelemetry::global::meter("nats-roles")` (which records nothing until the
    /// application installs a global meter provider).
    pub fn meter(mut self, meter: opentelemetry::metrics::Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Which roles get metric series of their own, labelled `role` ([`RoleSeries`];
    /// `telemetry.role_metrics` in the configuration). The others are recorded on the
    /// instance's series (the same names without `role`). Default: [`RoleSeries::Auto`]:
    /// every role while the manager has at most [`RoleSeries::AUTO_LIMIT`] roles when it
    /// starts, else none.
    pub fn role_metrics(mut self, series: RoleSeries) -> Self {
        self.role_series = series;
        self
    }

    /// Enables placement (docs/placement.md) when `settings.enabled`: a membership record
    /// `member.<instance>` with TTL `settings.member_ttl` (default: the shortest role TTL),
    /// priority takeover and load spreading by graceful hand-over. The settings are checked
    /// by [`start`](Self::start) ([`PlacementSettings::validate`]).
    pub fn placement(mut self, settings: PlacementSettings) -> Self {
        self.placement = settings.enabled.then_some(settings);
        self
    }

    /// Test-only: run with one deliberately broken mode, which the history checker must flag.
    #[cfg(feature = "negative-controls")]
    #[doc(hidden)]
    pub fn negative_control(mut self, mode: super::negative::NegativeControl) -> Self {
        self.negative = Some(mode);
        self
    }

    /// Records this manager's history (lease writes, terms, fenced writes) with `recorder`
    /// (format: `docs/reliability.md`). Without it nothing is recorded and nothing is paid.
    pub fn history(self, recorder: crate::history::HistoryRecorder) -> Self {
        self.tap_sink(Arc::new(recorder))
    }

    /// Adds a sink for the drivers' instrumentation events (history, metrics).
    pub(crate) fn tap_sink(mut self, sink: Arc<dyn TapSink>) -> Self {
        self.tap_sinks.push(sink);
        self
    }

    /// Transitions of every role from the very start (the promotions of roles won while
    /// [`RoleManagerBuilder::start`] runs included); [`RoleManager::events`] only sees what
    /// happens after its call.
    #[must_use]
    pub fn events(&self) -> broadcast::Receiver<RoleEvent> {
        self.events.subscribe()
    }

    /// Calls `observe` with every transition, synchronously, in the task that makes it and
    /// before [`events`](Self::events) subscribers get it: a role's `Demoted` is observed
    /// before its release is written (so before any successor can be promoted), its
    /// `Promoted` before its work starts. `nats-roles run` prints its stdout lines this way.
    /// Keep it short and non-blocking (a slow observer delays the role's own steps);
    /// anything else belongs in an [`events`](Self::events) subscriber.
    pub fn on_event(mut self, observe: impl Fn(&RoleEvent) + Send + Sync + 'static) -> Self {
        self.observers.push(Arc::new(observe));
        self
    }

    /// The KV bucket (default `roles`).
    pub fn bucket(mut self, name: impl Into<String>) -> Self {
        self.bucket.name = name.into();
        self
    }

    /// Create the bucket if it is missing, with this many replicas.
    pub fn auto_create(mut self, replicas: usize) -> Self {
        self.bucket.auto_create = true;
        self.bucket.replicas = replicas;
        self
    }

    /// Metadata written into every lease (host, HTTP address, ...).
    pub fn meta(mut self, meta: BTreeMap<String, String>) -> Self {
        self.meta = meta;
        self
    }

    /// Retry policy for transient failures.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// How [`start`](Self::start) retries a step that fails for a reason that can heal (a
    /// server that does not answer, a JetStream cluster or stream without a leader). Default:
    /// [`StartRetry::default`] (backoff from 100 ms doubling to 5 s, for up to 60 s);
    /// [`StartRetry::until_started`] retries without a deadline.
    pub fn start_retry(mut self, retry: StartRetry) -> Self {
        self.start_retry = retry;
        self
    }

    /// Where [`start`](Self::start) stands while it runs: the step and, after a failed
    /// attempt, the failure and when it is retried (its `Display` is the text `nats-roles run`
    /// serves on `/readyz` while starting). `None` before `start` is called and after it
    /// succeeded.
    #[must_use]
    pub fn start_progress(&self) -> watch::Receiver<Option<StartProgress>> {
        self.start_progress.subscribe()
    }

    /// Publishes the start's progress on `progress` (the binary's, which reported its connect
    /// step there first).
    #[cfg(feature = "cli")]
    pub(crate) fn start_progress_to(
        mut self,
        progress: watch::Sender<Option<StartProgress>>,
    ) -> Self {
        self.start_progress = progress;
        self
    }

    /// Longest wait for `on_demote` during a graceful release.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// How long this instance's member record outlives it when nobody saw it die (protocol
    /// Q8 rule 1: the last resort after its successors and its second tier; the record is
    /// rewritten unchanged every third of it, a message to every instance). Default `max(5
    /// min, 10 × the longest role TTL)`; a value below 10 × the longest role TTL is raised to
    /// it.
    pub fn presence_ttl(mut self, ttl: Duration) -> Self {
        self.presence_ttl = Some(ttl);
        self
    }

    /// Re-validate every held lease against the KV this often (protocol P6).
    pub fn validation_interval(mut self, interval: Option<Duration>) -> Self {
        self.validation_interval = interval;
        self
    }

    /// Release all roles after repeated health-check failures.
    pub fn health_checker(mut self, checker: impl HealthChecker, policy: HealthPolicy) -> Self {
        self.health = Some((Arc::new(checker), policy));
        self
    }

    /// Server errors seen on the connection (see [`connect`](super::connect)); enables fast permission errors.
    pub fn server_errors(mut self, errors: ServerErrors) -> Self {
        self.server_errors = errors;
        self
    }

    /// Default priority of this instance's roles.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Adds a role.
    pub fn role(mut self, role: RoleSpec) -> Self {
        self.roles.push(role);
        self
    }

    /// Adds a role group: the roles `<name>-0` … `<name>-<count − 1>` (protocol Q14). The
    /// group's count record in the bucket (`nats-roles scale`,
    /// [`RoleManager::set_group_count`]) overrides its count, read at start and followed while
    /// the manager runs.
    pub fn group(mut self, group: super::GroupSpec) -> Self {
        self.groups.push(group);
        self
    }

    /// Replaces the member callbacks of the group `name` added before (the binary's `exec`
    /// groups).
    #[cfg(feature = "cli")]
    pub(crate) fn set_group_callbacks(
        &mut self,
        name: &crate::names::RoleName,
        make: impl Fn(u32) -> std::sync::Arc<dyn crate::callbacks::RoleCallbacks>
        + Send
        + Sync
        + 'static,
    ) {
        if let Some(spec) = self.groups.iter_mut().find(|g| g.name() == name) {
            *spec = spec.clone().member_callbacks(make);
        }
    }

    /// Replaces the callbacks of the role `name` added before (the binary's `exec` roles).
    #[cfg(feature = "cli")]
    pub(crate) fn set_callbacks(
        &mut self,
        name: &crate::names::RoleName,
        callbacks: impl crate::callbacks::RoleCallbacks,
    ) {
        if let Some(spec) = self.roles.iter_mut().find(|r| r.name() == name) {
            spec.callbacks = std::sync::Arc::new(callbacks);
        }
    }

    /// Opens (or creates) the bucket, starts the watcher and every role.
    ///
    /// The steps that talk to NATS — opening (or creating) the bucket and reading its stream
    /// info, then reading the keys of the roles this instance campaigns for — are retried
    /// while they fail for a reason that can heal ([`Error::is_transient`]: time-outs, no
    /// responders, a cluster or stream without a leader, any JetStream code that is not a
    /// configuration error), with the backoff and deadline of
    /// [`start_retry`](Self::start_retry): a WARN log line per retry (attempt, error, next
    /// delay; at most one a minute after the tenth), an INFO line when a step succeeds after
    /// retries, and the progress on [`start_progress`](Self::start_progress). No key is
    /// written before both steps succeeded (with `auto_create` the bucket may have been
    /// created), so dropping the future while it retries leaves nothing to release.
    ///
    /// # Errors
    /// At once, without retrying: [`Error::InvalidTiming`] or [`Error::InvalidSetting`]
    /// (before anything is sent) for a setting that breaks a rule; [`Error::BucketNotFound`]
    /// (the bucket is missing and `auto_create` is off); [`Error::PermissionDenied`] (a
    /// permission violation on the bucket's JetStream API subjects or on the reply inbox);
    /// [`Error::JetStream`] with a configuration error code; [`Error::BucketMaxAge`] when the
    /// bucket has a `max_age` (see there); [`Error::IncompatibleProtocol`];
    /// [`Error::SlotCountConflict`] or [`Error::SlotCountRecordInvalid`] for a role with slots
    /// whose count disagrees with the bucket's slot count record (protocol Q15); or
    /// [`Error::RoleExists`] for a role given twice. [`Error::StartTimeout`] (with the last
    /// failure) when the transient failures outlast the deadline.
    pub async fn start(self) -> Result<RoleManager, Error> {
        for spec in &self.roles {
            spec.validate()?;
        }
        for group in &self.groups {
            group.validate()?;
            if let Some(role) = self
                .roles
                .iter()
                .find(|r| crate::groups::member_index(group.name(), r.name()).is_some())
            {
                return Err(Error::RoleExists(role.name().clone()));
            }
        }
        self.bucket.validate()?;
        self.retry.validate()?;
        self.start_retry.validate()?;
        if let Some((_, policy)) = &self.health {
            policy.validate()?;
        }
        if let Some(settings) = &self.placement {
            settings.validate()?;
        }
        let mut starter = Starter::new(self.start_retry, &self.start_progress);
        // Listens from before the first request (whose reply subscription can be denied).
        let mut denied = std::pin::pin!(
            self.server_errors
                .start_denied(bucket::api_subjects(&self.bucket))
        );
        // Each attempt owns what it uses: `start()` stays a `Send` future for any lifetime.
        let open = {
            let (client, bucket, errors) = (
                self.client.clone(),
                self.bucket.clone(),
                self.server_errors.clone(),
            );
            move || {
                let (client, bucket, errors) = (client.clone(), bucket.clone(), errors.clone());
                async move { bucket::open(&client, &bucket, &errors).await }
            }
        };
        let opened = starter
            .run(
                StartStep::OpenBucket {
                    bucket: self.bucket.name.clone(),
                },
                &mut denied,
                open,
            )
            .await?;
        let campaigns: Vec<(RoleName, Duration)> = self
            .roles
            .iter()
            .filter(|r| r.campaign)
            .map(|r| (r.name.clone(), r.timing.operation_timeout))
            .collect();
        let read = {
            let store = opened.store.clone();
            move || refuse_other_protocol(store.clone(), campaigns.clone())
        };
        starter
            .run(
                StartStep::ReadRoleKeys {
                    bucket: self.bucket.name.clone(),
                },
                &mut denied,
                read,
            )
            .await?;
        // Protocol Q15: every role with slots agrees with its slot count record first.
        let slotted: Vec<(RoleName, u32, Duration)> = self
            .roles
            .iter()
            .filter(|r| r.campaign && r.slots != 1)
            .map(|r| (r.name.clone(), r.slots, r.timing.operation_timeout))
            .collect();
        // And no role without slots is recorded as one with slots.
        let plain: Vec<(RoleName, Duration)> = self
            .roles
            .iter()
            .filter(|r| r.campaign && r.slots == 1)
            .map(|r| (r.name.clone(), r.timing.operation_timeout))
            .collect();
        if !slotted.is_empty() || !plain.is_empty() {
            let (store, by) = (opened.store.clone(), self.instance.to_string());
            let check = {
                let slotted = slotted.clone();
                move || {
                    let (store, slotted, plain, by) =
                        (store.clone(), slotted.clone(), plain.clone(), by.clone());
                    async move {
                        super::slot_count::ensure_all(store.clone(), slotted, by).await?;
                        super::slot_count::refuse_plain_with_record(store, plain).await
                    }
                }
            };
            starter
                .run(
                    StartStep::CheckSlotCounts {
                        bucket: self.bucket.name.clone(),
                    },
                    &mut denied,
                    check,
                )
                .await?;
        }
        starter.done();
        #[cfg_attr(not(feature = "negative-controls"), allow(unused_mut))]
        let mut backend: Arc<dyn RoleBackend> = Arc::new(opened.store.clone());
        #[cfg(feature = "negative-controls")]
        if let Some(mode) = self.negative {
            backend = Arc::new(super::negative::Flawed::new(opened.store.clone(), mode));
        }
        // How long a release can take at most: the drain of the role work, then the write.
        let release_bound = self.drain_timeout
            + self
                .roles
                .iter()
                .map(|r| r.timing.operation_timeout)
                .max()
                .unwrap_or(Timing::default().operation_timeout);
        // The member TTL: placement's `member_ttl`, or the shortest role TTL. Its quarter is
        // the member heartbeat period of every record (placement or presence).
        let member_ttl = self
            .placement
            .as_ref()
            .and_then(|config| config.member_ttl)
            .or_else(|| self.roles.iter().map(|r| r.timing.ttl).min())
            .unwrap_or(Timing::default().ttl)
            .max(Duration::from_secs(1));
        let operation_timeout = self
            .roles
            .iter()
            .map(|r| r.timing.operation_timeout)
            .min()
            .unwrap_or(Timing::default().operation_timeout);
        let placement = self.placement.clone().map(|config| {
            let (link, ends) = PlacementLink::new(placement_link::Settings {
                config,
                member_ttl,
                operation_timeout,
                priority: self.priority,
            });
            (Arc::new(link), ends)
        });
        let (connected_tx, connected_rx) = watch::channel(connection::is_connected(&self.client));
        let incarnation = Uuid::new_v4();
        let meter = self
            .meter
            .unwrap_or_else(|| opentelemetry::global::meter("nats-roles"));
        let group_members: usize = self.groups.iter().map(|g| g.count as usize).sum();
        let per_role = self.role_series.resolve(self.roles.len() + group_members);
        if self.role_series == RoleSeries::Auto && per_role == PerRole::None {
            info!(
                roles = self.roles.len() + group_members,
                limit = RoleSeries::AUTO_LIMIT,
                "metrics: no per-role series (role_metrics: auto, more roles than the limit at \
                 start); every role is measured on the instance's series (no `role` label). \
                 For per-role series set telemetry.role_metrics to `all` or a list of roles \
                 (RoleManagerBuilder::role_metrics)"
            );
        }
        let mut sinks = self.tap_sinks;
        sinks.push(Arc::new(crate::metrics::RoleMetrics::new(
            &meter,
            &self.instance,
            &self.bucket.name,
            per_role,
        )));
        let group_records =
            super::group_task::read_records(&opened.kv, &self.groups, operation_timeout).await;
        let groups = Arc::new(super::groups::GroupsLink::new(
            self.groups.clone(),
            group_records,
        ));
        let shared = Arc::new(Shared {
            instance: self.instance.clone(),
            incarnation,
            store: Arc::new(opened.store.clone()),
            drain_timeout: self.drain_timeout,
            connected: connected_rx,
            events: self.events,
            observers: self.observers,
            tap: Tap::new(sinks),
            member: super::member_link::MemberLink::new(
                &self.instance,
                incarnation,
                member_ttl / 4,
                operation_timeout,
                self.meta.get("http").cloned(),
                self.presence_ttl,
            ),
            placement: placement.as_ref().map(|(link, _)| link.clone()),
            groups: groups.clone(),
            backend,
            bucket: shared::BucketView::new(opened.epoch, opened.born, opened.last_revision),
            managed: shared::Managed::default(),
            released: shared::ReleasedRoles::default(),
            reports: shared::Reports::new(self.instance.clone()),
            slot_counts: shared::SlotCounts::default(),
        });
        for (role, slots, _) in slotted {
            shared.slot_counts.checked(&role, opened.epoch, slots);
        }
        let cancel = CancellationToken::new();
        let (probes, probe_inboxes) = super::probe::Probes::new();
        let health = self
            .health
            .as_ref()
            .map(|_| watch::channel(HealthState::default()));
        let set = Arc::new(super::role_set::RoleSet {
            shared: shared.clone(),
            cancel: cancel.clone(),
            retry: self.retry,
            priority: self.priority,
            meta: self.meta,
            validation_interval: self.validation_interval,
            seed: Mutex::new(incarnation.as_u64_pair().0),
            drivers: Mutex::new(std::collections::HashMap::new()),
            next_role: std::sync::atomic::AtomicU64::new(0),
        });
        let manager = RoleManager {
            shared: shared.clone(),
            cancel: cancel.clone(),
            epoch: opened.epoch,
            set: set.clone(),
            groups_cancel: cancel.child_token(),
            tasks: tokio_util::task::TaskTracker::new(),
            health: health.as_ref().map(|(_, rx)| rx.clone()),
            probes,
            kv: opened.kv.clone(),
        };
        // Protocol Q6: a young bucket holds every acquire until it is a TTL + heartbeat old.
        let age = shared.bucket.age(tokio::time::Instant::now());
        if let Some(hold) = self
            .roles
            .iter()
            .chain(self.groups.iter().map(|g| &g.template))
            .filter(|r| r.campaign)
            .map(|r| r.timing.ttl + r.timing.heartbeat)
            .max()
            .and_then(|longest| longest.checked_sub(age))
            .filter(|h| !h.is_zero())
        {
            info!(
                bucket = %self.bucket.name,
                age = ?age,
                hold = ?hold,
                "the bucket is young: no role is acquired for up to {hold:?} (a holder of a \
                 bucket it replaced may still act; protocol Q6)"
            );
        }
        for spec in self.roles {
            manager.add_role(spec)?;
        }
        for (name, entry) in groups.entries() {
            let count = entry.assignment.borrow().count;
            for index in 0..count {
                // Not `RoleManager::add_role`: it refuses the names of the groups' members.
                manager.set.add_role(groups.member(name, index)?)?;
            }
        }
        if !groups.is_empty() {
            manager.tasks.spawn(
                super::group_task::run(set, manager.groups_cancel.clone())
                    .instrument(tracing::info_span!("groups")),
            );
        }
        if let Some((link, _)) = &placement {
            manager.ensure_member_session(link.settings.member_ttl);
        }
        let span =
            tracing::info_span!("manager", instance = %self.instance, bucket = %self.bucket.name);
        manager.tasks.spawn(
            watcher::run(
                shared.clone(),
                opened.kv.clone(),
                watcher::BucketRecovery {
                    js: opened.js,
                    config: self.bucket.clone(),
                    epoch: opened.epoch,
                },
                probe_inboxes.watcher,
                cancel.clone(),
            )
            .instrument(span.clone()),
        );
        manager.tasks.spawn(
            super::backstop::run(shared.clone(), probe_inboxes.reaper, cancel.clone())
                .instrument(span.clone()),
        );
        manager.tasks.spawn(
            super::follower::run(shared.clone(), opened.kv.clone(), cancel.clone())
                .instrument(span.clone()),
        );
        manager
            .tasks
            .spawn(super::successor::run(shared.clone(), cancel.clone()).instrument(span.clone()));
        manager.tasks.spawn(
            connection::monitor(
                self.client.clone(),
                shared.clone(),
                connected_tx,
                cancel.clone(),
            )
            .instrument(span.clone()),
        );
        let placement = placement.map(|(link, ends)| {
            let written =
                placement_tasks::spawn(&manager.tasks, &shared, &link, ends, &cancel, &span);
            super::member_record::PlacementPart { link, written }
        });
        // Every manager writes its member record (protocol Q8 rule 1).
        super::member_record::spawn(&manager.tasks, &shared, placement, &cancel, &span);
        if let (Some((checker, policy)), Some((state, _))) = (self.health, health) {
            manager.tasks.spawn(
                health_task::health_loop(
                    shared.clone(),
                    checker,
                    policy,
                    release_bound,
                    state,
                    cancel.clone(),
                )
                .instrument(span),
            );
        }
        info!(
            instance = %manager.shared.instance,
            incarnation = %incarnation,
            ttl_mode = ?opened.store.ttl_mode(),
            "role manager started"
        );
        Ok(manager)
    }
}

/// Protocol Q10: a role key of the configured roles that holds another protocol version's
/// lease refuses the start (reads from the stream leader, 32 at a time). A read that fails for
/// a reason that can heal (no stream leader, no answer) fails the attempt, which the start
/// retries; one that fails for a persistent reason (a permission violation on the read API)
/// is left to the role's own detection at run time, where it is reported and retried.
async fn refuse_other_protocol(
    store: crate::store::LeaseStore,
    roles: Vec<(RoleName, Duration)>,
) -> Result<(), Error> {
    use futures_util::StreamExt;
    let mut reads = futures_util::stream::iter(roles)
        .map(|(name, timeout)| {
            let store = store.clone();
            async move {
                let key = format!("{}{name}", crate::store::ROLE_PREFIX);
                let state = store.read(&key, timeout).await;
                (name, state)
            }
        })
        .buffer_unordered(32);
    let mut unread = None;
    while let Some((name, state)) = reads.next().await {
        match state {
            Ok(crate::core::KeyState::Held { value, .. }) => {
                if let Some(found) = value.other_protocol() {
                    return Err(Error::IncompatibleProtocol {
                        bucket: store.bucket().to_string(),
                        role: name,
                        found,
                        ours: u64::from(crate::value::VALUE_VERSION),
                    });
                }
            }
            Ok(_) => {}
            Err(kind) if kind.class() == crate::core::FailureClass::Transient => {
                unread = Some(kind);
            }
            Err(_) => {}
        }
    }
    // Every read done first: another version's lease refuses the start whatever else failed.
    unread.map_or(Ok(()), |kind| Err(Error::Kv(kind)))
}
