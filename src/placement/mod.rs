//! Placement: which live instance should hold each role (docs/placement.md).
//!
//! Pure parts only — no I/O, no clock: the membership record every instance publishes under
//! `member.<instance>` ([`MemberRecord`]), the deterministic plan every instance computes from
//! the same membership and holders ([`plan`]), and the membership table that applies the join
//! stability window and the leave delay ([`Membership`]), and the decisions an instance takes
//! from the plan ([`hold_back`], [`choose_release`], [`vacancies_filled`]), and the controller's
//! bookkeeping as a step function (`controller::Controller`: move budget, move in flight, cooldowns).
//! The manager's placement driver (`manager::placement_tasks`) feeds it and carries out its actions.

mod assign;
pub(crate) mod controller;
mod decide;
mod drain;
mod freeze;
pub(crate) mod hash;
mod member;
mod members_view;
mod membership;
mod plan;
mod plan_cache;
mod settings;
mod version;
mod whatif;

pub(crate) use drain::DRAIN_VERSION;
#[cfg(any(feature = "tooling", feature = "http", test))]
pub use drain::drain_key;
pub use drain::{DRAIN_PREFIX, DrainRecord};
pub use freeze::{FREEZE_KEY, FREEZE_VERSION, FreezeRecord, Frozen};
#[cfg(test)]
pub(crate) use member::test_record;
pub use member::{MEMBER_PREFIX, MEMBER_VERSION, MEMBER_VERSION_HEARTBEATED, MemberRecord};
pub use members_view::{MemberList, MemberView, member_list};
pub use membership::{Membership, MembershipTiming};
#[cfg(feature = "cli")]
pub use plan::{Candidate, plan};
pub use plan::{Preferred, PreferredReason};
pub use settings::{PlacementSettings, Takeover, valid_zone};
pub use version::{Version, VersionError};
pub use whatif::{Joining, Move, Simulation, WhatIf, ZoneShare, simulate};
