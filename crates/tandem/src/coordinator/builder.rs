//! The [`CoordinatorBuilder`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Background, Coordinator};
use crate::config::{CommitPoint, ConflictPolicy, CoordinatorConfig, Strategy};
use crate::engine::Engine;
use crate::error::ChangeError;
use crate::event::{EventSink, TxEvent};
use crate::participant::{Participant, ParticipantKinds, Stores};
use crate::store::Store;

/// Builds a [`Coordinator`].
pub struct CoordinatorBuilder {
    pub(super) stores: Stores,
    pub(super) kinds: ParticipantKinds,
    pub(super) config: CoordinatorConfig,
    pub(super) events: Option<EventSink>,
}

impl CoordinatorBuilder {
    /// Adds a named store that participants can live in (another database or cluster).
    ///
    /// A store name must mean the same database in every process that shares
    /// the records (recovery finishes a record through the store it has
    /// under each name the record gives). This is checked: the first
    /// transaction that changes a document in the store reads the store's
    /// identity (a `uid` in the `tandem_store` collection of the
    /// coordinator's database on that store, written once by the first
    /// process that asks), and the record keeps it
    /// ([`ParticipantEntry::store_uid`](crate::record::ParticipantEntry::store_uid));
    /// a process whose store under that name has another identity does not
    /// drive, cancel or tidy the record ([`ChangeError::ForeignStore`]).
    pub fn store(mut self, name: impl Into<String>, store: impl Store) -> Self {
        self.stores.insert(name, Arc::new(store));
        self
    }

    /// [`store`](Self::store) for a store already shared behind an `Arc`
    /// (one opened at run time, whose type is not known here).
    pub fn store_shared(mut self, name: impl Into<String>, store: Arc<dyn Store>) -> Self {
        self.stores.insert(name, store);
        self
    }

    /// Registers a hand-written participant kind so recovery can rebuild it.
    pub fn kind<F>(mut self, kind: impl Into<String>, factory: F) -> Self
    where
        F: Fn(&bson::Document) -> Result<Box<dyn Participant>, ChangeError> + Send + Sync + 'static,
    {
        self.kinds.register(kind, factory);
        self
    }

    /// Replaces the whole configuration.
    pub fn config(mut self, config: CoordinatorConfig) -> Self {
        self.config = config;
        self
    }

    /// The database of the records (and of changes naming no database).
    pub fn database(mut self, db: impl Into<String>) -> Self {
        self.config.database = db.into();
        self
    }

    /// This worker's owner name, recorded in the history of the records it
    /// writes (a recovery worker's adds `-recovery-` and an id).
    ///
    /// # Panics
    ///
    /// [`build`](Self::build) panics on a name longer than 256 bytes: every
    /// history line repeats it, and a record's size is bounded.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.config.owner = owner.into();
        self
    }

    /// The lease after which recovery may take a silent transaction over.
    ///
    /// # Panics
    ///
    /// [`build`](Self::build) panics on a lease under a millisecond (the
    /// stores' clocks count milliseconds, so it is a zero lease): every
    /// step's deadline would have passed when it was sent, and every
    /// transaction would be canceled.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// Where `run` returns.
    pub fn commit_point(mut self, point: CommitPoint) -> Self {
        self.config.commit_point = point;
        self
    }

    /// How far a store's clock (a participant store's, or the records
    /// store's) may step back ([`CoordinatorConfig::clock_margin`]).
    pub fn clock_margin(mut self, margin: Duration) -> Self {
        self.config.clock_margin = margin;
        self
    }

    /// How long the background finisher may wait for more committed
    /// transactions to finish together ([`CoordinatorConfig::finish_delay`]).
    pub fn finish_delay(mut self, delay: Duration) -> Self {
        self.config.finish_delay = delay;
        self
    }

    /// How long after it finished a keyed transaction keeps answering for
    /// its id, at the least ([`CoordinatorConfig::idempotency_window`]).
    pub fn idempotency_window(mut self, window: Duration) -> Self {
        self.config.idempotency_window = window;
        self
    }

    /// Whether transactions may commit at their applies
    /// ([`CoordinatorConfig::early_commit`]; `true` by default).
    pub fn early_commit(mut self, early: bool) -> Self {
        self.config.early_commit = early;
        self
    }

    /// How transactions run unless they choose otherwise.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.config.strategy = strategy;
        self
    }

    /// What to do on conflicts.
    pub fn conflict(mut self, policy: ConflictPolicy) -> Self {
        self.config.conflict = policy;
        self
    }

    /// How store requests that failed transiently are repeated (see
    /// [`RetryPolicy`](crate::RetryPolicy)); [`RetryPolicy::NONE`](crate::RetryPolicy::NONE)
    /// returns the first error.
    pub fn retry(mut self, policy: crate::RetryPolicy) -> Self {
        self.config.retry = policy;
        self
    }

    /// The most participants per transaction.
    pub fn max_participants(mut self, n: usize) -> Self {
        self.config.max_participants = n;
        self
    }

    /// Receives every progress event.
    pub fn on_event(mut self, sink: impl Fn(&TxEvent) + Send + Sync + 'static) -> Self {
        self.events = Some(Arc::new(sink));
        self
    }

    /// The coordinator.
    ///
    /// # Panics
    ///
    /// On a [`lease`](Self::lease) under a millisecond.
    pub fn build(self) -> Coordinator {
        assert!(
            self.config.lease.as_millis() >= 1,
            "the lease must be at least a millisecond (the stores' clocks count milliseconds): every step's deadline would have passed when it was sent"
        );
        assert!(
            self.config.owner.len() <= crate::error::OWNER_LIMIT,
            "the owner name is {} bytes, over the {} a record's history lines may repeat",
            self.config.owner.len(),
            crate::error::OWNER_LIMIT
        );
        let background = Arc::new(Mutex::new(Background::default()));
        let own_unfinished = Background::own_unfinished(&background);
        Coordinator {
            engine: Arc::new(Engine {
                stores: self.stores,
                kinds: self.kinds,
                config: self.config,
                events: self.events,
                uids: Arc::default(),
                lease_registered: tokio::sync::OnceCell::new(),
                own_unfinished: Some(own_unfinished),
            }),
            background,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{Coordinator, CoordinatorConfig, MemoryStore};

    #[test]
    #[should_panic(expected = "over the 256 a record's history lines may repeat")]
    fn a_long_owner_name_is_refused() {
        Coordinator::builder(MemoryStore::new())
            .owner("o".repeat(257))
            .build();
    }

    #[test]
    #[should_panic(expected = "lease must be at least a millisecond")]
    fn a_zero_lease_is_refused() {
        Coordinator::builder(MemoryStore::new())
            .lease(Duration::ZERO)
            .build();
    }

    #[test]
    #[should_panic(expected = "lease must be at least a millisecond")]
    fn a_zero_lease_in_a_whole_config_is_refused() {
        Coordinator::builder(MemoryStore::new())
            .config(CoordinatorConfig {
                lease: Duration::ZERO,
                ..CoordinatorConfig::default()
            })
            .build();
    }

    #[test]
    #[should_panic(expected = "lease must be at least a millisecond")]
    fn a_lease_under_a_millisecond_is_refused() {
        Coordinator::builder(MemoryStore::new())
            .lease(Duration::from_micros(999))
            .build();
    }

    #[test]
    fn the_shortest_lease_is_taken() {
        let c = Coordinator::builder(MemoryStore::new())
            .lease(Duration::from_millis(1))
            .build();
        assert_eq!(c.config().lease, Duration::from_millis(1));
    }
}
