//! The [`Transaction`] to run, and the [`Receipt`] of one that committed.

use super::Item;
use crate::change::DocumentChange;
use crate::config::Strategy;
use crate::error::ChangeError;
use crate::participant::Participant;
use crate::record::TxState;
use crate::TxId;

/// A set of changes to run all-or-nothing.
///
/// ```
/// use tandem::{DocumentChange, Namespace, Transaction};
///
/// let accounts = Namespace::new("bank", "accounts");
/// let tx = Transaction::new()
///     .change(DocumentChange::update(accounts.clone(), "A").inc("balance", -100_i64).require_gte("balance", 100_i64))
///     .change(DocumentChange::update(accounts, "B").inc("balance", 100_i64));
/// assert_eq!(tx.len(), 2);
/// ```
#[derive(Default)]
pub struct Transaction {
    pub(super) id: Option<TxId>,
    pub(crate) strategy: Option<Strategy>,
    pub(crate) items: Vec<Item>,
    pub(super) errors: Vec<ChangeError>,
}

impl Transaction {
    /// An empty transaction with a generated id.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty transaction with a chosen id (e.g. an idempotency key).
    pub fn with_id(id: impl Into<String>) -> Self {
        let mut tx = Self::default();
        match TxId::new(id) {
            Ok(id) => tx.id = Some(id),
            Err(e) => tx.errors.push(e),
        }
        tx
    }

    /// Adds a document change (or a typed change from `#[participant]`).
    pub fn change(mut self, change: impl Into<DocumentChange>) -> Self {
        self.items.push(Item::Document(Box::new(change.into())));
        self
    }

    /// Adds a hand-written participant. Its kind must be registered with the coordinator.
    pub fn participant(mut self, participant: impl Participant + 'static) -> Self {
        self.items.push(Item::Custom(Box::new(participant)));
        self
    }

    /// Runs this transaction with `strategy` instead of the coordinator's default.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = Some(strategy);
        self
    }

    /// How many participants it has.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it has no participants.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The chosen id, if any.
    pub fn id(&self) -> Option<&TxId> {
        self.id.as_ref()
    }
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("id", &self.id)
            .field("participants", &self.items.len())
            .finish()
    }
}

/// What a committed transaction reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Receipt {
    /// The transaction id.
    pub id: TxId,
    /// `Applied` (committed; cleanup continues in the background) or `Done`.
    pub state: TxState,
    /// Sequential round trips to the stores until `run` returned, as the
    /// protocol plans them: a command the coordinator or the driver sent
    /// again after a transient error is not counted (the store's metrics
    /// count what was sent). With [`CommitPoint::Done`](crate::CommitPoint::Done),
    /// the finishing's trips count as planned even where finishing stopped
    /// early and left the rest to recovery (the receipt's `state` is then
    /// `Applied`).
    pub round_trips: u32,
    /// How it ran: [`Strategy::TwoPhase`] or [`Strategy::Native`] (what
    /// [`Strategy::Auto`] chose).
    pub strategy: Strategy,
}
