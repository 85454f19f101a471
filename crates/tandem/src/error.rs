//! Typed errors: what went wrong with a change, a step, or a whole transaction.

use crate::record::TxState;
use crate::store::{Namespace, StoreError};
use crate::TxId;

/// A change that is malformed: found before anything is written.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ChangeError {
    /// A field path is empty, has an empty segment, a segment starting with
    /// `$`, a number with a leading zero (`01`) after its first segment, or
    /// a NUL ([`check_path`](crate::change::check_path)); or a change that
    /// does not fit its document change (a field change or a guard on an
    /// insert, an insert without `_id`).
    #[error("invalid field path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// A database or collection name is empty or contains `$` or NUL; a
    /// database name contains `.`, `/`, `\`, `"` or a space, or is 64 bytes
    /// or longer; a collection name starts with `.` or `system.`; or the
    /// namespace (`db.collection`) is longer than 255 bytes.
    #[error("invalid namespace name {name:?}: {reason}")]
    InvalidNamespace {
        /// The name as given.
        name: String,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// A value holds a document with `$` keys: a store would read it as an operator.
    #[error("value for {path:?} holds the key {key:?}: keys starting with '$' act as operators and cannot be stored")]
    OperatorInValue {
        /// The field.
        path: String,
        /// The offending key.
        key: String,
    },
    /// A change names a field tandem keeps for itself (the marker, `_tandem`,
    /// or `_id`), or a guard names the marker or `_tandem` (tandem's
    /// bookkeeping, which says nothing of the application's data).
    #[error("field {path:?} is reserved by tandem and cannot be changed or guarded")]
    ReservedField {
        /// The reserved path.
        path: String,
    },
    /// Two changes of one document touch the same field, or a field and one inside it.
    #[error("changes to {first:?} and {second:?} overlap; change each field once")]
    OverlappingPaths {
        /// The first path.
        first: String,
        /// The second path.
        second: String,
    },
    /// An increment by zero, by a value that cannot be negated (`i32::MIN`,
    /// `i64::MIN`), by a NaN or an infinity, or by anything but an `i32`,
    /// `i64`, `f64` or `Decimal128`.
    #[error("invalid increment of {path:?}: {reason}")]
    InvalidAmount {
        /// The field.
        path: String,
        /// Why the amount is invalid.
        reason: &'static str,
    },
    /// A value could not be converted to BSON.
    #[error("value for {path:?} cannot be stored: {message}")]
    Unserializable {
        /// The field.
        path: String,
        /// The serializer's message.
        message: String,
    },
    /// A value nests documents and arrays deeper than a document may hold
    /// them, counting the levels of its field's path
    /// ([`MAX_VALUE_DEPTH`](crate::change::MAX_VALUE_DEPTH)): MongoDB's
    /// manual supports at most 100 levels (a server refuses past 180 by
    /// default), and the transaction record keeps the value deeper than
    /// the document does.
    #[error("value for {path:?} nests {depth} levels deep, its path included; at most {limit} fit in a document and in the transaction record")]
    TooDeep {
        /// The field.
        path: String,
        /// How deep the value reaches, its path's levels included.
        depth: usize,
        /// The limit.
        limit: usize,
    },
    /// A document change with nothing to do.
    #[error("the change of {participant} has no field changes")]
    Empty {
        /// The participant.
        participant: String,
    },
    /// A transaction with no participants.
    #[error("a transaction needs at least one participant")]
    NoParticipants,
    /// More participants than the coordinator allows
    /// ([`CoordinatorBuilder::max_participants`](crate::CoordinatorBuilder::max_participants)).
    #[error("{count} participants exceed the limit of {limit} (raise it with CoordinatorBuilder::max_participants)")]
    TooManyParticipants {
        /// How many were given.
        count: usize,
        /// The configured limit.
        limit: usize,
    },
    /// Two participants address the same document.
    #[error("document {participant} appears twice in one transaction")]
    DuplicateParticipant {
        /// The participant.
        participant: String,
    },
    /// The transaction id is empty or too long.
    #[error("invalid transaction id {id:?}: {reason}")]
    InvalidId {
        /// The id as given.
        id: String,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// A participant names a store the coordinator does not know.
    #[error("participant {participant} uses unknown store {store:?}")]
    UnknownStore {
        /// The participant.
        participant: String,
        /// The store name.
        store: String,
    },
    /// A participant's store name means another database in this process
    /// than in the one that recorded the transaction: the store registered
    /// here under that name has another identity
    /// ([`ParticipantEntry::store_uid`](crate::record::ParticipantEntry::store_uid)),
    /// or its identity could not be read (`here: None`). The record is left
    /// for a process whose store under that name is the recorded one.
    #[error(
        "participant {participant} is in store {store:?} with identity {recorded}, but the store \
         {store:?} here {}",
        foreign_here(.here)
    )]
    ForeignStore {
        /// The participant.
        participant: String,
        /// The store name.
        store: String,
        /// The store identity the record keeps.
        recorded: String,
        /// The identity of the store registered here under that name, if read.
        here: Option<String>,
    },
    /// A participant kind that no factory is registered for.
    #[error("no participant kind {kind:?} is registered")]
    UnknownKind {
        /// The kind.
        kind: String,
    },
    /// The native strategy needs every participant in one store that supports it.
    #[error("the native strategy cannot run this transaction: {reason}")]
    NativeUnavailable {
        /// Why.
        reason: String,
    },
    /// A stored participant specification could not be read back.
    #[error("participant specification of kind {kind:?} is invalid: {message}")]
    InvalidSpec {
        /// The kind.
        kind: String,
        /// What was wrong.
        message: String,
    },
}

