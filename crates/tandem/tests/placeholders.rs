//! Placeholders of inserts (`_tandem.ghost`): an insert reserves its `_id`
//! with an upsert, which cannot be fenced by time, so a reservation that
//! reaches the store after its transaction ended leaves a placeholder no
//! transaction fills. It carries the store's time of the reservation and
//! the reserving coordinator's lease, and expires when the store's clock
//! reads their sum: no fill lands on it after that without reserving it
//! again, typed reads stop counting it as in flight, `put` replaces it,
//! `Coordinator::collect_placeholders` (and on MongoDB a TTL index) removes it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use common::*;
use serde::{Deserialize, Serialize};
use tandem::testing::FaultStore;
use tandem::{
    participant, Coordinator, DocumentChange, Namespace, RecoveryConfig, RetryPolicy, StepError,
    Store, Strategy, Transaction, TxError,
};

#[participant(collection = "ledger")]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Entry {
    #[serde(rename = "_id")]
    id: String,
    amount: i64,
}

fn ledger() -> Namespace {
    Namespace::new("bank", "ledger")
}

/// Found by an adversarial review: T1 reserves X and stalls at its fill;
/// X's unfilled placeholder is removed (an undo of another insert of X
/// removed it then; removing a placeholder is always safe, whatever does
/// it); T1's fill finds nothing,
/// checks the clock, and stalls again right before reserving X anew;
/// recovery rolls T1 back (nothing at X to undo); then the reservation
/// lands. Nothing will fill that placeholder. Before it carried its time it
/// stayed for good: `in_flight` said true and `put` refused X forever, and a
/// plain insert of X failed.
#[tokio::test]
async fn a_placeholder_left_by_a_late_reservation_expires() {
    let (store, clock, _) = bank(&["A"], 100).await;
    let docs = FaultStore::new(Arc::new(store.clone()));
    let lease = Duration::from_secs(10);
    let coordinator = Coordinator::builder(store.clone())
        .database("bank")
        .lease(lease)
        .retry(RetryPolicy::NONE)
        .strategy(Strategy::TwoPhase)
        .store("docs", docs.clone())
        .build();
    // T1: a ledger entry X and a debit of A; it stops at its fill (op 3 on
    // "docs", after the read of its identity and the reservation).
    let t1 = Transaction::new()
        .change(DocumentChange::insert(ledger(), "X", doc! { "amount": 5_i64 }).in_store("docs"))
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -5_i64)
                .require_gte("balance", 5_i64),
        );
    let fill = docs.pause_at(3);
    let running = coordinator.clone();
    let owner = tokio::spawn(async move { running.run(t1).await });
    fill.reached.await.unwrap();
    assert!(get(&store, &ledger(), "X").await.is_some(), "T1 reserved X");

    // X's placeholder is removed.
    assert_eq!(
        store
            .delete_one(&ledger(), doc! { "_id": "X" })
            .await
            .unwrap(),
        1
    );

    // T1's fill matches nothing (op 3), it looks (ops 4 to 6), reads the
    // clock (op 7), and stops right before reserving X again (op 8).
    let reserve = docs.pause_at(8);
    fill.release.send(()).unwrap();
    reserve.reached.await.unwrap();
    clock.advance(lease + Duration::from_secs(3));
    let worker = coordinator.recovery(RecoveryConfig::default());
    assert_eq!(worker.run_once().await.unwrap().canceled, 1);
    reserve.release.send(()).unwrap();
    assert!(owner.await.unwrap().is_err());
    coordinator.drain().await;
    assert_eq!(balance(&store, "A").await, 100);

    // What the late reservation left: a placeholder, with its time.
    let left = get(&store, &ledger(), "X")
        .await
        .expect("a placeholder at X");
    let meta = left.get_document("_tandem").unwrap();
    assert_eq!(meta.get_bool("ghost"), Ok(true), "{left}");
    assert!(meta.get_datetime("reservedAt").is_ok(), "{left}");
    let reader = Coordinator::builder(store.clone())
        .database("bank")
        .lease(lease)
        .build();
    assert!(reader.in_flight::<Entry, _>("X").await.unwrap(), "young");
    let refused = reader
        .put(&Entry {
            id: "X".into(),
            amount: 1,
        })
        .await;
    assert_eq!(refused.unwrap_err().kind, tandem::StoreErrorKind::InFlight);

    // Past the lease plus the margin, no insert would fill it any more.
    clock.advance(lease + Duration::from_secs(2));
    assert!(
        !reader.in_flight::<Entry, _>("X").await.unwrap(),
        "left behind"
    );
    assert_eq!(reader.get_settled::<Entry, _>("X").await.unwrap(), None);
    reader
        .put(&Entry {
            id: "X".into(),
            amount: 1,
        })
        .await
        .unwrap();
    assert_eq!(
        reader.get::<Entry, _>("X").await.unwrap(),
        Some(Entry {
            id: "X".into(),
            amount: 1
        })
    );
}

