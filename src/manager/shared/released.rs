//! [`ReleasedRoles`]: the roles whose terms this instance's sessions list as released (Q5
//! rule 5). The session tasks write it, each only the entries of its own TTL class.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::names::RoleName;

/// Roles whose terms a session lists as released, with the session's TTL class: written by
/// the session tasks (each replaces the entries of its own class only, so no two write the
/// same entry), read by the watcher (it reports their keys' moves to the session listing them).
#[derive(Default)]
pub(crate) struct ReleasedRoles {
    roles: Mutex<HashMap<RoleName, u64>>,
}

impl ReleasedRoles {
    /// The roles the session of TTL class `class` lists released terms of now.
    pub(crate) fn set(&self, class: u64, roles: &[RoleName]) {
        let mut map = self.roles.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, c| *c != class);
        for r in roles {
            map.insert(r.clone(), class);
        }
    }

    /// The TTL class of the session listing a released term of `role`, if one does.
    pub(crate) fn class_of(&self, role: &RoleName) -> Option<u64> {
        self.roles
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(role)
            .copied()
    }
}
