//! The one retry policy: how a store request that failed transiently is repeated.
//!
//! Stores never repeat a request themselves. The coordinator (and the recovery
//! worker, which shares its engine) repeats it, because only there is it known
//! what an unanswered request means for the protocol: an apply whose answer was
//! lost may still land later, so its marker must not be removed before the
//! apply's deadline has passed (a store that retried on its own would hide
//! that first attempt and answer as if only the last one had been sent). The
//! same policy bounds the repeats of a native transaction
//! ([`NativeTransactions::run_native`](crate::NativeTransactions::run_native)) and the backoff of
//! [`ConflictPolicy::Wait`](crate::ConflictPolicy::Wait).

use std::time::Duration;

/// How a failed request is repeated: a jittered exponential backoff within a
/// number of attempts and a time budget.
///
/// Before attempt `n + 1` the caller sleeps a random duration between half and
/// all of `min(max_delay, base_delay * 2^(n-1))`. It stops when `max_attempts`
/// requests have been sent, or when the next sleep would end after `budget`
/// has passed since the first attempt, and then returns the last error.
///
/// Configured once, on the coordinator
/// ([`CoordinatorBuilder::retry`](crate::CoordinatorBuilder::retry)).
///
/// ```
/// use std::time::Duration;
/// use tandem::RetryPolicy;
///
/// let policy = RetryPolicy { budget: Duration::from_secs(5), ..RetryPolicy::default() };
/// assert_eq!(policy.max_attempts, 8);
/// assert_eq!(policy.backoff(3), Duration::from_millis(80));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The most attempts of one request, the first included. `0` and `1` both mean no retry.
    pub max_attempts: u32,
    /// The backoff before the first retry (before jitter).
    pub base_delay: Duration,
    /// The longest backoff between two attempts (before jitter).
    pub max_delay: Duration,
    /// The total time, from the first attempt, after which no retry starts.
    pub budget: Duration,
}

impl RetryPolicy {
    /// A policy that never retries: every error is returned as it is.
    pub const NONE: RetryPolicy = RetryPolicy {
        max_attempts: 1,
        base_delay: Duration::ZERO,
        max_delay: Duration::ZERO,
        budget: Duration::ZERO,
    };

    /// The backoff before attempt `attempt + 1`, where `attempt >= 1` attempts
    /// were made, without jitter.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(31);
        self.base_delay
            .checked_mul(1u32 << exp)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    /// The jittered backoff before attempt `attempt + 1`: uniformly random in
    /// `[backoff / 2, backoff]`.
    pub fn jittered_backoff(&self, attempt: u32) -> Duration {
        let full = self.backoff(attempt);
        let half = full / 2;
        let spread = u64::try_from((full - half).as_nanos()).unwrap_or(u64::MAX);
        if spread == 0 {
            return full;
        }
        half + Duration::from_nanos(crate::engine::random_u64() % spread.saturating_add(1))
    }

    /// The sleep before attempt `attempt + 1` of a request first sent
    /// `elapsed` ago, or `None` when the policy allows no further attempt.
    pub fn next_delay(&self, attempt: u32, elapsed: Duration) -> Option<Duration> {
        if attempt >= self.max_attempts {
            return None;
        }
        let delay = self.jittered_backoff(attempt);
        (elapsed + delay <= self.budget).then_some(delay)
    }
}

impl Default for RetryPolicy {
    /// Up to 8 attempts, 20 ms doubling up to 1 s between them, within 15 s.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            base_delay: Duration::from_millis(20),
            max_delay: Duration::from_secs(1),
            budget: Duration::from_secs(15),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        let p = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(100),
            budget: Duration::from_secs(1),
        };
        assert_eq!(p.backoff(1), Duration::from_millis(10));
        assert_eq!(p.backoff(2), Duration::from_millis(20));
        assert_eq!(p.backoff(4), Duration::from_millis(80));
        assert_eq!(p.backoff(5), Duration::from_millis(100));
        assert_eq!(p.backoff(60), Duration::from_millis(100));
        for attempt in 1..12 {
            let d = p.jittered_backoff(attempt);
            assert!(
                d >= p.backoff(attempt) / 2 && d <= p.backoff(attempt),
                "{d:?}"
            );
        }
    }

    #[test]
    fn none_allows_no_second_attempt() {
        assert_eq!(RetryPolicy::NONE.jittered_backoff(1), Duration::ZERO);
        assert_eq!(RetryPolicy::NONE.next_delay(1, Duration::ZERO), None);
    }

    #[test]
    fn attempts_and_budget_both_stop_the_repeats() {
        let p = RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(1),
            budget: Duration::from_secs(60),
        };
        let now = Duration::ZERO;
        assert!(p.next_delay(1, now).is_some());
        assert!(p.next_delay(2, now).is_some());
        assert_eq!(p.next_delay(3, now), None);
        let tight = RetryPolicy {
            max_attempts: 100,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(1),
            budget: Duration::from_millis(100),
        };
        assert_eq!(tight.next_delay(1, now), None);
    }
}
