//! [`Ticker`]: a periodic task's clock that stops with the manager.

use std::time::Duration;

use tokio::time::{Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// Ticks every period (the first at once) until cancelled.
pub(crate) struct Ticker {
    interval: Interval,
    cancel: CancellationToken,
}

impl Ticker {
    /// A ticker every `period`, handling missed ticks with `missed`.
    pub(crate) fn new(
        period: Duration,
        missed: MissedTickBehavior,
        cancel: CancellationToken,
    ) -> Self {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(missed);
        Self { interval, cancel }
    }

    /// Waits for the next tick; false once cancelled (cancellation wins over a due tick).
    pub(crate) async fn tick(&mut self) -> bool {
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => false,
            _ = self.interval.tick() => true,
        }
    }
}
