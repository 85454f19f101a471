//! Random interleavings of coordinators, recovery workers and crashes, checked against the invariants.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use tandem::testing::{audit, FaultStore};
use tandem::{CommitPoint, Coordinator, PendingPolicy, RecoveryConfig, TxState};

#[derive(Clone, Debug)]
struct Plan {
    from: usize,
    to: usize,
    amount: i64,
    crash_after: Option<u64>,
    commit_point: CommitPoint,
}

fn plan(accounts: usize) -> impl Strategy<Value = Plan> {
    (
        0..accounts,
        0..accounts,
        1_i64..150,
        prop::option::weighted(0.4, 0_u64..10),
        prop::bool::ANY,
    )
        .prop_filter("distinct accounts", |(f, t, ..)| f != t)
        .prop_map(|(from, to, amount, crash_after, applied)| Plan {
            from,
            to,
            amount,
            crash_after,
            commit_point: if applied { CommitPoint::Applied } else { CommitPoint::Done },
        })
}

const NAMES: [&str; 4] = ["A", "B", "C", "D"];

async fn scenario(plans: Vec<Plan>, seed: u64, recoveries: usize, forward: bool) {
    let (store, clock, seeded) = bank(&NAMES, 100).await;
    let policy = if forward { PendingPolicy::RollForward } else { PendingPolicy::RollBack };
    let mut tasks = Vec::new();
    for (i, p) in plans.iter().cloned().enumerate() {
        let mut faulty = FaultStore::new(Arc::new(store.clone())).with_yields(seed ^ i as u64);
        if let Some(k) = p.crash_after {
            faulty = faulty.crash_after(k);
        }
        let coordinator = Coordinator::builder(faulty).commit_point(p.commit_point).build();
        tasks.push(tokio::spawn(async move {
            let _ = coordinator.run(transfer(NAMES[p.from], NAMES[p.to], p.amount)).await;
            coordinator.drain().await;
        }));
    }
    // Recovery workers racing the coordinators, each seeing every lease expired.
    for r in 0..recoveries {
        let faulty = FaultStore::new(Arc::new(store.clone())).with_yields(seed.rotate_left(7) ^ r as u64);
        let clock = clock.clone();
        let worker = Coordinator::new(faulty).recovery(RecoveryConfig { pending: policy, ..RecoveryConfig::default() });
        tasks.push(tokio::spawn(async move {
            for _ in 0..(seed % 5) {
                tokio::task::yield_now().await;
            }
            clock.advance(Duration::from_secs(31));
            let _ = worker.run_once().await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Quiescence: recovery until nothing is left in flight.
    clock.advance(Duration::from_secs(31));
    let worker = Coordinator::new(store.clone()).recovery(RecoveryConfig { pending: policy, ..RecoveryConfig::default() });
    let report = worker.run_once().await.unwrap();
    assert_eq!(report.failed, 0, "{report:?}");

    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    let mut total = 0;
    for name in NAMES {
        let b = balance(&store, name).await;
        assert!(b >= 0, "{name} went negative: {b}");
        total += b;
    }
    assert_eq!(total, 400, "money is conserved");
    assert!(audit.records.iter().all(|r| r.state == TxState::Done || r.state == TxState::Canceled));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    #[test]
    fn interleavings_keep_the_invariants(
        plans in prop::collection::vec(plan(NAMES.len()), 1..7),
        seed in any::<u64>(),
        recoveries in 0_usize..3,
        forward in prop::bool::ANY,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(scenario(plans, seed, recoveries, forward));
    }
}
