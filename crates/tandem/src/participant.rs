//! The [`Participant`] trait: one party of a transaction, and how to rebuild it.
//!
//! Each step is an idempotent single-document (or single-request) action guarded
//! by the transaction id, so that running it twice, or after another worker
//! already ran it, changes nothing:
//!
//! * [`apply`](Participant::apply) makes the change and leaves a marker, but
//!   only before the epoch's [deadline](StepContext::deadline);
//! * [`compensate`](Participant::compensate) undoes the change if its marker
//!   is there, and removes the marker;
//! * [`clear_marker`](Participant::clear_marker) removes the marker once the
//!   transaction is committed;
//! * [`forget`](Participant::forget) runs when the record is
//!   garbage-collected, for participants that keep something until then.
//!
//! The two steps that remove a marker wait for
//! [`not_before`](StepContext::not_before), so that no apply still in flight
//! can land after them: a late step of a stalled worker is fenced by time.
//!
//! Recovery rebuilds participants from their stored [`spec`](Participant::spec)
//! through a [`ParticipantKinds`] registry, so a participant must be fully
//! described by its kind and spec.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bson::Document;

use crate::error::{ChangeError, StepError};
use crate::store::{Namespace, Store};
use crate::TxId;

/// The stores a coordinator knows: a default one and any number of named ones.
#[derive(Clone)]
pub struct Stores {
    default: Arc<dyn Store>,
    named: HashMap<String, Arc<dyn Store>>,
}

impl Stores {
    /// Stores with just a default.
    pub fn new(default: Arc<dyn Store>) -> Self {
        Stores {
            default,
            named: HashMap::new(),
        }
    }

    /// Adds (or replaces) a named store.
    pub fn insert(&mut self, name: impl Into<String>, store: Arc<dyn Store>) {
        self.named.insert(name.into(), store);
    }

    /// The default store (which also holds the transaction records).
    pub fn default_store(&self) -> &Arc<dyn Store> {
        &self.default
    }

    /// Every store: the default one first, then the named ones (in no particular order).
    pub fn all(&self) -> impl Iterator<Item = &Arc<dyn Store>> {
        std::iter::once(&self.default).chain(self.named.values())
    }

    /// The store named `name`, or the default store for `None`.
    pub fn get(&self, name: Option<&str>) -> Option<&Arc<dyn Store>> {
        match name {
            None => Some(&self.default),
            Some(n) => self.named.get(n),
        }
    }
}

impl fmt::Debug for Stores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stores")
            .field("default", &self.default.name())
            .field("named", &self.named.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// What a participant step knows about its transaction.
///
/// # Time fences
///
/// A worker may stall between sending a step and the step reaching the store,
/// and a recovery worker may meanwhile finish the transaction. Two times,
/// both judged by the clock of the store holding the participant, keep such
/// a late step harmless:
///
/// * [`deadline`](Self::deadline): an [`apply`](Participant::apply) must
///   land only while the store's clock reads earlier than this (document
///   changes put `{$expr: {$lt: [{$toLong: "$$NOW"}, deadline]}}` in the
///   filter), and refuse with [`StepError::Expired`] otherwise;
/// * [`not_before`](Self::not_before): a step that removes the participant's
///   marker ([`clear_marker`](Participant::clear_marker),
///   [`compensate`](Participant::compensate)) must act only once the store's
///   clock reads this time or later, and fail with [`StepError::NotYet`]
///   before. By then every apply that may still be in flight has missed its
///   deadline.
///
/// Together they replace per-document history: nothing is left on a document
/// once its marker is gone.
#[derive(Clone, Copy, Debug)]
pub struct StepContext<'a> {
    /// The transaction id. Key nothing by it that must outlive the record:
    /// a caller-chosen id is free again once its record is collected, and a
    /// later transaction under it would find the earlier one's effects. Use
    /// [`marker`](Self::marker), e.g. as a payment gateway's idempotency key.
    pub tx: &'a TxId,
    /// The value this transaction's markers and locks hold: its id tagged
    /// with its record's creation token ([`TxId::marker`]), so that a late
    /// step of an earlier transaction under the same id never matches them.
    /// What a participant keys its effects by (markers, idempotency keys).
    /// (A document change to a document an earlier participant changes too,
    /// through another store name, carries one of its own,
    /// `<marker>/<index>`, which [`TxId::of_marker`] also reads.)
    pub marker: &'a TxId,
    /// The epoch of the worker running the step.
    pub epoch: i64,
    /// The deadline of this epoch's applies, by the participant store's clock;
    /// `None` only outside the protocol's steps (e.g. in
    /// [`prepare`](Participant::prepare)).
    pub deadline: Option<bson::DateTime>,
    /// The earliest time, by the participant store's clock, at which this
    /// step may remove the participant's marker; `None`: at once.
    pub not_before: Option<bson::DateTime>,
    /// The before-image this participant's [`prepare`](Participant::prepare) returned, as recorded.
    pub before: Option<&'a Document>,
    /// The coordinator's stores.
    pub stores: &'a Stores,
    /// The lease of the coordinator (or recovery worker) running the step
    /// ([`CoordinatorConfig::lease`](crate::CoordinatorConfig::lease)). An insert's placeholder
    /// carries it, so that readers judge on the store's clock, from the
    /// placeholder alone, how long it stays a reservation.
    pub lease: std::time::Duration,
}

