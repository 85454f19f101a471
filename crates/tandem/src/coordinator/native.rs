//! Native transactions: when [`Strategy::Auto`] chooses one, and running a
//! transaction as one multi-document transaction of its store.

use super::{Coordinator, Item, Receipt, Transaction};
use crate::change::DocumentChange;
use crate::config::{ConflictPolicy, Strategy};
use crate::error::{ChangeError, StepError, TxError};
use crate::event::TxEvent;
use crate::native::NativeFailure;
use crate::participant::Participant;
use crate::record::TxState;
use crate::store::Store;
use crate::store::StoreError;
use crate::TxId;

/// The one store every participant of `tx` lives in (`None`: the default
/// store), or why there is none: a hand-written participant, or several stores.
fn one_document_store(tx: &Transaction) -> Result<Option<String>, String> {
    let mut store: Option<&Option<String>> = None;
    for item in &tx.items {
        match item {
            Item::Document(change) => match store {
                None => store = Some(&change.store),
                Some(first) if *first != change.store => {
                    return Err(format!(
                        "participants span the stores {} and {}, but native transactions run on one store: several stores need two-phase",
                        first.as_deref().unwrap_or("default"),
                        change.store.as_deref().unwrap_or("default")
                    ))
                }
                Some(_) => {}
            },
            Item::Custom(p) => {
                return Err(format!(
                    "participant {} is not a document change",
                    p.label()
                ))
            }
        }
    }
    Ok(store.cloned().flatten())
}

/// Why a transaction under a caller-chosen id cannot run natively on the
/// store `name`: its record, which answers a retry under the id, lives in
/// the default store, and one native transaction runs on one store.
fn keyed_elsewhere(name: &str) -> String {
    format!(
        "a caller-chosen id is kept in the transaction record, in the default store, so that a retry is told `Duplicate`; the changes are on the store {name}, and a native transaction runs on one store: run it two-phase"
    )
}

/// Whose record, final from the start, a keyed transaction leaves.
#[derive(Clone, Copy)]
pub(super) enum FinalRecord {
    /// A native transaction's (marked `native`).
    Native,
    /// A two-phase transaction's, refused before its own record was
    /// written.
    RefusedBeforeRecord,
}

impl Coordinator {
    /// What [`Strategy::Auto`] runs `tx` with, and why.
    pub(crate) fn choose(&self, tx: &Transaction) -> (Strategy, String) {
        let two_phase = |why: String| (Strategy::TwoPhase, why);
        let name = match one_document_store(tx) {
            Ok(name) => name,
            Err(why) => return two_phase(why),
        };
        let name = name.as_deref();
        if let (Some(_), Some(name)) = (&tx.id, name) {
            return two_phase(keyed_elsewhere(name));
        }
        match self.engine.stores.get(name) {
            Some(s) if s.native().is_some() => {}
            Some(s) => {
                return two_phase(format!(
                    "the {} store ({}) has no native transactions",
                    name.unwrap_or("default"),
                    s.name()
                ))
            }
            // An unknown store: the two-phase path refuses it with a typed error.
            None => return two_phase(format!("unknown store {name:?}")),
        }
        let changes = tx.items.len();
        if changes > crate::config::NATIVE_MAX_CHANGES {
            return two_phase(format!(
                "{changes} changes, more than the {} a native transaction takes",
                crate::config::NATIVE_MAX_CHANGES
            ));
        }
        // Serialized only when every cheaper check passed.
        let bytes: usize = tx
            .items
            .iter()
            .filter_map(|item| match item {
                Item::Document(change) => Some(
                    change
                        .spec()
                        .map(|spec| crate::query::size::document_len(&spec))
                        .unwrap_or(usize::MAX / 2),
                ),
                Item::Custom(_) => None,
            })
            .fold(0, usize::saturating_add);
        if bytes > crate::config::NATIVE_MAX_BYTES {
            return two_phase(format!(
                "{bytes} bytes of changes, more than the {} a native transaction takes",
                crate::config::NATIVE_MAX_BYTES
            ));
        }
        (
            Strategy::Native,
            format!(
                "{changes} change(s), {bytes} bytes, all on the {} store, which has native transactions",
                name.unwrap_or("default")
            ),
        )
    }

