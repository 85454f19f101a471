//! Before-images read below the top level, and images whose leaves the
//! apply's filter cannot all type: a stale image is never written back
//! over a committed change, and an undo restoring such an image has the
//! room it needs. Each test failed on the code before its fix.

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

/// A before-image read below the top level (`a.0.b`) was pinned by a query
/// equality, which reads `a.0.b` through the element `a[0]` and through a
/// field named `0` in any element of `a`; it is now pinned by an
/// aggregation expression, which reads the element alone. Before: T1 reads `a.0.b = "old"` and is
/// held before its record's create; T2 sets `a.0.b` to `"other"` and
/// commits; T3 pushes `{"0": {"b": "old"}}` onto `a` and commits. T1's
/// apply filter still matches (through `a[1]."0".b`), T1 applies and is
/// canceled (its other participant is missing): the undo writes the stale
/// `"old"` over T2's committed `"other"`.
#[tokio::test]
async fn a_stale_image_below_the_top_level_is_not_written_back_over_a_commit() {
    let store = MemoryStore::new();
    seed(&store, doc! { "_id": "A", "a": [{ "b": "old" }] }).await;

    // T1: 1 A's prepare read, 2 the record's create (paused).
    let faulty1 = FaultStore::new(Arc::new(store.clone()));
    let pause1 = faulty1.pause_at(2);
    let t1 = Coordinator::builder(faulty1).build();
    let run1 = tokio::spawn(async move {
        t1.run(
            Transaction::new()
                .change(DocumentChange::update(ns(), "A").set("a.0.b", "mine"))
                .change(DocumentChange::update(ns(), "no-such-doc").inc("balance", 1_i64)),
        )
        .await
    });
    pause1.reached.await.unwrap();

    let done = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .build();
    let t2 = done
        .run(Transaction::new().change(DocumentChange::update(ns(), "A").set("a.0.b", "other")))
        .await;
    assert!(t2.is_ok(), "{t2:?}");
    let t3 = done
        .run(
            Transaction::new()
                .change(DocumentChange::update(ns(), "A").push("a", doc! { "0": { "b": "old" } })),
        )
        .await;
    assert!(t3.is_ok(), "{t3:?}");
    eprintln!("before T1's apply: {:?}", read(&store, "A").await);

    pause1.release.send(()).unwrap();
    let answer1 = run1.await.unwrap();
    assert!(
        matches!(answer1, Err(TxError::Canceled { .. })),
        "{answer1:?}"
    );
    let after = read(&store, "A").await;
    eprintln!("after T1: {after:?}");
    // T2's committed write stands.
    let a = after.get_array("a").unwrap();
    assert_eq!(
        a[0].as_document().unwrap().get("b"),
        Some(&Bson::String("other".into())),
        "{after:?}"
    );
}

/// The same with money: T1 closes the account in `accts[0]` (sets its
/// balance to zero, as a transfer that moves the balance out and marks the
/// account closed would) and is canceled. It read `accts.0.bal = 100`;
/// meanwhile T2 credited 50 (committed: 150) and T3 pushed an element
/// `{"0": {"bal": 100}}`. T1's apply filter matches through that element;
/// its undo writes the stale 100 back: T2's committed credit of 50 is lost.
/// Expected: `accts[0].bal == 150` after T1's cancel.
#[tokio::test]
async fn a_stale_numeric_image_below_the_top_level_does_not_lose_a_credit() {
    let store = MemoryStore::new();
    seed(&store, doc! { "_id": "A", "accts": [{ "bal": 100_i32 }] }).await;

    // T1: 1 A's prepare read, 2 the record's create (paused).
    let faulty1 = FaultStore::new(Arc::new(store.clone()));
    let pause1 = faulty1.pause_at(2);
    let t1 = Coordinator::builder(faulty1).build();
    let run1 = tokio::spawn(async move {
        t1.run(
            Transaction::new()
                .change(
                    DocumentChange::update(ns(), "A")
                        .set("accts.0.bal", 0_i32)
                        .set("accts.0.status", "closed"),
                )
                .change(DocumentChange::update(ns(), "no-such-doc").inc("balance", 1_i64)),
        )
        .await
    });
    pause1.reached.await.unwrap();

    let done = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .build();
    let t2 = done
        .run(
            Transaction::new().change(DocumentChange::update(ns(), "A").inc("accts.0.bal", 50_i32)),
        )
        .await;
    assert!(t2.is_ok(), "{t2:?}");
    let t3 = done
        .run(Transaction::new().change(
            DocumentChange::update(ns(), "A").push("accts", doc! { "0": { "bal": 100_i32 } }),
        ))
        .await;
    assert!(t3.is_ok(), "{t3:?}");

    pause1.release.send(()).unwrap();
    let answer1 = run1.await.unwrap();
    let after = read(&store, "A").await;
    eprintln!("after T1: {answer1:?}\n{after:?}");
    assert!(
        matches!(answer1, Err(TxError::Canceled { .. })),
        "{answer1:?}"
    );
    let a0 = after.get_array("accts").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(a0.get("bal"), Some(&Bson::Int32(150)), "{after:?}");
}

