//! Start-up retries: the steps of a start ([`StartStep`]), where a start stands
//! ([`StartProgress`]), and the loop that retries a step while it fails for a reason that can
//! heal ([`StartRetry`]), logging each retry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{info, warn};

use crate::core::StartRetry;
use crate::core::backoff::SplitMix64;
use crate::core::fmt_duration;
use crate::error::Error;

/// Every failed attempt up to this one is logged; later ones at most once a minute.
const LOG_EVERY_ATTEMPT_UP_TO: u32 = 10;
/// The interval of WARN lines once a step has failed more than [`LOG_EVERY_ATTEMPT_UP_TO`]
/// times.
const LOG_INTERVAL: Duration = Duration::from_secs(60);

/// A step of a start-up that talks to NATS.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartStep {
    /// Connecting to NATS (`nats-roles run`; an embedding application hands the builder a
    /// connection).
    Connect,
    /// Opening the bucket (creating it with `auto_create`) and reading its stream's info:
    /// epoch, TTL mode, `max_age`.
    OpenBucket {
        /// The bucket.
        bucket: String,
    },
    /// Reading the keys of the roles this instance campaigns for from the stream leader
    /// (protocol Q10: a lease of another protocol version refuses the start).
    ReadRoleKeys {
        /// The bucket.
        bucket: String,
    },
    /// Creating, or reading from the stream leader, the slot count record
    /// (`control.slots.<role>`) of each role with slots this instance campaigns for
    /// (protocol Q15: another count refuses the start).
    CheckSlotCounts {
        /// The bucket.
        bucket: String,
    },
}

impl StartStep {
    /// What failed, as the start of a sentence that the error completes (`cannot open bucket
    /// "roles"`); empty for [`StartStep::Connect`], whose errors say so themselves.
    fn failed(&self) -> String {
        match self {
            Self::Connect => String::new(),
            Self::OpenBucket { bucket } => format!("cannot open bucket {bucket:?}: "),
            Self::ReadRoleKeys { bucket } => {
                format!("cannot read the role keys of bucket {bucket:?}: ")
            }
            Self::CheckSlotCounts { bucket } => {
                format!("cannot check the slot count records of bucket {bucket:?}: ")
            }
        }
    }
}

impl std::fmt::Display for StartStep {
    /// The step in progress: `connecting to NATS`, `opening bucket "roles"`, `reading the
    /// role keys of bucket "roles"`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect => f.write_str("connecting to NATS"),
            Self::OpenBucket { bucket } => write!(f, "opening bucket {bucket:?}"),
            Self::ReadRoleKeys { bucket } => {
                write!(f, "reading the role keys of bucket {bucket:?}")
            }
            Self::CheckSlotCounts { bucket } => {
                write!(f, "checking the slot count records of bucket {bucket:?}")
            }
        }
    }
}

/// Where a start-up stands: the step it is at and, once an attempt of that step failed, the
/// failure and when the next attempt starts
/// ([`RoleManagerBuilder::start_progress`](crate::RoleManagerBuilder::start_progress)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StartProgress {
    /// The step in progress.
    pub step: StartStep,
    /// Attempts of this step that failed so far (0 while the first one runs).
    pub failed_attempts: u32,
    /// The last failure (`None` while the first attempt runs).
    pub last_error: Option<Arc<Error>>,
    /// When the next attempt starts (`None` while the first attempt runs; in the past once the
    /// next attempt runs).
    pub retry_at: Option<Instant>,
    /// When the start-up began.
    pub since: Instant,
}

impl StartProgress {
    /// The first attempt of `step`.
    fn first(step: StartStep, since: Instant) -> Self {
        Self {
            step,
            failed_attempts: 0,
            last_error: None,
            retry_at: None,
            since,
        }
    }
}

impl std::fmt::Display for StartProgress {
    /// `opening bucket "roles"` while the first attempt runs; after a failure
    /// `cannot open bucket "roles": <error> (attempt 4), retrying in 2s`, and `…, retrying now`
    /// once the next attempt runs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(error) = &self.last_error else {
            return write!(f, "{}", self.step);
        };
        write!(
            f,
            "{}{error} (attempt {}), ",
            self.step.failed(),
            self.failed_attempts
        )?;
        let left = self.retry_at.map_or(Duration::ZERO, |at| {
            at.saturating_duration_since(Instant::now())
        });
        if left.is_zero() {
            f.write_str("retrying now")
        } else {
            // Whole tenths of a second, rounded up.
            let tenths = left.as_millis().div_ceil(100);
            let left = Duration::from_millis(u64::try_from(tenths * 100).unwrap_or(u64::MAX));
            write!(f, "retrying in {}", fmt_duration(left))
        }
    }
}

