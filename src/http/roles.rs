//! `GET /api/roles`, `GET /api/roles/{role}`, `GET /api/instances`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::error::ApiError;
use super::state::Api;
use crate::inspect::{InstanceList, RoleList, RoleView, instances as group};
use crate::names::RoleName;

impl Api {
    /// Every role this instance knows of: each role held in the bucket (seen by the watcher)
    /// and each role this instance takes part in (vacant ones included), sorted by name.
    #[must_use]
    pub fn roles(&self) -> RoleList {
        let manager = self.manager();
        let now = SystemTime::now();
        let health = manager.health();
        let mut views: BTreeMap<RoleName, RoleView> = manager
            .holders()
            .iter()
            .map(|h| (h.role.clone(), RoleView::held(h, true, now)))
            .collect();
        for status in manager.statuses() {
            let view = views
                .remove(&status.role)
                .unwrap_or_else(|| RoleView::vacant(&status.role));
            views.insert(
                status.role.clone(),
                view.with_local(&status).with_health(health.as_ref()),
            );
        }
        let campaigners = campaigners(manager);
        let groups = manager.groups();
        for (role, view) in &mut views {
            let preferred = manager.preferred(role);
            let here = view.local.as_ref().is_some_and(|l| l.campaign);
            let members = campaigners.as_ref().map(|c| c.contains(role));
            *view = std::mem::replace(view, RoleView::vacant(role))
                .with_preferred(preferred.as_ref())
                .with_candidates(here, members)
                .in_groups(groups.iter().map(crate::manager::GroupHandle::name));
        }
        RoleList::new(
            manager.bucket(),
            Some(manager.instance_id()),
            views.into_values().collect(),
        )
    }

    /// One role, if this instance knows of it (see [`Api::roles`]).
    #[must_use]
    pub fn role(&self, role: &RoleName) -> Option<RoleView> {
        let manager = self.manager();
        let now = SystemTime::now();
        // Not `observe`: that would remember every name ever asked for.
        let held = manager
            .holders()
            .iter()
            .find(|h| &h.role == role)
            .map(|h| RoleView::held(h, true, now));
        let preferred = manager.preferred(role);
        let view = match (held, manager.status(role)) {
            (Some(view), Some(status)) => Some(view.with_local(&status)),
            (None, Some(status)) => Some(RoleView::vacant(role).with_local(&status)),
            (held, None) => held,
        };
        let health = manager.health();
        let members = campaigners(manager).map(|c| c.contains(role));
        view.map(|v| {
            let here = v.local.as_ref().is_some_and(|l| l.campaign);
            v.with_preferred(preferred.as_ref())
                .with_health(health.as_ref())
                .with_candidates(here, members)
                .in_groups(
                    manager
                        .groups()
                        .iter()
                        .map(crate::manager::GroupHandle::name),
                )
        })
    }

    /// Instances holding roles, and this one.
    #[must_use]
    pub fn instances(&self) -> InstanceList {
        let manager = self.manager();
        InstanceList::new(
            manager.bucket(),
            Some(manager.instance_id()),
            group(
                &manager.holders(),
                Some((manager.instance_id(), manager.meta())),
            ),
        )
    }
}

/// With placement on: every role some live member campaigns for (from their membership
/// records; this instance's own record included). `None` without placement.
fn campaigners(manager: &crate::RoleManager) -> Option<BTreeSet<RoleName>> {
    manager.placement_enabled().then(|| {
        manager
            .members()
            .into_iter()
            .flat_map(|m| m.roles.into_keys())
            .collect()
    })
}

/// A role name from the path, or 400.
pub(crate) fn role_name(raw: &str) -> Result<RoleName, ApiError> {
    RoleName::from_key_name(raw).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_role_name",
            format!("{raw:?} is not a valid role name: it {e}"),
        )
    })
}

pub(crate) async fn list(State(api): State<Api>) -> Json<RoleList> {
    Json(api.roles())
}

pub(crate) async fn one(
    State(api): State<Api>,
    Path(role): Path<String>,
) -> Result<Json<RoleView>, ApiError> {
    let name = role_name(&role)?;
    api.role(&name)
        .map(Json)
        .ok_or_else(|| ApiError::unknown_role(&role))
}

pub(crate) async fn instances(State(api): State<Api>) -> Json<InstanceList> {
    Json(api.instances())
}

#[cfg(test)]
mod tests {
    use super::role_name;

    #[test]
    fn a_role_path_segment_may_name_a_slot() {
        let slot = role_name("indexer.2").expect("a slot is a role");
        assert_eq!(slot.slot(), Some(2));
        assert!(role_name("indexer.x").is_err());
        assert!(role_name("indexer.02").is_err());
    }
}
