//! Options of a [`MongoStore`](crate::MongoStore): concerns, timeouts and the retry policy.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mongodb::options::{Acknowledgment, ReadConcern, WriteConcern};

/// How a [`MongoStore`](crate::MongoStore) repeats a command that failed with a
/// [`Transient`](tandem::store::StoreErrorKind::Transient) error.
///
/// The protocol guards every step so that repeating it is harmless, so the
/// store repeats the same command after a jittered exponential backoff: before
/// attempt `n + 1` it sleeps a random duration between half and all of
/// `min(max_delay, base_delay * 2^(n-1))`. It stops when `max_attempts`
/// commands have been sent, or when the next sleep would end after `budget`
/// has passed since the first attempt, and then returns the last `Transient`
/// error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The most attempts of one command, the first included. `0` and `1` both mean no retry.
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

    /// The backoff before attempt `attempt + 1`, where `attempt >= 1` attempts were made, without jitter.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(31);
        let factor = 1u32 << exp;
        self.base_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    /// The jittered backoff before attempt `attempt + 1`: uniformly random in
    /// `[backoff / 2, backoff]`.
    pub fn jittered_backoff(&self, attempt: u32) -> Duration {
        let full = self.backoff(attempt);
        let half = full / 2;
        let spread = (full - half).as_nanos() as u64;
        if spread == 0 {
            return full;
        }
        half + Duration::from_nanos(random_u64() % (spread + 1))
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

/// A random number for jitter; not for anything that needs good randomness.
fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// The settings of a [`MongoStore`](crate::MongoStore).
///
/// Build one with [`MongoStore::builder`](crate::MongoStore::builder), or
/// start from [`MongoStoreOptions::default`] and change fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MongoStoreOptions {
    /// The write concern of every write. `None` keeps the client's (from the
    /// URI or the client options). Default: `{ w: "majority", j: true }`.
    pub write_concern: Option<WriteConcern>,
    /// The read concern of `find` and `findOne`. `None` keeps the client's.
    /// Default: `majority`.
    pub read_concern: Option<ReadConcern>,
    /// How long to wait for a server to send a command to. Used when the store
    /// makes its own client ([`MongoStoreBuilder::connect`]); `None` keeps the
    /// URI's value or the driver's default (30 s).
    pub server_selection_timeout: Option<Duration>,
    /// The application name sent to the server (`appName`), shown in server
    /// logs. Used when the store makes its own client; `None` keeps the URI's.
    pub app_name: Option<String>,
    /// How commands that failed with a transient error are repeated.
    pub retry: RetryPolicy,
    /// Settings of native multi-document transactions (the native strategy).
    pub native: crate::NativeOptions,
}

impl MongoStoreOptions {
    /// The default write concern: majority, journaled.
    pub fn default_write_concern() -> WriteConcern {
        WriteConcern::builder()
            .w(Acknowledgment::Majority)
            .journal(true)
            .build()
    }
}

impl Default for MongoStoreOptions {
    fn default() -> Self {
        MongoStoreOptions {
            write_concern: Some(Self::default_write_concern()),
            read_concern: Some(ReadConcern::majority()),
            server_selection_timeout: None,
            app_name: None,
            retry: RetryPolicy::default(),
            native: crate::NativeOptions::default(),
        }
    }
}

/// Builds a [`MongoStore`](crate::MongoStore) with non-default options.
///
/// ```no_run
/// # async fn example() -> Result<(), tandem::store::StoreError> {
/// use std::time::Duration;
/// use tandem_mongodb::{MongoStore, RetryPolicy};
///
/// let store = MongoStore::builder()
///     .server_selection_timeout(Duration::from_secs(5))
///     .app_name("billing")
///     .retry_policy(RetryPolicy { budget: Duration::from_secs(5), ..RetryPolicy::default() })
///     .connect("mongodb://127.0.0.1:27017/")
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct MongoStoreBuilder {
    pub(crate) options: MongoStoreOptions,
}

impl MongoStoreBuilder {
    /// A builder with the default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts from the given options.
    pub fn with_options(options: MongoStoreOptions) -> Self {
        MongoStoreBuilder { options }
    }

    /// Sets the write concern of every write; `None` keeps the client's.
    pub fn write_concern(mut self, write_concern: impl Into<Option<WriteConcern>>) -> Self {
        self.options.write_concern = write_concern.into();
        self
    }

    /// Sets the read concern of `find` and `findOne`; `None` keeps the client's.
    pub fn read_concern(mut self, read_concern: impl Into<Option<ReadConcern>>) -> Self {
        self.options.read_concern = read_concern.into();
        self
    }

    /// Sets the server selection timeout (only for [`connect`](Self::connect)).
    pub fn server_selection_timeout(mut self, timeout: Duration) -> Self {
        self.options.server_selection_timeout = Some(timeout);
        self
    }

    /// Sets the application name (only for [`connect`](Self::connect)).
    pub fn app_name(mut self, app_name: impl Into<String>) -> Self {
        self.options.app_name = Some(app_name.into());
        self
    }

    /// Sets the retry policy of transient errors.
    pub fn retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.options.retry = retry;
        self
    }

    /// The options built so far.
    pub fn options(&self) -> &MongoStoreOptions {
        &self.options
    }

    /// A store on an existing client. The client's own server selection
    /// timeout, application name and retryable writes stay as they are (the
    /// store needs no retryable writes: see [`connect`](Self::connect)).
    pub fn build(self, client: mongodb::Client) -> crate::MongoStore {
        crate::MongoStore::from_parts(client, self.options, Vec::new())
    }

    /// Parses `uri`, makes a client and checks that a server answers a `ping`.
    ///
    /// The client sends no retryable writes unless the URI says
    /// `retryWrites=true`: every step of the protocol is guarded, so sending it
    /// again is harmless, and the store retries transient errors itself
    /// ([`RetryPolicy`]). A server keeps a record of every retryable write for
    /// half an hour, which tandem would pay for and never use.
    ///
    /// Errors: a malformed URI or option gives
    /// [`BadRequest`](tandem::store::StoreErrorKind::BadRequest); no server
    /// reachable within the server selection timeout gives
    /// [`Unavailable`](tandem::store::StoreErrorKind::Unavailable). Messages
    /// never contain the URI's credentials.
    pub async fn connect(self, uri: &str) -> Result<crate::MongoStore, tandem::store::StoreError> {
        crate::store::connect(uri, self.options).await
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
    fn none_policy_has_no_delay() {
        assert_eq!(RetryPolicy::NONE.jittered_backoff(1), Duration::ZERO);
    }
}
