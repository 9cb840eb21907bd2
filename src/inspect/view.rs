//! JSON views of roles and instances (`GET /api/roles`, `GET /api/instances`,
//! `nats-roles status --json`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::redact::redact_token;
use crate::manager::{HolderInfo, RoleStatus};
use crate::names::{InstanceId, RoleName};

/// Who has a role key, as far as the lease says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HolderState {
    /// A nats-roles lease: `holder` holds the role.
    Held,
    /// Nobody holds the role.
    Vacant,
    /// The key holds a value nats-roles cannot read (treated as held by an unknown holder).
    Foreign,
}

/// One role in the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RoleView {
    /// The role name (for a slot of a role with `slots`, the role's: `indexer` for the key
    /// `role.indexer.2`; [`slot`](Self::slot) says which).
    pub role: String,
    /// The slot, for a role with slots (protocol Q15): each slot is an entry of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// Held, vacant or foreign.
    pub status: HolderState,
    /// The holder's instance id.
    pub holder: Option<String>,
    /// The current term (revision of the write that started it).
    pub term: Option<u64>,
    /// Revision of the role key: the write that began the term (protocol v2 renews the
    /// holder's session, not the role key, so it stays for the whole term — except a late
    /// commit of the term's own write, P5).
    pub revision: Option<u64>,
    /// The holder's priority for the role.
    pub priority: Option<i32>,
    /// The term's fencing token, redacted (see [`redact_token`]).
    pub token: Option<String>,
    /// When the term began (RFC 3339; the holder's clock).
    pub held_since: Option<String>,
    /// How long the term has lasted, in milliseconds.
    pub held_for_ms: Option<u64>,
    /// Server time the holder was last heard of (RFC 3339): its session's latest renewal
    /// (protocol v2 renews the session every heartbeat; the role key is written once per
    /// term), or the role key's write where the session was not read.
    pub renewed_at: Option<String>,
    /// Milliseconds since [`renewed_at`](Self::renewed_at).
    pub renewal_age_ms: Option<u64>,
    /// The holder's lease TTL in milliseconds.
    pub ttl_ms: Option<u64>,
    /// The holder's dashboard (its `http` metadata), if it advertises one of at most
    /// [`MAX_SHOWN_VALUE`] bytes. Text from the bucket, not checked to be a URL.
    pub holder_url: Option<String>,
    /// The holder's advertised metadata, capped: see [`shown_meta`].
    pub meta: BTreeMap<String, String>,
    /// Whether `meta` was cut to the caps (entries left out, keys or values shortened).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub meta_truncated: bool,
    /// This instance's own view of the role; absent when it does not take part in it (and
    /// always in `nats-roles status`, which is no instance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalView>,
    /// Placement: the instance the plan prefers for the role (`None` without placement
    /// members, or when no live member campaigns for it); see docs/placement.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred: Option<String>,
    /// Placement: why (`priority`, `share`, `draining`, `unhealthy`, `pinned`, `only_candidate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_reason: Option<String>,
    /// Only for a vacant role: whether anyone campaigns for it, as far as the answering
    /// instance can tell (a vacancy is an alarm only while candidates exist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<Candidates>,
    /// The role group the role is a member of (protocol Q14), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Its index in [`group`](Self::group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// For a slot: the number of slots the bucket records for its role (the slot count
    /// record `control.slots.<role>`, protocol Q15), when it holds a valid one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
}

fn campaigns() -> bool {
    true
}

/// Whether anyone campaigns for a vacant role, as far as the answering instance can tell
/// (`RoleView::candidates`): a vacancy is an alarm only while candidates exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Candidates {
    /// This instance campaigns for the role, or a live placement member does: the role
    /// should be held, so the vacancy is an alarm (a hand-over's few milliseconds aside).
    Present,
    /// Placement is on here and no live member (this one included) campaigns for the role:
    /// nobody is meant to hold it.
    Absent,
    /// This instance only observes the role and has no placement membership view to tell
    /// who campaigns: not an alarm here.
    Unknown,
}

