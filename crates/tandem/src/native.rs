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
use crate::RetryPolicy;

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
    async fn run_native(
        &self,
        changes: &[DocumentChange],
        retry: RetryPolicy,
    ) -> Result<(), StepError>;
}
