//! Deterministic simulation and property tests of the election core.
//!
//! One role, 2–6 [`RoleMachine`](crate::core::machine::RoleMachine)s and an in-memory model
//! of the role's JetStream KV key (`history: 1`, per-message TTL with expiry markers, CAS on
//! the last subject sequence). The simulation owns time: watcher deliveries, write
//! applications and acknowledgements, reads, expiries, timers and faults run in server-time
//! order from one RNG seeded by the [`scenario::Scenario`], so a failing case reproduces from
//! the scenario proptest prints.
//!
//! Faults: lost and very late watcher events, writes that commit after their timeout reported
//! `Unknown`, lost acknowledgements, spurious 10164 rejections (`Retry`), stale reads (a lagging
//! replica), failed reads and writes, crashes, restarts and reboots (same instance id, new
//! incarnation: restart adoption), pauses longer than the TTL (GC), connection flaps with
//! watcher resync and replay, releases, stops, slow drains, buckets without per-message TTLs
//! (fail-over by the observed-expiry backstop only), and clock drift: holders up to
//! 0.9 × margin slow (P4), followers up to 0.9 × heartbeat / TTL fast (the backstop needs
//! follower clocks faster than server time by less than heartbeat / TTL; P4 does not say so).
//!
//! [`check::check`] turns a [`trace::Trace`] into a list of [`check::Violation`]s, named with
//! the one list of IDs, [`crate::history::Invariant`], as in `docs/reliability.md` (S1, L2 and L3 do not apply: the model has no fenced writes, and
//! fail-over figures and steady-state windows are the real-server checker's):
//!
//! * **S2** promote terms strictly increase across all machines, in promote order.
//! * **S3** one holder per revision: a promote's revision is a put this machine's acquire
//!   stored, carrying the term's nonce (term = revision); a renewal's revision is this term's
//!   put.
//! * **S4** acting intervals of different machines never overlap. A machine acts for a term
//!   from its `Promote` until the earliest of its `Demote`, its crash and the term's deadline
//!   (as extended by `Renewed`), converted to server time with the machine's clock. Seen on
//!   the key: while a machine acts, the key holds that term's put and nothing else is stored.
//! * **S5** a leading machine's timer is due no later than its deadline, the timer firing at or
//!   after the deadline demotes the term, and no renewal is reported after it.
//! * **S6** per machine: `(Promote Renewed* Demote)*` with matching terms; no promote after
//!   `Stopped`.
//! * **L1** (fault-free runs) no stretch without an acting holder lasts longer than the
//!   fail-over bound (TTL + slack; without TTLs, TTL + heartbeat on the slowest clock + slack)
//!   after its start or the last fault in it, and a stop finishes promptly. In every run, what
//!   progress needs locally: after a timer fired, `poll_timeout()` is in the future (still due
//!   is a busy loop in a real driver), and a campaigning machine that is not stopped and has no
//!   operation in flight has a timer (otherwise it waits for events that may never come); a
//!   run that never ends (more events than the limit: livelock) is an L1 violation too.
//!
//! Negative controls run deliberately broken variants (a KV without CAS, a KV that drops the
//! TTL of renewals, a harness without local deadlines) and require the checker to notice. A
//! coverage test makes sure the fault runs reach the interesting paths (backstop takeovers,
//! adoption, own-write reclaim, late commits, each demote reason). Single-machine regression
//! tests pin the machine bugs the simulation found.
//!
//! To debug a failure, paste the printed `Scenario` into [`props::replay`] (or set
//! `SIM_WINDOW_MS` to widen the trace printed with the failure). `PROPTEST_CASES` sets the
//! number of cases.
//!
//! The parts, in the order a run uses them: [`clock`] (server time, the nodes' drifting
//! clocks), [`rng`] (the one random source), [`kv`] (the model of the role's key),
//! [`scenario`] (what a run depends on), [`trace`] (what a run records), [`world`] (the
//! simulated world that runs a scenario), [`check`] (the invariants), [`render`] (traces for
//! humans); the tests: [`strategy`] (random scenarios), [`props`] (the properties and
//! `replay`), [`controls`] (negative controls), [`coverage`] (the paths the fault runs must
//! reach), [`cases`] (regression tests of single machines).

mod check;
mod clock;
mod kv;
mod render;
mod rng;
mod scenario;
mod trace;
mod world;

mod cases;
mod controls;
mod coverage;
mod props;
mod strategy;
