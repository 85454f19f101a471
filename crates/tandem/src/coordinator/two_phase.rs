//! The two-phase protocol: running a transaction through its record and
//! single-document steps.

use std::time::Duration;

use bson::{doc, Bson, Document};
use futures::future::join_all;

use super::{
    entries_len, entry, entry_depth, Coordinator, Item, Receipt, Transaction, MAX_RECORD_DEPTH,
    MAX_RECORD_ENTRIES_LEN,
};
use crate::change::DocumentOp;
use crate::config::{CommitPoint, Strategy};
use crate::engine::{history, party_markers, CreateStamps, Live, Party, Step};
use crate::error::{ChangeError, StepError, TxError};
use crate::event::TxEvent;
use crate::participant::{Participant, StepContext};
use crate::record::TxState;
use crate::store::{ReturnDocument, Store, StoreError, StoreErrorKind};
use crate::TxId;

/// How many times a transaction waits for this coordinator's own
/// transactions holding its documents to be finished, and prepares or
/// applies again.
pub(super) const SETTLE_ROUNDS: usize = 4;

/// Whether any of `results` was refused as a conflict.
fn any_conflict<T>(results: &[Result<T, StepError>]) -> bool {
    results
        .iter()
        .any(|r| matches!(r, Err(StepError::Conflict { .. })))
}