/// This instance's own state for a role it takes part in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LocalView {
    /// `INIT`, `CANDIDATE`, `LEADER`, `FOLLOWER`, `DEMOTED` or `STOPPED`.
    pub state: String,
    /// Whether this instance campaigns for the role (`false`: it only observes it).
    #[serde(default = "campaigns")]
    pub campaign: bool,
    /// Whether this instance holds the role.
    pub leader: bool,
    /// Last promotion or demotion of this instance (RFC 3339).
    pub last_transition: String,
    /// Why this instance's last term ended (`shutdown`, `deadline_expired`, ...).
    pub last_demote_reason: Option<String>,
    /// What keeps the role from campaigning or renewing right now
    /// ([`RoleStatus::last_error`]); it keeps retrying. `None` once it recovered.
    pub error: Option<String>,
    /// Why this instance takes no role for ill health ([`crate::health::HealthState::reason`]):
    /// its health check failed `failure_threshold` times, its roles were released and it
    /// cools down or keeps failing. Absent while healthy (or without a health check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// Whether another live process was seen using this instance id.
    pub duplicate_instance: bool,
}

/// `GET /api/roles` and `nats-roles status --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RoleList {
    /// The bucket.
    pub bucket: String,
    /// The instance that answered (`None` from the CLI).
    pub instance: Option<String>,
    /// When the list was made (RFC 3339).
    pub generated_at: String,
    /// Every role, sorted by name.
    pub roles: Vec<RoleView>,
}

impl RoleList {
    /// A list made now.
    #[must_use]
    pub fn new(bucket: &str, instance: Option<&InstanceId>, roles: Vec<RoleView>) -> Self {
        Self {
            bucket: bucket.to_owned(),
            instance: instance.map(ToString::to_string),
            generated_at: format_time(SystemTime::now()),
            roles,
        }
    }
}

/// A role held by an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HeldRole {
    /// The role (for a slot, the role's name; [`slot`](Self::slot) says which).
    pub role: String,
    /// The slot, for a role with slots (protocol Q15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// The term.
    pub term: Option<u64>,
    /// The redacted fencing token.
    pub token: Option<String>,
    /// When the term began (RFC 3339).
    pub held_since: Option<String>,
}

/// An instance and the roles it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct InstanceView {
    /// The instance id.
    pub instance: String,
    /// Whether this is the instance that answered.
    pub this_instance: bool,
    /// Its dashboard (`http` metadata), if it advertises one of at most [`MAX_SHOWN_VALUE`]
    /// bytes. Text from the bucket, not checked to be a URL.
    pub url: Option<String>,
    /// Its advertised metadata, capped: see [`shown_meta`].
    pub meta: BTreeMap<String, String>,
    /// Whether `meta` was cut to the caps.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub meta_truncated: bool,
    /// The roles it holds, sorted by name.
    pub roles: Vec<HeldRole>,
}

impl InstanceList {
    /// A list made now.
    #[must_use]
    pub fn new(bucket: &str, instance: Option<&InstanceId>, instances: Vec<InstanceView>) -> Self {
        Self {
            bucket: bucket.to_owned(),
            instance: instance.map(ToString::to_string),
            generated_at: format_time(SystemTime::now()),
            instances,
        }
    }
}

/// `GET /api/instances`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct InstanceList {
    /// The bucket.
    pub bucket: String,
    /// The instance that answered (`None` from the CLI).
    pub instance: Option<String>,
    /// When the list was made (RFC 3339).
    pub generated_at: String,
    /// Instances that hold at least one role, and the answering instance; sorted by id.
    pub instances: Vec<InstanceView>,
}