/// Runs the steps of one start-up under one [`StartRetry`], publishing its progress.
pub(crate) struct Starter<'a> {
    retry: StartRetry,
    progress: &'a watch::Sender<Option<StartProgress>>,
    /// On tokio's clock (the deadline), published on the standard one.
    since: tokio::time::Instant,
    rng: SplitMix64,
}

impl<'a> Starter<'a> {
    /// A start-up beginning now.
    pub(crate) fn new(
        retry: StartRetry,
        progress: &'a watch::Sender<Option<StartProgress>>,
    ) -> Self {
        Self {
            retry,
            progress,
            since: tokio::time::Instant::now(),
            rng: SplitMix64::new(rand::random()),
        }
    }

    /// Runs `attempt` until it succeeds, fails for a reason retrying cannot change
    /// ([`Error::is_transient`] false: returned as it is), or the deadline passes
    /// ([`Error::StartTimeout`]). `denied` completes with a description when the server
    /// reports a permission violation that makes the step impossible
    /// ([`Error::PermissionDenied`], at once).
    pub(crate) async fn run<T, F, Fut>(
        &mut self,
        step: StartStep,
        denied: &mut (impl Future<Output = String> + Unpin),
        mut attempt: F,
    ) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let since = self.since.into_std();
        self.progress
            .send_replace(Some(StartProgress::first(step.clone(), since)));
        let mut failed = 0u32;
        let mut last_log: Option<tokio::time::Instant> = None;
        let mut unlogged = 0u32;
        loop {
            let outcome = tokio::select! {
                outcome = attempt() => outcome,
                what = &mut *denied => Err(Error::PermissionDenied {
                    detail: format!("{} ({what})", step.failed().trim_end_matches(": ")),
                }),
            };
            let error = match outcome {
                Ok(value) => {
                    if failed > 0 {
                        info!(
                            step = %step,
                            attempts = failed + 1,
                            after = %fmt_duration(round_ms(self.since.elapsed())),
                            "start-up step succeeded after retrying"
                        );
                    }
                    return Ok(value);
                }
                Err(error) if !error.is_transient() => return Err(error),
                Err(error) => error,
            };
            failed = failed.saturating_add(1);
            let delay = self.retry.delay(failed, &mut self.rng);
            let elapsed = self.since.elapsed();
            if self
                .retry
                .deadline
                .is_some_and(|deadline| elapsed + delay > deadline)
            {
                return Err(Error::StartTimeout {
                    attempts: failed,
                    elapsed,
                    last: Box::new(error),
                });
            }
            if failed <= LOG_EVERY_ATTEMPT_UP_TO
                || last_log.is_none_or(|at| at.elapsed() >= LOG_INTERVAL)
            {
                let retry_in = fmt_duration(round_ms(delay));
                if unlogged == 0 {
                    warn!(step = %step, attempt = failed, error = %error, %retry_in, "start-up failed; retrying");
                } else {
                    // Once a minute from the eleventh attempt on: how many went unlogged.
                    warn!(
                        step = %step,
                        attempt = failed,
                        error = %error,
                        %retry_in,
                        not_logged = unlogged,
                        "start-up failed; retrying"
                    );
                }
                last_log = Some(tokio::time::Instant::now());
                unlogged = 0;
            } else {
                unlogged += 1;
            }
            self.progress.send_replace(Some(StartProgress {
                step: step.clone(),
                failed_attempts: failed,
                last_error: Some(Arc::new(error)),
                retry_at: Some(Instant::now() + delay),
                since,
            }));
            tokio::time::sleep(delay).await;
        }
    }

    /// The start-up is complete: nothing to report any more.
    pub(crate) fn done(&self) {
        self.progress.send_replace(None);
    }
}

