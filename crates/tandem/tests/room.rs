//! The room a document keeps for its pending clears and undos asks for no
//! more than it needs: a numeric map key is a field, a large field can be
//! shrunk, unset or replaced, an array's element set; and a change an
//! earlier version recorded, reserving nothing, respects what others
//! reserved. Each test failed on the first version of the reservation.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document};
use tandem::testing::{MemoryFactory, StoreFactory};
use tandem::{
    CommitPoint, Coordinator, DocumentChange, Namespace, StepError, Store, Strategy, Transaction,
    TxError,
};

const DB: &str = "shop";
const LEASE: Duration = Duration::from_secs(30);
const MIB: usize = 1024 * 1024;

fn docs() -> Namespace {
    Namespace::new(DB, "docs")
}

fn coordinator(store: Arc<dyn Store>, strategy: Strategy) -> Coordinator {
    Coordinator::builder_shared(store)
        .database(DB)
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .commit_point(CommitPoint::Done)
        .strategy(strategy)
        .build()
}

async fn get(store: &dyn Store, id: &str) -> Document {
    store
        .find_one(&docs(), doc! { "_id": id })
        .await
        .expect("read")
        .expect("document")
}

/// A map keyed by numbers (user ids, order numbers) is an ordinary
/// document: `byUser.48213377` names a field, not element 48,213,377 of an
/// array, on either strategy. (Counting every numeric segment as padding
/// up to its index refused it `TooLarge`.)
#[tokio::test]
async fn a_numeric_map_key_is_not_refused_as_too_large() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let factory = MemoryFactory::new();
        let store = factory.fresh().await;
        store
            .insert_one(&docs(), doc! { "_id": "stats", "byUser": { "7": 1_i64 } })
            .await
            .unwrap();
        let credit = coordinator(store.clone(), strategy)
            .run(
                Transaction::with_id("credit")
                    .change(DocumentChange::update(docs(), "stats").inc("byUser.48213377", 1_i64)),
            )
            .await;
        assert!(credit.is_ok(), "{strategy:?} credit: {credit:?}");
        let set = coordinator(store.clone(), strategy)
            .run(
                Transaction::with_id("set")
                    .change(DocumentChange::update(docs(), "stats").set("names.48213377", "ann")),
            )
            .await;
        assert!(set.is_ok(), "{strategy:?} set: {set:?}");
        let d = get(store.as_ref(), "stats").await;
        assert_eq!(
            d.get_document("byUser").unwrap().get_i64("48213377").ok(),
            Some(1)
        );
    }
}

/// A change that holds its document alone is measured from its
/// before-image: its undo brings the document back to the size it has
/// now, so a 9 MiB field can be shrunk. (Counting the whole image as
/// reserved and the whole new value as growth refused it `TooLarge`.)
#[tokio::test]
async fn shrinking_a_large_field_is_not_refused() {
    let factory = MemoryFactory::new();
    let store = factory.fresh().await;
    store
        .insert_one(&docs(), doc! { "_id": "big", "blob": "b".repeat(9 * MIB) })
        .await
        .unwrap();
    let shrink = coordinator(store.clone(), Strategy::TwoPhase)
        .run(
            Transaction::with_id("shrink")
                .change(DocumentChange::update(docs(), "big").set("blob", "small")),
        )
        .await;
    assert!(shrink.is_ok(), "{shrink:?}");
    assert_eq!(
        get(store.as_ref(), "big").await.get_str("blob").unwrap(),
        "small"
    );
}

/// The same for an `unset` of the large field.
#[tokio::test]
async fn unsetting_a_large_field_is_not_refused() {
    let factory = MemoryFactory::new();
    let store = factory.fresh().await;
    store
        .insert_one(&docs(), doc! { "_id": "big", "blob": "b".repeat(9 * MIB) })
        .await
        .unwrap();
    let unset = coordinator(store.clone(), Strategy::TwoPhase)
        .run(
            Transaction::with_id("unset")
                .change(DocumentChange::update(docs(), "big").unset("blob")),
        )
        .await;
    assert!(unset.is_ok(), "{unset:?}");
    assert!(get(store.as_ref(), "big").await.get("blob").is_none());
}

/// A 6 MiB field replaced by another 6 MiB value: the document never holds
/// more than about 6 MiB (after the apply, after an undo), but the filter
/// requires 6 (document) + 6 (growth) + 6 (reservation) <= 16 MiB.
#[tokio::test]
async fn replacing_a_large_field_with_one_as_large_is_not_refused() {
    let factory = MemoryFactory::new();
    let store = factory.fresh().await;
    store
        .insert_one(&docs(), doc! { "_id": "big", "blob": "a".repeat(6 * MIB) })
        .await
        .unwrap();
    let replace = coordinator(store.clone(), Strategy::TwoPhase)
        .run(
            Transaction::with_id("replace")
                .change(DocumentChange::update(docs(), "big").set("blob", "c".repeat(6 * MIB))),
        )
        .await;
    assert!(replace.is_ok(), "{replace:?}");
}

