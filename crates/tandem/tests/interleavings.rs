//! Random interleavings of coordinators, recovery workers and crashes, checked against the invariants.

use proptest::prelude::*;
use tandem::testing::scenarios::{self, Interleaving, PlannedTransfer, BANK};
use tandem::testing::MemoryFactory;
use tandem::CommitPoint;

fn transfer() -> impl Strategy<Value = PlannedTransfer> {
    (
        0..BANK.len(),
        0..BANK.len(),
        1_i64..150,
        prop::option::weighted(0.4, 0_u64..10),
        any::<bool>(),
        prop::bool::weighted(0.3),
    )
        .prop_filter("distinct accounts", |(f, t, ..)| f != t)
        .prop_map(
            |(from, to, amount, crash_after, applied, expired_lease)| PlannedTransfer {
                from,
                to,
                amount,
                crash_after,
                commit_point: if applied {
                    CommitPoint::Applied
                } else {
                    CommitPoint::Done
                },
                expired_lease,
            },
        )
}

fn interleaving() -> impl Strategy<Value = Interleaving> {
    (
        prop::collection::vec(transfer(), 1..7),
        any::<u64>(),
        0_usize..3,
        any::<bool>(),
    )
        .prop_map(|(transfers, seed, recoveries, forward)| Interleaving {
            transfers,
            seed,
            recoveries,
            forward,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

    #[test]
    fn interleavings_keep_the_invariants(plan in interleaving()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(scenarios::interleaving(&MemoryFactory::new(), "bank", &plan));
    }
}