/// What [`ChangeError::ForeignStore`] says of the store here.
fn foreign_here(here: &Option<String>) -> String {
    match here {
        Some(here) => format!("is another database (identity {here})"),
        None => "has an identity not read yet (the store may be down)".to_owned(),
    }
}

/// Why one participant step (apply, compensate, clear) did not succeed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// The document does not exist.
    #[error("{participant}: document not found")]
    NotFound {
        /// The participant.
        participant: String,
    },
    /// The document to insert exists already.
    #[error("{participant}: document already exists")]
    AlreadyExists {
        /// The participant.
        participant: String,
    },
    /// A guard (precondition) is false.
    #[error("{participant}: guard failed: {guard}")]
    GuardFailed {
        /// The participant.
        participant: String,
        /// The guard, e.g. `balance >= 100 (found 40)`.
        guard: String,
    },
    /// A stored field has the wrong type for the change or guard.
    #[error("{participant}: field {path:?} has the wrong type: {message}")]
    TypeMismatch {
        /// The participant.
        participant: String,
        /// The field.
        path: String,
        /// What was found.
        message: String,
    },
    /// Another transaction holds the document, or changed it since it was read.
    #[error("{participant}: conflict with transaction {holder}")]
    Conflict {
        /// The participant.
        participant: String,
        /// The transaction holding the document, or `"(concurrent write)"`.
        holder: String,
    },
    /// This transaction was already finished by another worker: the step is fenced off.
    #[error("{participant}: fenced: transaction already finished elsewhere")]
    Fenced {
        /// The participant.
        participant: String,
    },
    /// The apply reached the store at or after its deadline, by the store's
    /// clock, and changed nothing (see [`StepContext`](crate::StepContext)):
    /// the worker was too slow, or its transaction may be in other hands.
    #[error("{participant}: the deadline of the apply has passed; nothing was changed")]
    Expired {
        /// The participant.
        participant: String,
    },
    /// The step would remove the participant's marker before the store's clock
    /// reads `until`, while an earlier apply may still be in flight; nothing
    /// was changed, and the step succeeds when repeated from then on (recovery
    /// repeats it).
    #[error("{participant}: not before {until}: an earlier apply may still be in flight")]
    NotYet {
        /// The participant.
        participant: String,
        /// The earliest time, by the participant store's clock, the step may act.
        until: bson::DateTime,
    },
    /// The undo found fields that a writer outside tandem changed after the
    /// apply: restoring the before-image would have overwritten that write, so
    /// those fields were left as that writer set them (everything else was
    /// undone, and the marker removed). The transaction still ends `canceled`,
    /// and its record's history notes the conflict (`TxRecord::conflicts`).
    #[error("{participant}: not restored, changed outside tandem since the apply: {fields}")]
    Overwritten {
        /// The participant.
        participant: String,
        /// The fields left as found, e.g. `state (found "Shipped")`.
        fields: String,
    },
    /// The change would make the document exceed the store's size limit.
    #[error("{participant}: document would exceed the size limit")]
    TooLarge {
        /// The participant.
        participant: String,
    },
    /// What the transaction record would keep of the participant (its
    /// spec, and its before-image: a field's value as the document holds
    /// it) nests documents and arrays deeper than a document may hold
    /// them: the record keeps a before-image's values six levels below its
    /// own top, and MongoDB's manual supports at most 100 levels. Refused while
    /// preparing, before anything is written; a document field that deep
    /// was not written by tandem (whose values reach at most
    /// [`MAX_VALUE_DEPTH`](crate::change::MAX_VALUE_DEPTH) levels, their
    /// paths included). The native strategy keeps no before-image.
    #[error("{participant}: the transaction record would nest what it keeps of it {depth} levels deep; at most {limit} fit")]
    TooDeep {
        /// The participant.
        participant: String,
        /// How deep the record would nest, its own level included.
        depth: usize,
        /// The limit.
        limit: usize,
    },
    /// A numeric change would overflow.
    #[error("{participant}: {message}")]
    Overflow {
        /// The participant.
        participant: String,
        /// The store's message.
        message: String,
    },
    /// A hand-written participant refused the step for a business reason.
    #[error("{participant}: rejected: {reason}")]
    Rejected {
        /// The participant.
        participant: String,
        /// Why.
        reason: String,
    },
    /// The store failed; the outcome of the step is unknown until it is repeated.
    #[error("{participant}: store error: {source}")]
    Store {
        /// The participant.
        participant: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
}