// A change an earlier version recorded.

use tandem::testing::FaultStore;
use tandem::{PendingPolicy, RecoveryConfig, TxRecord, TxState};

fn accounts() -> Namespace {
    Namespace::new(DB, "accounts")
}

fn records() -> Namespace {
    Namespace::new(DB, "transactions")
}

fn field_n(n: usize) -> String {
    format!("bonus{n}_{}", "f".repeat(3000))
}

fn transfer_to(id: &str, n: usize) -> Transaction {
    Transaction::with_id(id)
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        )
        .change(DocumentChange::update(accounts(), "B").inc(field_n(n), 10_i64))
}

fn bson_len(d: &Document) -> usize {
    let mut bytes = Vec::new();
    d.to_writer(&mut bytes).unwrap();
    bytes.len()
}

async fn account(store: &dyn Store, id: &str) -> Document {
    store
        .find_one(&accounts(), doc! { "_id": id })
        .await
        .unwrap()
        .unwrap()
}

async fn state(store: &dyn Store, id: &str) -> Option<TxState> {
    store
        .find_one(&records(), doc! { "_id": id })
        .await
        .unwrap()
        .map(|d| TxRecord::from_document(d).unwrap().state)
}

fn plain(store: Arc<dyn Store>) -> Coordinator {
    coordinator(store, Strategy::TwoPhase)
}

/// Seeds `A` and `B` (a pad of `pad` bytes); runs `t1` (credit of
/// `field_n(1)`) until its record is written, before any apply, and marks
/// its record as an earlier version's (no `reservesRoom` in the specs); then
/// runs `t2` (credit of `field_n(2)`) until its applies landed. `None` when
/// the crash points did not give that.
async fn old_then_new(
    factory: &MemoryFactory,
    pad: usize,
    n1: u64,
    n2: u64,
) -> Option<Arc<dyn Store>> {
    let store = factory.fresh().await;
    store
        .insert_one(&accounts(), doc! { "_id": "A", "balance": 100_i64 })
        .await
        .unwrap();
    store
        .insert_one(&accounts(), doc! { "_id": "B", "pad": "p".repeat(pad) })
        .await
        .unwrap();
    let _ = plain(Arc::new(FaultStore::new(store.clone()).crash_after(n1)))
        .run(transfer_to("t1", 1))
        .await;
    if state(store.as_ref(), "t1").await != Some(TxState::Pending)
        || account(store.as_ref(), "B")
            .await
            .get("pendingTransactions")
            .is_some()
    {
        return None;
    }
    store
        .update_one(
            &records(),
            doc! { "_id": "t1" },
            doc! { "$unset": {
                "participants.0.spec.reservesRoom": "",
                "participants.1.spec.reservesRoom": "",
            } },
            Default::default(),
        )
        .await
        .unwrap();
    let _ = plain(Arc::new(FaultStore::new(store.clone()).crash_after(n2)))
        .run(transfer_to("t2", 2))
        .await;
    let b = account(store.as_ref(), "B").await;
    let marked = b
        .get_array("pendingTransactions")
        .is_ok_and(|m| !m.is_empty());
    (marked && state(store.as_ref(), "t2").await == Some(TxState::Pending)).then_some(store)
}

