//! Reading the roles' status (`RoleManager::status`, `statuses`): each role's `watch`
//! channel, as [`current`] makes of it (an abandoned role reads as stopped).

use super::RoleManager;
use super::status::{RoleStatus, current};
use crate::names::RoleName;

impl RoleManager {
    /// Status of a managed role.
    #[must_use]
    pub fn status(&self, role: &RoleName) -> Option<RoleStatus> {
        self.shared
            .managed
            .roles()
            .get(role)
            .map(|s| current(&s.status))
    }

    /// Status of every managed role, sorted by name.
    #[must_use]
    pub fn statuses(&self) -> Vec<RoleStatus> {
        let mut v: Vec<_> = self
            .shared
            .managed
            .roles()
            .values()
            .map(|s| current(&s.status))
            .collect();
        v.sort_by(|a, b| a.role.cmp(&b.role));
        v
    }
}
