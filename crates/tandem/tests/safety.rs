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
