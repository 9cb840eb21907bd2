//! Deterministic simulation and property tests of the election core.
//!
//! 1–3 roles, 2–6 processes (instances), each with a
//! [`SessionMachine`](crate::core::SessionMachine), a watcher with a
//! [`SessionBook`](crate::core::SessionBook) and one
//! [`RoleMachine`](crate::core::machine::RoleMachine) per role, wired as the manager wires them,
//! and an in-memory model of the bucket: role keys, session keys and member records (`history:
//! 1`, per-message TTL with expiry markers, CAS on the last subject sequence, the bucket's
//! epoch). The
//! simulation owns time: watcher deliveries, write applications and acknowledgements, reads,
//! expiries, timers and faults run in server-time order from one RNG seeded by the
//! [`scenario::Scenario`], so a failing case reproduces from the scenario proptest prints.
//!
//! Faults: lost and very late watcher events, writes that commit after their timeout reported
//! `Unknown`, lost acknowledgements, spurious 10164 rejections (`Retry`), stale reads (a replica
//! that lags, for role and session keys alike), failed reads and writes, crashes, restarts and
//! reboots (same instance id, new incarnation: restart adoption), pauses longer than the TTL
//! (GC), connection flaps with watcher resync and replay, releases, stops, slow drains, buckets
//! without per-message TTLs (fail-over by reaps only), clock drift (holders up to 0.9 × margin
//! slow, P4; followers up to 0.9 × heartbeat / TTL fast, which the backstop needs), and those
//! of issue 24:
//!
//! * **markers that age out** (`subject_delete_marker_ttl`, 1–3 s): a server expiry marker is
//!   removed and the key has no entry at all; a watcher that gets to it late (a paused
//!   process) skips it. Client markers (releases, session ends, reaps) stay;
//! * **foreign session values**: another client writes a session value of an instance's id and
//!   another incarnation, without a TTL, into its key once the key holds no live session (the
//!   instance yields to it, then starts over it after the backstop period);
//! * **foreign role values**: another client writes, by CAS on a vacancy, a role value naming
//!   a live session of an instance that does not act on it (its own incarnation or another;
//!   an observer's session or a campaigner's);
//! * **refused role writes**: an instance's role-key writes fail with `permission_denied` for
//!   a while (its session writes work), alone or followed by a release (handed over through
//!   the session, Q5 rule 5);
//! * **deposed leaders**: an instance's reads are served as of a moment in the past and its
//!   watcher is silent, while its writes reach the new stream leader (a stream-leader change
//!   while a backstop read is in flight); every reap still goes through the leader's CAS;
//! * **bucket resets**: the bucket is deleted and recreated (no keys, revisions from 1, a new
//!   epoch), optionally with a fresh process started right after. Processes learn of it as the
//!   manager does: the session key went back (a `BucketReset` loss, then the session task
//!   waits up to 2 s for an epoch check), an epoch check before every session start, a
//!   revision below the high-water mark, a reconnect, or the watcher failing 5 s after its
//!   stream vanished; they then reset every role machine
//!   (`handle_bucket_reset` with the new bucket's age), the session book and the watcher. A
//!   process gets `handle_bucket_age` when it starts (a bucket may also be created when the
//!   run starts). The role runners' P6 rule is modelled too (an acquire's outcome is handed to
//!   the machine after `seed_high_water` with the process's bucket high-water mark when it was
//!   sent), and a bucket in use before the run starts at a realistic stream sequence; a run
//!   has at most one reset, of a bucket that was in use (`strategy::one_reset` says why).
//!
//! Protocol Q8 (successors instead of everyone) runs in every property: each process writes its
//! member record listing its live session when the session is announced (presence TTL
//! shortened to 4 × TTL so that it matters within a run; CAS on the revision it knows),
//! rewrites it every third of that TTL while the session lives, deletes it at a graceful stop,
//! and after another writer deleted or replaced it writes it again only after an acknowledged
//! renewal sent after it saw that (rule 6). Its session book is
//! [`SessionBook::following`](crate::core::SessionBook::following): the watcher delivers role
//! and member keys, and session keys only of the instances `wanted` names — a newly followed
//! instance through a consumer created a round trip later that delivers the key's last entry
//! first; an unfollowed one's entries no longer arrive. Every backstop tick the book's ended
//! members' records are deleted by CAS (rule 4) and the second tier reads the session keys of
//! the members it polls, once per backstop period, and deletes a record it judges ended
//! (rule 5). Q8's faults: a holder killed together with its successors, another client
//! deleting a member record or writing one listing a session that never existed (with
//! restarts and bucket resets from above). The replays of runs found before Q8 run in mode
//! `pre_q8` (no member records, every session key delivered), which keeps the random choices
//! they were captured with.
//!
//! [`check::check`] turns a [`trace::Trace`] into a list of [`violation::Violation`]s, named with
//! the one list of IDs, [`crate::history::Invariant`], as in `docs/reliability.md` (S1, L2 and L3 do not apply: the model has no fenced writes, and
//! fail-over figures and steady-state windows are the real-server checker's):
//!
//! * **S2** promote tokens `(epoch, term)` strictly increase across all machines, in promote
//!   order.
//! * **S3** one holder per revision: a promote's revision is a put this machine's acquire
//!   stored in the bucket whose epoch the token carries, carrying the term's nonce (term =
//!   revision); a renewal's revision is this term's put.
//! * **S4** acting intervals of different machines never overlap. A machine acts for a term
//!   from its `Promote` until the earliest of its `Demote`, its crash and the term's deadline
//!   (as extended by `Renewed`), converted to server time with the machine's clock (so across
//!   a bucket reset too). Seen on the key: while a machine acts, the key holds that term's put
//!   and nothing else is stored in that bucket.
//! * **S5** a leading machine's timer is due no later than its deadline, the timer firing at or
//!   after the deadline demotes the term, and no renewal is reported after it.
//! * **S6** per machine: `(Promote Renewed* Demote)*` with matching terms; no promote after
//!   `Stopped`.
//! * **S7** (runs with slots, protocol Q15: role 0 split into 2–3 slots on every process) per
//!   process and base role, the acting intervals of machines of two different slots never
//!   overlap. Each process drives its slots' permit as the manager's role driver does: after
//!   every step of a slot, the same [`SlotPermits`](crate::core::slot_permits::SlotPermits)
//!   decision on the siblings' views (`SlotView::of_machine`; a slot whose demote callback
//!   still runs claims), a slot given the permit woken at once.
//! * **L1** (fault-free runs) no stretch without an acting holder lasts longer than the
//!   fail-over bound (TTL + slack; without TTLs, TTL + heartbeat on the slowest clock + slack)
//!   after its start or the last fault in it (or the end of a pause, disconnect, deposed leader
//!   or write refusal), or than TTL + heartbeat on the slowest clock + slack after its bucket
//!   was created (no acquire in a young bucket, Q6), and a stop finishes promptly. Dedicated
//!   properties check it under their faults too: followers paused while markers age out (a
//!   backstop period after the resume), foreign role values and refused releases, bucket
//!   resets with paused or cut-off holders, a holder killed with its successors (within a TTL
//!   and a backstop period: the second tier). In every run, what progress needs locally: after a
//!   timer fired, `poll_timeout()` is in the future (still due is a busy loop in a real
//!   driver), and a campaigning machine that is not stopped and has no operation in flight has
//!   a timer (otherwise it waits for events that may never come); a run that never ends (more
//!   events than the limit: livelock) is an L1 violation too.
//!
//! Negative controls run deliberately broken variants (a KV without CAS, a KV that drops the
//! TTL of renewals, a harness without local deadlines, `ignore-session`, `renew-after-loss`, a
//! backstop that reads instead of reaping, a process that is not told the bucket's age, Q8
//! without its rules 4 and 5) and require the checker to notice. A coverage test makes sure
//! the fault runs reach the interesting paths (backstop takeovers, adoption, own-write
//! reclaim, late commits, each demote reason; reaps accepted, refused then learned, and on
//! revision 0 after a leader read found no entry; released terms taken over; a yield that ends
//! by writing over a stale value; a young-bucket hold; Q8's session entries not delivered to
//! non-followers, record deletes by a successor and by the second tier, orphans followed,
//! records removed by another client and written again). Single-machine regression tests pin
//! the machine bugs the simulation found.
//!
//! To debug a failure, paste the printed `Scenario` into [`props::replay`] (or set
//! `SIM_WINDOW_MS` to widen the trace printed with the failure). `PROPTEST_CASES` sets the
//! number of cases (1024 by default; the properties of one fault family run a quarter).
//!
//! The parts: [`clock`] (server time, the nodes' drifting clocks), [`rng`] (the one random
//! source), [`kv`] (the model of the bucket's keys), [`violation`] (a broken invariant),
//! [`trace`] (what a run records), [`check`] (the invariants), [`scenario`] (what a run
//! depends on, and which checks apply to it), [`world`] (the simulated world that runs a
//! scenario), [`render`] (traces for humans). Each uses only parts before it in this list: the
//! trace knows neither the world nor the checker, and the checker reads the trace, not the
//! world. The tests: [`strategy`] (random scenarios), [`props`] (the properties and `replay`),
//! [`controls`] (negative controls), [`coverage`] (the paths the fault runs must reach),
//! [`moves`] (targeted moves), [`cases`] (regression tests of single machines).

mod check;
mod clock;
mod kv;
mod render;
mod rng;
mod scenario;
mod trace;
mod violation;
mod world;

mod cases;
mod controls;
mod coverage;
mod moves;
mod props;
mod strategy;