impl StepError {
    /// Whether this error means the store failed (rather than the change being refused).
    pub fn is_store_failure(&self) -> bool {
        matches!(self, StepError::Store { .. })
    }

    /// Whether the change's own conditions refused it: its document is
    /// missing ([`NotFound`](Self::NotFound)) or, for an insert, exists
    /// ([`AlreadyExists`](Self::AlreadyExists)), a guard is false
    /// ([`GuardFailed`](Self::GuardFailed)), or a hand-written participant
    /// said no ([`Rejected`](Self::Rejected)). These are the answers a
    /// business gives its customer ("insufficient funds", "out of stock");
    /// the same transaction run again is refused again until the data
    /// changes.
    ///
    /// Not a refusal: another transaction in the way
    /// ([`Conflict`](Self::Conflict)), a step too late or fenced off
    /// ([`Expired`](Self::Expired), [`Fenced`](Self::Fenced),
    /// [`NotYet`](Self::NotYet)), an outside write met by an undo
    /// ([`Overwritten`](Self::Overwritten)), a store failure
    /// ([`Store`](Self::Store)), and what the stored data or the store's
    /// limits do not allow ([`TypeMismatch`](Self::TypeMismatch),
    /// [`TooLarge`](Self::TooLarge), [`TooDeep`](Self::TooDeep),
    /// [`Overflow`](Self::Overflow)).
    ///
    /// ```
    /// use tandem::StepError;
    /// let guard = StepError::GuardFailed { participant: "shop.wallets/bob".into(), guard: "balance >= 300 (found 40)".into() };
    /// let conflict = StepError::Conflict { participant: "shop.wallets/bob".into(), holder: "t-7".into() };
    /// assert!(guard.is_refusal());
    /// assert!(!conflict.is_refusal());
    /// ```
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            StepError::NotFound { .. }
                | StepError::AlreadyExists { .. }
                | StepError::GuardFailed { .. }
                | StepError::Rejected { .. }
        )
    }

    /// The label of the participant the error is about.
    pub fn participant(&self) -> Option<&str> {
        match self {
            StepError::NotFound { participant }
            | StepError::AlreadyExists { participant }
            | StepError::GuardFailed { participant, .. }
            | StepError::TypeMismatch { participant, .. }
            | StepError::Conflict { participant, .. }
            | StepError::Fenced { participant }
            | StepError::Expired { participant }
            | StepError::NotYet { participant, .. }
            | StepError::Overwritten { participant, .. }
            | StepError::TooLarge { participant }
            | StepError::TooDeep { participant, .. }
            | StepError::Overflow { participant, .. }
            | StepError::Rejected { participant, .. }
            | StepError::Store { participant, .. } => Some(participant),
        }
    }
}

