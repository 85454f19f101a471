//! The safety regression scenarios (`tandem::testing::safety`) on the embedded store.

use tandem::testing::{safety, MemoryFactory};

#[tokio::test]
async fn late_delete_after_recreation() {
    safety::late_delete_after_recreation(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn late_insert_after_deletion() {
    safety::late_insert_after_deletion(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn hot_document_stays_bounded() {
    let bytes = safety::hot_document_stays_bounded(&MemoryFactory::new(), "bank", 2000).await;
    println!("hot account after 2000 transfers: {bytes} bytes");
}

#[tokio::test]
async fn garbage_collection_then_late_apply() {
    safety::garbage_collection_then_late_apply(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn numeric_ids_are_one_document() {
    safety::numeric_ids_are_one_document(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn same_owner_same_id() {
    safety::same_owner_same_id(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn committed_answer_after_failure() {
    safety::committed_answer_after_failure(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn canceled_insert_frees_the_id() {
    safety::canceled_insert_frees_the_id(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn exclusive_change_sees_other_marker_fields() {
    safety::exclusive_change_sees_other_marker_fields(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn cancel_while_the_owner_applies() {
    safety::cancel_while_the_owner_applies(&MemoryFactory::new(), "bank").await;
}

/// The clock margin, and what breaks beyond it. A worker is paused before
/// its apply; recovery rolls the transfer back once the lease and the margin
/// have passed; then the store's clock steps back (an NTP correction, a
/// failover to a replica that is behind) and the worker's apply arrives.
/// Returns the balance of the debited account and whether a marker was left.
async fn clock_steps_back(by: std::time::Duration) -> (i64, bool) {
    use std::sync::Arc;
    use std::time::Duration;
    use tandem::testing::FaultStore;
    use tandem::{
        CommitPoint, Coordinator, DocumentChange, MemoryStore, Namespace, PendingPolicy,
        RecoveryConfig, Store, Transaction,
    };

    let clock = Arc::new(tandem::ManualClock::default());
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let ns = Namespace::new("bank", "accounts");
    for (id, balance) in [("A", 100_i64), ("B", 0)] {
        store
            .insert_one(&ns, bson::doc! { "_id": id, "balance": balance })
            .await
            .unwrap();
    }
    let (lease, margin) = (Duration::from_secs(30), Duration::from_secs(2));
    let faulty = FaultStore::new(store.clone());
    let pause = faulty.pause_at(2);
    let worker = Coordinator::builder(faulty)
        .lease(lease)
        .clock_margin(margin)
        .commit_point(CommitPoint::Done)
        .build();
    let tx = Transaction::new()
        .change(
            DocumentChange::update(ns.clone(), "A")
                .inc("balance", -10_i64)
                .require_gte("balance", 10_i64),
        )
        .change(DocumentChange::update(ns.clone(), "B").inc("balance", 10_i64));
    let run = tokio::spawn(async move { worker.run(tx).await });
    pause.reached.await.unwrap();
    clock.advance(lease + margin);
    let report = Coordinator::builder_shared(store.clone())
        .lease(lease)
        .clock_margin(margin)
        .build()
        .recovery(RecoveryConfig {
            pending: PendingPolicy::RollBack,
            ..RecoveryConfig::default()
        })
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.canceled, 1, "{report:?}");
    clock.rewind(by);
    pause.release.send(()).unwrap();
    let _ = run.await.unwrap();
    let a = store
        .find_one(&ns, bson::doc! { "_id": "A" })
        .await
        .unwrap()
        .unwrap();
    let marked = a
        .get_array("pendingTransactions")
        .map(|m| !m.is_empty())
        .unwrap_or(false);
    (a.get_i64("balance").unwrap(), marked)
}

#[tokio::test]
async fn a_clock_step_back_within_the_margin_changes_nothing() {
    let (balance, marked) = clock_steps_back(std::time::Duration::from_secs(2)).await;
    assert_eq!((balance, marked), (100, false));
}

/// Beyond the margin the promise breaks, as the guide says: the late debit
/// of a canceled transfer lands and its marker stays.
#[tokio::test]
async fn a_clock_step_back_beyond_the_margin_lets_a_late_apply_in() {
    let (balance, marked) = clock_steps_back(std::time::Duration::from_secs(3)).await;
    assert_eq!((balance, marked), (90, true));
}

#[tokio::test]
async fn credits_near_the_limit_are_counted_together() {
    safety::credits_near_the_limit_are_counted_together(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn undo_keeps_writes_made_outside_tandem() {
    safety::undo_keeps_writes_made_outside_tandem(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn undo_keeps_an_outside_increment() {
    safety::undo_keeps_an_outside_increment(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn idempotency_key_outlives_garbage_collection() {
    safety::idempotency_key_outlives_garbage_collection(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn a_pending_credit_creates_no_field() {
    safety::a_pending_credit_creates_no_field(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn late_create_after_collection() {
    safety::late_create_after_collection(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn stale_move_misses_the_inert_copy() {
    safety::stale_move_misses_the_inert_copy(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn reused_id_keeps_markers_apart() {
    safety::reused_id_keeps_markers_apart(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn own_record_landing_while_the_id_is_taken() {
    safety::own_record_landing_while_the_id_is_taken(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn before_images_keep_the_stored_types() {
    safety::before_images_keep_the_stored_types(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn images_of_paths_through_arrays() {
    safety::images_of_paths_through_arrays(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn a_canceled_change_leaves_nothing_on_the_way() {
    safety::a_canceled_change_leaves_nothing_on_the_way(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn a_native_insert_takes_over_a_placeholder() {
    safety::a_native_insert_takes_over_a_placeholder(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn an_insert_meeting_a_held_delete_is_a_conflict() {
    safety::an_insert_meeting_a_held_delete_is_a_conflict(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn typed_presence_guards_follow_option() {
    safety::typed_presence_guards_follow_option(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn guards_on_unusual_numbers_decide_alike() {
    safety::guards_on_unusual_numbers_decide_alike(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn credits_at_new_paths_leave_nothing() {
    safety::credits_at_new_paths_leave_nothing(&MemoryFactory::new(), "bank", 200).await;
}

#[tokio::test]
async fn credits_keep_each_others_shapes() {
    safety::credits_keep_each_others_shapes(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn zero_sums_make_way() {
    safety::zero_sums_make_way(&MemoryFactory::new(), "bank").await;
}

#[tokio::test]
async fn undo_keeps_a_reservation_it_does_not_hold() {
    safety::undo_keeps_a_reservation_it_does_not_hold(&MemoryFactory::new(), "bank").await;
}