    /// The record of a transaction under a caller-chosen id that is final
    /// from the start, in `state` (`done` or `canceled`), with no
    /// participants (`origin`): a native one's, or a two-phase one's refused
    /// before its own record was written. Stamped with the records store's
    /// clock as the coordinator estimates it (no step of it can arrive late:
    /// the time serves garbage collection only). A native `done` record is
    /// written inside the transaction, so it exists if and only if the
    /// transaction committed; a `canceled` one after the refusal.
    async fn final_record(
        &self,
        state: TxState,
        last_error: Option<&str>,
        origin: FinalRecord,
    ) -> Result<bson::Document, StoreError> {
        let engine = &self.engine;
        let now = engine.retry(|| engine.records().clock_estimate()).await?;
        let owner = engine.config.owner.as_str();
        let lease = i64::try_from(engine.config.lease.as_millis()).unwrap_or(i64::MAX);
        let event = match origin {
            FinalRecord::Native => "native",
            FinalRecord::RefusedBeforeRecord => "refused before its record",
        };
        // A native record is stamped before its attempt, and the store's
        // own repeats of that attempt (a transient transaction error, an
        // unknown commit result) may come between the stamp and the commit,
        // within the retry budget: the key's window is kept that much longer.
        let window = super::two_phase::idempotency_millis(&engine.config);
        let idempotency_millis = match origin {
            FinalRecord::Native => window.saturating_add(
                i64::try_from(engine.config.retry.budget.as_millis()).unwrap_or(i64::MAX),
            ),
            FinalRecord::RefusedBeforeRecord => window,
        };
        let mut record = bson::doc! {
            "state": state,
            "participants": [],
            "owner": owner,
            "epoch": 0_i64,
            "leaseMillis": lease,
            "attempts": 0,
            "token": crate::record::new_token(),
            "keyed": true,
            "idempotencyMillis": idempotency_millis,
            "created": now,
            "lastModified": now,
            "finishedAt": now,
            "history": [crate::engine::history(state, owner, 0, event)],
        };
        if let FinalRecord::Native = origin {
            record.insert("native", true);
        }
        if let Some(error) = last_error {
            record.insert(
                "lastError",
                crate::error::clip(error.to_owned(), crate::error::RECORD_TEXT_LIMIT),
            );
        }
        Ok(record)
    }

    /// The insert of a native transaction's record `doc` under `id`,
    /// stamped with the records store's clock as the coordinator estimates
    /// it now (`created`, `lastModified`, `finishedAt`), for an attempt
    /// about to be sent: the record exists only once the transaction
    /// commits, and garbage collection counts the key's idempotency window
    /// from `finishedAt`, so no wait before the attempt may lie between the
    /// stamp and the commit.
    async fn stamp_native_record(
        &self,
        id: &TxId,
        doc: &bson::Document,
    ) -> Result<DocumentChange, StoreError> {
        let engine = &self.engine;
        let now = engine.retry(|| engine.records().clock_estimate()).await?;
        let mut doc = doc.clone();
        for field in ["created", "lastModified", "finishedAt"] {
            doc.insert(field, now);
        }
        Ok(DocumentChange::insert(
            engine.records_ns(),
            id.as_str(),
            doc,
        ))
    }