impl Coordinator {
    /// Runs a transaction with the two-phase protocol.
    pub(super) async fn run_two_phase(
        &self,
        tx: Transaction,
        announce: impl FnOnce(&TxId),
    ) -> Result<Receipt, TxError> {
        let keyed = tx.id.is_some();
        let (id, items) = self.prepare_items(tx)?;
        announce(&id);
        // Inserts reserve their `_id` while preparing: a round trip of its own.
        let inserts: Vec<bool> = items
            .iter()
            .map(|item| matches!(item, Item::Document(c) if matches!(c.op, DocumentOp::Insert { .. })))
            .collect();
        let reserves = inserts.contains(&true);
        // Whether preparing reads or writes a store: a document change that
        // reserves an `_id` or reads a before-image (one taken from its
        // equality guards needs no read), or a hand-written participant that
        // returns a before-image.
        let document_reads = items.iter().any(|item| match item {
            Item::Document(change) => change.prepare_reads(),
            Item::Custom(_) => false,
        });
        let custom: Vec<bool> = items
            .iter()
            .map(|item| matches!(item, Item::Custom(_)))
            .collect();
        let participants: Vec<Box<dyn Participant>> = items
            .into_iter()
            .map(|item| match item {
                Item::Document(change) => change as Box<dyn Participant>,
                Item::Custom(p) => p,
            })
            .collect();
        let engine = &self.engine;
        let mut round_trips = 0;

        // Before-images, read before anything is written.
        let epoch = 0;
        let token = crate::record::new_token();
        let marker = id.marker(Some(&token));
        // The specs the record keeps, and from them the marker each change
        // carries (its own where an earlier one changes the same document
        // through another store name), as recovery rebuilds them.
        let specs: Vec<Result<Document, ChangeError>> =
            participants.iter().map(|p| p.spec()).collect();
        let keys: Vec<_> = participants
            .iter()
            .zip(&specs)
            .map(|(p, spec)| {
                spec.as_ref()
                    .ok()
                    .and_then(|spec| crate::document::document_key(p.kind(), spec))
            })
            .collect();
        let own_markers = party_markers(&keys, &marker);
        // The identity of each named store a document change is in, read
        // before anything is written (once per process and store): the
        // record keeps it, and a process whose store under that name is
        // another database does not drive the record.
        let uids = match self.store_uids(&id, &participants, &specs).await {
            Ok(uids) => uids,
            Err(e) => return self.refused_without_record(keyed, e, None).await,
        };
        let prepare_ctx = StepContext {
            tx: &id,
            marker: &marker,
            epoch,
            deadline: None,
            not_before: None,
            before: None,
            stores: &engine.stores,
            lease: engine.config.lease,
        };
        // A document change's reads and reservations are repeated after a
        // transient failure, as every request is; a hand-written
        // participant's `prepare` runs once.
        let prepare = |i: usize| {
            let ctx = StepContext {
                marker: own_markers[i].as_ref().unwrap_or(&marker),
                ..prepare_ctx
            };
            engine.prepare(participants[i].as_ref(), ctx, !custom[i])
        };
        let since = self.finished_mark();
        let mut images = join_all((0..participants.len()).map(prepare)).await;
        // A document held by a transaction of this coordinator's own that
        // committed and waits for its background finishing (the caller's
        // previous change of the same document, say) is read again once that
        // finishing is done, rather than refused as a conflict. Bounded: each
        // round waits for transactions committed before it.
        if any_conflict(&images) {
            // Boxed: a path seldom taken does not grow every run's future.
            Box::pin(self.settle_conflicts(&mut images, since, prepare)).await;
        }
        let mut parties = Vec::with_capacity(participants.len());
        let mut entries = Vec::with_capacity(participants.len());
        let mut refused = None;
        // A refusal by a change's own conditions (a document missing) is
        // the answer before any other participant's conflict or store
        // failure: the transaction is refused whatever those would have
        // found, as at the applies.
        let refusal = images
            .iter()
            .position(|image| matches!(image, Err(e) if e.is_refusal()));
        for (index, ((((participant, image), spec), own), uid)) in participants
            .into_iter()
            .zip(images)
            .zip(specs)
            .zip(own_markers)
            .zip(&uids)
            .enumerate()
        {
            let before = match image {
                Ok(b) => b,
                Err(StepError::Store { source, .. }) => {
                    refused.get_or_insert(TxError::Interrupted {
                        id: id.clone(),
                        state: None,
                        source,
                    });
                    None
                }
                Err(cause) => {
                    if matches!(cause, StepError::Conflict { .. }) {
                        crate::metrics::conflict(Strategy::TwoPhase);
                    }
                    let canceled = || TxError::Canceled {
                        id: id.clone(),
                        cause,
                        participant: Some(Box::new(participant.reference(index))),
                        undone: true,
                    };
                    if refusal == Some(index) && !matches!(refused, Some(TxError::Invalid(_))) {
                        refused = Some(canceled());
                    } else {
                        refused.get_or_insert_with(canceled);
                    }
                    None
                }
            };
            match spec {
                Ok(spec) => {
                    let kept = entry(
                        participant.as_ref(),
                        spec,
                        before.clone(),
                        own.as_ref(),
                        uid.as_deref(),
                    );
                    // An entry the record could not hold (a before-image
                    // of a field nested that deep was not written by tandem)
                    // is refused before anything is written.
                    let depth = entry_depth(&kept);
                    if depth > MAX_RECORD_DEPTH {
                        refused.get_or_insert_with(|| TxError::Canceled {
                            id: id.clone(),
                            cause: StepError::TooDeep {
                                participant: participant.label(),
                                depth,
                                limit: MAX_RECORD_DEPTH,
                            },
                            participant: Some(Box::new(participant.reference(index))),
                            undone: true,
                        });
                    }
                    entries.push(kept);
                }
                Err(e) => {
                    refused.get_or_insert(TxError::Invalid(e));
                }
            }
            parties.push(Party::new(participant, before).with_marker(own));
        }
        // The record holds every change: one too large for it is refused
        // before it is written (servers disagree on how they refuse it).
        let record_len = entries_len(&entries);
        if refused.is_none() && record_len > MAX_RECORD_ENTRIES_LEN {
            refused = Some(TxError::canceled_at_record(
                id.clone(),
                StepError::TooLarge {
                    participant: TxError::RECORD.into(),
                },
            ));
        }
        if let Some(refusal) = refused {
            // Nothing was recorded.
            give_back(&parties, &inserts, prepare_ctx).await;
            return self.refused_without_record(keyed, refusal, None).await;
        }
        let custom_reads = parties
            .iter()
            .zip(&custom)
            .any(|(p, custom)| *custom && p.before.is_some());
        if reserves || document_reads || custom_reads {
            round_trips += 1;
        }
        // Commits at its applies when every participant can tell recovery
        // whether its apply landed: one round trip sooner.
        let early = engine.config.early_commit && parties.iter().all(|p| p.participant.probes());
        let mut live = Live {
            keyed,
            token: Some(token.clone()),
            // Set from the record as written.
            stamps: None,
            id: id.clone(),
            epoch,
            marker: marker.clone(),
            parties,
            // Set from the record as written: its lease start plus the lease.
            deadline: bson::DateTime::from_millis(0),
            not_before: None,
            early,
        };

        // The record is created `pending`: it holds every participant before any is
        // applied, so there is nothing an `initial` state would add but a round trip.
        (live.deadline, live.stamps) = match self.create_record(&live, entries, &uids).await {
            Ok(written) => written,
            Err(e) => {
                // Refused before anything of it could apply (the id is
                // another's, the record too large, or written inert): no
                // record will drive its inserts. (Not when the outcome is
                // unknown or recovery has the record: an undo now could take
                // back what recovery applied.)
                if matches!(e, TxError::Duplicate { .. } | TxError::Canceled { .. }) {
                    give_back(&live.parties, &inserts, prepare_ctx).await;
                }
                // A record of this run under the id (an inert one, canceled)
                // takes the id already.
                return self.refused_without_record(keyed, e, Some(&token)).await;
            }
        };
        round_trips += 1;
        let since = self.finished_mark();
        let mut results = engine.step_all(&live, Step::Apply).await;
        // An apply refused as a conflict with a transaction of this
        // coordinator's own, committed and waiting for its background
        // finishing, is made again once that finishing is done (the record is
        // written, the deadline ahead: the apply of this epoch, as
        // `ConflictPolicy::Wait` repeats it).
        if any_conflict(&results) {
            let live = &live;
            round_trips += Box::pin(
                self.settle_conflicts(&mut results, since, |i| engine.apply_again(live, i)),
            )
            .await;
        }
        // An apply refused by a guard that a committed credit of this
        // coordinator's own, still to land at its finishing, may make true
        // is made again once that finishing is done.
        if results
            .iter()
            .any(|r| matches!(r, Err(StepError::GuardFailed { .. })))
        {
            let live = &live;
            if Box::pin(self.settle_guards(&mut results, |i| engine.apply_again(live, i))).await {
                round_trips += 1;
            }
        }
        let applied = engine.applied_or_refuse(&live, results).await;
        round_trips += 1;
        applied?;
        if !early {
            // The commit point: the record's move to `applied`.
            engine
                .transition(&live, TxState::Pending, TxState::Applied, None)
                .await?;
            round_trips += 1;
        }
        // Committed: every apply landed (and, for a transaction that commits
        // at its applies, recovery commits it too, whatever happens next).

        match engine.config.commit_point {
            CommitPoint::Done => {
                // The move to `applied` (if still to make), the clears, `done`.
                round_trips += if early { 3 } else { 2 };
                // Committed either way: what finishing meets (a store failure,
                // an apply still in flight) is left to recovery, and the
                // receipt says `applied` rather than claim an unknown outcome.
                let state = match engine.finish_applied(&live).await {
                    Ok(()) => TxState::Done,
                    Err(TxError::Superseded { .. }) => TxState::Applied,
                    Err(e) => {
                        tracing::warn!(target: "tandem", "finishing {id} left to recovery: {e}");
                        TxState::Applied
                    }
                };
                Ok(Receipt {
                    id,
                    state,
                    round_trips,
                    strategy: Strategy::TwoPhase,
                })
            }
            CommitPoint::Applied => {
                self.finish_later(live).await;
                Ok(Receipt {
                    id,
                    state: TxState::Applied,
                    round_trips,
                    strategy: Strategy::TwoPhase,
                })
            }
        }
    }

