//! Retry policy: exponential backoff with jitter that honours `retry-after`.
//!
//! A model call happens before any tool of that turn runs, so sending a request again never
//! runs a tool twice: retrying is always safe here.

use crate::{EventSink, ModelError, ModelEvent};
use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// The longest `retry-after` cadre honours; a server asking for more gets this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How often and how patiently a transient failure is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retrying).
    pub max_retries: u32,
    /// The backoff ceiling for the first retry; it doubles with every further one.
    pub base_delay: Duration,
    /// The largest backoff between two attempts.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// The backoff ceiling before retry `retry` (1 for the first): `base * 2^(retry-1)`, capped.
    pub fn backoff_ceiling(&self, retry: u32) -> Duration {
        let exp = retry.saturating_sub(1).min(31);
        self.base_delay
            .saturating_mul(1u32 << exp)
            .min(self.max_delay)
    }

    /// How long to wait before retry `retry` (1 for the first) after `error`.
    ///
    /// The server's `retry-after` wins when given (capped at [`MAX_RETRY_AFTER`]); otherwise
    /// a uniformly random wait up to [`Self::backoff_ceiling`] ("full jitter"), which keeps
    /// many subagents hitting the same limit from retrying in lockstep.
    pub fn delay_for(&self, retry: u32, error: &ModelError) -> Duration {
        if let Some(wait) = error.retry_after() {
            return wait.min(MAX_RETRY_AFTER);
        }
        let ceiling = self.backoff_ceiling(retry);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(uniform_up_to(nanos))
    }

    /// Runs `attempt` (given the attempt number, 1 for the first) until it succeeds, fails
    /// for good, or the retries run out.
    ///
    /// Each retry is reported through `events` as [`ModelEvent::Retrying`]; anything the
    /// failed attempt already streamed should be discarded by the listener. Running out
    /// gives [`ModelError::RetriesExhausted`], except with `max_retries == 0`, where the
    /// error itself is returned.
    pub async fn run<T, F, Fut>(
        &self,
        events: EventSink<'_>,
        mut attempt: F,
    ) -> Result<T, ModelError>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, ModelError>>,
    {
        let mut n = 1u32;
        loop {
            let error = match attempt(n).await {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            if !error.is_transient() {
                return Err(error);
            }
            let retry = n;
            if retry > self.max_retries {
                if self.max_retries == 0 {
                    return Err(error);
                }
                return Err(ModelError::RetriesExhausted {
                    attempts: n,
                    last: Box::new(error),
                });
            }
            let wait = self.delay_for(retry, &error);
            let reason = one_line(&error.to_string());
            tracing::warn!(
                attempt = retry,
                of = self.max_retries,
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "model call failed, retrying: {reason}"
            );
            events(ModelEvent::Retrying {
                attempt: retry,
                wait,
                reason,
            });
            tokio::time::sleep(wait).await;
            n += 1;
        }
    }
}

/// A number drawn evenly from `0..=max`. Jitter needs no strong randomness: the standard
/// library's randomly keyed hasher, fresh keys on every call, is enough to spread retries.
fn uniform_up_to(max: u64) -> u64 {
    let random = RandomState::new().build_hasher().finish();
    // Scales the 64 random bits onto 0..=max (multiply-shift, no division bias to speak of).
    let scaled = (u128::from(random) * (u128::from(max) + 1)) >> 64;
    u64::try_from(scaled).unwrap_or(max)
}

