//! [`PlacementSettings`]: the placement knobs of one instance, with their rules, and each
//! role's [`Takeover`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::timing_error::fmt_duration;
use crate::core::{MAX_DURATION, SettingError, Timing};

/// Placement: membership records, priority takeover and load spreading
/// (docs/placement.md). Every knob applies to this instance only; all instances
/// of a deployment should use the same values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementSettings {
    /// Publish a membership record and move roles to their preferred instance.
    /// Default: `false`.
    pub enabled: bool,
    /// Capacity: this instance's fair share is proportional to it; 1 to 1000.
    /// Default: `1`.
    pub weight: u32,
    /// New members count only once no further member joined for this long.
    /// Default: `5s`.
    #[serde(with = "humantime_serde")]
    pub stability_window: Duration,
    /// A member that vanished without a graceful stop still counts for this long
    /// (a flapping member moves nothing). Default: `10s`.
    #[serde(with = "humantime_serde")]
    pub leave_delay: Duration,
    /// How long an instance holds back its campaign for a vacancy another live
    /// member is preferred for; it takes the role if that member does not.
    /// Default: `500ms`.
    #[serde(with = "humantime_serde")]
    pub claim_grace: Duration,
    /// A role moved voluntarily is not moved voluntarily again for this long (the
    /// instance that released it may take it again whenever the plan prefers it: there is
    /// no campaign cooldown after a placement release). Default: `30s`.
    #[serde(with = "humantime_serde")]
    pub cooldown: Duration,
    /// At most this many voluntary moves per `move_interval`; at least 1.
    /// Default: `10`.
    pub move_budget: u32,
    /// The interval of `move_budget`; greater than zero. Default: `1s`.
    #[serde(with = "humantime_serde")]
    pub move_interval: Duration,
    /// Spreading releases roles only while this instance holds more than its
    /// share in the plan plus this many. Default: `0`.
    pub hysteresis: u32,
    /// Start draining: move every role away and take none another member is
    /// preferred for. Default: `false`.
    pub draining: bool,
    /// Warm hand-over: how long a holder waits for the chosen receiver of a voluntary move to
    /// prepare the role (its `on_prepare`, announced in its membership record) before it
    /// releases the role anyway. Default: `5s`.
    #[serde(with = "humantime_serde")]
    pub prepare_timeout: Duration,
    /// Freeze this instance's voluntary moves (spreading, priority, rollout): it hands
    /// nothing over until unfrozen (`POST /api/placement/freeze`). Vacant roles are still
    /// taken. Default: `false`.
    pub frozen: bool,
    /// This instance's zone (from `instance.zone`, else `instance.meta.zone`): roles spread
    /// across zones first. Default: `None` (one zone with every member without one).
    #[serde(skip)]
    pub zone: Option<String>,
    /// Units of role cost (`roles[].weight`) this instance holds at most (from
    /// `instance.capacity`); no voluntary move exceeds it. Default: `None` (no limit).
    #[serde(skip)]
    pub capacity: Option<u32>,
    /// Roles this instance holds at most (from `instance.max_roles`). Default: `None`.
    #[serde(skip)]
    pub max_roles: Option<u32>,
    /// This instance's software version (from `instance.version` or `NATS_ROLES_VERSION`):
    /// no role moves onto a member older than the newest live one. Default: `None`.
    #[serde(skip)]
    pub version: Option<super::Version>,
    /// TTL of the membership record (heartbeated every quarter of it); whole
    /// seconds, at least `1s`. Default: `None` (the top-level `timing.ttl`).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub member_ttl: Option<Duration>,
}

impl Default for PlacementSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            weight: 1,
            stability_window: Duration::from_secs(5),
            leave_delay: Duration::from_secs(10),
            claim_grace: Duration::from_millis(500),
            cooldown: Duration::from_secs(30),
            move_budget: 10,
            move_interval: Duration::from_secs(1),
            hysteresis: 0,
            draining: false,
            prepare_timeout: Duration::from_secs(5),
            frozen: false,
            zone: None,
            capacity: None,
            max_roles: None,
            version: None,
            member_ttl: None,
        }
    }
}