    /// The answer of a two-phase transaction refused before its record was
    /// written (`answer`): under a caller-chosen id, a refusal
    /// ([`TxError::Canceled`]) takes the id with a `canceled` record, as a
    /// refusal at an apply does through the transaction's own record and a
    /// native refusal through one written after it
    /// ([`keep_refused_key`](Self::keep_refused_key)): an idempotency key is
    /// taken by whatever its first run ended as, wherever it was refused.
    /// Other answers are passed on.
    async fn refused_without_record(
        &self,
        keyed: bool,
        answer: TxError,
        own_token: Option<&str>,
    ) -> Result<Receipt, TxError> {
        if keyed {
            self.keep_refused_key(
                answer,
                super::native::FinalRecord::RefusedBeforeRecord,
                own_token,
            )
            .await
        } else {
            Err(answer)
        }
    }

    /// The identity of the named store each document change of
    /// `participants` is in ([`Engine::store_uid`](crate::engine::Engine::store_uid)),
    /// `None` for the others: read once per process and store, the first
    /// time a transaction needs it. A store that cannot be read refuses the
    /// transaction before anything of it is written (`Canceled`, with the
    /// store error as the cause, naming the first participant in it).
    async fn store_uids(
        &self,
        id: &TxId,
        participants: &[Box<dyn Participant>],
        specs: &[Result<Document, ChangeError>],
    ) -> Result<Vec<Option<String>>, TxError> {
        let names: Vec<Option<&str>> = participants
            .iter()
            .zip(specs)
            .map(|(p, spec)| match spec {
                Ok(spec) if p.kind() == crate::document::KIND => spec.get_str("store").ok(),
                _ => None,
            })
            .collect();
        let mut distinct: Vec<&str> = names.iter().flatten().copied().collect();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.is_empty() {
            return Ok(vec![None; participants.len()]);
        }
        let engine = &self.engine;
        let read = join_all(distinct.iter().map(|name| engine.store_uid(name))).await;
        let mut uids = std::collections::HashMap::new();
        for (name, uid) in distinct.into_iter().zip(read) {
            match uid {
                Ok(uid) => {
                    uids.insert(name, uid);
                }
                Err(source) => {
                    let index = names
                        .iter()
                        .position(|n| *n == Some(name))
                        .expect("a store name read is a participant's");
                    let participant = &participants[index];
                    return Err(TxError::Canceled {
                        id: id.clone(),
                        cause: StepError::Store {
                            participant: participant.label(),
                            source,
                        },
                        participant: Some(Box::new(participant.reference(index))),
                        undone: true,
                    });
                }
            }
        }
        Ok(names
            .iter()
            .map(|name| name.and_then(|n| uids.get(n).cloned()))
            .collect())
    }

