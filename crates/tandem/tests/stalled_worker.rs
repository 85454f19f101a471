//! A worker paused mid-transaction, overtaken by recovery, then resumed: nothing applies twice.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tandem::testing::{audit, FaultStore};
use tandem::{CommitPoint, Coordinator, PendingPolicy, RecoveryConfig, TxError, TxState};

#[tokio::test]
async fn a_resumed_stalled_worker_applies_nothing_twice() {
    let mut covered = 0;
    for policy in [PendingPolicy::RollForward, PendingPolicy::RollBack] {
        // Pause worker 1 before each of its operations in turn (create, pending, apply A,
        // apply B, applied, clear A, clear B, done).
        for pause_at in 1..=8 {
            let (store, clock, seeded) = bank(&["A", "B"], 1000).await;
            let faulty = FaultStore::new(Arc::new(store.clone()));
            let pause = faulty.pause_at(pause_at);
            let worker1 = Coordinator::builder(faulty.clone())
                .commit_point(CommitPoint::Done)
                .build();
            let run1 = tokio::spawn(async move { worker1.run(transfer("A", "B", 100)).await });
            pause.reached.await.unwrap();

            // Worker 1's lease expires; worker 2 takes over and finishes.
            clock.advance(Duration::from_secs(31));
            let worker2 = Coordinator::new(store.clone()).recovery(RecoveryConfig {
                pending: policy,
                ..RecoveryConfig::default()
            });
            let report = worker2.run_once().await.unwrap();
            assert_eq!(report.failed, 0, "{report:?}");

            // Worker 1 resumes.
            pause.release.send(()).unwrap();
            let result1 = run1.await.unwrap();
            if pause_at > 1 {
                assert!(
                    matches!(result1, Err(TxError::Superseded { .. })),
                    "paused at {pause_at}: {result1:?}"
                );
            }
            let final_pass = worker2.run_once().await.unwrap();
            assert_eq!(final_pass.failed, 0);

            let audit = audit(&store, &records(), &seeded).await.unwrap();
            audit.assert_clean();
            let a = balance(&store, "A").await;
            let b = balance(&store, "B").await;
            assert_eq!(a + b, 2000, "paused at {pause_at}");
            let committed = audit.count(TxState::Done) == 1;
            assert_eq!((a, b), if committed { (900, 1100) } else { (1000, 1000) });
            covered += 1;
        }
    }
    println!("stalled-worker scenarios: {covered}");
}