/// RFC 3339 with milliseconds, UTC (`2026-11-22T05:01:02.123Z`).
#[must_use]
pub fn format_time(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    let t = t
        .replace_nanosecond(t.nanosecond() / 1_000_000 * 1_000_000)
        .unwrap_or(t);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn millis_between(earlier: SystemTime, later: SystemTime) -> u64 {
    let d = later.duration_since(earlier).unwrap_or(Duration::ZERO);
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Most metadata entries a view shows (the first ones by key); the others are left out.
pub const MAX_SHOWN_META: usize = 32;
/// Longest metadata key a view shows, in bytes; a longer one is cut and ends in `…`.
pub const MAX_SHOWN_KEY: usize = 64;
/// Longest metadata value a view shows, in bytes; a longer one is cut and ends in `…`.
pub const MAX_SHOWN_VALUE: usize = 256;

/// What a view shows of metadata, which anyone who can write to the bucket controls: at most
/// [`MAX_SHOWN_META`] entries, keys cut to [`MAX_SHOWN_KEY`] and values to
/// [`MAX_SHOWN_VALUE`] bytes, control characters replaced by `�`. `true` when anything was
/// cut or left out.
#[must_use]
pub fn shown_meta(meta: &BTreeMap<String, String>) -> (BTreeMap<String, String>, bool) {
    let mut truncated = meta.len() > MAX_SHOWN_META;
    let mut shown = BTreeMap::new();
    for (key, value) in meta.iter().take(MAX_SHOWN_META) {
        let (key, key_cut) = shown_text(key, MAX_SHOWN_KEY);
        let (value, value_cut) = shown_text(value, MAX_SHOWN_VALUE);
        truncated |= key_cut || value_cut;
        // Two keys cut to the same text: the first one stays.
        match shown.entry(key) {
            std::collections::btree_map::Entry::Occupied(_) => truncated = true,
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(value);
            }
        }
    }
    (shown, truncated)
}

/// `text` cut to at most `max` bytes (on a character boundary, ending in `…`), control
/// characters replaced by `�`; `true` if it was cut.
fn shown_text(text: &str, max: usize) -> (String, bool) {
    const MORE: char = '…';
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_control() { '\u{fffd}' } else { c })
            .collect()
    };
    if text.len() <= max {
        return (clean(text), false);
    }
    let mut end = max.saturating_sub(MORE.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = clean(&text[..end]);
    // Replacement characters can be longer than what they replace.
    while cut.len() + MORE.len_utf8() > max {
        cut.pop();
    }
    cut.push(MORE);
    (cut, true)
}

/// The `http` metadata as a dashboard link: only whole (never cut) values.
fn shown_url(meta: &BTreeMap<String, String>) -> Option<String> {
    meta.get("http")
        .filter(|url| url.len() <= MAX_SHOWN_VALUE && !url.chars().any(char::is_control))
        .cloned()
}

/// A role as people read it: `indexer`, or `indexer[2]` for slot 2 of `indexer`.
#[must_use]
pub fn shown_name(role: &str, slot: Option<u32>) -> String {
    match slot {
        Some(k) => format!("{role}[{k}]"),
        None => role.to_owned(),
    }
}

impl RoleView {
    /// The role as people read it: `indexer[2]` for slot 2 of `indexer`, else the role.
    #[must_use]
    pub fn shown_name(&self) -> String {
        shown_name(&self.role, self.slot)
    }

    /// A role nobody holds.
    #[must_use]
    pub fn vacant(role: &RoleName) -> Self {
        Self {
            role: role.base_role().to_string(),
            slot: role.slot(),
            status: HolderState::Vacant,
            holder: None,
            term: None,
            revision: None,
            priority: None,
            token: None,
            held_since: None,
            held_for_ms: None,
            renewed_at: None,
            renewal_age_ms: None,
            ttl_ms: None,
            holder_url: None,
            meta: BTreeMap::new(),
            meta_truncated: false,
            local: None,
            preferred: None,
            preferred_reason: None,
            candidates: None,
            group: None,
            index: None,
            slots: None,
        }
    }