/// Why a transaction did not commit.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TxError {
    /// The transaction was malformed; nothing was written.
    #[error("invalid transaction: {0}")]
    Invalid(#[from] ChangeError),
    /// A transaction record with this id exists already, written by another
    /// transaction (told apart by the record's creation token); this one wrote
    /// no record and applied nothing. For a retry with an idempotency key,
    /// `state` is the outcome of the first run once it finished.
    #[error("transaction {id} exists already{}", state.map(|s| format!(" ({s})")).unwrap_or_default())]
    Duplicate {
        /// The id.
        id: TxId,
        /// The state of the existing record (or of its stub), if it could be
        /// read; `None` too where that record was written by a late copy of
        /// a create ([`TxRecord::is_inert`](crate::TxRecord::is_inert)),
        /// whose state says nothing of the run that sent it.
        state: Option<TxState>,
    },
    /// A participant refused its change, and the transaction is decided
    /// canceled: it never commits.
    ///
    /// `undone` says whether every change it applied was undone before this
    /// answer. It is `false` when an undo met a store failure, or had to wait
    /// because an apply whose answer was lost could still land until the
    /// transaction's deadline: the record stays `canceling`, the documents may
    /// show the applied half, and recovery undoes the rest once the lease
    /// plus the clock margin has passed. Read the record to learn when it is
    /// `canceled`; [`Coordinator::drain`](crate::Coordinator::drain) does
    /// not wait for this, only recovery finishes it.
    #[error(
        "transaction {id} canceled{}: {cause}",
        if *undone { "" } else { " (its undo is left to recovery)" }
    )]
    Canceled {
        /// The id.
        id: TxId,
        /// Why: a refusal by a change's own conditions
        /// ([`StepError::is_refusal`]) where any change was refused so,
        /// before any other change's conflict, expired apply or store
        /// failure; among equals, the first change's.
        cause: StepError,
        /// Which participant refused, when one did (not for a refusal of the
        /// transaction as a whole, such as a record too large): see
        /// [`TxError::participant`] and [`TxError::refused_by`].
        participant: Option<Box<ParticipantRef>>,
        /// Whether nothing of the transaction is left applied: every applied
        /// change was undone (or none was applied) before this answer.
        undone: bool,
    },
    /// Another worker took the transaction over (its lease had expired); that worker decides the outcome.
    #[error("transaction {id} was taken over by another worker (now {state:?} at epoch {epoch})")]
    Superseded {
        /// The id.
        id: TxId,
        /// The state the record is in now, read back after the move that
        /// missed; `None` if it no longer exists.
        state: Option<TxState>,
        /// The record's epoch now (the last one known, if it no longer exists).
        epoch: i64,
    },
    /// No record has this id: the transaction never existed, or it finished
    /// and garbage collection removed its record. Which of the two is not
    /// known (answered by [`Coordinator::cancel`](crate::Coordinator::cancel)).
    #[error("no transaction record has the id {id}: it never existed, or it finished and its record was collected")]
    NoRecord {
        /// The id.
        id: TxId,
    },
    /// The store failed mid-way and **the outcome is not known yet**.
    ///
    /// * `state: None`: the worker does not know whether the record was
    ///   written (the write's answer was lost). If it was, recovery finishes
    ///   it, rolling it back or forward; read the record to find out.
    /// * `state: Some(Pending)`: the record exists; recovery commits it if
    ///   every apply landed, and otherwise rolls it back
    ///   ([`PendingPolicy::RollBack`](crate::PendingPolicy::RollBack), the
    ///   default) or forward, so it may still commit.
    /// * `state: Some(Applied)` never reaches a caller (`applied` is committed),
    ///   nor does `Canceling` (the outcome is then [`TxError::Canceled`]).
    ///
    /// With the native strategy (`state` is `None`), the commit was sent and
    /// its outcome stayed unknown (a keyed transaction's record, written in
    /// the same native transaction, exists exactly when it committed), or a
    /// keyed transaction's store failed before its commit was sent: nothing
    /// was applied and its id is left free, so a retry under the id runs it.
    /// An unkeyed native transaction whose store failed before its commit
    /// was aborted and is answered [`TxError::Canceled`].
    #[error(
        "transaction {id} interrupted {}, outcome unknown: {source}",
        where_interrupted(state)
    )]
    Interrupted {
        /// The id.
        id: TxId,
        /// The last state this worker knows to be stored; `None` if it does
        /// not know whether the record was written.
        state: Option<TxState>,
        /// The store error.
        #[source]
        source: StoreError,
    },
}

