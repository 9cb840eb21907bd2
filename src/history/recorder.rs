//! [`HistoryRecorder`]: writes a node's history as JSON lines, off the role runners.
//!
//! Events go through a bounded queue to a writer thread that flushes at least every 50 ms and
//! when the recorder stops or its last handle is dropped. Recording never blocks: when the
//! queue is full the event is counted as dropped, and the count is written as a `dropped`
//! event (the checker then treats the node's history as incomplete).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::time::Instant;

use super::clock::{MonoMap, faketime_rate, mono_now_ns, real_mono_now_ns};
use super::event::{Event, OpKind, OpResult, Record};
use crate::core::{WriteKind, WriteOutcome};
use crate::leadership::Leadership;
use crate::names::{InstanceId, RoleName};
use crate::tap::{FencedRefusal, TapEvent, TapSink};

/// Events queued before new ones are dropped (and counted).
pub const QUEUE_CAPACITY: usize = 65_536;

/// Records one node's history to a JSON-lines file (format: `docs/reliability.md`).
///
/// Cheap to clone. Register it with
/// [`RoleManagerBuilder::history`](crate::RoleManagerBuilder::history); a manager without a
/// recorder pays nothing. The workload reports its leader-only work with
/// [`HistoryRecorder::act`]; call [`HistoryRecorder::stop`] after the manager shut down.
#[derive(Clone)]
pub struct HistoryRecorder {
    inner: Arc<Inner>,
}

struct Inner {
    node: String,
    /// This recorder's incarnation (`inc` of its records).
    inc: String,
    path: PathBuf,
    map: MonoMap,
    tx: Mutex<Option<SyncSender<String>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    dropped: AtomicU64,
    /// Write id of the last `act` per role (pairs the following fenced write with it).
    last_act: Mutex<HashMap<RoleName, u64>>,
}

