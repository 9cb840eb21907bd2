//! Leader work in any language (binary, cargo feature `cli`; docs/exec.md): a role's `exec`
//! command runs while this instance holds the role, under a watchdog process that kills its
//! whole process group before the holder's local deadline — even when the manager is stopped
//! or gone — and hooks run on the role's transitions.
//!
//! * [`watchdog`] — the watchdog process (`nats-roles watchdog`, hidden);
//! * [`wire`] — the lines the manager and a watchdog exchange;
//! * [`child`] — the manager's side of one watched child;
//! * [`lock`] — the role lock a restarted manager's child waits for;
//! * [`metrics`] — runs, restarts and running commands;
//! * [`one_shot`] — whether `nats-roles exec`'s command starts or `exec` gave up waiting;
//! * [`seams`] — test-only seams (cargo feature `negative-controls`);
//! * [`slots`] — the callbacks of a role with slots: one set of processes per slot;
//! * [`supervisor`] — the role callbacks that run hooks and children term by term.

pub(crate) mod child;
pub(crate) mod lock;
pub(crate) mod metrics;
pub(crate) mod one_shot;
pub(crate) mod seams;
pub(crate) mod slots;
pub(crate) mod supervisor;
pub(crate) mod watchdog;
pub(crate) mod wire;