/// `collect_placeholders` removes the placeholders older than the lease
/// plus the margin, and nothing else: not a young placeholder, not a
/// document.
#[tokio::test]
async fn collect_placeholders_removes_only_old_placeholders() {
    let (store, clock, _) = bank(&["A"], 100).await;
    let now = store.now().await.unwrap().timestamp_millis();
    let at = |ms: i64| bson::DateTime::from_millis(now - ms);
    for (id, reserved) in [("old", at(40_000)), ("young", at(5_000))] {
        store
            .insert_one(
                &ledger(),
                doc! { "_id": id, "_tandem": { "ghost": true, "reservedAt": reserved } },
            )
            .await
            .unwrap();
    }
    store
        .insert_one(&ledger(), doc! { "_id": "entry", "amount": 3_i64 })
        .await
        .unwrap();
    let coordinator = Coordinator::builder(store.clone()).database("bank").build();
    assert_eq!(
        coordinator
            .collect_placeholders(None, &ledger())
            .await
            .unwrap(),
        1
    );
    let ids: Vec<String> = store
        .documents(&ledger())
        .iter()
        .map(|d| d.get_str("_id").unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["entry", "young"]);
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        coordinator
            .collect_placeholders(None, &ledger())
            .await
            .unwrap(),
        1
    );
    assert_eq!(store.documents(&ledger()).len(), 1);
}