fn bson_len(d: &Document) -> usize {
    let mut v = Vec::new();
    d.to_writer(&mut v).unwrap();
    v.len()
}

const MAX: usize = 16 * 1024 * 1024;

fn room(d: &Document) -> usize {
    match d.get_document("_tandem").ok().and_then(|t| t.get("room")) {
        Some(Bson::Int64(n)) => *n as usize,
        Some(Bson::Int32(n)) => *n as usize,
        _ => 0,
    }
}

/// An `unset` of `a.b` images the sub-document `a` whole (up to 16 KiB),
/// and the apply checks the image's leaf types for its first 256 leaves
/// only: such an image is not pinned byte for byte, and its undo reserves
/// the whole image. (Worked out from the image, the room was `size(b)`.) T1 reads `a` (1000 doubles `5.0` and `b`) and is held
/// before its record's create; T2 sets 700 of the doubles past the 256th
/// to `Int32` 5 (equal values: T1's filter still matches) and commits,
/// 2800 bytes fewer; ordinary credits then fill the document to within a
/// few hundred bytes of 16 MiB. T1 applies (its own fields fit) and is
/// canceled; its undo writes `a` back whole, doubles and all: 2800 bytes
/// more than it reserved, past 16 MiB, refused: a canceled transaction
/// never undone, the document held for good. Expected: T1 canceled and
/// undone (or its apply refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undo_of_a_whole_sub_document_has_room_after_an_equal_value_type_change() {
    const N: usize = 1000;
    let store = MemoryStore::new();
    let mut a = Document::new();
    for i in 0..N {
        a.insert(format!("x{i:04}"), 5.0_f64);
    }
    a.insert("b", "bee");
    let mut d = doc! { "_id": "A", "a": a };
    let skeleton = bson_len(&d);
    d.insert("pad", "p".repeat(MAX - skeleton - 100 * 1024));
    seed(&store, d).await;

    // T1: 1 A's prepare read, 2 the record's create (paused).
    let faulty1 = FaultStore::new(Arc::new(store.clone()));
    let pause1 = faulty1.pause_at(2);
    let t1 = Coordinator::builder(faulty1).build();
    let run1 = tokio::spawn(async move {
        t1.run(
            Transaction::new()
                .change(DocumentChange::update(ns(), "A").unset("a.b"))
                .change(DocumentChange::update(ns(), "no-such-doc").inc("balance", 1_i64)),
        )
        .await
    });
    pause1.reached.await.unwrap();

    let done = Coordinator::builder(store.clone())
        .commit_point(CommitPoint::Done)
        .build();
    let mut t2 = DocumentChange::update(ns(), "A");
    for i in 300..N {
        t2 = t2.set(format!("a.x{i:04}"), 5_i32);
    }
    let t2 = done.run(Transaction::new().change(t2)).await;
    assert!(t2.is_ok(), "{t2:?}");

    // Double credits (no credit sums, which an exclusive apply drops) to
    // new fields, down to names of 512 bytes.
    let mut k = 0;
    let mut len = 64 * 1024;
    while len >= 512 {
        loop {
            k += 1;
            let name = format!("g{k}_{}", "x".repeat(len));
            let t3 = done
                .run(
                    Transaction::new().change(DocumentChange::update(ns(), "A").inc(name, 1.5_f64)),
                )
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
        MAX as i64 - bson_len(&full) as i64 - room(&full) as i64,
        bson_len(&full),
        room(&full)
    );

    pause1.release.send(()).unwrap();
    let answer1 = tokio::time::timeout(std::time::Duration::from_secs(120), run1)
        .await
        .expect("T1 finished")
        .unwrap();
    let after = read(&store, "A").await;
    eprintln!(
        "T1: {answer1:?}; size {}, x0999 = {:?}, b = {:?}, lock {:?}",
        bson_len(&after),
        after.get_document("a").unwrap().get("x0999"),
        after.get_document("a").unwrap().get("b"),
        after
            .get_document("_tandem")
            .ok()
            .and_then(|t| t.get("lock")),
    );
    assert!(
        matches!(answer1, Err(TxError::Canceled { undone: true, .. })),
        "{answer1:?}; b = {:?}",
        after.get_document("a").unwrap().get("b"),
    );
    assert_eq!(
        after.get_document("a").unwrap().get("b"),
        Some(&Bson::String("bee".into()))
    );
}