/// Collapses whitespace runs (newlines included) so a reason fits one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;

    fn fast(max_retries: u32) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
        }
    }

    fn overloaded() -> ModelError {
        ModelError::Api {
            status: 529,
            kind: "overloaded_error".into(),
            message: "Overloaded\nplease wait".into(),
            retry_after: None,
        }
    }

    #[test]
    fn defaults() {
        let p = RetryPolicy::default();
        assert_eq!(p.max_retries, 4);
        assert_eq!(p.base_delay, Duration::from_millis(500));
        assert_eq!(p.max_delay, Duration::from_secs(30));
        assert_eq!(RetryPolicy::none().max_retries, 0);
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff_ceiling(1), Duration::from_millis(500));
        assert_eq!(p.backoff_ceiling(2), Duration::from_secs(1));
        assert_eq!(p.backoff_ceiling(3), Duration::from_secs(2));
        assert_eq!(p.backoff_ceiling(10), Duration::from_secs(30));
        assert_eq!(p.backoff_ceiling(u32::MAX), Duration::from_secs(30));
        for retry in 1..8 {
            for _ in 0..50 {
                assert!(p.delay_for(retry, &overloaded()) <= p.backoff_ceiling(retry));
            }
        }
    }

    #[test]
    fn jitter_stays_in_range_and_varies() {
        assert_eq!(uniform_up_to(0), 0);
        let draws: Vec<u64> = (0..64).map(|_| uniform_up_to(1_000)).collect();
        assert!(draws.iter().all(|&d| d <= 1_000), "{draws:?}");
        assert!(draws.iter().any(|&d| d != draws[0]), "{draws:?}");
        // The low half and the high half are both reached.
        assert!(draws.iter().any(|&d| d < 500) && draws.iter().any(|&d| d >= 500));
        let _ = uniform_up_to(u64::MAX);
    }

    #[test]
    fn retry_after_wins_and_is_capped() {
        let p = RetryPolicy::default();
        let mut e = ModelError::Api {
            status: 429,
            kind: "rate_limit_error".into(),
            message: "slow down".into(),
            retry_after: Some(Duration::from_secs(7)),
        };
        assert_eq!(p.delay_for(1, &e), Duration::from_secs(7));
        if let ModelError::Api { retry_after, .. } = &mut e {
            *retry_after = Some(Duration::from_secs(3600));
        }
        assert_eq!(p.delay_for(1, &e), MAX_RETRY_AFTER);
    }

    /// The real delays (a 7 s `retry-after`, then full-jitter backoff from 500 ms) on a
    /// paused clock: the waits are exact and the test takes no real time.
    #[tokio::test(start_paused = true)]
    async fn waits_retry_after_then_backs_off_on_the_paused_clock() {
        let waits = Mutex::new(Vec::new());
        let sink = |e: ModelEvent| {
            if let ModelEvent::Retrying { wait, .. } = e {
                waits.lock().unwrap().push(wait);
            }
        };
        let started = tokio::time::Instant::now();
        let out = RetryPolicy::default()
            .run(&sink, |n| async move {
                match n {
                    1 => Err(ModelError::Api {
                        status: 429,
                        kind: "rate_limit_error".into(),
                        message: "slow down".into(),
                        retry_after: Some(Duration::from_secs(7)),
                    }),
                    2 | 3 => Err(overloaded()),
                    _ => Ok(n),
                }
            })
            .await;
        assert_eq!(out.unwrap(), 4);
        let waits = waits.into_inner().unwrap();
        assert_eq!(waits.len(), 3);
        assert_eq!(waits[0], Duration::from_secs(7));
        let policy = RetryPolicy::default();
        assert!(waits[1] <= policy.backoff_ceiling(2), "{waits:?}");
        assert!(waits[2] <= policy.backoff_ceiling(3), "{waits:?}");
        // Each wait really happened, on the test's clock (whose timers round up to the
        // next millisecond).
        let slept = started.elapsed();
        let asked: Duration = waits.iter().sum();
        assert!(
            slept >= asked && slept <= asked + Duration::from_millis(3),
            "{slept:?} vs {asked:?}"
        );
    }

    #[tokio::test]
    async fn retries_transient_then_succeeds_and_reports() {
        let seen = Mutex::new(Vec::new());
        let sink = |e: ModelEvent| seen.lock().unwrap().push(e);
        let calls = AtomicU32::new(0);
        let out = fast(4)
            .run(&sink, |n| {
                calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n < 3 {
                        Err(overloaded())
                    } else {
                        Ok(n)
                    }
                }
            })
            .await
            .unwrap();
        assert_eq!(out, 3);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 2);
        match &seen[1] {
            ModelEvent::Retrying {
                attempt, reason, ..
            } => {
                assert_eq!(*attempt, 2);
                assert!(reason.contains("Overloaded please wait"), "{reason}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn exhausts_with_attempt_count() {
        let calls = AtomicU32::new(0);
        let err = fast(2)
            .run(&crate::ignore_events, |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err::<(), _>(overloaded()) }
            })
            .await
            .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        match err {
            ModelError::RetriesExhausted { attempts, last } => {
                assert_eq!(attempts, 3);
                assert!(matches!(*last, ModelError::Api { status: 529, .. }));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn no_retries_returns_the_error_itself() {
        let err = RetryPolicy::none()
            .run(&crate::ignore_events, |_| async {
                Err::<(), _>(overloaded())
            })
            .await
            .unwrap_err();
        assert!(matches!(err, ModelError::Api { status: 529, .. }));
    }

    #[tokio::test]
    async fn permanent_errors_fail_at_once() {
        let calls = AtomicU32::new(0);
        let err = fast(4)
            .run(&crate::ignore_events, |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async {
                    Err::<(), _>(ModelError::Api {
                        status: 400,
                        kind: "invalid_request_error".into(),
                        message: "bad".into(),
                        retry_after: None,
                    })
                }
            })
            .await
            .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(matches!(err, ModelError::Api { status: 400, .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_retry_after() {
        let start = tokio::time::Instant::now();
        let out = fast(1)
            .run(&crate::ignore_events, |n| async move {
                if n == 1 {
                    Err(ModelError::Api {
                        status: 429,
                        kind: "rate_limit_error".into(),
                        message: "later".into(),
                        retry_after: Some(Duration::from_secs(30)),
                    })
                } else {
                    Ok(())
                }
            })
            .await;
        assert!(out.is_ok());
        assert!(start.elapsed() >= Duration::from_secs(30));
    }
}
