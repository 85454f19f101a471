//! A hand-written participant that can say whether its apply landed
//! (`Participant::probes`), through the interleaving that needs its apply to
//! take a marker for its own only in time: the coordinator stalls in the
//! participant's apply past its lease; recovery rolls the transaction
//! forward, its apply of the participant lands, its apply of the account
//! loses its answer, so it cancels, and the participant's service is down
//! for the undo (the record stays `canceling`). Then the coordinator wakes.
//!
//! A participant that keeps the rule (its "applied already?" read carries
//! the deadline, as `DocumentChange`'s does) answers `Expired`; one that
//! does not finds recovery's marker, and the coordinator answers committed
//! for a transaction that ends canceled.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bson::{doc, Document};
use common::*;
use tandem::store::UpdateOptions;
use tandem::testing::FaultStore;
use tandem::{
    ChangeError, Coordinator, DocumentChange, Namespace, Participant, PendingPolicy,
    RecoveryConfig, RetryPolicy, StepContext, StepError, Store, StoreError, StoreErrorKind,
    Transaction, TxState,
};

const KIND: &str = "review.svc";

fn svc_ns() -> Namespace {
    Namespace::new("svc", "holds")
}

/// A hold on a service account, kept in a document of the "svc" store:
/// `markers` lists the transactions whose hold is applied, `held` sums them.
#[derive(Debug)]
struct Hold {
    key: String,
    amount: i64,
    /// The service refuses undo requests while down.
    down: Arc<AtomicBool>,
    /// Whether "applied already" is believed only if read before the deadline.
    timely: bool,
}