/// A change read back from an earlier version's record reserves nothing,
/// but its apply (here by recovery rolling it forward after an upgrade)
/// respects the room others reserved: it does not take the room `t2`
/// reserved for its clear, whose committed credit lands. (Without the
/// condition, `t2`'s clear was refused as too large, for good.)
#[tokio::test]
async fn an_earlier_versions_apply_respects_the_room_reserved() {
    let factory = MemoryFactory::new();
    // Crash points: the first that leaves t1's record alone, then the first
    // that leaves t2 applied.
    let small = 100;
    let mut found = None;
    'outer: for n1 in 1..30 {
        for n2 in 1..30 {
            if let Some(store) = old_then_new(&factory, small, n1, n2).await {
                let size = bson_len(&account(store.as_ref(), "B").await);
                found = Some((n1, n2, size));
                break 'outer;
            }
        }
    }
    let (n1, n2, size) = found.expect("crash points");
    // B with t2 applied: 4,500 bytes under the limit. t2 reserved ~3 KiB
    // for its clear; t1's unchecked apply adds a ~3 KiB pending sum.
    let pad = small + (16 * MIB - size) - 4_500;
    let store = old_then_new(&factory, pad, n1, n2)
        .await
        .expect("same points");
    assert!(16 * MIB - bson_len(&account(store.as_ref(), "B").await) <= 4_600);
    for _ in 0..4 {
        factory.pass(store.as_ref(), LEASE * 10).await;
        let _ = plain(store.clone())
            .recovery(RecoveryConfig {
                pending: PendingPolicy::RollForward,
                ..RecoveryConfig::default()
            })
            .run_once()
            .await;
    }
    let b = account(store.as_ref(), "B").await;
    let t1 = state(store.as_ref(), "t1").await;
    let t2 = state(store.as_ref(), "t2").await;
    assert_eq!(
        (t2, b.get_i64(field_n(2)).ok()),
        (Some(TxState::Done), Some(10)),
        "t2's committed credit lands in the room it reserved (t1 {t1:?}, B {} bytes, _tandem {:?})",
        bson_len(&b),
        b.get_document("_tandem").map(|t| t
            .keys()
            .map(|k| k.chars().take(20).collect::<String>())
            .collect::<Vec<_>>())
    );
}

/// Replacing element 900,000 of an array of a million numbers (a 12 MiB
/// document, whose size the change does not alter) takes no room.
#[tokio::test]
async fn setting_an_element_of_a_large_array_is_not_refused() {
    let factory = MemoryFactory::new();
    let store = factory.fresh().await;
    let items: Vec<i32> = (0..1_000_000).collect();
    store
        .insert_one(&docs(), doc! { "_id": "series", "items": items })
        .await
        .unwrap();
    let set = coordinator(store.clone(), Strategy::TwoPhase)
        .run(
            Transaction::with_id("set")
                .change(DocumentChange::update(docs(), "series").set("items.900000", -1_i32)),
        )
        .await;
    assert!(set.is_ok(), "{set:?}");
    let d = get(store.as_ref(), "series").await;
    assert_eq!(
        d.get_array("items").unwrap()[900_000],
        bson::Bson::Int32(-1)
    );
}

/// On a document others share, an increment past an array's end would
/// pad the array with as many nulls as the index says, which no
/// reservation bounds: refused with `TypeMismatch`, by either strategy,
/// the document unchanged; an increment of an element that exists, and
/// of the element just past the end (no padding), commit.
#[tokio::test]
async fn a_shared_increment_past_an_arrays_end_is_refused() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let factory = MemoryFactory::new();
        let store = factory.fresh().await;
        store
            .insert_one(&docs(), doc! { "_id": "s", "items": [1_i64, 2_i64] })
            .await
            .unwrap();
        let credit = |path: &str| {
            Transaction::new().change(DocumentChange::update(docs(), "s").inc(path, 5_i64))
        };
        let past = coordinator(store.clone(), strategy)
            .run(credit("items.1000"))
            .await;
        assert!(
            matches!(
                &past,
                Err(tandem::TxError::Canceled {
                    cause: tandem::StepError::TypeMismatch { path, .. },
                    ..
                }) if path == "items.1000"
            ),
            "{strategy:?}: {past:?}"
        );
        assert_eq!(
            get(store.as_ref(), "s")
                .await
                .get_array("items")
                .unwrap()
                .len(),
            2
        );
        for path in ["items.1", "items.2"] {
            coordinator(store.clone(), strategy)
                .run(credit(path))
                .await
                .unwrap_or_else(|e| panic!("{strategy:?} {path}: {e:?}"));
        }
        let items = get(store.as_ref(), "s")
            .await
            .get_array("items")
            .unwrap()
            .clone();
        assert_eq!(
            items,
            vec![
                bson::Bson::Int64(1),
                bson::Bson::Int64(7),
                bson::Bson::Int64(5)
            ]
        );
    }
}

/// An event log of 9 MiB (small documents, over 256 leaves, so its image
/// is pinned by value only): appending one event needs room for the event,
/// and for what equal numbers of other types could add, not for the whole
/// log again (9 + 9 > 16 MiB was refused `TooLarge`).
#[tokio::test]
async fn pushing_to_a_large_log_is_not_refused() {
    let store = tandem::MemoryStore::new();
    let n = 9 * MIB / 1040;
    let v = "x".repeat(1000);
    let events: Vec<Bson> = (0..n)
        .map(|i| Bson::Document(doc! { "k": i as i64, "v": v.clone() }))
        .collect();
    store
        .insert_one(
            &Namespace::new(DB, "logs"),
            doc! { "_id": "L", "events": events },
        )
        .await
        .unwrap();
    let size = bson_len(
        &store
            .find_one(&Namespace::new(DB, "logs"), doc! { "_id": "L" })
            .await
            .unwrap()
            .unwrap(),
    );
    assert!(size > 8 * MIB + MIB / 2 && size < 12 * MIB, "{size}");
    let c = Coordinator::builder(store.clone())
        .database(DB)
        .commit_point(CommitPoint::Done)
        .build();
    let r = c
        .run(
            Transaction::new().change(
                DocumentChange::update(Namespace::new(DB, "logs"), "L")
                    .push("events", doc! { "k": -1_i64, "v": "new" }),
            ),
        )
        .await;
    assert!(r.is_ok(), "{r:?}");
}