/// A participant step written as one update of one document: see
/// [`Participant::apply_statement`].
#[derive(Clone)]
pub struct StepUpdate {
    /// The store holding the document.
    pub store: Arc<dyn Store>,
    /// Its collection.
    pub namespace: Namespace,
    /// The filter, matching at most the one document (it names its `_id`).
    pub filter: Document,
    /// The update.
    pub update: Document,
}

impl fmt::Debug for StepUpdate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepUpdate")
            .field("store", &self.store.name())
            .field("namespace", &self.namespace)
            .field("filter", &self.filter)
            .field("update", &self.update)
            .finish()
    }
}

/// One party of a transaction.
///
/// Document changes implement it already (see [`DocumentChange`](crate::DocumentChange));
/// implement it by hand for anything else that can be made idempotent per
/// transaction, such as a remote service called with an idempotency key
/// (key it by [`StepContext::marker`], not by the bare id).
/// Register the kind with
/// [`CoordinatorBuilder::kind`](crate::CoordinatorBuilder::kind) so recovery can
/// rebuild it.
#[async_trait]
pub trait Participant: Send + Sync + fmt::Debug {
    /// The registered kind that rebuilds this participant from its spec.
    fn kind(&self) -> &str;

    /// Everything needed to rebuild the participant, stored in the transaction record.
    fn spec(&self) -> Result<Document, ChangeError>;

    /// A readable label for logs and errors.
    fn label(&self) -> String;

    /// Who it is, as participant number `index` of its transaction: what a
    /// refusal names ([`TxError::participant`](crate::TxError::participant)).
    /// The default knows the label only.
    fn reference(&self, index: usize) -> crate::ParticipantRef {
        crate::ParticipantRef::new(index, self.label())
    }

    /// The resource this participant touches, to refuse two participants on one resource.
    fn resource(&self) -> String {
        self.label()
    }

    /// Checks the participant before anything is written.
    fn validate(&self) -> Result<(), ChangeError> {
        Ok(())
    }

    /// Reads what compensation will need, before the record is written. Runs
    /// once for a hand-written participant (a document change's is repeated
    /// after a transient store failure, under the coordinator's
    /// [`RetryPolicy`](crate::RetryPolicy)), unless it answers
    /// [`StepError::Conflict`] with a holder that may be one of the
    /// coordinator's own committed transactions waiting for its background
    /// finishing: then it runs again once that finishing is done (a few
    /// times at most), as an apply does. A `prepare` that answers a
    /// conflict must have left nothing behind.
    async fn prepare(&self, ctx: StepContext<'_>) -> Result<Option<Document>, StepError> {
        let _ = ctx;
        Ok(None)
    }