impl std::fmt::Debug for HistoryRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryRecorder")
            .field("node", &self.inner.node)
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl HistoryRecorder {
    /// Appends the history of `node` to the file at `path` (created if missing; a restarted
    /// node appends a new `start`).
    ///
    /// # Errors
    /// The file cannot be opened, or the writer thread cannot be started.
    pub fn create(path: impl AsRef<Path>, node: &InstanceId) -> std::io::Result<Self> {
        Self::with_queue(path.as_ref(), node, QUEUE_CAPACITY, None)
    }

    /// A recorder whose queue holds `capacity` events; with `gate`, the writer starts
    /// consuming only once the gate receives (tests use it to fill the queue).
    fn with_queue(
        path: &Path,
        node: &InstanceId,
        capacity: usize,
        gate: Option<mpsc::Receiver<()>>,
    ) -> std::io::Result<Self> {
        let path = path.to_path_buf();
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        end_partial_line(&mut file)?;
        let (tx, rx) = mpsc::sync_channel::<String>(capacity);
        let writer = std::thread::Builder::new()
            .name(format!("history-{node}"))
            .spawn(move || {
                if let Some(gate) = gate {
                    let _ = gate.recv();
                }
                write_loop(&rx, file);
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                node: node.to_string(),
                inc: format!("{:016x}", rand::random::<u64>()),
                path,
                map: MonoMap::now(),
                tx: Mutex::new(Some(tx)),
                writer: Mutex::new(Some(writer)),
                dropped: AtomicU64::new(0),
                last_act: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Records `<dir>/<node>.jsonl`, the file name the checker expects for a node.
    ///
    /// # Errors
    /// As [`HistoryRecorder::create`].
    pub fn in_dir(dir: impl AsRef<Path>, node: &InstanceId) -> std::io::Result<Self> {
        Self::create(dir.as_ref().join(format!("{node}.jsonl")), node)
    }

    /// The file written.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The incarnation of the recording process: a random id, new for every recorder, written
    /// as `inc` on each of its records (and by the watchdogs of the process's `exec` children
    /// on theirs), so that the checker tells two processes with one instance id apart.
    #[must_use]
    pub fn incarnation(&self) -> &str {
        &self.inner.inc
    }

    /// Events dropped so far because the queue was full.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }

    /// Records the node's `start` (the roles it campaigns for, its clock rate under
    /// `faketime`). Call it once, before starting the manager.
    pub fn start(&self, roles: &[RoleName]) {
        let event = Event::Start {
            roles: roles.iter().map(ToString::to_string).collect(),
            clock_rate: faketime_rate(),
            real_mono_ns: Some(real_mono_now_ns()),
        };
        self.push(self.record(mono_now_ns(), None, event));
    }

    /// Records that the workload is about to act as leader of `leadership`'s role with write
    /// `write_id`, if the term is still valid; returns whether it is (act only then). The next
    /// fenced write of that role is recorded with this write id.
    pub fn act(&self, leadership: &Leadership, write_id: u64) -> bool {
        // Stamped before the check: a demote (stamped after the term's cancellation) or the
        // deadline can then only come after this stamp if the check passes.
        let stamp = mono_now_ns();
        if !leadership.is_valid() {
            return false;
        }
        let role = leadership.role();
        if let Ok(mut m) = self.inner.last_act.lock() {
            m.insert(role.clone(), write_id);
        }
        let token = leadership.token();
        self.push(self.record(
            stamp,
            Some(role.as_str()),
            Event::Act {
                epoch: token.epoch(),
                term: token.term(),
                write_id,
            },
        ));
        true
    }

    /// Records a clean exit (`dropped` first if events were lost), flushes and closes the
    /// file. Call it after the manager's shutdown returned. Later events are ignored.
    pub fn stop(&self) {
        let dropped = self.dropped();
        if dropped > 0 {
            let rec = self.record(mono_now_ns(), None, Event::Dropped { count: dropped });
            self.push_blocking(rec.to_line());
        }
        let rec = self.record(mono_now_ns(), None, Event::Stop);
        self.push_blocking(rec.to_line());
        self.close();
    }

    /// Flushes and closes the file without a `stop` (as if the process crashed).
    pub fn close(&self) {
        if let Ok(mut tx) = self.inner.tx.lock() {
            tx.take();
        }
        let writer = self.inner.writer.lock().ok().and_then(|mut w| w.take());
        if let Some(w) = writer {
            let _ = w.join();
        }
    }

    fn push(&self, record: Record) {
        let line = record.to_line();
        let sent = match self.inner.tx.lock() {
            Ok(tx) => match tx.as_ref() {
                Some(tx) => match tx.try_send(line) {
                    Ok(()) => true,
                    Err(TrySendError::Full(_)) => false,
                    Err(TrySendError::Disconnected(_)) => true,
                },
                None => true,
            },
            Err(_) => false,
        };
        if !sent {
            self.inner.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn push_blocking(&self, line: String) {
        let tx = self.inner.tx.lock().ok().and_then(|tx| tx.clone());
        if let Some(tx) = tx {
            let _ = tx.send(line);
        }
    }

    /// A record of `role` stamped now. Tap events are reported as they happen, so the clock
    /// is read directly (like `act`) rather than mapped from the tap's `Instant`: every record
    /// of a node then comes from one clock read path and their order is exact. Only deadlines
    /// go through the `Instant` map.
    fn node_record(&self, role: &RoleName, event: Event) -> Record {
        self.record(mono_now_ns(), Some(role.as_str()), event)
    }

    /// A record of this node and incarnation.
    fn record(&self, mono_ns: u64, role: Option<&str>, event: Event) -> Record {
        Record::node(mono_ns, &self.inner.node, role, event).with_inc(Some(self.inner.inc.clone()))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        if let Some(w) = self.writer.get_mut().ok().and_then(Option::take) {
            let _ = w.join();
        }
    }
}

/// Ends a partial last line (left by a killed predecessor) so that the next record starts on
/// a line of its own.
fn end_partial_line(file: &mut File) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    if file.metadata()?.len() == 0 {
        return Ok(());
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    if last[0] != b'\n' {
        file.write_all(b"\n")?;
    }
    Ok(())
}

fn write_loop(rx: &mpsc::Receiver<String>, file: File) {
    let mut out = BufWriter::new(file);
    // Every line that arrived is written and flushed as soon as the queue is empty (a burst is
    // written in one go): a process killed with SIGKILL loses only what it had not queued yet,
    // not a batch of its last events (its `exec` children's records, which their watchdogs
    // write at once, would otherwise seem to have no term).
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(mut line) = next.take() {
            // One write per line: the buffer is flushed at line boundaries only, so the lines
            // a role's watchdog process appends to the same file (`exec` roles) never land
            // inside one of ours.
            line.push('\n');
            let _ = out.write_all(line.as_bytes());
            next = rx.try_recv().ok();
        }
        let _ = out.flush();
    }
    let _ = out.flush();
}

fn op_kind(kind: WriteKind) -> OpKind {
    match kind {
        WriteKind::Acquire => OpKind::Acquire,
        WriteKind::Renew => OpKind::Renew,
        WriteKind::Release => OpKind::Release,
    }
}

impl TapSink for HistoryRecorder {
    fn record(&self, _instance: &InstanceId, role: &RoleName, event: &TapEvent, _at: Instant) {
        let map = &self.inner.map;
        let ev = match event {
            TapEvent::WriteInvoked { op, kind, expected } => Event::Invoke {
                op: *op,
                kind: op_kind(*kind),
                expected: *expected,
            },
            TapEvent::WriteCompleted {
                op,
                kind,
                outcome,
                elapsed,
            } => {
                let (result, revision, error) = match outcome {
                    WriteOutcome::Ok { revision } => (OpResult::Ok, Some(*revision), None),
                    WriteOutcome::Conflict => (OpResult::Fail, None, Some("conflict".into())),
                    WriteOutcome::Retry => (OpResult::Fail, None, Some("retry".into())),
                    WriteOutcome::Unknown => (OpResult::Unknown, None, None),
                    WriteOutcome::Failed(k) => (OpResult::Fail, None, Some(k.as_str().into())),
                };
                Event::Complete {
                    op: *op,
                    kind: op_kind(*kind),
                    result,
                    revision,
                    error,
                    elapsed_us: Some(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)),
                }
            }
            TapEvent::Promoted {
                token, deadline, ..
            } => Event::Promote {
                epoch: token.epoch(),
                term: token.term(),
                deadline_ns: map.ns(*deadline),
            },
            TapEvent::Renewed {
                token, deadline, ..
            } => Event::Renew {
                epoch: token.epoch(),
                term: token.term(),
                deadline_ns: map.ns(*deadline),
            },
            TapEvent::Demoted {
                token,
                reason,
                held,
            } => Event::Demote {
                epoch: token.epoch(),
                term: token.term(),
                reason: reason.as_str().to_string(),
                held_ms: Some(u64::try_from(held.as_millis()).unwrap_or(u64::MAX)),
            },
            TapEvent::FencedWrite { token, key, stored } => {
                let write_id = self
                    .inner
                    .last_act
                    .lock()
                    .ok()
                    .and_then(|m| m.get(role).copied())
                    .unwrap_or(0);
                let (accepted, unknown, revision, error) = match stored {
                    Ok(rev) => (true, false, Some(*rev), None),
                    Err(FencedRefusal::Unknown) => (false, true, None, None),
                    Err(FencedRefusal::Fenced) => (false, false, None, Some("fenced".into())),
                    Err(FencedRefusal::Failed(k)) => (false, false, None, Some(k.as_str().into())),
                };
                Event::FencedWrite {
                    epoch: token.epoch(),
                    term: token.term(),
                    write_id,
                    accepted,
                    unknown,
                    revision,
                    error,
                    key: Some(key.clone()),
                }
            }
            TapEvent::StateChanged { from, to, reason } => Event::State {
                from: from.as_str().to_string(),
                to: to.as_str().to_string(),
                reason: reason.map(|r| r.as_str().to_string()),
            },
            TapEvent::Failed(kind) => Event::Failed {
                error: kind.to_string(),
            },
            // Not judged by the checker (a recovery shows in the writes that follow).
            TapEvent::Recovered | TapEvent::VacancyEnded { .. } => return,
            // Not part of the history format: the checker judges terms and writes, and a lost
            // connection shows in their outcomes.
            TapEvent::Connection(_) => return,
        };
        self.push(self.node_record(role, ev));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::DemoteReason;
    use crate::history::load::{Loaded, parse_into};
    use crate::token::FencingToken;
    use std::time::Duration;

    fn read(path: &Path) -> Vec<Record> {
        let text = std::fs::read_to_string(path).expect("history file");
        let mut out = Loaded::default();
        parse_into(path, &text, &mut out).expect("parses");
        out.records
    }

    #[tokio::test]
    async fn tap_events_become_lines_flushed_within_the_interval_and_stop_closes_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let node = InstanceId::new("n1").expect("valid");
        let role = RoleName::new("r0").expect("valid");
        let rec = HistoryRecorder::in_dir(dir.path(), &node).expect("recorder");
        rec.start(std::slice::from_ref(&role));
        let token = FencingToken::new(7, 42, uuid::Uuid::new_v4());
        let now = Instant::now();
        let sink: &dyn TapSink = &rec;
        sink.record(
            &node,
            &role,
            &TapEvent::WriteInvoked {
                op: 1,
                kind: WriteKind::Acquire,
                expected: 0,
            },
            now,
        );
        sink.record(
            &node,
            &role,
            &TapEvent::WriteCompleted {
                op: 1,
                kind: WriteKind::Acquire,
                outcome: WriteOutcome::Ok { revision: 42 },
                elapsed: Duration::from_millis(1),
            },
            now,
        );
        sink.record(
            &node,
            &role,
            &TapEvent::Promoted {
                token,
                deadline: now + Duration::from_millis(900),
                session: None,
            },
            now,
        );
        // Flushed without a stop within a few flush intervals.
        let path = dir.path().join("n1.jsonl");
        let mut lines = Vec::new();
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            lines = read(&path);
            if lines.len() == 4 {
                break;
            }
        }
        assert_eq!(lines.len(), 4, "{lines:?}");
        sink.record(
            &node,
            &role,
            &TapEvent::Demoted {
                token,
                reason: DemoteReason::Expired,
                held: Duration::from_millis(5),
            },
            now + Duration::from_millis(5),
        );
        rec.stop();
        // After the stop nothing more is written.
        sink.record(
            &node,
            &role,
            &TapEvent::Failed(crate::core::FailureKind::PayloadTooLarge),
            now,
        );
        let lines = read(&path);
        let evs: Vec<&Event> = lines.iter().map(|r| &r.event).collect();
        assert!(
            matches!(evs[0], Event::Start { roles, clock_rate, .. } if roles == &["r0".to_string()] && (*clock_rate - 1.0).abs() < 1e-9)
        );
        assert!(matches!(
            evs[1],
            Event::Invoke {
                op: 1,
                kind: OpKind::Acquire,
                expected: 0
            }
        ));
        assert!(matches!(
            evs[2],
            Event::Complete {
                result: OpResult::Ok,
                revision: Some(42),
                ..
            }
        ));
        let Event::Promote {
            epoch: 7,
            term: 42,
            deadline_ns,
        } = evs[3]
        else {
            panic!("promote expected: {evs:?}");
        };
        let promote_ns = lines[3].mono_ns;
        // The promote is stamped when recorded (a little after `now`): the deadline, mapped
        // from `now + 900 ms`, is at most 900 ms after it.
        let ahead = deadline_ns.saturating_sub(promote_ns);
        assert!(
            ahead <= 900_100_000 && ahead > 850_000_000,
            "deadline mapped on the same clock: {ahead} ns after the promote"
        );
        assert!(matches!(evs[4], Event::Demote { reason, .. } if reason == "expired"));
        assert!(matches!(evs[5], Event::Stop));
        assert_eq!(lines.len(), 6);
        assert!(
            !std::fs::read_to_string(&path)
                .expect("file")
                .contains(&token.nonce().to_string())
        );
        // A restarted node appends, after the partial line a killed process may leave.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(b"{\"mono_ns\":1,\"sr"))
            .expect("partial line");
        let again = HistoryRecorder::in_dir(dir.path(), &node).expect("recorder");
        again.start(&[]);
        again.close();
        let text = std::fs::read_to_string(&path).expect("file");
        let mut out = Loaded::default();
        assert!(
            parse_into(&path, &text, &mut out).expect("parses"),
            "truncation noted"
        );
        assert_eq!(out.records.len(), 7);
        assert!(matches!(out.records[6].event, Event::Start { .. }));
    }

    #[test]
    fn a_full_queue_drops_events_without_blocking_and_stop_reports_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let node = InstanceId::new("n2").expect("valid");
        let role = RoleName::new("r0").expect("valid");
        let path = dir.path().join("n2.jsonl");
        let (go, gate) = mpsc::channel();
        let rec = HistoryRecorder::with_queue(&path, &node, 4, Some(gate)).expect("recorder");
        let sink: &dyn TapSink = &rec;
        for op in 0..10 {
            sink.record(
                &node,
                &role,
                &TapEvent::WriteInvoked {
                    op,
                    kind: WriteKind::Renew,
                    expected: op,
                },
                Instant::now(),
            );
        }
        assert_eq!(rec.dropped(), 6);
        go.send(()).expect("writer waiting");
        rec.stop();
        let lines = read(&path);
        assert_eq!(lines.len(), 6, "{lines:?}");
        assert!(matches!(lines[4].event, Event::Dropped { count: 6 }));
        assert!(matches!(lines[5].event, Event::Stop));
    }
}
