//! [`RoleManager`]: many role elections over one NATS connection and one bucket watcher.

mod bucket;
mod connection;
pub(crate) mod events;
mod handle;
pub(crate) mod placement;
mod role_task;
pub(crate) mod shared;
pub(crate) mod status;
pub(crate) mod view;
mod watcher;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, warn};
use uuid::Uuid;

pub use connection::connect;
pub(crate) use connection::connect_observed;
pub use events::{HolderInfo, RoleEvent};
pub use handle::RoleHandle;
pub use status::RoleStatus;

use crate::callbacks::{NoCallbacks, RoleCallbacks};
use crate::config::{Config, PlacementConfig, RoleConfig, Takeover, TimingConfig};
use crate::core::{Identity, ReleaseReason, RetryPolicy, RoleMachine, Timing};
use crate::error::Error;
use crate::health::{Advertised, FailureCounter, HealthChecker, HealthPolicy, HealthState};
use crate::leadership::Leadership;
use crate::names::{InstanceId, RoleName};
use crate::store::ServerErrors;
use crate::tap::{Tap, TapSink};
use role_task::{RoleInput, RoleTask};
use shared::{Flaws, RoleSlot, Shared};

/// One role to take part in.
#[derive(Clone)]
pub struct RoleSpec {
    name: RoleName,
    campaign: bool,
    /// `None`: the manager's default priority.
    priority: Option<i32>,
    timing: Timing,
    takeover: Takeover,
    callbacks: Arc<dyn RoleCallbacks>,
}

impl std::fmt::Debug for RoleSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoleSpec")
            .field("name", &self.name)
            .field("campaign", &self.campaign)
            .field("priority", &self.priority)
            .field("timing", &self.timing)
            .field("takeover", &self.takeover)
            .finish_non_exhaustive()
    }
}

impl RoleSpec {
    /// A role with default timing, priority 0, campaigning, no callbacks.
    #[must_use]
    pub fn new(name: RoleName) -> Self {
        Self {
            name,
            campaign: true,
            priority: None,
            timing: timing_from(&TimingConfig::default()),
            takeover: Takeover::Voluntary,
            callbacks: Arc::new(NoCallbacks),
        }
    }

    /// A role as declared in the configuration (timing overrides applied).
    #[must_use]
    pub fn from_config(role: &RoleConfig, config: &Config) -> Self {
        Self {
            name: role.name.clone(),
            campaign: role.campaign,
            priority: Some(role.effective_priority(&config.instance)),
            timing: timing_from(&config.timing.for_role(role)),
            takeover: role.takeover,
            callbacks: Arc::new(NoCallbacks),
        }
    }

    /// The role name.
    #[must_use]
    pub fn name(&self) -> &RoleName {
        &self.name
    }

    /// Only observe the role: never campaign for it.
    #[must_use]
    pub fn observe_only(mut self) -> Self {
        self.campaign = false;
        self
    }