impl PlacementSettings {
    /// Every rule this value breaks (empty when valid); fields are named as in YAML
    /// (`placement.weight`).
    #[must_use]
    pub fn problems(&self) -> Vec<SettingError> {
        let mut found = Vec::new();
        if !(1..=1000).contains(&self.weight) {
            found.push(SettingError::new(
                "placement.weight",
                format!(
                    "{} is out of range: it must be between 1 and 1000",
                    self.weight
                ),
            ));
        }
        if let Some(zone) = &self.zone
            && !valid_zone(zone)
        {
            found.push(SettingError::new(
                "instance.zone",
                format!("{zone:?} is not a zone name: 1 to 64 letters, digits, '-', '_' or '.'"),
            ));
        }
        if self.capacity == Some(0) {
            found.push(SettingError::new(
                "instance.capacity",
                "must be at least 1 (leave it out for no limit)",
            ));
        }
        if self.max_roles == Some(0) {
            found.push(SettingError::new(
                "instance.max_roles",
                "must be at least 1 (leave it out for no limit)",
            ));
        }
        if self.move_budget == 0 {
            found.push(SettingError::new(
                "placement.move_budget",
                "must be at least 1",
            ));
        }
        if self.move_interval.is_zero() {
            found.push(SettingError::new(
                "placement.move_interval",
                "must be greater than zero",
            ));
        }
        found.extend(
            [
                ("placement.stability_window", self.stability_window),
                ("placement.leave_delay", self.leave_delay),
                ("placement.claim_grace", self.claim_grace),
                ("placement.cooldown", self.cooldown),
                ("placement.move_interval", self.move_interval),
                ("placement.prepare_timeout", self.prepare_timeout),
            ]
            .into_iter()
            .filter_map(|(field, value)| SettingError::at_most(field, value, MAX_DURATION)),
        );
        if let Some(ttl) = self.member_ttl
            && (ttl < Timing::MIN_TTL || ttl > Timing::MAX_TTL || ttl.subsec_nanos() != 0)
        {
            found.push(SettingError::new(
                "placement.member_ttl",
                format!(
                    "{} must be a whole number of seconds, at least {} and at most {}",
                    fmt_duration(ttl),
                    fmt_duration(Timing::MIN_TTL),
                    fmt_duration(Timing::MAX_TTL)
                ),
            ));
        }
        found
    }

    /// The knobs every member should agree on, in short (published in the membership
    /// record; members whose digests differ are shown as disagreeing):
    /// `stability_window/leave_delay/claim_grace/cooldown/move_budget per move_interval/hysteresis`.
    #[must_use]
    pub fn digest(&self) -> String {
        format!(
            "sw={} ld={} cg={} cd={} mb={}/{} h={}",
            fmt_duration(self.stability_window),
            fmt_duration(self.leave_delay),
            fmt_duration(self.claim_grace),
            fmt_duration(self.cooldown),
            self.move_budget,
            fmt_duration(self.move_interval),
            self.hysteresis
        )
    }

    /// Checks every rule.
    ///
    /// # Errors
    /// The first rule broken.
    pub fn validate(&self) -> Result<(), SettingError> {
        self.problems().into_iter().next().map_or(Ok(()), Err)
    }
}

/// Whether `zone` is a valid zone name: 1 to 64 ASCII letters, digits, `-`, `_` or `.`.
#[must_use]
pub fn valid_zone(zone: &str) -> bool {
    (1..=64).contains(&zone.len())
        && zone
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Whether placement may move a role away from this instance voluntarily.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Takeover {
    /// Hand the role over gracefully when placement prefers another instance. The default.
    #[default]
    Voluntary,
    /// Never release the role for placement (it still moves on stop, failure or health).
    Never,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_each_rule_names_its_field() {
        assert_eq!(PlacementSettings::default().validate(), Ok(()));
        let cases: [(PlacementSettings, &str); 4] = [
            (
                PlacementSettings {
                    weight: 0,
                    ..Default::default()
                },
                "placement.weight",
            ),
            (
                PlacementSettings {
                    move_budget: 0,
                    ..Default::default()
                },
                "placement.move_budget",
            ),
            (
                PlacementSettings {
                    cooldown: Duration::from_secs(7200),
                    ..Default::default()
                },
                "placement.cooldown",
            ),
            (
                PlacementSettings {
                    member_ttl: Some(Duration::from_millis(1500)),
                    ..Default::default()
                },
                "placement.member_ttl",
            ),
        ];
        for (settings, field) in cases {
            let e = settings.validate().expect_err(field);
            assert_eq!(e.field, field);
        }
    }
}
