//! A field's type on a document others share, and the room its undo
//! needs: a double credit pending on a missing field makes it a double from
//! its apply on (so no integer debit applies to it, and a second double
//! credit does); an integer debit's undo that widens its field has room;
//! an `unset` beside a large sibling images the field alone. Each test
//! failed on the code before its fix.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use tandem::testing::FaultStore;
use tandem::{
    CommitPoint, Coordinator, DocumentChange, MemoryStore, Namespace, Store, Transaction, TxError,
};

fn ns() -> Namespace {
    Namespace::new("bank", "accounts")
}

async fn seed(store: &MemoryStore, d: Document) {
    store.insert_one(&ns(), d).await.unwrap();
}

async fn read(store: &MemoryStore, id: &str) -> Document {
    store
        .find_one(&ns(), doc! { "_id": id })
        .await
        .unwrap()
        .unwrap()
}

/// A shared double credit applies only to a double, decimal or missing
/// field. Applied to a missing one, it stays pending (deferred to the
/// commit); when its apply created the field as `Int32(0)`, an integer
/// debit could apply to it, the double credit commit (the field becomes a
/// double) and the debit's cancel add its amount back to a double, which
/// rounds. The apply now creates it as `0.0`.
///
/// T2: credit `balance` by 24.27 on a document without `balance`, held
/// after its apply. T3: credit 36203 (Int64), committed. T1: debit 31473,
/// held before its cancel. T2 commits, T1 cancels. Expected: 36203 + 24.27
/// = 36227.27, as without T1.
#[tokio::test]
async fn a_double_credit_pending_on_a_missing_field_does_not_make_a_pending_integer_debit_round() {
    let store = MemoryStore::new();
    seed(&store, doc! { "_id": "A" }).await;

    // T2: 1 the record's create, 2 A's apply, 3 the commit (paused).
    let faulty2 = FaultStore::new(Arc::new(store.clone()));
    let pause2 = faulty2.pause_at(3);
    let t2 = Coordinator::builder(faulty2)
        .commit_point(CommitPoint::Done)
        .build();
    let run2 = tokio::spawn(async move {
        t2.run(
            Transaction::new().change(DocumentChange::update(ns(), "A").inc("balance", 24.27_f64)),
        )
        .await
    });
    pause2.reached.await.unwrap();
    let applied = read(&store, "A").await;
    eprintln!("after T2's apply: {applied:?}");

    // T3: an integer credit, to the end.
    let t3 = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .build()
        .run(Transaction::new().change(DocumentChange::update(ns(), "A").inc("balance", 36203_i64)))
        .await;
    assert!(t3.is_ok(), "{t3:?}");

    // T1: an integer debit, applied, held before its cancel.
    let faulty1 = FaultStore::new(Arc::new(store.clone()));
    let pause1 = faulty1.pause_at(3);
    let t1 = Coordinator::builder(faulty1).build();
    let run1 = tokio::spawn(async move {
        t1.run(
            Transaction::new()
                .change(
                    DocumentChange::update(ns(), "A")
                        .inc("balance", -31473_i64)
                        .require_gte("balance", 31473_i64),
                )
                .change(DocumentChange::update(ns(), "no-such-doc").inc("balance", 1_i64)),
        )
        .await
    });
    pause1.reached.await.unwrap();
    eprintln!("after T1's debit: {:?}", read(&store, "A").await);

    // Let T2 commit.
    pause2.release.send(()).unwrap();
    let answer2 = run2.await.unwrap();
    assert!(answer2.is_ok(), "{answer2:?}");

    pause1.release.send(()).ok();
    let answer1 = run1.await.unwrap();
    assert!(
        matches!(answer1, Err(TxError::Canceled { .. })),
        "{answer1:?}"
    );
    let after = read(&store, "A").await;
    let balance = after.get("balance").cloned();
    // The committed credits, exactly as without T1.
    let alone = Bson::Double(0.0_f64 + 36203.0 + 24.27);
    assert_eq!(balance, Some(alone), "{after:?}");
}

fn bson_len(d: &Document) -> usize {
    let mut v = Vec::new();
    d.to_writer(&mut v).unwrap();
    v.len()
}

const MAX: usize = 16 * 1024 * 1024;

/// The room reserved on `d`.
fn room(d: &Document) -> usize {
    match d.get_document("_tandem").ok().and_then(|t| t.get("room")) {
        Some(Bson::Int64(n)) => *n as usize,
        Some(Bson::Int32(n)) => *n as usize,
        _ => 0,
    }
}