/// `d` rounded to whole milliseconds (for logs).
fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Connects as [`connect`](super::connect) does, retrying as `retry` says (the connect step of
/// `nats-roles run`).
#[cfg(feature = "cli")]
pub(crate) async fn connect(
    nats: &crate::config::NatsConfig,
    name: &str,
    retry: StartRetry,
    progress: &watch::Sender<Option<StartProgress>>,
) -> Result<(async_nats::Client, crate::store::ServerErrors), Error> {
    let mut starter = Starter::new(retry, progress);
    // No server errors before there is a connection.
    let mut never = std::pin::pin!(std::future::pending::<String>());
    starter
        .run(StartStep::Connect, &mut never, || {
            super::connect(nats, name)
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed_out() -> Error {
        Error::Timeout(Duration::from_secs(2))
    }

    #[test]
    fn progress_says_what_runs_what_failed_and_when_it_is_retried() {
        let since = Instant::now();
        let bucket = StartStep::OpenBucket {
            bucket: "roles".into(),
        };
        let mut p = StartProgress::first(bucket.clone(), since);
        assert_eq!(p.to_string(), "opening bucket \"roles\"");
        p.failed_attempts = 4;
        p.last_error = Some(Arc::new(timed_out()));
        p.retry_at = Some(Instant::now() + Duration::from_millis(1_950));
        assert_eq!(
            p.to_string(),
            "cannot open bucket \"roles\": operation timed out after 2s; its outcome is unknown \
             (attempt 4), retrying in 2s"
        );
        p.retry_at = Some(Instant::now() - Duration::from_millis(1));
        assert!(p.to_string().ends_with("(attempt 4), retrying now"), "{p}");
        let mut c = StartProgress::first(StartStep::Connect, since);
        assert_eq!(c.to_string(), "connecting to NATS");
        c.failed_attempts = 1;
        c.last_error = Some(Arc::new(Error::Connect("IO error: refused".into())));
        c.retry_at = Some(Instant::now() + Duration::from_millis(120));
        assert_eq!(
            c.to_string(),
            "cannot connect to NATS: IO error: refused (attempt 1), retrying in 200ms"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_with_backoff_and_reported() {
        let (tx, rx) = watch::channel(None);
        let mut starter = Starter::new(StartRetry::until_started(), &tx);
        let mut never = std::pin::pin!(std::future::pending::<String>());
        let mut calls = 0;
        let started = tokio::time::Instant::now();
        let step = StartStep::OpenBucket { bucket: "b".into() };
        let value = starter
            .run(step.clone(), &mut never, || {
                calls += 1;
                let n = calls;
                let rx = rx.clone();
                async move {
                    if n < 4 {
                        if n > 1 {
                            let p = rx.borrow().clone().expect("progress");
                            assert_eq!(p.failed_attempts, n - 1);
                            assert_eq!(p.step, StartStep::OpenBucket { bucket: "b".into() });
                        }
                        Err(timed_out())
                    } else {
                        Ok(n)
                    }
                }
            })
            .await
            .expect("succeeds on the 4th attempt");
        assert_eq!(value, 4);
        // 100 + 200 + 400 ms, ±20 %.
        let waited = started.elapsed();
        assert!(
            (Duration::from_millis(560)..=Duration::from_millis(840)).contains(&waited),
            "{waited:?}"
        );
        starter.done();
        assert!(rx.borrow().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn persistent_failures_end_the_start_at_once() {
        let (tx, _rx) = watch::channel(None);
        let mut starter = Starter::new(StartRetry::until_started(), &tx);
        let mut never = std::pin::pin!(std::future::pending::<String>());
        let mut calls = 0;
        let result: Result<(), Error> = starter
            .run(
                StartStep::OpenBucket { bucket: "b".into() },
                &mut never,
                || {
                    calls += 1;
                    async { Err(Error::BucketNotFound { bucket: "b".into() }) }
                },
            )
            .await;
        assert!(matches!(result, Err(Error::BucketNotFound { .. })));
        assert_eq!(calls, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_permission_violation_ends_the_start_at_once() {
        let (tx, _rx) = watch::channel(None);
        let mut starter = Starter::new(StartRetry::until_started(), &tx);
        let mut denied = std::pin::pin!(async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            "publish to \"$JS.API.STREAM.INFO.KV_b\"".to_owned()
        });
        let result: Result<(), Error> = starter
            .run(
                StartStep::OpenBucket { bucket: "b".into() },
                &mut denied,
                std::future::pending,
            )
            .await;
        match result {
            Err(Error::PermissionDenied { detail }) => assert_eq!(
                detail,
                "cannot open bucket \"b\" (publish to \"$JS.API.STREAM.INFO.KV_b\")"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_ends_the_retries_with_the_last_failure() {
        let (tx, _rx) = watch::channel(None);
        let retry = StartRetry::default().with_deadline(Some(Duration::from_secs(3)));
        let mut starter = Starter::new(retry, &tx);
        let mut never = std::pin::pin!(std::future::pending::<String>());
        let started = tokio::time::Instant::now();
        let result: Result<(), Error> = starter
            .run(StartStep::Connect, &mut never, || async {
                Err(Error::Timeout(Duration::from_secs(1)))
            })
            .await;
        match result {
            Err(Error::StartTimeout { attempts, last, .. }) => {
                assert!(attempts >= 4, "{attempts}");
                assert!(matches!(*last, Error::Timeout(_)));
            }
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() <= Duration::from_secs(3));
        // A zero deadline: the first failure is final.
        let mut starter = Starter::new(
            StartRetry::default().with_deadline(Some(Duration::ZERO)),
            &tx,
        );
        let result: Result<(), Error> = starter
            .run(StartStep::Connect, &mut never, || async {
                Err(Error::Timeout(Duration::from_secs(1)))
            })
            .await;
        assert!(matches!(
            result,
            Err(Error::StartTimeout { attempts: 1, .. })
        ));
    }
}