    /// After a keyed transaction was refused without a record of its own
    /// (a native one aborted, a two-phase one was refused before its record
    /// was written: nothing of it was applied), takes its id with a
    /// `canceled` record, so that a retry under the id is told `Duplicate`,
    /// as after a refusal at a two-phase apply. `Ok(None)`: the record is
    /// written (or the id holds this run's own record already).
    /// `Ok(Some(state))`: another run under the id took it first (`state`,
    /// if its record could be read). `Err`: the records store failed, and
    /// whether the id is taken is not known.
    async fn take_refused_key(
        &self,
        id: &TxId,
        cause: &StepError,
        origin: FinalRecord,
        own_token: Option<&str>,
    ) -> Result<Option<Option<TxState>>, StoreError> {
        let engine = &self.engine;
        let mut record = bson::doc! { "_id": id.as_str() };
        record.extend(
            self.final_record(TxState::Canceled, Some(&cause.to_string()), origin)
                .await?,
        );
        let token = record.get_str("token").ok().map(str::to_owned);
        let ns = engine.records_ns();
        match engine
            .retry(|| engine.records().insert_one(&ns, record.clone()))
            .await
        {
            Ok(()) => Ok(None),
            Err(e) if e.kind == crate::store::StoreErrorKind::DuplicateKey => {
                // Ours, landed by an attempt whose answer was lost, or
                // another run's: told apart by the creation token, read as
                // the two-phase create reads it (`exists`: on MongoDB a
                // `linearizable` read, which a lagging snapshot cannot fool).
                for token in token.as_deref().into_iter().chain(own_token) {
                    let ours = bson::doc! { "_id": id.as_str(), "token": token };
                    if engine
                        .retry(|| engine.records().exists(&ns, ours.clone()))
                        .await?
                    {
                        return Ok(None);
                    }
                }
                let state = engine.duplicate_state(id).await;
                Ok(Some(state))
            }
            Err(e) => Err(e),
        }
    }

    /// A keyed transaction's refusal that left no record of its own
    /// (`answer`, a [`TxError::Canceled`]: a native transaction aborted, or
    /// a two-phase one refused before its record was written) takes the id
    /// with a `canceled` record ([`take_refused_key`](Self::take_refused_key)),
    /// so that a retry under the id is told `Duplicate` whichever strategy
    /// ran it and wherever it was refused. The answer stays `Canceled`; it
    /// is `Duplicate` when another run under the id took it first, and
    /// [`TxError::Interrupted`] (no id taken) for a store failure whose
    /// outcome is not known rather than a refusal. Should
    /// the record not be written or confirmed, the answer is `Canceled` all
    /// the same, and a [`TxEvent::StepFailed`] says that a retry under the
    /// id may run again. `own_token`: the creation token of a record this
    /// run may have written under the id already (an inert one), which is
    /// then its own. Any other answer is passed on as it is.
    pub(super) async fn keep_refused_key(
        &self,
        answer: TxError,
        origin: FinalRecord,
        own_token: Option<&str>,
    ) -> Result<Receipt, TxError> {
        let TxError::Canceled { id, cause, .. } = &answer else {
            return Err(answer);
        };
        // A store failure, not a refusal (a named store's identity that
        // could not be read, the records store's clock): no id is taken,
        // and the answer is that the outcome is not known, as for a native
        // transaction whose store failed before its commit, so that a retry
        // under the id runs it (`Canceled` would say the key was used up).
        if let StepError::Store { source, .. } = cause {
            if source.kind.outcome_unknown() {
                return Err(TxError::Interrupted {
                    id: id.clone(),
                    state: None,
                    source: source.clone(),
                });
            }
        }
        match self.take_refused_key(id, cause, origin, own_token).await {
            Ok(None) => Err(answer),
            Ok(Some(state)) => Err(TxError::Duplicate {
                id: id.clone(),
                state,
            }),
            Err(e) => {
                self.engine.emit(TxEvent::StepFailed {
                    id: id.clone(),
                    participant: self.engine.records_ns().to_string() + "/" + id.as_str(),
                    error: format!(
                        "the refusal's record under the id could not be written or confirmed, so a retry under the id may run again: {e}"
                    ),
                });
                Err(answer)
            }
        }
    }

