//! A worker paused mid-transaction, overtaken by recovery, then resumed: nothing applies twice.

use tandem::testing::{scenarios, MemoryFactory};

#[tokio::test]
async fn a_resumed_stalled_worker_applies_nothing_twice() {
    let covered = scenarios::stalled_worker(&MemoryFactory::new(), "bank").await;
    println!("stalled-worker scenarios: {covered}");
    assert_eq!(covered, 14, "7 operations x 2 pending policies");
}
