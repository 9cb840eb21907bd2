// The dashboard's script (served as /dashboard.js: the page's CSP allows no inline script).
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const NOTE_MS = 60000;
  const rows = new Map();      // role -> {tr, cells, term, holder, leader, release, evict}
  const notes = new Map();     // role -> {text, until}
  let me = null;
  let adminConfigured = null; // from the stream's hello: does this instance have an admin token?
  const here = () => me || "this instance";

  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  };
  const dur = (ms) => {
    if (ms === null || ms === undefined) return "";
    if (ms < 10000) return (ms / 1000).toFixed(1) + " s";
    let s = Math.floor(ms / 1000);
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    return (d ? d + "d " : "") + (d || h ? h + "h " : "") + (d || h || m ? m + "m " : "") + s + "s";
  };
  const clock = (iso) => { const t = new Date(iso); return isNaN(t) ? "" : t.toLocaleTimeString(); };
  // Metadata comes from the bucket, which anyone with write access controls: only absolute
  // http(s) URLs become links (never javascript:, data:, ...).
  const link = (url, text) => {
    let u = null;
    try { u = new URL(url); } catch (e) { return null; }
    if (u.protocol !== "http:" && u.protocol !== "https:") return null;
    const a = el("a", null, text);
    a.href = u.href;
    a.rel = "noopener noreferrer";
    return a;
  };

  function row(role) {
    let r = rows.get(role);
    if (r) return r;
    const tr = el("tr");
    tr.dataset.role = role;
    const cells = {};
    for (const name of ["role", "holder", "term", "token", "since", "renewed", "local", "actions"]) {
      cells[name] = el("td", name);
      tr.appendChild(cells[name]);
    }
    cells.term.classList.add("num");
    cells.token.classList.add("mono");
    cells.actions.classList.add("admin-only");
    cells.role.textContent = role;
    r = { tr, cells, term: null, holder: null, leader: false };
    r.release = adminButton("Release", "release", () => releaseRole(role));
    r.evict = adminButton("Evict", "evict", () => evictRole(role));
    cells.actions.append(r.release, r.evict);
    rows.set(role, r);
    updateRoleButtons(r);
    return r;
  }

  // A vacancy is an alarm only while someone campaigns for the role (`candidates`, from
  // GET /api/roles): "present" (this instance or a live placement member campaigns), "absent"
  // (placement knows nobody does), "unknown" (this instance only observes it).
  const VACANCY = {
    absent: ["vacancy-quiet", "vacant · nobody campaigns for it"],
    unknown: ["vacancy-quiet", "vacant · only observed here"],
  };

  function setHolder(r, holder, url, status) {
    const c = r.cells.holder;
    c.textContent = "";
    c.dataset.vacancy = "";
    if (status === "vacant" || (!holder && status !== "foreign")) {
      const quiet = VACANCY[r.candidates];
      c.dataset.vacancy = quiet ? r.candidates : "alarm";
      c.appendChild(quiet ? el("span", quiet[0], quiet[1]) : el("span", "vacant", "— vacant"));
    } else if (!holder) {
      c.appendChild(el("span", "muted", "foreign value"));
    } else {
      c.appendChild((url && link(url, holder)) || el("span", null, holder));
    }
    c.dataset.holder = holder || "";
    r.holder = holder || null;
    const note = notes.get(r.tr.dataset.role);
    if (note && note.until > Date.now()) c.appendChild(el("span", "note handover", note.text));
  }

  function setTerm(r, term) {
    r.term = term ?? null;
    r.cells.term.textContent = term ?? "";
  }

  // A slot of a role with slots (protocol Q15) is a row of its own, named as its key
  // (`indexer.2`): the admin actions address it by that name.
  function keyOf(v) {
    return v.slot == null ? v.role : v.role + "." + v.slot;
  }

  function renderRole(v) {
    const r = row(keyOf(v));
    r.candidates = v.candidates || null;
    setHolder(r, v.holder, v.holder_url, v.status);
    setTerm(r, v.term);
    r.cells.token.textContent = v.token ?? "";
    r.cells.since.textContent = dur(v.held_for_ms);
    r.cells.renewed.textContent = "";
    if (v.renewal_age_ms !== null && v.renewal_age_ms !== undefined) {
      const box = el("span", "age");
      const frac = v.ttl_ms ? Math.min(1, v.renewal_age_ms / v.ttl_ms) : 0;
      const bar = el("span", "bar");
      const fill = el("i", frac > 0.9 ? "bad" : frac > 0.5 ? "warn" : "");
      fill.style.width = Math.max(4, Math.round(frac * 100)) + "%";
      bar.appendChild(fill);
      box.appendChild(bar);
      box.appendChild(el("span", null, dur(v.renewal_age_ms) + " ago"));
      r.cells.renewed.appendChild(box);
    }
    const l = v.local;
    r.leader = !!l && l.state === "LEADER";
    updateRoleButtons(r);
    r.cells.local.textContent = "";
    if (l && l.campaign === false) {
      // Observe-only (campaign: false): never a candidate here.
      r.cells.local.appendChild(el("span", "muted observer", "observes only"));
    } else if (l) {
      r.cells.local.appendChild(el("span", "state-" + l.state, l.state.toLowerCase()));
      if (l.error) r.cells.local.appendChild(el("span", "note", "error: " + l.error));
      if (l.health) r.cells.local.appendChild(el("span", "note", l.health));
      if (l.duplicate_instance) r.cells.local.appendChild(el("span", "note", "duplicate instance id!"));
    } else {
      r.cells.local.appendChild(el("span", "muted", "—"));
    }
    if (v.preferred) {
      // Placement: where the plan wants the role, and why (docs/placement.md).
      r.cells.local.appendChild(el("span", "muted pref", "preferred: " + v.preferred + " (" + (v.preferred_reason || "") + ")"));
    }
  }

  // Role groups (protocol Q14): a group is one row ("shard · 64 members"), its members' rows
  // are shown only while the group is expanded (a click on the group's row).
  const groupRows = new Map(); // group -> {tr, cells, members}
  const expanded = new Set();

  function groupRow(name) {
    let g = groupRows.get(name);
    if (g) return g;
    const tr = el("tr", "group");
    tr.dataset.group = name;
    const cells = {};
    for (const c of ["role", "holder", "term", "token", "since", "renewed", "local", "actions"]) {
      cells[c] = el("td", c);
      tr.appendChild(cells[c]);
    }
    const toggle = el("button", "group-toggle");
    toggle.type = "button";
    toggle.addEventListener("click", () => {
      if (expanded.has(name)) expanded.delete(name); else expanded.add(name);
      refresh();
    });
    cells.role.appendChild(toggle);
    cells.actions.classList.add("admin-only");
    g = { tr, cells, toggle, members: [] };
    groupRows.set(name, g);
    return g;
  }

  function renderGroup(name, members) {
    const g = groupRow(name);
    g.members = members;
    const open = expanded.has(name);
    g.toggle.textContent = (open ? "▾ " : "▸ ") + name + " · " + members.length +
      (members.length === 1 ? " member" : " members");
    g.toggle.setAttribute("aria-expanded", open ? "true" : "false");
    const byHolder = new Map();
    let vacant = 0, alarms = 0, mine = 0;
    for (const v of members) {
      if (v.status === "vacant") {
        vacant++;
        if (!VACANCY[v.candidates]) alarms++;
      } else {
        const h = v.holder || "foreign value";
        byHolder.set(h, (byHolder.get(h) || 0) + 1);
      }
      if (v.local && v.local.state === "LEADER") mine++;
    }
    const c = g.cells.holder;
    c.textContent = "";
    c.dataset.vacancy = alarms ? "alarm" : "";
    const parts = [...byHolder.entries()].sort((a, b) => a[0].localeCompare(b[0]))
      .map(([h, n]) => h + " " + n);
    c.appendChild(el("span", null, (members.length - vacant) + " held" +
      (parts.length ? " · " + parts.join(", ") : "")));
    if (alarms) c.appendChild(el("span", "vacant", " · " + alarms + " vacant"));
    g.cells.local.textContent = mine ? mine + " held here" : "";
  }

  function renderRoles(list) {
    $("bucket").textContent = list.bucket;
    $("instance").textContent = list.instance || "";
    me = list.instance;
    const body = $("roles");
    const seen = new Set();
    const groups = new Map();
    for (const v of list.roles) {
      renderRole(v);
      seen.add(keyOf(v));
      const r = rows.get(keyOf(v));
      r.group = v.group ?? null;
      r.index = v.index ?? null;
      if (r.group !== null) {
        if (!groups.has(r.group)) groups.set(r.group, []);
        groups.get(r.group).push(v);
      }
    }
    for (const [role, r] of rows) {
      if (!seen.has(role)) { r.tr.remove(); rows.delete(role); }
    }
    for (const [name, g] of groupRows) {
      if (!groups.has(name)) { g.tr.remove(); groupRows.delete(name); }
    }
    for (const [name, members] of groups) renderGroup(name, members);
    // Rows in order: roles by name, each group's row where its name sorts, then its members
    // by index while it is expanded.
    const entries = [];
    for (const [role, r] of rows) if (r.group === null) entries.push([role, [r.tr]]);
    for (const [name, g] of groupRows) {
      const members = [...rows.values()].filter((r) => r.group === name)
        .sort((a, b) => a.index - b.index);
      const open = expanded.has(name);
      for (const r of members) { r.tr.hidden = !open; r.tr.classList.add("group-member"); }
      entries.push([name, [g.tr, ...(open ? members.map((r) => r.tr) : [])]]);
      if (!open) for (const r of members) r.tr.remove();
    }
    entries.sort((a, b) => a[0].localeCompare(b[0]));
    const order = entries.flatMap((e) => e[1]);
    order.forEach((tr, i) => {
      if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
    });
    while (body.children.length > order.length) body.removeChild(body.lastChild);
    $("no-roles").hidden = rows.size > 0;
    const vacant = list.roles.filter((v) => v.status === "vacant");
    const alarms = vacant.filter((v) => !VACANCY[v.candidates]).length;
    const held = list.roles.length - vacant.length;
    let summary = list.roles.length + " roles · " + held + " held · " + alarms + " vacant";
    if (vacant.length > alarms) summary += " · " + (vacant.length - alarms) + " not campaigned for";
    if (groups.size) summary += " · " + groups.size + (groups.size === 1 ? " group" : " groups");
    $("summary").textContent = summary;
  }

  function renderInstances(list) {
    const box = $("instances");
    box.textContent = "";
    for (const i of list.instances) {
      const card = el("div", "instance" + (i.this_instance ? " me" : ""));
      card.dataset.instance = i.instance;
      const a = i.url && !i.this_instance ? link(i.url, i.instance) : null;
      if (a) {
        const b = el("b");
        b.appendChild(a);
        card.appendChild(b);
      } else {
        card.appendChild(el("b", null, i.instance));
      }
      if (i.this_instance) card.appendChild(el("span", "pill", "this instance"));
      card.appendChild(el("div", "muted", i.roles.length + (i.roles.length === 1 ? " role" : " roles")));
      const chips = el("div", "chips");
      for (const r of i.roles) chips.appendChild(el("span", "chip", keyOf(r) + " #" + (r.term ?? "?")));
      card.appendChild(chips);
      box.appendChild(card);
    }
  }

  // ---- Members (placement): GET /api/members -------------------------------------------------

  const MARKS = {
    missing: "planned for this member, not held by it",
    extra: "held by this member, not planned for it",
  };

  // A list of role chips; those missing from `other` are marked with `mark` (planned but not
  // held: "missing", or held but not planned: "extra").
  function roleChips(roles, other, mark) {
    const chips = el("div", "chips");
    for (const role of roles) {
      const chip = el("span", "chip", role);
      if (!other.includes(role)) {
        chip.classList.add(mark);
        chip.title = MARKS[mark];
      }
      chips.appendChild(chip);
    }
    return chips;
  }

  function countText(roles, units) {
    const n = roles.length;
    units = units ?? n;
    let text = n + (n === 1 ? " role" : " roles");
    if (units !== n) text += ", " + units + (units === 1 ? " unit" : " units");
    return text;
  }

  function limitsText(m) {
    const cap = m.capacity ?? null;
    const max = m.max_roles ?? null;
    if (cap === null && max === null) return "—";
    return (cap === null ? "∞" : cap + " units") + " / " + (max === null ? "∞" : max + " roles");
  }

  function memberCell(m, isMe) {
    const td = el("td", "member");
    const a = m.http && !isMe ? link(m.http, m.id) : null;
    td.appendChild(a || el("b", null, m.id));
    if (isMe) td.appendChild(el("span", "pill", "this instance"));
    if (m.settings) td.title = "settings: " + m.settings;
    return td;
  }

  function healthCell(m) {
    const td = el("td", "health");
    td.appendChild(el("span", m.healthy ? "good" : "bad", m.healthy ? "healthy" : "unhealthy"));
    td.appendChild(document.createTextNode(" · "));
    td.appendChild(el("span", m.live ? "good" : "bad", m.live ? "live" : "silent"));
    if (m.unavailable && m.unavailable.length) {
      td.appendChild(el("span", "note", "won't take now: " + m.unavailable.join(", ")));
    }
    return td;
  }

  function stateCell(m) {
    const td = el("td", "draining");
    td.appendChild(m.draining ? el("span", "warn", "draining") : el("span", "muted", "no"));
    if (m.frozen) td.appendChild(el("span", "note", "freezes moves (its configuration)"));
    return td;
  }

  function rolesCell(cls, roles, units, other, mark) {
    const td = el("td", cls);
    td.appendChild(el("div", null, countText(roles, units)));
    if (roles.length) td.appendChild(roleChips(roles, other, mark));
    return td;
  }

  function memberRow(m, isMe) {
    const tr = el("tr");
    tr.dataset.member = m.id;
    const planned = m.planned || [], held = m.held || [];
    const differs = planned.length !== held.length || planned.some((r) => !held.includes(r));
    tr.dataset.differs = String(differs);
    if (differs) tr.classList.add("differs");
    if (isMe) tr.classList.add("me");
    tr.appendChild(memberCell(m, isMe));
    tr.appendChild(el("td", "zone", m.zone ?? "—"));
    tr.appendChild(el("td", "num", String(m.weight)));
    tr.appendChild(el("td", "limits", limitsText(m)));
    tr.appendChild(el("td", "version", m.version ?? "—"));
    tr.appendChild(healthCell(m));
    tr.appendChild(stateCell(m));
    tr.appendChild(rolesCell("planned", planned, m.planned_units, held, "missing"));
    tr.appendChild(rolesCell("held", held, m.held_units, planned, "extra"));
    return tr;
  }

  // One sentence on why voluntary moves are frozen (docs/placement.md), or null.
  function frozenText(f) {
    if (!f) return null;
    switch (f.cause) {
      case "operator":
        return "Voluntary moves are frozen by an operator: " +
          (f.reason ? "“" + f.reason + "”" : "no reason given") +
          " (by " + (f.by || "?") + (f.at ? " at " + clock(f.at) : "") + ").";
      case "member":
        return "Voluntary moves are frozen by the configuration of " + (f.members || []).join(", ") + ".";
      case "storm":
        return "Voluntary moves are frozen by the storm breaker: " + f.vanished + " of " + f.of +
          " members vanished; stable again in " + dur(f.stable_in_ms) + " if membership stays unchanged.";
      default:
        return "Voluntary moves are frozen (" + String(f.cause) + ").";
    }
  }

  function renderFrozen(f) {
    const box = $("frozen");
    const text = frozenText(f);
    box.hidden = text === null;
    box.dataset.cause = f ? String(f.cause) : "";
    box.textContent = text || "";
    if (text) box.appendChild(el("span", "muted detail", "Vacant roles are still taken."));
  }

  function renderDisagreements(list) {
    const ul = $("disagreement-list");
    ul.textContent = "";
    for (const d of list || []) ul.appendChild(el("li", null, d));
    $("disagreements").hidden = ul.children.length === 0;
  }

  function renderMembers(list) {
    const members = list.members || [];
    const body = $("members");
    body.textContent = "";
    for (const m of members) body.appendChild(memberRow(m, m.id === list.instance));
    const off = list.placement === false;
    $("members-table").hidden = off || members.length === 0;
    $("no-members").hidden = !off;
    renderFrozen(list.frozen);
    renderDisagreements(list.disagreements);
  }

  // ---- Admin actions: the token is typed in, kept in sessionStorage, sent as a header ---------

  const TOKEN_KEY = "nats-roles.admin-token";

  function storedToken() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return ""; }
  }

  function storeToken(token) {
    try {
      if (token) sessionStorage.setItem(TOKEN_KEY, token); else sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* no storage: the token lives in the field only */ }
  }

  function token() {
    return $("admin-token").value.trim();
  }

  function adminButton(label, cls, onClick) {
    const b = el("button", "admin " + cls, label);
    b.type = "button";
    b.addEventListener("click", onClick);
    return b;
  }

  function updateRoleButtons(r) {
    const on = token() !== "";
    r.release.disabled = !on || !r.leader;
    r.release.title = r.leader ? "give this role up on this instance" : "this instance does not hold the role";
    r.evict.disabled = !on || r.term === null;
    r.evict.title = r.term === null ? "the role is vacant" : "delete the lease of term " + r.term;
  }

  // What the token field means right now, in words: whether this instance takes admin
  // actions at all (its hello says), and whether a token was typed (it is checked only when an
  // action is sent: a refusal says so).
  let tokenRefused = false;
  function tokenText(on) {
    if (adminConfigured === false) {
      return on
        ? "token typed, but this instance has no admin token configured: admin actions are off here"
        : "admin actions are off on this instance (no admin token configured)";
    }
    if (!on) return "no token typed: type the admin token to enable the admin actions";
    if (tokenRefused) return "the token typed was refused (401): check it";
    return "token typed for this tab; checked when you confirm an action (sent only then)";
  }

  function updateAdmin() {
    const on = token() !== "";
    document.body.dataset.admin = String(on);
    for (const b of document.querySelectorAll("#admin button.admin")) b.disabled = !on;
    for (const r of rows.values()) updateRoleButtons(r);
    $("forget-token").disabled = !on;
    const state = $("token-state");
    state.textContent = tokenText(on);
    state.className = tokenRefused && on ? "bad" : "muted";
  }

  function showResult(ok, text) {
    const box = $("admin-result");
    box.hidden = false;
    box.className = "admin-result " + (ok ? "good" : "bad");
    box.dataset.ok = String(ok);
    box.textContent = "";
    box.appendChild(el("time", null, new Date().toLocaleTimeString()));
    box.appendChild(document.createTextNode(text));
  }

  // What a refusal means, in words: the server's message with its status and code.
  function errorText(action, status, body) {
    const message = body && typeof body.error === "string" ? body.error.replace(/\.$/, "") : "no explanation";
    const code = body && typeof body.code === "string" ? body.code : "error";
    let hint = "";
    if (status === 401) hint = " Check the admin token.";
    else if (status === 403) hint = " This instance has no admin token configured.";
    else if (code === "placement_disabled") hint = " Placement is off on this instance.";
    return action + " failed: " + status + " " + code + ": " + message + "." + hint;
  }

  // POSTs `body` (JSON, or nothing) to `path` with the token; shows the outcome (`done` turns
  // the answer into a sentence) and refreshes the page's views.
  async function post(action, path, body, done) {
    const headers = { Authorization: "Bearer " + token() };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    try {
      const res = await fetch(path, {
        method: "POST",
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
        credentials: "omit",
      });
      let answer = null;
      try { answer = await res.json(); } catch (e) { answer = null; }
      if (res.ok) showResult(true, done(answer || {}, res.status));
      else showResult(false, errorText(action, res.status, answer));
      if (res.status === 401 || res.ok) { tokenRefused = res.status === 401; updateAdmin(); }
    } catch (e) {
      showResult(false, action + " failed: the request did not get through (" + e.message + ").");
    }
    refresh();
  }

  function releaseRole(role) {
    const cooldown = $("release-cooldown").value.trim();
    const r = rows.get(role);
    const ask = "Release role " + role + " (term " + (r ? r.term : "?") + ") on " + here() + "?\n\n" + here() +
      " hands it over and stays away for " + (cooldown || "its configured cooldown") + ".";
    if (!window.confirm(ask)) return;
    post("release " + role, "api/roles/" + encodeURIComponent(role) + "/release",
      cooldown ? { cooldown } : undefined,
      (a, status) => (status === 202 ? "releasing " : "released ") + a.role + " (term " + a.term + ") on " +
        a.instance + "; it stays away for " + dur(a.cooldown_ms) + "." +
        (status === 202 ? " It is still finishing its work." : ""));
  }

  function evictRole(role) {
    const r = rows.get(role);
    if (!r || r.term === null) return;
    const term = r.term;
    const ask = "Evict role " + role + ", term " + term + " (held by " + (r.holder || "a foreign value") + ")?\n\n" +
      "Its lease is deleted: the holder loses the role and the candidates campaign again. " +
      "Nothing happens if the role is no longer in term " + term + ".";
    if (!window.confirm(ask)) return;
    post("evict " + role, "api/roles/" + encodeURIComponent(role) + "/evict", { term },
      (a) => "evicted " + a.role + ": term " + (a.term ?? "?") + " of " + (a.holder || "a foreign value") + ".");
  }

  function drain(draining) {
    const ask = draining
      ? "Drain " + here() + "?\n\nPlacement hands every role of " + here() +
        " over to other members and gives it none until it is undrained."
      : "Undrain " + here() + "?\n\nPlacement may give it roles again.";
    if (!window.confirm(ask)) return;
    post(draining ? "drain" : "undrain", "api/drain", { draining },
      (a) => a.instance + (a.draining ? " is draining." : " is no longer draining."));
  }

  function freeze(frozen) {
    const reason = $("freeze-reason").value.trim();
    const ask = frozen
      ? "Freeze voluntary placement moves on every instance" + (reason ? " (reason: " + reason + ")" : "") +
        "?\n\nVacant roles are still taken."
      : "Unfreeze voluntary placement moves on every instance?\n\nThis lifts an operator's freeze; " +
        "a member's configuration or the storm breaker keep theirs.";
    if (!window.confirm(ask)) return;
    const body = frozen && reason ? { frozen, reason } : { frozen };
    post(frozen ? "freeze" : "unfreeze", "api/placement/freeze", body,
      (a) => a.frozen ? "placement frozen" + (a.reason ? ": " + a.reason : "") + "."
        : "placement unfrozen: the operator's freeze is lifted.");
  }

  function setupAdmin() {
    const input = $("admin-token");
    input.value = storedToken();
    const changed = () => { tokenRefused = false; storeToken(token()); updateAdmin(); };
    input.addEventListener("input", changed);
    input.addEventListener("change", changed);
    $("forget-token").addEventListener("click", () => {
      input.value = "";
      tokenRefused = false;
      storeToken("");
      updateAdmin();
    });
    $("freeze").addEventListener("click", () => freeze(true));
    $("unfreeze").addEventListener("click", () => freeze(false));
    $("drain").addEventListener("click", () => drain(true));
    $("undrain").addEventListener("click", () => drain(false));
    updateAdmin();
  }

  let refreshing = false, again = false;
  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    try {
      const [roles, instances, ready, members] = await Promise.all([
        fetch("api/roles").then((r) => r.json()),
        fetch("api/instances").then((r) => r.json()),
        fetch("readyz").then((r) => r.json()),
        // An older instance has no members view: the rest of the page still works.
        fetch("api/members").then((r) => (r.ok ? r.json() : null)).catch(() => null),
      ]);
      renderRoles(roles);
      renderInstances(instances);
      if (members) renderMembers(members);
      const pill = $("ready");
      pill.textContent = ready.status === "ready" ? "ready" : "not ready";
      pill.className = "pill " + (ready.status === "ready" ? "good" : "bad");
      pill.title = (ready.reasons || []).join("\n");
    } catch (e) {
      $("ready").textContent = "unreachable";
      $("ready").className = "pill bad";
    } finally {
      refreshing = false;
      if (again) { again = false; refresh(); }
    }
  }

  // ---- Transitions: the instance's journal (GET /api/events?since=N), then the live stream ---

  const LOG_MAX = 300;
  const logged = new Set(); // seq of every line shown
  let journalCursor = null;  // newest seq read from the journal or the stream

  // One line of the transitions log, kept in seq order (newest first); lines without a seq
  // (none today) go on top. The same event from the journal and the stream is shown once.
  function log(text, cls, at, seq) {
    if (seq !== undefined && seq !== null) {
      if (logged.has(seq)) return;
      logged.add(seq);
      if (journalCursor === null || seq > journalCursor) journalCursor = seq;
    }
    const li = el("li", cls);
    if (seq !== undefined && seq !== null) li.dataset.seq = String(seq);
    li.appendChild(el("time", null, clock(at)));
    li.appendChild(document.createTextNode(text));
    const ol = $("log");
    let before = ol.firstChild;
    if (seq !== undefined && seq !== null) {
      while (before && before.dataset.seq && Number(before.dataset.seq) > seq) before = before.nextSibling;
    }
    ol.insertBefore(li, before);
    while (ol.children.length > LOG_MAX) {
      const last = ol.lastChild;
      if (last.dataset.seq) logged.delete(Number(last.dataset.seq));
      ol.removeChild(last);
    }
    $("no-log").hidden = true;
  }

  // The log line of an event: [text, class], or null for events that are no transition.
  function describe(ev) {
    switch (ev.type) {
      case "holder":
        if (ev.handover) {
          return [ev.role + ": handed over from " + ev.previous + " to " + ev.holder + " (term " + ev.term + ")", "handover"];
        }
        return [ev.role + ": " + (ev.holder || "a foreign value") + " holds it (term " + ev.term + ")", ""];
      case "vacant":
        return [ev.role + ": vacant" + (ev.previous ? " (was " + ev.previous + ")" : ""), ""];
      case "promoted":
        return [ev.role + ": " + ev.instance + " (this instance) promoted, term " + ev.term, ""];
      case "demoted":
        return [ev.role + ": " + ev.instance + " (this instance) demoted, term " + ev.term + ", " + ev.reason +
          (ev.reason === "placement" ? " (a placement move)" : ""), ""];
      case "duplicate_instance":
        return [ev.role + ": another live process uses the id " + ev.instance + "!", "handover"];
      case "failed":
        return [ev.role + ": failed: " + ev.error, "handover"];
      case "recovered":
        return [ev.role + ": recovered", ""];
      case "frozen":
        return ["placement frozen (" + ev.cause + "): " + ev.detail, "handover"];
      case "unfrozen":
        return ["placement unfrozen", ""];
      case "resync":
        return ["(" + ev.missed + " events missed by this instance's journal)", "muted"];
      case "group":
        return ["group " + ev.group + ": this instance acts on " + ev.count + " members and holds " +
          ev.held.length + (ev.held.length ? " (" + ev.held.join(", ") + ")" : ""), "muted"];
      default:
        return null;
    }
  }

  function logEvent(ev) {
    const line = describe(ev);
    if (line) log(line[0], line[1], ev.at, ev.seq);
  }

  // Reads the journal after `since` (the transitions before the page opened, or those a slow
  // stream dropped) into the log.
  let journalLoading = false;
  async function loadJournal(since) {
    if (journalLoading) return;
    journalLoading = true;
    try {
      const res = await fetch("api/events?since=" + since, { cache: "no-store" });
      if (!res.ok) return;
      const page = await res.json();
      for (const ev of page.events || []) logEvent(ev);
      const box = $("log-truncated");
      box.hidden = !page.truncated;
      if (page.truncated) {
        box.textContent = "Older transitions are no longer kept (this instance keeps the last " +
          page.capacity + ").";
      }
    } catch (e) {
      /* the stream still works; the next hello retries */
    } finally {
      journalLoading = false;
    }
  }

  function flash(role) {
    const r = rows.get(role);
    if (!r) return;
    // A member of a collapsed group flashes its group's row.
    const g = r.group && !expanded.has(r.group) ? groupRows.get(r.group) : null;
    const tr = g ? g.tr : r.tr;
    tr.classList.remove("flash");
    void tr.offsetWidth; // restart the animation
    tr.classList.add("flash");
  }

  function onEvent(ev) {
    switch (ev.type) {
      case "hello":
        $("instance").textContent = ev.instance || "";
        $("bucket").textContent = ev.bucket;
        if (typeof ev.admin === "boolean") { adminConfigured = ev.admin; updateAdmin(); }
        // Everything up to the stream's cursor is in the journal; the stream brings the rest.
        loadJournal(journalCursor === null ? 0 : journalCursor);
        break;
      case "holder": {
        const r = row(ev.role);
        if (ev.handover) {
          const text = "handed over from " + ev.previous + " to " + ev.holder;
          notes.set(ev.role, { text, until: Date.now() + NOTE_MS });
        }
        logEvent(ev);
        setHolder(r, ev.holder, null, ev.holder ? "held" : "foreign");
        setTerm(r, ev.term);
        r.cells.token.textContent = ev.token ?? "";
        if (!r.tr.parentNode && !(r.group && !expanded.has(r.group))) $("roles").appendChild(r.tr);
        flash(ev.role);
        refresh();
        break;
      }
      case "vacant": {
        const r = row(ev.role);
        setHolder(r, null, null, "vacant");
        setTerm(r, null);
        r.cells.token.textContent = "";
        logEvent(ev);
        flash(ev.role);
        refresh();
        break;
      }
      case "frozen":
      case "unfrozen":
        logEvent(ev);
        refresh();
        break;
      case "resync":
        // This stream fell behind the journal: re-read it and the lists.
        loadJournal(journalCursor === null ? 0 : journalCursor);
        refresh();
        break;
      default:
        logEvent(ev);
        break;
    }
  }

  function connect() {
    const es = new EventSource("api/events");
    es.onopen = () => {
      $("live").textContent = "live";
      $("live").className = "pill good";
      document.body.dataset.live = "true";
      refresh();
    };
    es.onerror = () => {
      $("live").textContent = "reconnecting";
      $("live").className = "pill bad";
      document.body.dataset.live = "false";
    };
    es.onmessage = (m) => {
      try { onEvent(JSON.parse(m.data)); } catch (e) { /* ignore malformed events */ }
    };
  }

  setupAdmin();
  refresh();
  connect();
  // Renewal ages move with every heartbeat: re-read the list every second while visible.
  setInterval(() => { if (!document.hidden) refresh(); }, 1000);
})();