    /// Runs a transaction as one native multi-document transaction of its store.
    pub(super) async fn run_native(
        &self,
        tx: Transaction,
        announce: impl FnOnce(&TxId),
    ) -> Result<Receipt, TxError> {
        let unavailable =
            |reason: String| TxError::Invalid(ChangeError::NativeUnavailable { reason });
        let name = one_document_store(&tx).map_err(unavailable)?;
        let keyed = tx.id.is_some();
        // The same validation as the two-phase path, so bad input fails the same way.
        let (id, items) = self.prepare_items(tx)?;
        if let (true, Some(name)) = (keyed, &name) {
            return Err(unavailable(keyed_elsewhere(name)));
        }
        announce(&id);
        let mut changes: Vec<DocumentChange> = Vec::with_capacity(items.len() + 1);
        // A caller-chosen id: the record goes in the same transaction, first,
        // so that a retry under the id collides with it and is told
        // `Duplicate` (as a two-phase one is), and collection keeps it as a
        // stub for the idempotency window. It is stamped again right before
        // each attempt (`stamp_native_record`): its `finishedAt` is where
        // that window starts, and a wait between two attempts (a conflict
        // waited out, this coordinator's own finishing) must not be counted
        // in it.
        let record = if keyed {
            // As a two-phase run registers before its first keyed record:
            // garbage collection keeps a key taken for the longest lease
            // registered after its window, which covers the time a commit
            // can land after the record's stamp.
            self.engine
                .register_lease()
                .await
                .map_err(|source| TxError::record_store_failed(id.clone(), source))?;
            let doc = self
                .final_record(TxState::Done, None, FinalRecord::Native)
                .await
                .map_err(|source| TxError::Interrupted {
                    id: id.clone(),
                    state: None,
                    source,
                })?;
            let change = DocumentChange::insert(self.engine.records_ns(), id.as_str(), doc.clone());
            let label = change.label();
            changes.push(change);
            Some((label, doc))
        } else {
            None
        };
        changes.extend(items.into_iter().filter_map(|item| match item {
            Item::Document(change) => Some(*change),
            // Refused above.
            Item::Custom(_) => None,
        }));
        let store = self
            .engine
            .stores
            .get(name.as_deref())
            .ok_or_else(|| unavailable(format!("unknown store {name:?}")))?;
        let Some(native) = store.native() else {
            return Err(unavailable(format!(
                "the {} store has no native transactions",
                store.name()
            )));
        };
        let config = &self.engine.config;
        let started = tokio::time::Instant::now();
        let mut attempt = 0_u32;
        let mut tidied = false;
        let mut settled = 0;
        let mut guards_settled = false;
        let outcome = loop {
            attempt += 1;
            if let (Some((_, doc)), 2..) = (&record, attempt) {
                changes[0] = self.stamp_native_record(&id, doc).await.map_err(|source| {
                    TxError::Interrupted {
                        id: id.clone(),
                        state: None,
                        source,
                    }
                })?;
            }
            let since = self.finished_mark();
            let mut outcome = native.run_native(&changes, config.retry).await;
            // Refused for the zero credit sums in the way of a credit (what
            // credits that landed or were undone leave): dropped, and run
            // once more. The tidy's read and guarded unset are repeated
            // after a transient failure, as every other request is (a
            // repeat reads the sums again); a store failure it cannot get
            // past is the answer, not the refusal the sums in the way made.
            if let (
                false,
                Err(NativeFailure::Aborted(StepError::TypeMismatch { participant, .. })),
            ) = (tidied, &outcome)
            {
                tidied = true;
                let change = changes.iter().find(|c| c.label() == *participant);
                if let Some(change) = change {
                    let tidy = self
                        .engine
                        .retry(|| async {
                            match change.tidy_zero_sums(store.as_ref()).await {
                                Err(StepError::Store { source, .. }) => Err(source),
                                other => Ok(other),
                            }
                        })
                        .await;
                    match tidy {
                        Ok(Ok(true)) => continue,
                        Ok(_) => {}
                        Err(source) => {
                            outcome = Err(NativeFailure::Aborted(StepError::Store {
                                participant: change.label(),
                                source,
                            }));
                        }
                    }
                }
            }
            // Refused for a document held by a transaction of this
            // coordinator's own, committed and waiting for its background
            // finishing: run again once that is done (nothing was written).
            if let Err(NativeFailure::Aborted(StepError::Conflict { holder, .. })) = &outcome {
                if settled < super::two_phase::SETTLE_ROUNDS
                    && Box::pin(self.settle_own(&[Some(holder.as_str())], since)).await[0]
                {
                    settled += 1;
                    continue;
                }
            }
            // Refused by a guard that a committed credit of this
            // coordinator's own, still to land at its finishing, may make
            // true: run once more once that finishing is done.
            if let Err(NativeFailure::Aborted(StepError::GuardFailed { .. })) = &outcome {
                if !guards_settled && Box::pin(self.settle_all_own()).await {
                    guards_settled = true;
                    continue;
                }
            }
            let waiting = match (&outcome, config.conflict) {
                (
                    Err(NativeFailure::Aborted(StepError::Conflict { .. })),
                    ConflictPolicy::Wait { timeout },
                ) => {
                    crate::metrics::conflict(Strategy::Native);
                    started.elapsed() < timeout
                }
                _ => false,
            };
            if !waiting {
                break outcome;
            }
            // A refused native transaction wrote nothing: run it again, as
            // a two-phase apply is retried, never in a busy loop.
            let delay = config
                .retry
                .jittered_backoff(attempt)
                .max(std::time::Duration::from_millis(1));
            tokio::time::sleep(delay).await;
        };
        let result = match outcome {
            Ok(()) => Ok(Receipt {
                id,
                strategy: Strategy::Native,
                state: TxState::Done,
                // One command per change inside the transaction, then the commit.
                round_trips: u32::try_from(changes.len())
                    .unwrap_or(u32::MAX)
                    .saturating_add(1),
            }),
            Err(NativeFailure::Aborted(StepError::AlreadyExists { participant }))
                if record.as_ref().map(|(label, _)| label.as_str())
                    == Some(participant.as_str()) =>
            {
                // Nothing of this one was written: the transaction aborted.
                let state = self.engine.duplicate_state(&id).await;
                Err(TxError::Duplicate { id, state })
            }
            Err(NativeFailure::InDoubt(source)) => Err(TxError::Interrupted {
                id,
                state: None,
                source,
            }),
            // A keyed transaction whose store failed before the commit was
            // sent (not a refusal: the store may answer the same request
            // later): nothing was applied, and the id is left free, as a
            // two-phase one's is when its store fails before its record is
            // written, so a retry under the id runs it.
            Err(NativeFailure::Aborted(StepError::Store { source, .. }))
                if keyed && source.kind.outcome_unknown() =>
            {
                Err(TxError::Interrupted {
                    id,
                    state: None,
                    source,
                })
            }
            Err(NativeFailure::Aborted(cause)) => {
                // The store names the refusing change by its label; the
                // index is the caller's (without the record, which a keyed
                // transaction puts first). Two changes labeled alike (`_id`s
                // `7` and `"7"`) cannot be told apart: neither is named.
                let skipped = usize::from(record.is_some());
                let mut named = changes
                    .iter()
                    .enumerate()
                    .skip(skipped)
                    .filter(|(_, c)| cause.participant() == Some(c.label().as_str()));
                let participant = match (named.next(), named.next()) {
                    (Some((i, c)), None) => Some(Box::new(Participant::reference(c, i - skipped))),
                    _ => None,
                };
                // The native transaction was aborted: nothing of it was
                // applied. Under a caller-chosen id, the refusal takes the
                // id, as a two-phase one's record does.
                let canceled = TxError::Canceled {
                    id,
                    cause,
                    participant,
                    undone: true,
                };
                if keyed {
                    self.keep_refused_key(canceled, FinalRecord::Native, None)
                        .await
                } else {
                    Err(canceled)
                }
            }
        };
        self.engine.emit(TxEvent::NativeFinished {
            id: match &result {
                Ok(r) => r.id.clone(),
                Err(e) => e.id().cloned().unwrap_or_else(TxId::generate),
            },
            outcome: match &result {
                Ok(_) => Some(TxState::Done),
                Err(TxError::Canceled { .. }) => Some(TxState::Canceled),
                Err(_) => None,
            },
            error: result.as_ref().err().map(ToString::to_string),
        });
        result
    }
}