fn where_interrupted(state: &Option<TxState>) -> String {
    match state {
        Some(state) => format!("in state {state}"),
        None => "before its record was known to be written (it may exist)".to_owned(),
    }
}

/// The participant a refusal came from, to turn it into a business error
/// ("coupon already used", "out of stock") without matching labels.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ParticipantRef {
    /// Its position in the transaction, from 0, in the order it was added.
    pub index: usize,
    /// Its label, e.g. `shop.coupons/SPRING`.
    pub label: String,
    /// Its database and collection, for a document change.
    pub namespace: Option<Namespace>,
    /// Its document's `_id`, for a document change.
    pub id: Option<bson::Bson>,
    /// The `#[participant]` struct it was declared from
    /// ([`std::any::type_name`]), for a typed change.
    pub type_name: Option<&'static str>,
}

impl ParticipantRef {
    /// Participant number `index` (from 0), labeled `label`, with nothing else known.
    pub fn new(index: usize, label: impl Into<String>) -> Self {
        ParticipantRef {
            index,
            label: label.into(),
            namespace: None,
            id: None,
            type_name: None,
        }
    }

    /// The same, naming the document it changes.
    pub fn with_document(mut self, namespace: Namespace, id: bson::Bson) -> Self {
        self.namespace = Some(namespace);
        self.id = Some(id);
        self
    }

    /// The same, naming the type it was declared from.
    pub fn with_type_name(mut self, type_name: &'static str) -> Self {
        self.type_name = Some(type_name);
        self
    }

    /// Whether it was declared from the `#[participant]` struct `T`.
    pub fn is<T: ?Sized + 'static>(&self) -> bool {
        self.type_name == Some(std::any::type_name::<T>())
    }
}

impl TxError {
    /// The name a step on the transaction record (not a participant's
    /// change) carries in its [`StepError`].
    pub(crate) const RECORD: &'static str = "(transaction record)";