    /// Applies the change and leaves the marker, keyed by
    /// [`StepContext::marker`], only while the store's clock reads earlier
    /// than [`StepContext::deadline`]. Succeeds if this transaction applied
    /// it already; a participant that [`probes`](Participant::probes) may
    /// count a marker it finds as its own only if the same read shows the
    /// store's clock still before the deadline (after it, a later epoch of
    /// recovery may have applied it, and may still cancel), and fails with
    /// [`StepError::Expired`] otherwise.
    async fn apply(&self, ctx: StepContext<'_>) -> Result<(), StepError>;

    /// The [`apply`](Participant::apply) step as one guarded update of one
    /// document, when it is exactly that, so that the coordinator can send it
    /// together with other participants' in one request ([`Store::update_each`]).
    ///
    /// The update must match only where `apply` would make the change, and then
    /// do exactly what `apply` does. When every statement of such a request
    /// matches, each participant counts as applied; otherwise the coordinator
    /// runs `apply` on each of them, which must succeed for those whose update
    /// landed (as it does for an apply repeated after a lost answer).
    /// The default, `None`, always runs `apply`.
    fn apply_statement(&self, ctx: &StepContext<'_>) -> Option<StepUpdate> {
        let _ = ctx;
        None
    }

    /// Undoes the change if it was applied, and removes the marker, honouring
    /// [`StepContext::not_before`] (so that no late apply can land after it).
    /// Idempotent.
    async fn compensate(&self, ctx: StepContext<'_>) -> Result<(), StepError>;

    /// Removes the marker after commit (landing what waits for the commit),
    /// honouring [`StepContext::not_before`]. Idempotent.
    async fn clear_marker(&self, ctx: StepContext<'_>) -> Result<(), StepError>;

    /// The [`clear_marker`](Participant::clear_marker) step as one update of one
    /// document, under the same contract as
    /// [`apply_statement`](Participant::apply_statement). The default, `None`,
    /// always runs `clear_marker`.
    fn clear_statement(&self, ctx: &StepContext<'_>) -> Option<StepUpdate> {
        let _ = ctx;
        None
    }

    /// Whether [`applied`](Participant::applied) can tell if this
    /// participant's apply landed. When every participant of a transaction
    /// can, the transaction commits at its applies (one round trip sooner):
    /// the coordinator answers as soon as every apply has landed, and
    /// recovery asks each participant before it rolls a `pending`
    /// transaction back ([`TxRecord::early_commit`](crate::TxRecord::early_commit)).
    /// The default, `false`, keeps the commit point at the record's move to
    /// `applied`. Document changes can.
    ///
    /// Return `true` only if the participant keeps, beyond the rules every
    /// participant keeps:
    ///
    /// * its [`apply`](Participant::apply) takes a marker it finds for its
    ///   own only in time (read together with the store's clock, before the
    ///   deadline); a coordinator answers committed on that answer;
    /// * [`applied`](Participant::applied) sees every write that reached
    ///   the store, acknowledged yet or not ([`Store::exists`]
    ///   does; a read of a snapshot that may lag does not);
    /// * nothing but `clear_marker` and `compensate` removes its marker.
    ///
    /// `tests/custom_probes.rs` shows a hand-written participant that keeps
    /// them, and what goes wrong with one that takes a late marker for its own.
    fn probes(&self) -> bool {
        false
    }

    /// Whether this transaction's apply landed on the participant (for a
    /// document, whether its marker is there), asked by recovery once no
    /// apply can land any more: it must fail with [`StepError::NotYet`]
    /// while the store's clock reads earlier than [`StepContext::not_before`].
    /// Called only when [`probes`](Participant::probes) is `true`; it must
    /// then answer `true` for every apply that landed, from the moment it
    /// landed until the marker is removed by [`clear_marker`](Participant::clear_marker)
    /// or [`compensate`](Participant::compensate). The default refuses.
    async fn applied(&self, ctx: StepContext<'_>) -> Result<bool, StepError> {
        let _ = ctx;
        Err(StepError::Store {
            participant: self.label(),
            source: crate::StoreError::new(
                crate::StoreErrorKind::Other,
                "this participant cannot tell whether its apply landed",
            ),
        })
    }

    /// Runs when the record is garbage-collected, for a participant that keeps
    /// something about the transaction until then (document changes keep
    /// nothing). Idempotent. The default does nothing.
    ///
    /// A participant whose `apply` is fenced by what it keeps (a gateway
    /// that refuses a voided key) rather than by the deadline must keep it
    /// here: a late apply may arrive at any time after.
    async fn forget(&self, ctx: StepContext<'_>) -> Result<(), StepError> {
        let _ = ctx;
        Ok(())
    }
}

/// Builds a participant from its stored spec.
pub type ParticipantFactory =
    Arc<dyn Fn(&Document) -> Result<Box<dyn Participant>, ChangeError> + Send + Sync>;

/// The registry of participant kinds recovery can rebuild.
#[derive(Clone)]
pub struct ParticipantKinds {
    factories: HashMap<String, ParticipantFactory>,
}

impl ParticipantKinds {
    /// A registry that knows the built-in `"document"` kind.
    pub fn new() -> Self {
        let mut kinds = ParticipantKinds {
            factories: HashMap::new(),
        };
        kinds.register(crate::document::KIND, |spec| {
            if let Some(change) = crate::DocumentChange::read_spec(spec) {
                return Ok(Box::new(change) as Box<dyn Participant>);
            }
            let change: crate::DocumentChange =
                bson::from_document(spec.clone()).map_err(|e| ChangeError::InvalidSpec {
                    kind: crate::document::KIND.into(),
                    message: e.to_string(),
                })?;
            Ok(Box::new(change) as Box<dyn Participant>)
        });
        kinds
    }

    /// Registers (or replaces) the factory of `kind`.
    pub fn register<F>(&mut self, kind: impl Into<String>, factory: F)
    where
        F: Fn(&Document) -> Result<Box<dyn Participant>, ChangeError> + Send + Sync + 'static,
    {
        self.factories.insert(kind.into(), Arc::new(factory));
    }

    /// Whether `kind` is registered.
    pub(crate) fn knows(&self, kind: &str) -> bool {
        self.factories.contains_key(kind)
    }

    /// Rebuilds a participant.
    pub fn build(&self, kind: &str, spec: &Document) -> Result<Box<dyn Participant>, ChangeError> {
        let factory = self
            .factories
            .get(kind)
            .ok_or_else(|| ChangeError::UnknownKind { kind: kind.into() })?;
        factory(spec)
    }
}

impl Default for ParticipantKinds {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ParticipantKinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.factories.keys()).finish()
    }
}