impl Hold {
    fn store<'a>(&self, ctx: &StepContext<'a>) -> &'a Arc<dyn Store> {
        ctx.stores.get(Some("svc")).expect("svc store")
    }
    fn err(&self, e: StoreError) -> StepError {
        StepError::Store {
            participant: self.label(),
            source: e,
        }
    }
    async fn not_before(&self, ctx: &StepContext<'_>) -> Result<(), StepError> {
        if let Some(until) = ctx.not_before {
            let now = self.store(ctx).now().await.map_err(|e| self.err(e))?;
            if now < until {
                return Err(StepError::NotYet {
                    participant: self.label(),
                    until,
                });
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Participant for Hold {
    fn kind(&self) -> &str {
        KIND
    }
    fn spec(&self) -> Result<Document, ChangeError> {
        Ok(doc! { "key": &self.key, "amount": self.amount })
    }
    fn label(&self) -> String {
        format!("svc/{}", self.key)
    }
    fn probes(&self) -> bool {
        true
    }
    async fn apply(&self, ctx: StepContext<'_>) -> Result<(), StepError> {
        let store = self.store(&ctx);
        let m = ctx.marker.as_str();
        let deadline = ctx.deadline.expect("a deadline").timestamp_millis();
        // Lands only before the deadline (StepContext::deadline).
        let landed = store
            .update_one(
                &svc_ns(),
                doc! { "_id": &self.key, "markers": { "$ne": m },
                "$expr": { "$lt": [ { "$toLong": "$$NOW" }, deadline ] } },
                doc! { "$push": { "markers": m }, "$inc": { "held": self.amount } },
                UpdateOptions::default(),
            )
            .await
            .map_err(|e| self.err(e))?;
        if landed.matched == 1 {
            return Ok(());
        }
        // "Succeeds if it was applied already" (Participant::apply).
        let mut filter = doc! { "_id": &self.key, "markers": m };
        if self.timely {
            // What DocumentChange does since the fifth flaw: only in time.
            filter.insert(
                "$expr",
                doc! { "$lt": [ { "$toLong": "$$NOW" }, deadline ] },
            );
        }
        if store
            .find_one(&svc_ns(), filter)
            .await
            .map_err(|e| self.err(e))?
            .is_some()
        {
            return Ok(());
        }
        Err(StepError::Expired {
            participant: self.label(),
        })
    }
    async fn compensate(&self, ctx: StepContext<'_>) -> Result<(), StepError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(self.err(StoreError::new(StoreErrorKind::Unavailable, "service down")));
        }
        self.not_before(&ctx).await?;
        let m = ctx.marker.as_str();
        self.store(&ctx)
            .update_one(
                &svc_ns(),
                doc! { "_id": &self.key, "markers": m },
                doc! { "$pull": { "markers": m }, "$inc": { "held": -self.amount } },
                UpdateOptions::default(),
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }
    async fn clear_marker(&self, ctx: StepContext<'_>) -> Result<(), StepError> {
        self.not_before(&ctx).await?;
        let m = ctx.marker.as_str();
        self.store(&ctx)
            .update_one(
                &svc_ns(),
                doc! { "_id": &self.key, "markers": m },
                doc! { "$pull": { "markers": m } },
                UpdateOptions::default(),
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }
    async fn applied(&self, ctx: StepContext<'_>) -> Result<bool, StepError> {
        self.not_before(&ctx).await?;
        self.store(&ctx)
            .exists(
                &svc_ns(),
                doc! { "_id": &self.key, "markers": ctx.marker.as_str() },
            )
            .await
            .map_err(|e| self.err(e))
    }
}

/// Returns (the coordinator's answer, the record's final state, A's balance, the hold).
async fn run(timely: bool) -> (Result<tandem::Receipt, tandem::TxError>, TxState, i64, i64) {
    let (store, clock, _) = bank(&["A"], 100).await;
    store
        .insert_one(
            &svc_ns(),
            doc! { "_id": "card", "markers": [], "held": 0_i64 },
        )
        .await
        .unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let svc = FaultStore::new(shared.clone());
    // Recovery's apply of A (the fourth operation on the "docs" store, after
    // the read of its identity) loses its answer.
    let docs = FaultStore::new(shared.clone()).lose_at(4);
    let down = Arc::new(AtomicBool::new(false));
    let lease = Duration::from_secs(10);
    let d2 = down.clone();
    let coordinator = Coordinator::builder(store.clone())
        .lease(lease)
        .retry(RetryPolicy::NONE)
        .store("svc", svc.clone())
        .store("docs", docs.clone())
        .kind(KIND, move |spec| {
            Ok(Box::new(Hold {
                key: spec.get_str("key").unwrap().into(),
                amount: spec.get_i64("amount").unwrap(),
                down: d2.clone(),
                timely,
            }) as Box<dyn Participant>)
        })
        .build();
    let tx = Transaction::new()
        .change(
            DocumentChange::update(accounts(), "A")
                .in_store("docs")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        )
        .participant(Hold {
            key: "card".into(),
            amount: 10,
            down: down.clone(),
            timely,
        });
    // The coordinator stalls in the hold's apply (before its request reaches the service).
    let pause = svc.pause_at(1);
    let c = coordinator.clone();
    let owner = tokio::spawn(async move { c.run(tx).await });
    pause.reached.await.unwrap();
    // Its lease and deadline pass; recovery rolls forward. Its apply of the hold
    // lands; its apply of A loses its answer, so it cancels; the service is down
    // for the undo, so the record stays `canceling`.
    clock.advance(lease + Duration::from_secs(3));
    down.store(true, Ordering::SeqCst);
    let worker = coordinator.recovery(RecoveryConfig {
        pending: PendingPolicy::RollForward,
        ..RecoveryConfig::default()
    });
    let pass = worker.run_once().await.unwrap();
    assert_eq!(pass.claimed, 1, "{pass:?}");
    let id = {
        let recs = store
            .find(&records(), doc! {}, Default::default())
            .await
            .unwrap();
        tandem::TxId::new(recs[0].get_str("_id").unwrap()).unwrap()
    };
    let mid = coordinator.record(&id).await.unwrap().unwrap();
    assert_eq!(
        mid.state,
        TxState::Canceling,
        "recovery cancels, undo pending"
    );
    assert_eq!(mid.epoch, 2, "a claim to probe, then one to roll forward");
    // The coordinator wakes: its apply finds the marker recovery pushed.
    pause.release.send(()).unwrap();
    let answer = owner.await.unwrap();
    coordinator.drain().await;
    // Later everything is settled.
    down.store(false, Ordering::SeqCst);
    clock.advance(lease * 20);
    for _ in 0..4 {
        worker.run_once().await.unwrap();
        clock.advance(lease * 20);
    }
    let end = coordinator.record(&id).await.unwrap().unwrap();
    let held = get(&store, &svc_ns(), "card")
        .await
        .unwrap()
        .get_i64("held")
        .unwrap();
    (answer, end.state, balance(&store, "A").await, held)
}

#[tokio::test]
async fn a_probing_participant_that_keeps_the_rules_keeps_its_answers() {
    let (answer, end, a, held) = run(true).await;
    assert!(
        answer.is_err() || end == TxState::Done,
        "answered {answer:?}, ended {end} (A = {a}, held = {held})"
    );
    assert_eq!((end, a, held), (TxState::Canceled, 100, 0), "{answer:?}");
}

/// The rule is needed: without it, the stalled coordinator takes recovery's
/// marker for its own apply and answers committed, and the transaction ends
/// canceled.
#[tokio::test]
async fn without_the_timely_rule_a_committed_answer_is_rolled_back() {
    let (answer, end, a, held) = run(false).await;
    assert!(answer.is_ok(), "{answer:?}");
    assert_eq!((end, a, held), (TxState::Canceled, 100, 0));
}