async fn pending_credit(factory: &MemoryFactory, long: &str, n: u64) -> Option<Arc<dyn Store>> {
    let store = factory.fresh().await;
    store
        .insert_one(&accounts(), doc! { "_id": "A", "balance": 100_i64 })
        .await
        .unwrap();
    store
        .insert_one(
            &accounts(),
            doc! { "_id": "B", long: 0_i64, "small": 0_i64, "pad": "" },
        )
        .await
        .unwrap();
    let tx = Transaction::with_id("t1")
        .change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        )
        .change(DocumentChange::update(accounts(), "B").inc(long, 10_i64));
    let c = Coordinator::builder_shared(Arc::new(FaultStore::new(store.clone()).crash_after(n)))
        .database(DB)
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .build();
    let _ = c.run(tx).await;
    let rec = store
        .find_one(&records(), doc! { "_id": "t1" })
        .await
        .unwrap()
        .map(|d| TxRecord::from_document(d).unwrap().state);
    let b = store
        .find_one(&accounts(), doc! { "_id": "B" })
        .await
        .unwrap()
        .unwrap();
    let marked = b
        .get_array("pendingTransactions")
        .is_ok_and(|m| !m.is_empty());
    (rec == Some(TxState::Pending) && marked).then_some(store)
}

/// A credit that would fit but for the room a pending credit reserved
/// (and gives back at its clear, its field already there: the document
/// does not grow) is a conflict with that transaction, not `TooLarge`
/// (which `ConflictPolicy::Wait` would not wait out): once it finishes,
/// the same credit lands.
#[tokio::test]
async fn room_reserved_by_a_pending_credit_is_a_conflict_not_too_large() {
    reserved_room_case(Strategy::TwoPhase).await;
}

/// The same for a credit run natively beside the pending two-phase one.
#[tokio::test]
async fn room_reserved_by_a_pending_credit_is_a_conflict_not_too_large_natively() {
    reserved_room_case(Strategy::Native).await;
}

async fn reserved_room_case(strategy: Strategy) {
    let factory = MemoryFactory::new();
    let long = format!("bonus_{}", "f".repeat(3000));
    let mut found = None;
    for n in 1..30 {
        if let Some(store) = pending_credit(&factory, &long, n).await {
            found = Some(store);
            break;
        }
    }
    let store = found.expect("a crash point leaving t1 applied to B");
    let b = store
        .find_one(&accounts(), doc! { "_id": "B" })
        .await
        .unwrap()
        .unwrap();
    let room = b.get_document("_tandem").unwrap().get_i64("room").unwrap();
    assert!(room > 3000, "{room}");
    // Leave half of t1's reservation free beside it.
    let free = 16;
    let pad = 16 * MIB - bson_len(&b) - room as usize - free;
    store
        .update_one(
            &accounts(),
            doc! { "_id": "B" },
            doc! { "$set": { "pad": "p".repeat(pad) } },
            Default::default(),
        )
        .await
        .unwrap();
    let c = Coordinator::builder_shared(store.clone())
        .database(DB)
        .lease(LEASE)
        .clock_margin(Duration::ZERO)
        .commit_point(CommitPoint::Done)
        .strategy(strategy)
        .build();
    let credit =
        || Transaction::new().change(DocumentChange::update(accounts(), "B").inc("small", 1_i64));
    let r = c.run(credit()).await;
    let cause = match &r {
        Err(TxError::Canceled { cause, .. }) => Some(cause.clone()),
        _ => None,
    };
    // t1 finishes (rolled forward: its credit lands in its room).
    factory.pass(store.as_ref(), Duration::from_secs(300)).await;
    let _ = c
        .recovery(RecoveryConfig {
            pending: PendingPolicy::RollForward,
            ..RecoveryConfig::default()
        })
        .run_once()
        .await;
    let again = c.run(credit()).await;
    assert!(again.is_ok(), "after t1: {again:?}");
    assert!(
        matches!(cause, Some(StepError::Conflict { .. })),
        "while t1 held its room: {r:?}"
    );
}