/// An insert of an `_id` a document has is refused, and the reservation
/// adds nothing to that document (its time stamp is for placeholders only).
#[tokio::test]
async fn an_insert_over_a_document_leaves_it_as_it_was() {
    let (store, _, _) = bank(&["A"], 100).await;
    store
        .insert_one(&ledger(), doc! { "_id": "X", "amount": 3_i64 })
        .await
        .unwrap();
    let before = get(&store, &ledger(), "X").await.unwrap();
    let refused = Coordinator::new(store.clone())
        .run(
            Transaction::new()
                .change(DocumentChange::insert(
                    ledger(),
                    "X",
                    doc! { "amount": 9_i64 },
                ))
                .change(DocumentChange::update(accounts(), "A").inc("balance", 1_i64)),
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(TxError::Canceled {
                cause: StepError::AlreadyExists { .. },
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(get(&store, &ledger(), "X").await, Some(before));
    assert_eq!(balance(&store, "A").await, 100);
}

/// Found by an adversarial review: a transaction refused when its record
/// could not be written (its caller-chosen id taken: `Duplicate`, "this one
/// wrote nothing") left the placeholder its insert reserved while
/// preparing, until it expired. It gives the `_id` back, as a refusal
/// before the record does.
#[tokio::test]
async fn a_duplicate_answer_gives_back_the_placeholders_it_reserved() {
    let (store, _, _) = bank(&["A"], 1000).await;
    let coordinator = Coordinator::builder(store.clone())
        .commit_point(tandem::CommitPoint::Done)
        .build();
    let pay = |amount: i64| {
        Transaction::with_id("pay-1")
            .change(
                DocumentChange::update(accounts(), "A")
                    .inc("balance", -amount)
                    .require_gte("balance", amount),
            )
            .change(DocumentChange::insert(
                ledger(),
                "entry-pay-1",
                doc! { "amount": amount },
            ))
    };
    // Refused by its guard: the insert is undone, the id stays taken.
    let first = coordinator.run(pay(5000)).await;
    assert!(matches!(first, Err(TxError::Canceled { .. })), "{first:?}");
    let again = coordinator.run(pay(5000)).await;
    assert!(matches!(again, Err(TxError::Duplicate { .. })), "{again:?}");
    assert_eq!(get(&store, &ledger(), "entry-pay-1").await, None);
}

/// A placeholder written by a version that did not stamp placeholders
/// (`{_tandem: {ghost: true}}`, no `reservedAt`: what a coordinator of that
/// version left when it crashed between reserving and writing its record)
/// expires too (found by an adversarial review: every expiry path filtered on
/// the stamp, so it blocked its `_id` for good). The first collection stamps
/// it; one a lease plus the margin later removes it, and `put` then writes.
#[tokio::test]
async fn a_placeholder_of_an_older_version_expires() {
    let (store, clock, _) = bank(&["A"], 100).await;
    store
        .insert_one(&ledger(), doc! { "_id": "X", "_tandem": { "ghost": true } })
        .await
        .unwrap();
    let lease = Duration::from_secs(10);
    let reader = Coordinator::builder(store.clone())
        .database("bank")
        .lease(lease)
        .build();
    clock.advance(Duration::from_secs(24 * 3600));
    assert_eq!(
        reader.collect_placeholders(None, &ledger()).await.unwrap(),
        0,
        "stamped now, not removed: an older coordinator may still fill it"
    );
    let stamped = get(&store, &ledger(), "X").await.expect("still there");
    assert!(
        stamped
            .get_document("_tandem")
            .unwrap()
            .get_datetime("reservedAt")
            .is_ok(),
        "{stamped}"
    );
    assert!(reader.in_flight::<Entry, _>("X").await.unwrap());
    clock.advance(lease + Duration::from_secs(10));
    assert!(!reader.in_flight::<Entry, _>("X").await.unwrap());
    assert_eq!(
        reader.collect_placeholders(None, &ledger()).await.unwrap(),
        1
    );
    reader
        .put(&Entry {
            id: "X".into(),
            amount: 1,
        })
        .await
        .expect("the _id is free");
    assert_eq!(
        get(&store, &ledger(), "X").await,
        Some(doc! { "_id": "X", "amount": 1_i64 })
    );
}

// A placeholder carries its own validity: `reservedAt` plus `leaseMillis`
// (the reserving coordinator's lease), both judged on the participant
// store's clock. Found by an adversarial review: readers judged a
// placeholder by the reader's lease plus margin from `reservedAt`, while
// the fill's deadline ran from the record's `leaseStart`, written after
// the reservation: a slow create let a fill land on a placeholder that a
// reader had called left behind (or that `put` had replaced).

const LEASE: Duration = Duration::from_secs(30);
const MARGIN: Duration = Duration::from_secs(2);
const T0: i64 = 1_700_000_000_000;

#[participant(collection = "orders")]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Order {
    #[serde(rename = "_id")]
    id: String,
    amount: i64,
    state: String,
}

fn orders() -> Namespace {
    Namespace::new("shop", "orders")
}

fn placeholder_meta(doc: &bson::Document) -> (i64, i64) {
    let meta = doc.get_document("_tandem").unwrap();
    (
        meta.get_datetime("reservedAt").unwrap().timestamp_millis(),
        meta.get_i64("leaseMillis").unwrap(),
    )
}

type Run = tokio::task::JoinHandle<Result<tandem::Receipt, TxError>>;

/// An insert of `o-new` (store "ins") whose reservation lands at `T0`, whose
/// record's create lands `MARGIN + 1s` later, and which stops right before
/// its fill (op 3 on "ins"). The record's lease, and so the fill's
/// deadline, runs from the create: until `T0 + 33s`; the placeholder is a
/// reservation until `T0 + 30s`.
async fn slow_insert() -> (
    Arc<tandem::ManualClock>,
    tandem::MemoryStore,
    FaultStore,
    Run,
    tokio::sync::oneshot::Sender<()>,
) {
    let clock = Arc::new(tandem::ManualClock::new(bson::DateTime::from_millis(T0)));
    let mem = tandem::MemoryStore::with_clock(clock.clone());
    let rec = FaultStore::new(Arc::new(mem.clone()));
    let ins = FaultStore::new(Arc::new(mem.clone())).keeping_upserts();
    let coordinator = Coordinator::builder(rec.clone())
        .database("shop")
        .store("ins", ins.clone())
        .lease(LEASE)
        .clock_margin(MARGIN)
        .build();
    let create = rec.pause_at(1);
    // ins: 1 reads the store's identity, 2 reserves, 3 fills.
    let fill = ins.pause_at(3);
    let run = tokio::spawn(async move {
        coordinator
            .run(
                Transaction::new().change(
                    DocumentChange::insert(
                        orders(),
                        "o-new",
                        doc! { "amount": 5_i64, "state": "new" },
                    )
                    .in_store("ins"),
                ),
            )
            .await
    });
    create.reached.await.unwrap();
    clock.advance(MARGIN + Duration::from_secs(1));
    create.release.send(()).unwrap();
    fill.reached.await.unwrap();
    (clock, mem, ins, run, fill.release)
}

fn reader(mem: &tandem::MemoryStore, lease: Duration) -> Coordinator {
    Coordinator::builder(mem.clone())
        .database("shop")
        .lease(lease)
        .clock_margin(MARGIN)
        .build()
}

/// While its placeholder is a reservation, a slow insert is in flight and
/// `put` is refused; once it is not, readers say so, and the insert
/// reserves its `_id` again (stamping the placeholder anew) before it fills
/// it, and commits.
#[tokio::test]
async fn a_slow_insert_reserves_again_before_filling_an_expired_placeholder() {
    let (clock, mem, ins, run, release) = slow_insert().await;
    let placeholder = get(&mem, &orders(), "o-new").await.unwrap();
    assert_eq!(placeholder_meta(&placeholder), (T0, 30_000));
    let reader = reader(&mem, LEASE);

    // T0 + 29s: a reservation still.
    clock.advance(Duration::from_secs(26));
    assert!(reader.in_flight::<Order, _>("o-new").await.unwrap());
    let refused = reader
        .put(&Order {
            id: "o-new".into(),
            amount: 1,
            state: "put".into(),
        })
        .await;
    assert_eq!(refused.unwrap_err().kind, tandem::StoreErrorKind::InFlight);

    // T0 + 31s: expired by its own lease (the fill's deadline is T0 + 33s).
    clock.advance(Duration::from_secs(2));
    assert!(
        !reader.in_flight::<Order, _>("o-new").await.unwrap(),
        "no fill lands on it without a new reservation"
    );

    // The fill misses (op 3), looks (ops 4 to 6), reserves again (op 7):
    // stop before the second fill (op 8) to see the new stamp.
    let refill = ins.pause_at(8);
    release.send(()).unwrap();
    refill.reached.await.unwrap();
    let stamped = get(&mem, &orders(), "o-new").await.unwrap();
    assert_eq!(placeholder_meta(&stamped), (T0 + 31_000, 30_000));
    assert!(reader.in_flight::<Order, _>("o-new").await.unwrap());
    refill.release.send(()).unwrap();

    run.await.unwrap().expect("the insert commits");
    assert_eq!(reservations(&ins), 2, "reserved twice");
    assert_eq!(
        reader.get::<Order, _>("o-new").await.unwrap(),
        Some(Order {
            id: "o-new".into(),
            amount: 5,
            state: "new".into(),
        })
    );
}

/// `put` replaces a placeholder expired by its own lease (though the
/// insert's deadline has not passed); the insert then reserves again, finds
/// the document, and is refused as if it had been there first (it was).
#[tokio::test]
async fn put_replaces_an_expired_placeholder_and_the_slow_insert_finds_the_document() {
    let (clock, mem, _ins, run, release) = slow_insert().await;
    let reader = reader(&mem, LEASE);
    clock.advance(Duration::from_secs(28)); // T0 + 31s
    reader
        .put(&Order {
            id: "o-new".into(),
            amount: 1,
            state: "put".into(),
        })
        .await
        .expect("no reservation any more");
    release.send(()).unwrap();
    let refused = run.await.unwrap();
    assert!(
        matches!(
            refused,
            Err(TxError::Canceled {
                cause: StepError::AlreadyExists { .. },
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(
        get(&mem, &orders(), "o-new").await,
        Some(doc! { "_id": "o-new", "amount": 1_i64, "state": "put" })
    );
}

/// A placeholder reserved with a longer lease than the reader's is a
/// reservation for the writer's lease: the reader says it is in flight,
/// `put` is refused, collection leaves it, and the insert commits.
#[tokio::test]
async fn a_placeholder_is_valid_for_its_writers_lease() {
    let clock = Arc::new(tandem::ManualClock::new(bson::DateTime::from_millis(T0)));
    let mem = tandem::MemoryStore::with_clock(clock.clone());
    let ins = FaultStore::new(Arc::new(mem.clone())).keeping_upserts();
    let writer = Coordinator::builder(mem.clone())
        .database("shop")
        .store("ins", ins.clone())
        .lease(Duration::from_secs(60))
        .clock_margin(MARGIN)
        .build();
    // ins: 1 reads the store's identity, 2 reserves, 3 fills.
    let fill = ins.pause_at(3);
    let run = tokio::spawn(async move {
        writer
            .run(
                Transaction::new().change(
                    DocumentChange::insert(
                        orders(),
                        "o-long",
                        doc! { "amount": 7_i64, "state": "new" },
                    )
                    .in_store("ins"),
                ),
            )
            .await
    });
    fill.reached.await.unwrap();
    let placeholder = get(&mem, &orders(), "o-long").await.unwrap();
    assert_eq!(placeholder_meta(&placeholder), (T0, 60_000));

    let reader = reader(&mem, Duration::from_secs(10));
    clock.advance(Duration::from_secs(40)); // past the reader's lease plus margin
    assert!(reader.in_flight::<Order, _>("o-long").await.unwrap());
    let refused = reader
        .put(&Order {
            id: "o-long".into(),
            amount: 1,
            state: "put".into(),
        })
        .await;
    assert_eq!(refused.unwrap_err().kind, tandem::StoreErrorKind::InFlight);
    assert_eq!(
        reader.collect_placeholders(None, &orders()).await.unwrap(),
        0
    );

    fill.release.send(()).unwrap();
    run.await.unwrap().expect("the insert commits");
    assert_eq!(reservations(&ins), 1, "filled with its first reservation");
    assert_eq!(
        reader
            .get::<Order, _>("o-long")
            .await
            .unwrap()
            .map(|o| o.amount),
        Some(7)
    );
}

/// The fill's filter matches a placeholder only while it is a reservation
/// by its own fields: not once `reservedAt + leaseMillis` has passed, not
/// one without `leaseMillis` (written by an older version: the insert
/// reserves it again first); and collection removes exactly the expired
/// ones, judging those without `leaseMillis` by the collector's lease plus
/// margin.
#[tokio::test]
async fn a_fill_lands_only_on_a_placeholder_still_reserved() {
    let clock = Arc::new(tandem::ManualClock::new(bson::DateTime::from_millis(T0)));
    let mem = tandem::MemoryStore::with_clock(clock.clone());
    let at = |ms: i64| bson::DateTime::from_millis(T0 - ms);
    let placeholders = [
        (
            "fresh",
            doc! { "ghost": true, "reservedAt": at(29_000), "leaseMillis": 30_000_i64 },
        ),
        (
            "expired",
            doc! { "ghost": true, "reservedAt": at(30_000), "leaseMillis": 30_000_i64 },
        ),
        (
            "long",
            doc! { "ghost": true, "reservedAt": at(50_000), "leaseMillis": 60_000_i64 },
        ),
        ("legacy", doc! { "ghost": true, "reservedAt": at(1_000) }),
        (
            "legacy-old",
            doc! { "ghost": true, "reservedAt": at(32_000) },
        ),
    ];
    for (id, meta) in &placeholders {
        mem.insert_one(&orders(), doc! { "_id": *id, "_tandem": meta.clone() })
            .await
            .unwrap();
    }
    let stores = tandem::Stores::new(Arc::new(mem.clone()));
    let tx = tandem::TxId::new("t").unwrap();
    let fills = |id: &'static str| {
        let change = DocumentChange::insert(orders(), id, doc! { "amount": 1_i64 });
        let ctx = tandem::StepContext {
            tx: &tx,
            marker: &tx,
            epoch: 0,
            deadline: Some(bson::DateTime::from_millis(T0 + 3_600_000)),
            not_before: None,
            before: None,
            stores: &stores,
            lease: LEASE,
        };
        let step = tandem::Participant::apply_statement(&change, &ctx).expect("one statement");
        let store = step.store.clone();
        async move {
            store
                .update_one(
                    &step.namespace,
                    step.filter,
                    step.update,
                    Default::default(),
                )
                .await
                .unwrap()
                .matched
        }
    };
    let collector = reader(&mem, LEASE);
    assert_eq!(
        collector
            .collect_placeholders(None, &orders())
            .await
            .unwrap(),
        2
    );
    let mut left: Vec<String> = mem
        .documents(&orders())
        .iter()
        .map(|d| d.get_str("_id").unwrap().to_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["fresh", "legacy", "long"]);
    assert_eq!(fills("legacy").await, 0, "no lease: reserve it again first");
    assert_eq!(fills("long").await, 1);
    assert_eq!(fills("fresh").await, 1);
}

/// The reservations `store` saw: its upserts of `orders` (the store's
/// identity is upserted too, elsewhere).
fn reservations(store: &FaultStore) -> usize {
    store.upserts().iter().filter(|u| u.ns == orders()).count()
}
