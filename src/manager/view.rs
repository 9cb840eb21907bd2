//! Non-blocking, read-only accessors for dashboards and probes (`nats_roles::http`, the CLI).

use std::collections::BTreeMap;

use super::RoleManager;
use super::events::HolderInfo;
#[cfg(any(feature = "tooling", feature = "http"))]
use crate::store::LeaseStore;

impl RoleManager {
    /// Holders of every role seen in the bucket, each with the latest renewal of its
    /// holder's session seen (`renewed_at`; `None` for a holder whose sessions this instance
    /// does not follow, protocol Q8; the receivers of [`RoleManager::observe`] carry
    /// the time of the term's own last write there, and change only when the role does).
    #[must_use]
    pub fn holders(&self) -> Vec<HolderInfo> {
        let renewals = self.shared.bucket.renewals().clone();
        self.shared
            .bucket
            .holders()
            .values()
            .filter_map(|h| h.borrow().clone())
            .map(|mut info| {
                match info.holder.as_ref().and_then(|h| renewals.get(h)) {
                    Some(at) if info.renewed_at.is_none_or(|r| r < *at) => {
                        info.renewed_at = Some(*at);
                    }
                    Some(_) => {}
                    // Q8: the session of a holder this instance does not follow is not seen
                    // renewed; the term's own write time would read as a stale renewal.
                    None => info.renewed_at = None,
                }
                info
            })
            .collect()
    }

    /// Whether the NATS connection is up right now.
    #[must_use]
    pub fn is_connected(&self) -> bool {
        *self.shared.connected.borrow()
    }

    /// Whether the bucket watcher has delivered the bucket's current state at least once (the
    /// non-blocking form of [`RoleManager::caught_up`]).
    #[must_use]
    pub fn is_caught_up(&self) -> bool {
        *self.shared.bucket.caught_up.borrow()
    }

    /// Placement: whether this instance is draining — handing its roles over and taking none
    /// another live member is preferred for: its own flag (`placement.draining`,
    /// `POST /api/drain`, [`RoleManager::set_draining`], a graceful stop) OR an operator's
    /// drain record naming it (`nats-roles drain`). What its membership record publishes and
    /// `/readyz` and `GET /api/members` show. False without placement.
    #[must_use]
    pub fn is_draining(&self) -> bool {
        self.shared
            .placement
            .as_ref()
            .is_some_and(|p| *p.draining.borrow())
    }

    /// Placement: the operator's drain record naming this instance, if the bucket holds one
    /// (`nats-roles drain`; docs/placement.md).
    #[must_use]
    pub fn drain_record(&self) -> Option<crate::placement::DrainRecord> {
        self.shared
            .placement
            .as_ref()
            .and_then(|p| p.drain_record())
    }

    /// The bucket epoch read at start-up (creation time of the bucket's stream, ns since the
    /// Unix epoch; the first half of every fencing token, protocol P1/P6).
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The metadata this instance writes into its leases (host, HTTP address, ...).
    #[must_use]
    pub fn meta(&self) -> &BTreeMap<String, String> {
        &self.set.meta
    }

    /// The lease store of the bucket (conditional writes and leader reads).
    #[cfg(feature = "http")]
    pub(crate) fn store(&self) -> &LeaseStore {
        &self.shared.store
    }
}

/// A bucket opened without a manager (for read-only tools and operator actions).
#[cfg(feature = "tooling")]
pub(crate) struct OpenedBucket {
    pub(crate) store: LeaseStore,
    pub(crate) kv: async_nats::jetstream::kv::Store,
    pub(crate) epoch: u64,
}

/// Opens an existing bucket (never creates it) the way the manager does.
#[cfg(feature = "tooling")]
pub(crate) async fn open_bucket(
    client: &async_nats::Client,
    bucket: &crate::core::BucketSettings,
    errors: &crate::store::ServerErrors,
) -> Result<OpenedBucket, crate::error::Error> {
    let config = crate::core::BucketSettings {
        auto_create: false,
        ..bucket.clone()
    };
    let opened = super::bucket::open(client, &config, errors).await?;
    Ok(OpenedBucket {
        store: opened.store,
        kv: opened.kv,
        epoch: opened.epoch,
    })
}
