//! Native multi-document transactions: the optional second contract of a store.
//!
//! A [`Store`](crate::Store) is a document store and nothing more; a store
//! that can also run several document changes in one transaction of its own
//! (a MongoDB session, the embedded store's lock) implements
//! [`NativeTransactions`] and returns itself from
//! [`Store::native`](crate::Store::native). The native strategy
//! ([`Strategy::Native`](crate::Strategy::Native), and
//! [`Strategy::Auto`](crate::Strategy::Auto) when it picks it) runs there.

use async_trait::async_trait;

use crate::change::DocumentChange;
use crate::error::StepError;
use crate::store::StoreError;
use crate::RetryPolicy;

/// Why [`NativeTransactions::run_native`] did not commit, and whether it
/// still may have.
#[derive(Debug)]
#[non_exhaustive]
pub enum NativeFailure {
    /// The transaction did not commit and never will: a participant refused,
    /// or the store failed before the commit was sent. Nothing of it was
    /// applied.
    Aborted(StepError),
    /// The commit was sent and its outcome is not known: the changes may
    /// have been applied, all of them, or none.
    InDoubt(StoreError),
}

/// Runs document changes inside one native multi-document transaction.
#[async_trait]
pub trait NativeTransactions: Send + Sync {
    /// Makes every change inside one native multi-document transaction: all
    /// or nothing, with the same guards and typed refusals as the two-phase
    /// protocol (see [`DocumentChange::native_command`] and
    /// [`DocumentChange::explain`]).
    ///
    /// `retry` bounds how often the store runs the transaction again after a
    /// transient transaction error, and repeats its commit after an unknown
    /// commit result (the coordinator's [`RetryPolicy`]): only the store can
    /// repeat a commit within its session.
    ///
    /// An error says whether the transaction may have committed
    /// ([`NativeFailure::InDoubt`]) or surely did not
    /// ([`NativeFailure::Aborted`]): the coordinator answers the first
    /// `Interrupted` and the second `Canceled`.
    async fn run_native(
        &self,
        changes: &[DocumentChange],
        retry: RetryPolicy,
    ) -> Result<(), NativeFailure>;
}
