//! Progress events: what a coordinator or recovery worker just did.
//!
//! Every event is also logged with `tracing`; an [`EventSink`] lets an
//! application print or count them (the examples print each state change).

use std::fmt;
use std::sync::Arc;

use crate::record::TxState;
use crate::TxId;

/// Something that happened to a transaction.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TxEvent {
    /// [`Strategy::Auto`](crate::Strategy::Auto) chose how the transaction runs.
    StrategyChosen {
        /// The transaction.
        id: TxId,
        /// [`Native`](crate::Strategy::Native) or [`TwoPhase`](crate::Strategy::TwoPhase).
        strategy: crate::Strategy,
        /// Why, e.g. `"participants span the stores default and \"shipping\""`.
        reason: String,
    },
    /// A transaction run by the native strategy ended (it leaves no record,
    /// so no other event is emitted for it).
    NativeFinished {
        /// The transaction.
        id: TxId,
        /// `Done` (committed), `Canceled` (refused, nothing changed), or
        /// `None`: the outcome is unknown (the store failed).
        outcome: Option<TxState>,
        /// The error, as text, unless it committed.
        error: Option<String>,
    },
    /// The record was written, in state `pending`.
    Created {
        /// The transaction.
        id: TxId,
        /// How many participants it has.
        participants: usize,
    },
    /// The record moved from one state to another.
    StateChanged {
        /// The transaction.
        id: TxId,
        /// The state before.
        from: TxState,
        /// The state after.
        to: TxState,
    },
    /// A recovery worker claimed the record.
    Claimed {
        /// The transaction.
        id: TxId,
        /// The state it was found in.
        state: TxState,
        /// The worker.
        owner: String,
        /// The new epoch.
        epoch: i64,
    },
    /// A stale `initial` record (nothing applied) was removed.
    Removed {
        /// The transaction.
        id: TxId,
    },
    /// A participant step failed (the transaction will be canceled or left to recovery).
    StepFailed {
        /// The transaction.
        id: TxId,
        /// The participant.
        participant: String,
        /// The error, as text.
        error: String,
    },
}

impl fmt::Display for TxEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxEvent::StrategyChosen {
                id,
                strategy,
                reason,
            } => write!(f, "{id}: runs {strategy:?}: {reason}"),
            TxEvent::NativeFinished { id, outcome, error } => match (outcome, error) {
                (Some(state), None) => write!(f, "{id}: native transaction {state}"),
                (Some(state), Some(e)) => write!(f, "{id}: native transaction {state}: {e}"),
                (None, e) => write!(
                    f,
                    "{id}: native transaction, outcome unknown: {}",
                    e.as_deref().unwrap_or("")
                ),
            },
            TxEvent::Created { id, participants } => {
                write!(
                    f,
                    "{id}: created with {participants} participants (pending)"
                )
            }
            TxEvent::StateChanged { id, from, to } => write!(f, "{id}: {from} -> {to}"),
            TxEvent::Claimed {
                id,
                state,
                owner,
                epoch,
            } => write!(
                f,
                "{id}: claimed in state {state} by {owner} (epoch {epoch})"
            ),
            TxEvent::Removed { id } => write!(f, "{id}: stale initial record removed"),
            TxEvent::StepFailed {
                id,
                participant,
                error,
            } => write!(f, "{id}: step on {participant} failed: {error}"),
        }
    }
}

/// A callback receiving every [`TxEvent`].
pub type EventSink = Arc<dyn Fn(&TxEvent) + Send + Sync>;