    /// The view of a held (or foreign) role. `observed` says whether `info.since` is a real
    /// observation of the term's start (a manager's watcher) rather than the time of a read:
    /// it is then the fallback for leases that do not carry their start time.
    #[must_use]
    pub fn held(info: &HolderInfo, observed: bool, now: SystemTime) -> Self {
        let since = info.acquired_at.or(observed.then_some(info.since));
        let (meta, meta_truncated) = shown_meta(&info.meta);
        Self {
            role: info.role.base_role().to_string(),
            slot: info.role.slot(),
            status: if info.foreign {
                HolderState::Foreign
            } else {
                HolderState::Held
            },
            holder: info.holder.as_ref().map(ToString::to_string),
            term: info.term,
            revision: Some(info.revision),
            priority: (!info.foreign).then_some(info.priority),
            token: info.token.as_ref().map(redact_token),
            held_since: since.map(format_time),
            held_for_ms: since.map(|s| millis_between(s, now)),
            renewed_at: info.renewed_at.map(format_time),
            renewal_age_ms: info.renewed_at.map(|r| millis_between(r, now)),
            ttl_ms: info
                .ttl
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            holder_url: shown_url(&info.meta),
            meta,
            meta_truncated,
            local: None,
            preferred: None,
            preferred_reason: None,
            candidates: None,
            group: None,
            index: None,
            slots: None,
        }
    }

    /// For a slot, the slot count recorded for its role, from `counts` (by role; protocol
    /// Q15).
    #[must_use]
    pub fn with_slot_counts(mut self, counts: &BTreeMap<RoleName, u32>) -> Self {
        if self.slot.is_some() {
            self.slots = RoleName::new(self.role.as_str())
                .ok()
                .and_then(|role| counts.get(&role).copied());
        }
        self
    }

    /// Names the group the role is a member of, among `groups` (protocol Q14).
    #[must_use]
    pub fn in_groups<'a>(mut self, groups: impl IntoIterator<Item = &'a RoleName>) -> Self {
        if let Ok(role) = RoleName::new(self.role.as_str()) {
            for group in groups {
                if let Some(index) = crate::groups::member_index(group, &role) {
                    self.group = Some(group.to_string());
                    self.index = Some(index);
                    break;
                }
            }
        }
        self
    }

    /// Adds the placement plan's preferred holder.
    #[must_use]
    pub fn with_preferred(mut self, preferred: Option<&crate::placement::Preferred>) -> Self {
        self.preferred = preferred.map(|p| p.instance.to_string());
        self.preferred_reason = preferred.map(|p| p.reason.as_str().to_owned());
        self
    }

    /// Adds this instance's own state for the role.
    #[must_use]
    pub fn with_local(mut self, status: &RoleStatus) -> Self {
        self.local = Some(LocalView {
            state: status.state.as_str().to_owned(),
            campaign: status.campaign,
            leader: status.is_leader(),
            last_transition: format_time(status.last_transition),
            last_demote_reason: status.last_demote_reason.map(|r| r.as_str().to_owned()),
            error: status.last_error.clone(),
            health: None,
            duplicate_instance: status.duplicate_instance,
        });
        self
    }

    /// Adds whether anyone campaigns for the role, if it is vacant: `this_campaigns` (this
    /// instance does), `members` (placement is on here: whether a live member campaigns for
    /// it; `None` without placement). Nothing for a held or foreign role.
    #[must_use]
    pub fn with_candidates(mut self, this_campaigns: bool, members: Option<bool>) -> Self {
        if self.status == HolderState::Vacant {
            self.candidates = Some(match (this_campaigns, members) {
                (true, _) | (false, Some(true)) => Candidates::Present,
                (false, Some(false)) => Candidates::Absent,
                (false, None) => Candidates::Unknown,
            });
        }
        self
    }

    /// Adds why this instance takes no role for ill health to its own view of the role (only
    /// with [`with_local`](Self::with_local); nothing while healthy).
    #[must_use]
    pub fn with_health(mut self, health: Option<&crate::health::HealthState>) -> Self {
        if let Some(local) = &mut self.local {
            local.health = health.and_then(crate::health::HealthState::reason);
        }
        self
    }
}

