//! Transactions committed together are finished together, and survive a crash anywhere in between.

mod common;

use common::*;
use tandem::testing::{audit, scenarios, MemoryFactory};
use tandem::{Coordinator, TxState};

#[tokio::test]
async fn transfers_committed_together_survive_a_crash_after_any_operation() {
    let covered = scenarios::finished_together(&MemoryFactory, "bank").await;
    // 8 transfers: the run without a crash, then a crash after each operation.
    assert!(covered > 8 * 4, "only {covered} runs");
}

#[tokio::test]
async fn the_finisher_clears_and_moves_a_whole_round_in_two_requests() {
    let names: Vec<String> = (0..32).map(|i| format!("acct-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (store, _, seeded) = bank(&names, 1000).await;
    let coordinator = Coordinator::new(store.clone());
    let before = store.command_count();
    // On this single-threaded runtime the sixteen transfers reach `applied`
    // before the finisher first runs, so it takes them all in one round.
    let receipts = futures::future::join_all(
        (0..16).map(|i| coordinator.run(transfer(names[2 * i], names[2 * i + 1], 10))),
    )
    .await;
    for r in &receipts {
        assert_eq!(r.as_ref().expect("commits").state, TxState::Applied);
    }
    let committed = store.command_count() - before;
    assert_eq!(committed, 16 * 3, "create, apply (one request), applied");
    coordinator.drain().await;
    let finishing = store.command_count() - before - committed;
    assert_eq!(
        finishing, 2,
        "every clear in one request, every move to done in another"
    );
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Done), 16);
    for i in 0..16 {
        assert_eq!(balance(&store, names[2 * i]).await, 990);
        assert_eq!(balance(&store, names[2 * i + 1]).await, 1010);
    }
}