    /// The answer for a transaction refused or failed as a whole, at its
    /// record, before anything of it was applied.
    pub(crate) fn canceled_at_record(id: TxId, cause: StepError) -> Self {
        TxError::Canceled {
            id,
            cause,
            participant: None,
            undone: true,
        }
    }

    /// [`canceled_at_record`](Self::canceled_at_record) for a store failure
    /// met before the record was written.
    pub(crate) fn record_store_failed(id: TxId, source: StoreError) -> Self {
        Self::canceled_at_record(
            id,
            StepError::Store {
                participant: Self::RECORD.into(),
                source,
            },
        )
    }

    /// The participant at which the transaction was canceled, if it was
    /// canceled at one: by its refusal ([`StepError::is_refusal`]), or by a
    /// conflict, an expired apply or a store failure there. `None` for a
    /// refusal of the transaction as a whole (its record too large, say)
    /// and for every answer but [`TxError::Canceled`].
    pub fn participant(&self) -> Option<&ParticipantRef> {
        match self {
            TxError::Canceled {
                participant: Some(p),
                ..
            } => Some(p),
            _ => None,
        }
    }

    /// Whether the transaction was canceled by a refusal
    /// ([`StepError::is_refusal`]: a guard, a missing or existing document,
    /// a hand-written participant's no) of a change declared from the
    /// `#[participant]` struct `T` (e.g. `err.refused_by::<Coupon>()`).
    ///
    /// `false` when the transaction was canceled at that change for
    /// another reason (a conflict with another transaction, an apply past
    /// its deadline, a store failure): telling a customer "coupon already
    /// used" then would be wrong. [`participant`](Self::participant) names
    /// the change whatever the reason.
    pub fn refused_by<T: ?Sized + 'static>(&self) -> bool {
        match self {
            TxError::Canceled { cause, .. } => {
                cause.is_refusal() && self.participant().is_some_and(ParticipantRef::is::<T>)
            }
            _ => false,
        }
    }

    /// The transaction id, when one was assigned.
    pub fn id(&self) -> Option<&TxId> {
        match self {
            TxError::Invalid(_) => None,
            TxError::Duplicate { id, .. }
            | TxError::Canceled { id, .. }
            | TxError::Superseded { id, .. }
            | TxError::NoRecord { id }
            | TxError::Interrupted { id, .. } => Some(id),
        }
    }
}

/// The longest text of a stored value an error or a record note quotes.
pub(crate) const QUOTE_LIMIT: usize = 256;

/// The longest store message a step error passes on.
pub(crate) const MESSAGE_LIMIT: usize = 1024;

/// The longest error a record keeps (`lastError`).
pub(crate) const RECORD_TEXT_LIMIT: usize = 4096;

/// The longest note a line of a record's history keeps. The record keeps
/// [`HISTORY_KEPT`](crate::engine::HISTORY_KEPT) lines, each with its
/// owner's name (at most [`OWNER_LIMIT`] bytes, and a recovery worker's
/// suffix): all of them, with the longest `lastError` and cancel reason,
/// fit in the room a record leaves beside its participant entries.
pub(crate) const HISTORY_TEXT_LIMIT: usize = 1024;

/// The longest owner name a coordinator takes
/// ([`CoordinatorBuilder::owner`](crate::CoordinatorBuilder::owner)).
pub(crate) const OWNER_LIMIT: usize = 256;

/// `text`, cut to at most `max` bytes (at a character boundary) with what
/// was left out said: errors and record notes quote stored values, and a
/// value may be megabytes long (a record is limited to 16 MiB).
pub(crate) fn clip(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

#[cfg(test)]
mod clip_tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_at_a_character_boundary() {
        assert_eq!(clip("short".into(), 10), "short");
        assert_eq!(clip("abcdef".into(), 3), "abc… (6 bytes)");
        // "é" is two bytes: a cut inside it moves back.
        assert_eq!(clip("aé".into(), 2), "a… (3 bytes)");
    }
}