/// Groups held roles by holder. `this` (the answering instance and its metadata) is always
/// listed, holding something or not.
#[must_use]
pub fn instances(
    holders: &[HolderInfo],
    this: Option<(&InstanceId, &BTreeMap<String, String>)>,
) -> Vec<InstanceView> {
    let mut by_id: BTreeMap<String, InstanceView> = BTreeMap::new();
    if let Some((id, meta)) = this {
        let (shown, meta_truncated) = shown_meta(meta);
        by_id.insert(
            id.to_string(),
            InstanceView {
                instance: id.to_string(),
                this_instance: true,
                url: shown_url(meta),
                meta: shown,
                meta_truncated,
                roles: Vec::new(),
            },
        );
    }
    for info in holders {
        let Some(holder) = &info.holder else { continue };
        let entry = by_id
            .entry(holder.to_string())
            .or_insert_with(|| InstanceView {
                instance: holder.to_string(),
                this_instance: false,
                url: None,
                meta: BTreeMap::new(),
                meta_truncated: false,
                roles: Vec::new(),
            });
        if !entry.this_instance {
            // Every lease carries the holder's metadata; any of them will do.
            entry.url = shown_url(&info.meta);
            (entry.meta, entry.meta_truncated) = shown_meta(&info.meta);
        }
        entry.roles.push(HeldRole {
            role: info.role.base_role().to_string(),
            slot: info.role.slot(),
            term: info.term,
            token: info.token.as_ref().map(redact_token),
            held_since: info.acquired_at.map(format_time),
        });
    }
    let mut out: Vec<InstanceView> = by_id.into_values().collect();
    for i in &mut out {
        i.roles.sort_by(|a, b| a.role.cmp(&b.role));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::KeyState;
    use crate::value::{HolderValue, LeaseValue};
    use uuid::Uuid;

    fn info(role: &str, holder: &str, term: u64) -> HolderInfo {
        let value = LeaseValue {
            v: crate::value::VALUE_VERSION,
            holder: InstanceId::new(holder).unwrap(),
            incarnation: Uuid::new_v4(),
            session: uuid::Uuid::nil(),
            session_key: crate::value::session_key(&InstanceId::new(holder).unwrap(), 3000),
            nonce: Uuid::new_v4(),
            term: Some(term),
            priority: 3,
            ttl_ms: 3000,
            meta: BTreeMap::from([("http".into(), format!("http://{holder}:8080"))]),
            acquired_at: Some("2026-11-22T05:01:02.123Z".into()),
            renewed_at: None,
        };
        let state = KeyState::Held {
            revision: term + 5,
            value: HolderValue::Lease(Box::new(value)),
        };
        let written = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        HolderInfo::from_state(
            &RoleName::from_key_name(role).unwrap(),
            &state,
            9,
            Some(written),
        )
        .unwrap()
    }

    #[test]
    fn a_held_role_shows_holder_term_ages_and_a_redacted_token() {
        let i = info("scheduler", "node-a", 41);
        let now = SystemTime::UNIX_EPOCH + Duration::from_millis(1_800_000_000_250);
        let v = RoleView::held(&i, false, now);
        assert_eq!(v.status, HolderState::Held);
        assert_eq!(v.holder.as_deref(), Some("node-a"));
        assert_eq!(
            (v.term, v.revision, v.priority),
            (Some(41), Some(46), Some(3))
        );
        assert_eq!(v.renewal_age_ms, Some(250));
        assert_eq!(v.held_since.as_deref(), Some("2026-11-22T05:01:02.123Z"));
        assert_eq!(v.ttl_ms, Some(3000));
        assert_eq!(v.holder_url.as_deref(), Some("http://node-a:8080"));
        let token = i.token.unwrap();
        let json = serde_json::to_string(&v).unwrap();
        assert!(!json.contains(&token.expose()), "{json}");
        assert!(
            !json.contains(&token.nonce().simple().to_string()),
            "{json}"
        );
        assert!(v.token.unwrap().starts_with("41·…"));
        let back: RoleView = serde_json::from_str(&json).unwrap();
        assert_eq!(back.holder.as_deref(), Some("node-a"));
    }

    #[test]
    fn instances_group_roles_and_always_list_this_instance() {
        let holders = vec![
            info("b", "node-a", 2),
            info("a", "node-a", 1),
            info("c", "node-b", 3),
        ];
        let me = InstanceId::new("node-c").unwrap();
        let meta = BTreeMap::from([("http".to_owned(), "http://me".to_owned())]);
        let list = instances(&holders, Some((&me, &meta)));
        let ids: Vec<_> = list.iter().map(|i| i.instance.as_str()).collect();
        assert_eq!(ids, ["node-a", "node-b", "node-c"]);
        let roles: Vec<_> = list[0].roles.iter().map(|r| r.role.as_str()).collect();
        assert_eq!(roles, ["a", "b"]);
        assert!(list[2].this_instance && list[2].roles.is_empty());
        assert_eq!(list[2].url.as_deref(), Some("http://me"));
    }

    #[test]
    fn foreign_metadata_is_shown_capped() {
        let mut i = info("scheduler", "node-a", 41);
        let huge = "x".repeat(900 * 1024);
        i.meta.insert("blob".into(), huge.clone());
        i.meta.insert("k".repeat(1000), "v".into());
        i.meta.insert("esc".into(), "\u{1b}[31mred\u{7}".into());
        i.meta.insert("d-wide".into(), "é".repeat(300));
        i.meta
            .insert("http".into(), format!("http://a/{}", "p".repeat(300)));
        for n in 0..100 {
            i.meta.insert(format!("m{n:03}"), n.to_string());
        }
        let v = RoleView::held(&i, false, SystemTime::UNIX_EPOCH);
        assert!(v.meta_truncated);
        assert_eq!(v.meta.len(), MAX_SHOWN_META);
        assert!(
            v.meta
                .iter()
                .all(|(k, v)| k.len() <= MAX_SHOWN_KEY && v.len() <= MAX_SHOWN_VALUE)
        );
        assert!(v.meta["blob"].ends_with('…') && v.meta["blob"].starts_with("xxx"));
        assert_eq!(v.meta["esc"], "\u{fffd}[31mred\u{fffd}");
        assert!(
            v.meta["d-wide"].ends_with("é…"),
            "cut on a character boundary"
        );
        assert_eq!(v.holder_url, None, "a cut URL is no link");
        let json = serde_json::to_string(&v).unwrap();
        assert!(json.len() < 16 * 1024, "{} bytes", json.len());
        assert!(!json.contains(&huge[..1000]));
        let list = instances(&[i], None);
        assert!(list[0].meta_truncated && list[0].meta.len() == MAX_SHOWN_META);
        assert_eq!(list[0].url, None);
        // Ordinary metadata is shown as it is.
        let plain = info("a", "node-b", 1);
        let v = RoleView::held(&plain, false, SystemTime::UNIX_EPOCH);
        assert!(!v.meta_truncated);
        assert_eq!(v.meta, plain.meta);
        assert!(
            !serde_json::to_string(&v)
                .unwrap()
                .contains("meta_truncated")
        );
    }

    #[test]
    fn times_are_rfc3339_with_milliseconds() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_800_000_000_123_456_789);
        assert_eq!(format_time(t), "2027-01-15T08:00:00.123Z");
    }

    /// A slot (protocol Q15) is an entry of its own: `role` names the role, `slot` the slot;
    /// a role without slots has no `slot` field at all.
    #[test]
    fn a_slot_is_an_entry_with_its_role_and_slot() {
        let slot = RoleName::from_key_name("indexer.2").unwrap();
        let v = RoleView::vacant(&slot);
        assert_eq!((v.role.as_str(), v.slot), ("indexer", Some(2)));
        assert_eq!(v.shown_name(), "indexer[2]");
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["role"], "indexer");
        assert_eq!(json["slot"], 2);
        let plain =
            serde_json::to_value(RoleView::vacant(&RoleName::new("solo").unwrap())).unwrap();
        assert!(plain.get("slot").is_none(), "{plain}");
        let held = RoleView::held(&info("indexer.1", "a", 7), true, SystemTime::now());
        assert_eq!((held.role.as_str(), held.slot), ("indexer", Some(1)));
        let list = instances(&[info("indexer.1", "a", 7)], None);
        assert_eq!(list[0].roles[0].slot, Some(1));
    }
}
