//! The plumbing of liveness probes (a leaf): the answer channel, the probe inboxes of the tasks
//! that have none of their own (the watcher, the reaper), and [`answering`]. The probe itself
//! is `RoleManager::probe` (`liveness.rs`).

use std::future::Future;

use tokio::sync::{mpsc, oneshot};

/// The answer channel of one probe.
pub(crate) type Reply = oneshot::Sender<()>;

/// The probes one task without an inbox of its own receives (the watcher, the reaper).
pub(crate) type Inbox = mpsc::UnboundedReceiver<Reply>;

/// Where the manager sends the probes of its tasks that have no inbox of their own.
pub(crate) struct Probes {
    pub(crate) watcher: mpsc::UnboundedSender<Reply>,
    pub(crate) reaper: mpsc::UnboundedSender<Reply>,
}

/// The receiving ends of [`Probes`], handed to the tasks at start-up.
pub(crate) struct Inboxes {
    pub(crate) watcher: Inbox,
    pub(crate) reaper: Inbox,
}

impl Probes {
    /// The senders and the tasks' inboxes.
    pub(crate) fn new() -> (Self, Inboxes) {
        let (watcher, watcher_rx) = mpsc::unbounded_channel();
        let (reaper, reaper_rx) = mpsc::unbounded_channel();
        (
            Self { watcher, reaper },
            Inboxes {
                watcher: watcher_rx,
                reaper: reaper_rx,
            },
        )
    }
}

/// Awaits `fut`, answering the probes that arrive meanwhile: for the awaits of a task that
/// are bounded by a timeout of their own (a JetStream request, a backoff sleep), during which
/// the task is alive but not back in its loop.
pub(crate) async fn answering<F: Future>(probes: &mut Inbox, fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    loop {
        tokio::select! {
            biased;
            out = &mut fut => return out,
            Some(reply) = probes.recv() => {
                let _ = reply.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn answering_answers_probes_while_the_wait_runs_and_returns_its_output() {
        let (tx, mut inbox) = mpsc::unbounded_channel();
        let asked = tokio::spawn(async move {
            let mut answered = 0;
            for _ in 0..3 {
                let (reply, rx) = oneshot::channel();
                tx.send(reply).expect("send a probe");
                if tokio::time::timeout(Duration::from_millis(10), rx).await == Ok(Ok(())) {
                    answered += 1;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            answered
        });
        let out = answering(&mut inbox, async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            7
        })
        .await;
        assert_eq!(out, 7);
        assert_eq!(asked.await.expect("prober"), 3);
        // Without a sender the wait still completes.
        let (tx, mut closed) = mpsc::unbounded_channel::<Reply>();
        drop(tx);
        assert_eq!(answering(&mut closed, async { 8 }).await, 8);
    }
}