    /// Writes the record in state `pending`, with timestamps from the store's
    /// clock, and returns the deadline of its applies (the lease's start, as
    /// the store stamped it, plus the lease).
    async fn create_record(
        &self,
        live: &Live,
        entries: Vec<Bson>,
        uids: &[Option<String>],
    ) -> Result<(bson::DateTime, Option<CreateStamps>), TxError> {
        let engine = &self.engine;
        let config = &engine.config;
        let ns = engine.records_ns();
        let lease_millis = i64::try_from(config.lease.as_millis()).unwrap_or(i64::MAX);
        // Tells this transaction's record apart from another one of the same id
        // (owner names repeat across processes that were given the same name).
        let token = live.token.clone().unwrap_or_default();
        let keyed = live.keyed;
        let canceled = |source| TxError::record_store_failed(live.id.clone(), source);
        // A keyed create can land live until this coordinator's lease has
        // passed: the lease is registered first, so that garbage collection
        // keeps the id of a run under the same key that finished meanwhile
        // taken at least that long.
        if keyed {
            engine.register_lease().await.map_err(canceled)?;
        }
        // The create's deadline, fixed before the first attempt: a record the
        // store writes later (an attempt that arrived late, perhaps after the
        // transaction finished and its record was collected) is inert.
        let estimate = engine
            .retry(|| engine.records().clock_estimate())
            .await
            .map_err(canceled)?;
        let create_by =
            bson::DateTime::from_millis(estimate.timestamp_millis().saturating_add(lease_millis));
        let attempts = std::sync::atomic::AtomicU32::new(0);
        let statement = |participants: Vec<Bson>| {
            // `state: {$in: []}` matches nothing, so an existing record is never touched:
            // the upsert then collides with its `_id` and fails with a duplicate key.
            let filter = doc! { "_id": live.id.as_str(), "state": { "$in": [] } };
            let mut fields = doc! {
                "state": TxState::Pending,
                "participants": participants,
                "owner": &config.owner,
                "epoch": live.epoch,
                "leaseMillis": lease_millis,
                "attempts": 0,
                "token": &token,
                "keyed": keyed,
                "earlyCommit": live.early,
                "createBy": create_by,
                "history": [history(TxState::Pending, &config.owner, live.epoch, "create")],
            };
            if keyed {
                // The promise made to this coordinator's callers travels
                // with the record, whichever process collects it.
                fields.insert("idempotencyMillis", idempotency_millis(config));
            }
            let update = doc! {
                "$setOnInsert": fields,
                "$currentDate": { "created": true, "lastModified": true, "leaseStart": true },
            };
            (filter, update)
        };
        // The first attempt takes the entries as they are; a retry (the store
        // took them) writes them out again from the participants.
        let mut first = Some(entries);
        let ns = &ns;
        let result = engine
            .retry(|| {
                let participants = match first.take() {
                    Some(entries) => Ok(entries),
                    None => live
                        .parties
                        .iter()
                        .zip(uids)
                        .map(|(party, uid)| {
                            let p = party.participant.as_ref();
                            Ok(entry(
                                p,
                                p.spec()?,
                                party.before.clone(),
                                party.marker.as_ref(),
                                uid.as_deref(),
                            ))
                        })
                        .collect::<Result<Vec<_>, ChangeError>>(),
                };
                let statement = participants.map(statement);
                attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                async move {
                    let (filter, update) = statement
                        .map_err(|e| StoreError::new(StoreErrorKind::Other, e.to_string()))?;
                    engine
                        .records()
                        .find_one_and_update(
                            ns,
                            filter,
                            update,
                            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After)
                                .with_upsert(true)
                                // What is read of the answer: not the whole record back.
                                .with_fields(&["created", "createBy", "leaseStart"]),
                        )
                        .await
                }
            })
            .await;
        let written = match result {
            Ok(Some(doc)) => doc,
            Ok(None) => {
                return Err(TxError::Interrupted {
                    id: live.id.clone(),
                    state: None,
                    source: StoreError::new(
                        StoreErrorKind::Other,
                        "the store returned no document for the record's upsert",
                    ),
                })
            }
            Err(e) if e.kind == StoreErrorKind::DuplicateKey => {
                let retried = attempts.load(std::sync::atomic::Ordering::Relaxed) > 1;
                return self.id_taken(live, &token, create_by, retried).await;
            }
            Err(source)
                if source.kind == StoreErrorKind::DocumentTooLarge
                    && attempts.load(std::sync::atomic::Ordering::Relaxed) == 1 =>
            {
                // The record holds every change: one too large for it is refused outright.
                // (Only on the first attempt: a refusal of a retry speaks for
                // that attempt alone, and an earlier one whose answer was
                // lost may have written the record, which recovery then
                // drives: the outcome is unknown, below.)
                return Err(TxError::canceled_at_record(
                    live.id.clone(),
                    StepError::TooLarge {
                        participant: TxError::RECORD.into(),
                    },
                ));
            }
            Err(source) => {
                return Err(TxError::Interrupted {
                    id: live.id.clone(),
                    state: None,
                    source,
                })
            }
        };
        let stamp = |field| written.get_datetime(field).ok().copied();
        if crate::record::written_late(stamp("created"), stamp("createBy")) {
            let retried = attempts.load(std::sync::atomic::Ordering::Relaxed) > 1;
            return Err(self.cancel_inert(live, live.epoch, retried).await);
        }
        engine.emit(TxEvent::Created {
            id: live.id.clone(),
            participants: live.parties.len(),
        });
        let start = written
            .get_datetime("leaseStart")
            .map(|t| t.timestamp_millis())
            .map_err(|e| TxError::Interrupted {
                id: live.id.clone(),
                state: Some(TxState::Pending),
                source: StoreError::new(
                    StoreErrorKind::Other,
                    format!("the record as written has no lease start: {e}"),
                ),
            })?;
        let stamps = stamp("created").map(|created| CreateStamps { created, create_by });
        Ok((
            bson::DateTime::from_millis(start.saturating_add(lease_millis)),
            stamps,
        ))
    }

    /// The record's `_id` is taken: by the record of an earlier attempt of
    /// ours whose answer was lost, or by another transaction's. `Ok` (the
    /// deadline of its applies) to go on with our own record, live and as
    /// written; otherwise the answer.
    ///
    /// The record is ours only under our creation token, as a read that sees
    /// every write that landed finds it ([`Store::exists`]): a read that may
    /// lag (a MongoDB `majority` snapshot) could miss our own record, and the
    /// answer `Duplicate` ("this one wrote nothing") would stand for a
    /// transaction that recovery then finishes. After a retry (`retried`),
    /// an earlier attempt of ours may also land later, once the record now
    /// under the id is collected, until the create deadline (plus the
    /// margin): wait for it, then look again; not ours then, the outcome is
    /// unknown (`Interrupted`), never `Duplicate`.
    async fn id_taken(
        &self,
        live: &Live,
        token: &str,
        create_by: bson::DateTime,
        retried: bool,
    ) -> Result<(bson::DateTime, Option<CreateStamps>), TxError> {
        let engine = &self.engine;
        let ns = engine.records_ns();
        let interrupted = |source| TxError::Interrupted {
            id: live.id.clone(),
            state: None,
            source,
        };
        let ours = || {
            engine.retry(|| {
                engine
                    .records()
                    .exists(&ns, doc! { "_id": live.id.as_str(), "token": token })
            })
        };
        let mut waited = false;
        loop {
            if ours().await.map_err(interrupted)? {
                let Some(r) = engine.load(&live.id).await.map_err(interrupted)? else {
                    return Err(interrupted(StoreError::new(
                        StoreErrorKind::Other,
                        "this transaction's record was found, then not: collected meanwhile",
                    )));
                };
                if r.token.as_deref() != Some(token) {
                    return Err(interrupted(StoreError::new(
                        StoreErrorKind::Other,
                        "this transaction's record was found, then another under its id",
                    )));
                }
                if r.is_inert() {
                    return Err(self.cancel_inert(live, r.epoch, retried).await);
                }
                if r.state != TxState::Pending || r.epoch != live.epoch {
                    // Written by us, then claimed by recovery before we heard back.
                    return Err(TxError::Superseded {
                        id: live.id.clone(),
                        state: Some(r.state),
                        epoch: r.epoch,
                    });
                }
                engine.emit(TxEvent::Created {
                    id: live.id.clone(),
                    participants: live.parties.len(),
                });
                return Ok((r.deadline(), CreateStamps::of(&r)));
            }
            if retried && !waited {
                // An earlier attempt of ours may still be on its way: it can
                // write a live record only before the create deadline, by the
                // records store's clock, which may step back by the margin.
                let past = bson::DateTime::from_millis(
                    create_by
                        .timestamp_millis()
                        .saturating_add(engine.margin_millis()),
                );
                if !self.wait_until(past).await {
                    return Err(interrupted(StoreError::new(
                        StoreErrorKind::Other,
                        "the id is taken, and an earlier attempt to write this \
                         transaction's record may still land until its create deadline",
                    )));
                }
                waited = true;
                continue;
            }
            if waited {
                // Not there once no attempt of ours can land live any more.
                // Either none landed, or one did and its record has been
                // finished by recovery and collected already, and under
                // leases that differ between processes and clocks that step
                // back, no time bound tells the two apart. "Duplicate" ("this
                // one wrote nothing") would be a guess.
                return Err(interrupted(StoreError::new(
                    StoreErrorKind::Other,
                    "the id is taken by another record; an earlier attempt of this transaction \
                     lost its answer, and may have written a record that was finished and \
                     collected since",
                )));
            }
            let other = engine.load(&live.id).await.map_err(interrupted)?;
            return Err(TxError::Duplicate {
                id: live.id.clone(),
                state: other.and_then(|r| r.state_for_duplicate()),
            });
        }
    }

    /// The answer for a record the store wrote at or after its create
    /// deadline: nothing of it was or will be applied. Moves it to `canceled`
    /// at once when it can; recovery does it otherwise, without touching any
    /// document.
    ///
    /// When the record took more than one attempt (`retried`), an earlier
    /// attempt whose answer was lost may have written a live record in time,
    /// which recovery then finished (perhaps committed) and collected before
    /// this one landed: the outcome is unknown.
    async fn cancel_inert(&self, live: &Live, epoch: i64, retried: bool) -> TxError {
        if epoch == live.epoch {
            if let Err(e) = self.engine.cancel_inert(live, TxState::Pending).await {
                tracing::warn!(target: "tandem", "canceling the inert record {} left to recovery: {e}", live.id);
            }
        }
        if retried {
            return TxError::Interrupted {
                id: live.id.clone(),
                state: None,
                source: StoreError::new(
                    StoreErrorKind::Other,
                    "the record was written after its create deadline by a retry; an \
                     earlier attempt may have written it in time and been finished by recovery",
                ),
            };
        }
        TxError::canceled_at_record(
            live.id.clone(),
            StepError::Expired {
                participant: TxError::RECORD.into(),
            },
        )
    }

    /// Waits until the records store's clock reads `time` or later: `true`
    /// once it does, `false` if it does not within the lease plus the clock
    /// margin of local time (or cannot be read; or at once, where that is
    /// past what an instant holds: a lease of `Duration::MAX`).
    async fn wait_until(&self, time: bson::DateTime) -> bool {
        let config = &self.engine.config;
        let Some(give_up) = tokio::time::Instant::now()
            .checked_add(config.lease.saturating_add(config.clock_margin))
        else {
            return false;
        };
        loop {
            let Ok(now) = self.engine.records().now().await else {
                return false;
            };
            let left = time
                .timestamp_millis()
                .saturating_sub(now.timestamp_millis());
            if left <= 0 {
                return true;
            }
            let left = Duration::from_millis(u64::try_from(left).unwrap_or(0).min(1_000));
            if tokio::time::Instant::now()
                .checked_add(left)
                .is_none_or(|at| at > give_up)
            {
                return false;
            }
            tokio::time::sleep(left).await;
        }
    }
}

/// Gives back the `_id`s that the inserts among `parties` reserved while
/// preparing (`inserts` says which), for a transaction whose record was not
/// written, or is not this coordinator's to drive: removing a placeholder is
/// always safe, as an insert that finds none reserves its `_id` again.
async fn give_back(parties: &[Party], inserts: &[bool], ctx: StepContext<'_>) {
    join_all(
        parties
            .iter()
            .zip(inserts)
            .filter(|(_, insert)| **insert)
            .map(|(party, _)| async move {
                let ctx = StepContext {
                    marker: party.marker.as_ref().unwrap_or(ctx.marker),
                    ..ctx
                };
                if let Err(e) = party.participant.compensate(ctx).await {
                    tracing::warn!(target: "tandem", "releasing the placeholder of {} failed: {e}", party.participant.label());
                }
            }),
    )
    .await;
}

/// [`CoordinatorConfig::idempotency_window`](crate::CoordinatorConfig::idempotency_window)
/// in milliseconds, as a keyed record keeps it (`idempotencyMillis`).
pub(super) fn idempotency_millis(config: &crate::CoordinatorConfig) -> i64 {
    i64::try_from(config.idempotency_window.as_millis()).unwrap_or(i64::MAX)
}