    /// Priority written into the lease (placement uses it); default: the manager's priority.
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Whether placement may hand this role over to a preferred instance (default
    /// [`Takeover::Voluntary`]; only with [`RoleManagerBuilder::placement`]).
    #[must_use]
    pub fn takeover(mut self, takeover: Takeover) -> Self {
        self.takeover = takeover;
        self
    }

    /// Lease timing for this role. It is checked ([`Timing::validate`], the same rules as the
    /// YAML configuration) when the role is started: [`RoleManagerBuilder::start`] and
    /// [`RoleManager::add_role`] return [`Error::InvalidTiming`] for a timing that breaks one.
    #[must_use]
    pub fn timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// Checks the role's timing ([`Timing::validate`]).
    ///
    /// # Errors
    /// [`Error::InvalidTiming`] naming the role and the first rule broken.
    pub fn validate(&self) -> Result<(), Error> {
        self.timing
            .validate()
            .map_err(|source| Error::InvalidTiming {
                role: self.name.clone(),
                source,
            })
    }

    /// Callbacks run on promotion and demotion.
    #[must_use]
    pub fn callbacks(mut self, callbacks: impl RoleCallbacks) -> Self {
        self.callbacks = Arc::new(callbacks);
        self
    }

    /// Callbacks shared with other roles.
    #[must_use]
    pub fn shared_callbacks(mut self, callbacks: Arc<dyn RoleCallbacks>) -> Self {
        self.callbacks = callbacks;
        self
    }
}

/// Converts configuration timing into core timing.
#[must_use]
pub fn timing_from(t: &TimingConfig) -> Timing {
    Timing {
        ttl: t.ttl,
        heartbeat: t.heartbeat,
        deadline_margin: t.deadline_margin,
        operation_timeout: t.operation_timeout,
        disconnect_grace: t.disconnect_grace,
        campaign_jitter: t.campaign_jitter,
    }
}

/// Builds a [`RoleManager`].
#[must_use = "a builder does nothing until start() is called"]
pub struct RoleManagerBuilder {
    client: async_nats::Client,
    server_errors: ServerErrors,
    instance: InstanceId,
    bucket: crate::config::BucketConfig,
    priority: i32,
    meta: BTreeMap<String, String>,
    retry: RetryPolicy,
    drain_timeout: Duration,
    validation_interval: Option<Duration>,
    health: Option<(Arc<dyn HealthChecker>, HealthPolicy)>,
    roles: Vec<RoleSpec>,
    events: broadcast::Sender<RoleEvent>,
    tap_sinks: Vec<Arc<dyn TapSink>>,
    meter: Option<opentelemetry::metrics::Meter>,
    placement: Option<(PlacementConfig, Option<Duration>)>,
    #[cfg(feature = "negative-controls")]
    negative: Option<crate::negative::NegativeControl>,
}

impl RoleManagerBuilder {
    /// Records the manager's metrics ([`crate::metrics`]) with `meter` instead of
    /// `opentelemetry::global::meter("nats-roles")` (which records nothing until the
    /// application installs a global meter provider).
    pub fn meter(mut self, meter: opentelemetry::metrics::Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Enables placement (docs/placement.md) when `config.enabled`: a membership record
    /// `member.<instance>` with TTL `member_ttl` (default: the shortest role TTL), priority
    /// takeover and load spreading by graceful hand-over.
    pub fn placement(mut self, config: PlacementConfig, member_ttl: Option<Duration>) -> Self {
        self.placement = config.enabled.then_some((config, member_ttl));
        self
    }

    /// Test-only: run with one deliberately broken mode, which the history checker must flag.
    #[cfg(feature = "negative-controls")]
    #[doc(hidden)]
    pub fn negative_control(mut self, mode: crate::negative::NegativeControl) -> Self {
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

    /// Longest wait for `on_demote` during a graceful release.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
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

    /// Server errors seen on the connection (see [`connect`]); enables fast permission errors.
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

    /// Opens (or creates) the bucket, starts the watcher and every role.
    ///
    /// # Errors
    /// [`Error::InvalidTiming`] (before connecting to the bucket) for a role whose timing breaks
    /// a rule of [`Timing::validate`]; [`Error::BucketNotFound`], [`Error::PermissionDenied`],
    /// [`Error::JetStream`]; [`Error::BucketMaxAgeTooShort`] when the bucket's `max_age` is
    /// shorter than a role's TTL; or [`Error::RoleExists`] for a role given twice.
    pub async fn start(self) -> Result<RoleManager, Error> {
        for spec in &self.roles {
            spec.validate()?;
        }
        #[cfg_attr(not(feature = "negative-controls"), allow(unused_mut))]
        let mut opened = bucket::open(&self.client, &self.bucket, &self.server_errors).await?;
        #[cfg_attr(not(feature = "negative-controls"), allow(unused_mut))]
        let mut flaws = Flaws::default();
        #[cfg(feature = "negative-controls")]
        {
            use crate::negative::NegativeControl as N;
            if let Some(mode) = self.negative {
                tracing::error!(
                    ?mode,
                    "negative control active: this manager is deliberately broken (test only)"
                );
            }
            match self.negative {
                Some(N::PlainPut) => opened.store.set_plain_put(),
                Some(N::DropTtl) => flaws.drop_ttl = true,
                Some(N::NoLocalDeadline) => flaws.no_local_deadline = true,
                Some(N::SkipDemote) => flaws.skip_demote = true,
                None => {}
            }
        }
        // How long a release can take at most: the drain of the role work, then the write.
        let release_bound = self.drain_timeout
            + self
                .roles
                .iter()
                .map(|r| r.timing.operation_timeout)
                .max()
                .unwrap_or(Timing::default().operation_timeout);
        let placement = self.placement.clone().map(|(config, member_ttl)| {
            let shortest = self.roles.iter().map(|r| r.timing.ttl).min();
            let member_ttl = member_ttl
                .or(shortest)
                .unwrap_or(Timing::default().ttl)
                .max(Duration::from_secs(1));
            let operation_timeout = self
                .roles
                .iter()
                .map(|r| r.timing.operation_timeout)
                .min()
                .unwrap_or(Timing::default().operation_timeout);
            Arc::new(placement::PlacementShared::new(placement::Settings {
                config,
                member_ttl,
                operation_timeout,
                priority: self.priority,
                http: self.meta.get("http").cloned(),
            }))
        });
        let (connected_tx, connected_rx) = watch::channel(connection::is_connected(&self.client));
        let incarnation = Uuid::new_v4();
        let meter = self
            .meter
            .unwrap_or_else(|| opentelemetry::global::meter("nats-roles"));
        let mut sinks = self.tap_sinks;
        sinks.push(Arc::new(crate::metrics::RoleMetrics::new(
            &meter,
            &self.instance,
            &self.bucket.name,
        )));
        let shared = Arc::new(Shared {
            instance: self.instance.clone(),
            incarnation,
            store: opened.store.clone(),
            drain_timeout: self.drain_timeout,
            connected: connected_rx,
            events: self.events,
            roles: Mutex::new(HashMap::new()),
            holders: Mutex::new(BTreeMap::new()),
            caught_up: watch::channel(false).0,
            bucket_check: tokio::sync::Notify::new(),
            tap: Tap::new(sinks),
            placement: placement.clone(),
            flaws,
            epoch: std::sync::atomic::AtomicU64::new(opened.epoch),
            bucket_high_water: std::sync::atomic::AtomicU64::new(opened.last_revision),
        });
        let cancel = CancellationToken::new();
        let health = self
            .health
            .as_ref()
            .map(|_| watch::channel(HealthState::default()));
        let manager = RoleManager {
            shared: shared.clone(),
            cancel: cancel.clone(),
            epoch: opened.epoch,
            retry: self.retry,
            priority: self.priority,
            meta: self.meta,
            validation_interval: self.validation_interval,
            seed: Mutex::new(incarnation.as_u64_pair().0),
            background: Mutex::new(Vec::new()),
            health: health.as_ref().map(|(_, rx)| rx.clone()),
        };
        for spec in self.roles {
            manager.add_role(spec)?;
        }
        let span =
            tracing::info_span!("manager", instance = %self.instance, bucket = %self.bucket.name);
        let mut background = Vec::new();
        background.push(tokio::spawn(
            watcher::run(
                shared.clone(),
                opened.kv,
                watcher::BucketRecovery {
                    js: opened.js,
                    config: self.bucket.clone(),
                    epoch: opened.epoch,
                },
                cancel.clone(),
            )
            .instrument(span.clone()),
        ));
        background.push(tokio::spawn(
            connection::monitor(
                self.client.clone(),
                shared.clone(),
                connected_tx,
                cancel.clone(),
            )
            .instrument(span.clone()),
        ));
        if let Some(p) = &placement {
            background.push(tokio::spawn(
                placement::run_heartbeat(shared.clone(), p.clone(), cancel.clone())
                    .instrument(span.clone()),
            ));
            background.push(tokio::spawn(
                placement::run_controller(shared.clone(), p.clone(), cancel.clone())
                    .instrument(span.clone()),
            ));
        }
        if let (Some((checker, policy)), Some((state, _))) = (self.health, health) {
            background.push(tokio::spawn(
                health_loop(
                    shared.clone(),
                    checker,
                    policy,
                    release_bound,
                    state,
                    cancel.clone(),
                )
                .instrument(span),
            ));
        }
        if let Ok(mut b) = manager.background.lock() {
            b.extend(background);
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

/// Runs many role elections over one NATS connection and one bucket watcher.
///
/// Dropping the manager without [`RoleManager::shutdown`] stops nothing gracefully: held roles
/// then expire after their TTL. Always call `shutdown` for a fast hand-over.
pub struct RoleManager {
    shared: Arc<Shared>,
    cancel: CancellationToken,
    epoch: u64,
    retry: RetryPolicy,
    priority: i32,
    meta: BTreeMap<String, String>,
    validation_interval: Option<Duration>,
    seed: Mutex<u64>,
    background: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The health checker's verdict (`None` without a health checker).
    health: Option<watch::Receiver<HealthState>>,
}

impl std::fmt::Debug for RoleManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoleManager")
            .field("instance", &self.shared.instance)
            .field("bucket", &self.shared.store.bucket())
            .finish_non_exhaustive()
    }
}

impl RoleManager {
    /// A builder using an existing connection (the application owns it).
    pub fn builder(client: async_nats::Client, instance: InstanceId) -> RoleManagerBuilder {
        RoleManagerBuilder {
            client,
            server_errors: ServerErrors::default(),
            instance,
            bucket: crate::config::BucketConfig::default(),
            priority: 0,
            meta: BTreeMap::new(),
            retry: RetryPolicy::default(),
            drain_timeout: Duration::from_secs(5),
            validation_interval: None,
            health: None,
            roles: Vec::new(),
            events: broadcast::channel(1024).0,
            tap_sinks: Vec::new(),
            meter: None,
            placement: None,
            #[cfg(feature = "negative-controls")]
            negative: None,
        }
    }

    /// A builder from a validated configuration: bucket, instance, retry, health, fencing,
    /// shutdown and every declared role (without callbacks; add them with
    /// [`RoleManagerBuilder::role`] instead, or use [`RoleManager::subscribe`]).
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
        let r = &config.retry;
        let mut builder = Self::builder(client, instance)
            .server_errors(server_errors)
            .meta(config.instance.meta.clone())
            .retry(RetryPolicy {
                initial: r.initial_backoff,
                max: r.max_backoff,
                multiplier: r.multiplier,
                jitter: r.jitter,
                max_attempts: r.max_attempts,
                persistent_interval: r.persistent_interval,
            })
            .drain_timeout(config.shutdown.drain_timeout)
            .validation_interval(config.fencing.validation_interval);
        builder.bucket = config.bucket.clone();
        builder = builder
            .priority(config.instance.priority)
            .placement(config.placement.clone(), Some(config.member_ttl()));
        if let Some(argv) = &config.health.command
            && let Some(checker) = crate::health::CommandHealthChecker::new(argv.clone())
        {
            let h = &config.health;
            builder = builder.health_checker(
                checker,
                HealthPolicy {
                    interval: h.interval,
                    timeout: h.timeout,
                    failure_threshold: h.failure_threshold,
                    cooldown: h.cooldown,
                },
            );
        }
        for role in &config.roles {
            builder = builder.role(RoleSpec::from_config(role, config));
        }
        Ok(builder)
    }

    /// This instance's id.
    #[must_use]
    pub fn instance_id(&self) -> &InstanceId {
        &self.shared.instance
    }

    /// Random id of this process start (written into every lease).
    #[must_use]
    pub fn incarnation(&self) -> Uuid {
        self.shared.incarnation
    }

    /// The bucket name.
    #[must_use]
    pub fn bucket(&self) -> &str {
        self.shared.store.bucket()
    }

    /// Starts taking part in one more role.
    ///
    /// # Errors
    /// [`Error::InvalidTiming`] if the role's timing breaks a rule of [`Timing::validate`];
    /// [`Error::BucketMaxAgeTooShort`] if the bucket's `max_age` is shorter than the role's TTL
    /// (a role this instance campaigns for); [`Error::RoleExists`] if the role is already
    /// managed; [`Error::Stopped`] after shutdown.
    pub fn add_role(&self, spec: RoleSpec) -> Result<(), Error> {
        if self.cancel.is_cancelled() {
            return Err(Error::Stopped);
        }
        spec.validate()?;
        // In every TTL mode: the server removes an entry `max_age` after it was written,
        // whatever its per-key TTL, so a shorter `max_age` expires a live lease early and a
        // second holder can be promoted before the first one's deadline (P3). An observer
        // writes no lease.
        let store = &self.shared.store;
        let max_age = store.max_age();
        if spec.campaign && !max_age.is_zero() && max_age < spec.timing.ttl {
            return Err(Error::BucketMaxAgeTooShort {
                bucket: store.bucket().to_string(),
                max_age,
                ttl: spec.timing.ttl,
                role: spec.name,
            });
        }
        let mut roles = self.shared.roles();
        if roles.contains_key(&spec.name) {
            return Err(Error::RoleExists(spec.name));
        }
        let seed = {
            let mut s = self
                .seed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            *s
        };
        let identity = Identity {
            instance: self.shared.instance.clone(),
            incarnation: self.shared.incarnation,
            priority: spec.priority.unwrap_or(self.priority),
            meta: self.meta.clone(),
        };
        #[cfg_attr(not(feature = "negative-controls"), allow(unused_mut))]
        let mut machine = RoleMachine::new(
            identity,
            spec.timing,
            self.retry,
            spec.campaign,
            // Under the roles lock: the epoch of the bucket as it is now (P1), never the one
            // read at start-up if the bucket was recreated since.
            self.shared.epoch(),
            seed,
        );
        // P6: every revision this manager saw in the bucket (any key) is below any write the
        // new role makes there, so an acquire acknowledged at or below it was stored in a
        // recreated bucket this manager has not noticed yet: never promoted, epoch checked.
        machine.seed_high_water(self.shared.bucket_high_water());
        #[cfg(feature = "negative-controls")]
        if self.shared.flaws.no_local_deadline {
            machine.ignore_deadline_for_negative_control();
        }
        let (inbox_tx, inbox_rx) = mpsc::unbounded_channel();
        let (status_tx, status_rx) = watch::channel(RoleStatus::new(
            spec.name.clone(),
            self.shared.store.ttl_mode(),
        ));
        let current = Arc::new(Mutex::new(None));
        let task = RoleTask {
            role: spec.name.clone(),
            machine,
            shared: self.shared.clone(),
            inbox: inbox_rx,
            status: status_tx,
            callbacks: spec.callbacks,
            current: current.clone(),
            ttl: spec.timing.ttl,
            operation_timeout: spec.timing.operation_timeout,
            validation_interval: self.validation_interval,
            promoted_at: None,
            term_span: None,
            reported: crate::status::RoleState::Init,
        };
        let handle = tokio::spawn(task.run());
        roles.insert(
            spec.name.clone(),
            RoleSlot {
                inbox: inbox_tx,
                status: status_rx,
                current,
                task: handle,
            },
        );
        drop(roles);
        if let Some(p) = &self.shared.placement {
            let priority = spec.priority.unwrap_or(self.priority);
            p.add_role(spec.name, priority, spec.takeover, spec.campaign);
        }
        Ok(())
    }

    /// Stops taking part in a role: releases it gracefully if held and waits until the demote
    /// callback returned.
    ///
    /// # Errors
    /// [`Error::UnknownRole`] if the role is not managed.
    pub async fn remove_role(&self, role: &RoleName) -> Result<(), Error> {
        let slot = self
            .shared
            .roles()
            .remove(role)
            .ok_or_else(|| Error::UnknownRole(role.clone()))?;
        if let Some(p) = &self.shared.placement {
            p.remove_role(role);
        }
        let _ = slot.inbox.send(RoleInput::Stop);
        let _ = slot.task.await;
        Ok(())
    }

    /// Gives a held role up voluntarily (graceful hand-over) and does not campaign for it
    /// again for `cooldown`.
    ///
    /// Not `async`: it only asks the role's task and returns at once, before the hand-over
    /// (`on_demote`, then the lease delete) has happened. To wait for it, watch the role's
    /// status ([`RoleManager::subscribe`]: `wait_for(|s| !s.is_leader())`) or
    /// [`RoleManager::events`] (`Demoted` with reason `released`).
    /// [`RoleManager::remove_role`] and [`RoleManager::shutdown`] do wait.
    ///
    /// # Errors
    /// [`Error::UnknownRole`] if the role is not managed.
    pub fn release(&self, role: &RoleName, cooldown: Duration) -> Result<(), Error> {
        if self
            .shared
            .send(role, RoleInput::Release(ReleaseReason::Requested, cooldown))
        {
            Ok(())
        } else {
            Err(Error::UnknownRole(role.clone()))
        }
    }

    /// The managed roles.
    #[must_use]
    pub fn roles(&self) -> Vec<RoleName> {
        let mut v: Vec<_> = self.shared.roles().keys().cloned().collect();
        v.sort();
        v
    }

    /// A handle on a managed role (`is_leader`, `leadership`, status changes).
    #[must_use]
    pub fn role(&self, role: &RoleName) -> Option<RoleHandle> {
        self.shared.roles().get(role).map(|s| RoleHandle {
            role: role.clone(),
            status: s.status.clone(),
            current: s.current.clone(),
        })
    }

    /// Status of a managed role.
    #[must_use]
    pub fn status(&self, role: &RoleName) -> Option<RoleStatus> {
        self.shared
            .roles()
            .get(role)
            .map(|s| s.status.borrow().clone())
    }

    /// Status of every managed role, sorted by name.
    #[must_use]
    pub fn statuses(&self) -> Vec<RoleStatus> {
        let mut v: Vec<_> = self
            .shared
            .roles()
            .values()
            .map(|s| s.status.borrow().clone())
            .collect();
        v.sort_by(|a, b| a.role.cmp(&b.role));
        v
    }

    /// A channel of a managed role's status: `changed().await` wakes on every transition.
    #[must_use]
    pub fn subscribe(&self, role: &RoleName) -> Option<watch::Receiver<RoleStatus>> {
        self.shared.roles().get(role).map(|s| s.status.clone())
    }

    /// The current term of a role, if this instance holds it.
    #[must_use]
    pub fn leadership(&self, role: &RoleName) -> Option<Leadership> {
        self.shared
            .roles()
            .get(role)
            .and_then(|s| role_task::get(&s.current))
            .filter(Leadership::is_valid)
    }

    /// Whether this instance holds `role` right now (term valid, deadline ahead).
    #[must_use]
    pub fn is_leader(&self, role: &RoleName) -> bool {
        self.leadership(role).is_some()
    }

    /// Transitions of every role (promotions, demotions, holder changes seen by the watcher).
    #[must_use]
    pub fn events(&self) -> broadcast::Receiver<RoleEvent> {
        self.shared.events.subscribe()
    }

    /// The holder of any role in the bucket (observer view; no campaign needed).
    #[must_use]
    pub fn observe(&self, role: &RoleName) -> watch::Receiver<Option<HolderInfo>> {
        let mut holders = self.shared.holders();
        holders
            .entry(role.clone())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe()
    }

    /// Holders of every role seen in the bucket.
    #[must_use]
    pub fn holders(&self) -> Vec<HolderInfo> {
        self.shared
            .holders()
            .values()
            .filter_map(|h| h.borrow().clone())
            .collect()
    }

    /// Placement: starts (`true`) or ends draining. A draining instance hands every role over
    /// gracefully, one at a time within the move budget, and takes none another live member
    /// is preferred for. Without placement this does nothing and returns false.
    pub fn set_draining(&self, draining: bool) -> bool {
        match &self.shared.placement {
            Some(p) => {
                p.draining.send_replace(draining);
                true
            }
            None => false,
        }
    }

    /// Placement: the membership records of the live members (empty without placement).
    #[must_use]
    pub fn members(&self) -> Vec<crate::placement::MemberRecord> {
        self.shared
            .placement
            .as_ref()
            .map(|p| p.members())
            .unwrap_or_default()
    }

    /// Placement: where the plan wants `role` and why (`None` without placement).
    #[must_use]
    pub fn preferred(&self, role: &RoleName) -> Option<crate::placement::Preferred> {
        self.shared.placement.as_ref()?.preferred(role)
    }

    /// What the health checker says about this instance: healthy or not, failing since when,
    /// cooling down until when (`None` without a [`RoleManagerBuilder::health_checker`]).
    /// While it is not [`healthy`](HealthState::healthy) its roles are released and it does
    /// not campaign, and `/readyz` answers 503 with [`HealthState::reason`].
    #[must_use]
    pub fn health(&self) -> Option<HealthState> {
        self.health.as_ref().map(|rx| rx.borrow().clone())
    }

    /// Resolves once the watcher has delivered the bucket's current state.
    pub async fn caught_up(&self) {
        let mut rx = self.shared.caught_up.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Graceful shutdown: releases every held role (cancel, run `on_demote`, CAS-delete),
    /// waits for all demote callbacks, then stops the watcher.
    ///
    /// # Errors
    /// [`Error::ShutdownTimeout`] when roles were not released within `timeout` (their leases
    /// then expire after the TTL).
    pub async fn shutdown(&self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        if let Some(p) = &self.shared.placement {
            // Others stop preferring this instance before its roles become vacant, so the
            // preferred members acquire first (docs/placement.md).
            let wait = p.settings.operation_timeout.min(timeout / 4);
            placement::drain_and_wait(p, wait).await;
        }
        let slots: Vec<(RoleName, RoleSlot)> = self.shared.roles().drain().collect();
        for (_, slot) in &slots {
            let _ = slot.inbox.send(RoleInput::Stop);
        }
        let mut late = Vec::new();
        for (name, slot) in slots {
            let mut task = slot.task;
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                warn!(role = %name, "role did not stop in time");
                task.abort();
                late.push(name);
            }
        }
        self.cancel.cancel();
        let background: Vec<_> = self
            .background
            .lock()
            .map(|mut b| b.drain(..).collect())
            .unwrap_or_default();
        for task in background {
            let _ = tokio::time::timeout_at(deadline + Duration::from_millis(100), task).await;
        }
        // Roles aborted above never reported STOPPED: end every series of this manager.
        self.shared.tap.manager_stopped(&self.shared.instance);
        if late.is_empty() {
            info!("role manager stopped");
            Ok(())
        } else {
            Err(Error::ShutdownTimeout {
                timeout,
                roles: late,
            })
        }
    }
}

impl Drop for RoleManager {
    fn drop(&mut self) {
        self.cancel.cancel();
        for slot in self.shared.roles().values() {
            slot.task.abort();
        }
        // The aborted roles report nothing more: a gauge must not show them held.
        self.shared.tap.manager_stopped(&self.shared.instance);
    }
}

async fn health_loop(
    shared: Arc<Shared>,
    checker: Arc<dyn HealthChecker>,
    policy: HealthPolicy,
    release_bound: Duration,
    state: watch::Sender<HealthState>,
    cancel: CancellationToken,
) {
    let mut failures = FailureCounter::default();
    let mut advertised = Advertised::default();
    let mut tick = tokio::time::interval(policy.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let healthy = tokio::time::timeout(policy.timeout, checker.check())
            .await
            .unwrap_or(false);
        state.send_modify(|s| s.checked(healthy, std::time::SystemTime::now()));
        if failures.record(healthy, policy.failure_threshold) {
            warn!(
                failures = policy.failure_threshold,
                cooldown = ?policy.cooldown,
                "health check failed repeatedly; releasing all roles"
            );
            // The other members learn first that this instance is unhealthy, so they take
            // its roles at once instead of holding back for it (bounded wait).
            if let Some(p) = &shared.placement {
                placement::publish_health_and_wait(p, false, &cancel).await;
            }
            // The roles' cooldown starts when their release is done: after the drain of the
            // role work and the release write. Stay unhealthy in the record at least that long.
            advertised.released(Instant::now().into_std(), policy.cooldown + release_bound);
            // Readiness says so before the roles go (docs/http-api.md).
            publish(&state, &advertised);
            shared.broadcast(|| RoleInput::Release(ReleaseReason::Unhealthy, policy.cooldown));
        } else {
            let flag = advertised.observe(healthy, Instant::now().into_std());
            publish(&state, &advertised);
            if let Some(p) = shared.placement.as_ref().filter(|_| flag) {
                p.healthy.send_if_modified(|h| !std::mem::replace(h, true));
            }
        }
    }
}

/// Publishes the verdict of `advertised` (healthy, or unhealthy until at least when).
fn publish(state: &watch::Sender<HealthState>, advertised: &Advertised) {
    let until = advertised.until();
    state.send_if_modified(|s| {
        let before = (s.healthy, s.cooldown_until);
        s.healthy = until.is_none();
        s.cooldown_until = until.map(Instant::from_std);
        before != (s.healthy, s.cooldown_until)
    });
}