/// Adding an `Int32` debit back can overflow the 32-bit range once a
/// credit landed meanwhile, and the store then widens the field to an
/// `Int64`: 4 bytes more per field, which the debit's apply reserves. T1 debits 120 `Int32` fields of a document
/// near 16 MiB (each `i32::MAX - 500`) by 1000 and is held before its
/// cancel; T2 credits each by 1000 and commits (the fields are `Int32`
/// again, `i32::MAX - 500`); ordinary credits to new fields then fill the
/// document up to what the room lets them (each apply respects the room,
/// and there is none reserved for T1's undo). T1's undo then adds 4 bytes
/// per field, ~480 bytes, more than any apply must leave free: refused as
/// too large, a canceled transaction that can never be undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_integer_debits_undo_that_widens_its_field_has_room() {
    const N: usize = 120;
    let store = MemoryStore::new();
    let x = i32::MAX - 500;
    let mut a = doc! { "_id": "A" };
    for i in 0..N {
        a.insert(format!("f{i:03}"), x);
    }
    let skeleton = bson_len(&a);
    a.insert("pad", "p".repeat(MAX - skeleton - 200 * 1024));
    seed(&store, a).await;

    // T1: 1 the record's create, 2 A's apply, 3 the move to `canceling` (paused).
    let faulty1 = FaultStore::new(Arc::new(store.clone()));
    let pause1 = faulty1.pause_at(3);
    let t1 = Coordinator::builder(faulty1).build();
    let run1 = tokio::spawn(async move {
        let mut change = DocumentChange::update(ns(), "A");
        for i in 0..N {
            change = change.inc(format!("f{i:03}"), -1000_i32);
        }
        t1.run(
            Transaction::new()
                .change(change)
                .change(DocumentChange::update(ns(), "no-such-doc").inc("balance", 1_i64)),
        )
        .await
    });
    pause1.reached.await.unwrap();
    assert_eq!(
        read(&store, "A").await.get("f000"),
        Some(&Bson::Int32(x - 1000))
    );

    let done = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .build();
    // T2: the credits land; each field is `x` again, an `Int32`.
    let mut change = DocumentChange::update(ns(), "A");
    for i in 0..N {
        change = change.inc(format!("f{i:03}"), 1000_i32);
    }
    let t2 = done.run(Transaction::new().change(change)).await;
    assert!(t2.is_ok(), "{t2:?}");
    assert_eq!(read(&store, "A").await.get("f000"), Some(&Bson::Int32(x)));

    // Credits to new fields, as large as the room lets them.
    let mut k = 0;
    let mut len = 64 * 1024;
    while len >= 1 {
        loop {
            k += 1;
            let name = format!("g{k}_{}", "x".repeat(len));
            let t3 = done
                .run(Transaction::new().change(DocumentChange::update(ns(), "A").inc(name, 1_i32)))
                .await;
            if t3.is_err() {
                break;
            }
        }
        len /= 2;
    }
    let full = read(&store, "A").await;
    eprintln!(
        "free after the credits: {} bytes (size {}, room {})",
        MAX - bson_len(&full) - room(&full),
        bson_len(&full),
        room(&full)
    );

    pause1.release.send(()).unwrap();
    let answer1 = tokio::time::timeout(std::time::Duration::from_secs(120), run1)
        .await
        .expect("T1 finished")
        .unwrap();
    let after = read(&store, "A").await;
    assert!(
        matches!(answer1, Err(TxError::Canceled { undone: true, .. })),
        "{answer1:?}; f000 = {:?}, pending = {:?}",
        after.get("f000"),
        after
            .get_document("_tandem")
            .ok()
            .and_then(|t| t.get("pending")),
    );
    assert_eq!(after.get("f000"), Some(&Bson::Int64(i64::from(x) + 1000)));
}

/// An `unset` of a field of a sub-document images the sub-document whole
/// (to keep its field order) only up to 16 KiB: beside a sibling of
/// nearly 16 MiB, the record could not hold that image, and the change was
/// refused for good. The field alone is imaged, and the unset commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unset_beside_a_large_sibling_is_not_refused() {
    let store = MemoryStore::new();
    seed(
        &store,
        doc! { "_id": "P", "profile": { "nickname": "bo", "photo": "p".repeat(16 * 1024 * 1024 - 4096) } },
    )
    .await;
    let answer = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .build()
        .run(Transaction::new().change(DocumentChange::update(ns(), "P").unset("profile.nickname")))
        .await;
    assert!(answer.is_ok(), "{answer:?}");
    let after = read(&store, "P").await;
    assert!(after
        .get_document("profile")
        .unwrap()
        .get("nickname")
        .is_none());
}

/// Two double credits of a new field, the first pending when the second
/// applies: the first's apply leaves a double there (`0.0`), so the second
/// is admitted, and both land. (With an `Int32(0)`, the second was refused
/// for good, `TypeMismatch` "stored int 0".)
#[tokio::test]
async fn two_pending_double_credits_of_a_missing_field_both_commit() {
    let store = MemoryStore::new();
    seed(&store, doc! { "_id": "A" }).await;

    // T2: 1 the record's create, 2 A's apply, 3 the commit (paused).
    let faulty2 = FaultStore::new(Arc::new(store.clone()));
    let pause2 = faulty2.pause_at(3);
    let t2 = Coordinator::builder(faulty2)
        .commit_point(CommitPoint::Done)
        .build();
    let run2 = tokio::spawn(async move {
        t2.run(Transaction::new().change(DocumentChange::update(ns(), "A").inc("points", 0.5_f64)))
            .await
    });
    pause2.reached.await.unwrap();

    let t4 = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .build()
        .run(Transaction::new().change(DocumentChange::update(ns(), "A").inc("points", 1.25_f64)))
        .await;
    pause2.release.send(()).unwrap();
    let answer2 = run2.await.unwrap();
    assert!(answer2.is_ok(), "{answer2:?}");
    assert!(t4.is_ok(), "the second double credit: {t4:?}");
    assert_eq!(
        read(&store, "A").await.get("points"),
        Some(&Bson::Double(1.75))
    );
}
