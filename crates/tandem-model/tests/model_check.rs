//! Exhaustive (breadth-first) checks of the protocol model; see the crate docs
//! of `tandem_model` for what the model covers.
//!
//! The default configurations finish in seconds in a debug build. The largest
//! ones take minutes there and are ignored by default; run them with
//! `cargo test -p tandem-model --release -- --ignored --nocapture`.

use std::collections::BTreeSet;

use stateright::{Checker, HasDiscoveries, Model};
use tandem_model::{
    PendingPolicy, TandemModel, Variant, CANCELED_LEAVES_NOTHING, COMMIT_HOLDS_ALL,
    EVENTUALLY_FINISHED, NEVER_BOTH, NEVER_NEGATIVE, ONE_EFFECTIVE_APPLY, QUIESCENT_FINISHED,
    VALUES_CONSISTENT,
};

/// Explores every reachable state and asserts every property: no
/// counterexample to a safety or liveness property, an example for each
/// `sometimes` property. Returns the number of states.
fn check(model: TandemModel) -> usize {
    let checker = model.clone().checker().spawn_bfs().join();
    checker.assert_properties();
    let states = checker.unique_state_count();
    println!(
        "model: {} participants, {} takeovers, {} crashes, {:?} recovery: {states} states, all properties hold",
        model.participants, model.takeovers, model.crashes, model.pending
    );
    states
}

/// Checks a broken `model` until it finds a counterexample to each of
/// `expected`, prints them, and fails if one is missing.
fn find_counterexamples(model: TandemModel, expected: &[&'static str]) {
    let wanted: BTreeSet<&'static str> = expected.iter().copied().collect();
    let checker = model
        .clone()
        .checker()
        .finish_when(HasDiscoveries::AllOf(wanted))
        .spawn_bfs()
        .join();
    for &name in expected {
        let path = checker.discovery(name).unwrap_or_else(|| {
            panic!(
                "{:?} with {} participants: no counterexample to {name:?} in {} states",
                model.variant,
                model.participants,
                checker.unique_state_count()
            )
        });
        println!(
            "{:?}, {} participants: counterexample to {name:?}:\n{}",
            model.variant,
            model.participants,
            model.explain(&path.into_actions())
        );
    }
}

/// The properties a late apply breaks when nothing fences it off.
const LATE_APPLY_BREAKS: [&str; 3] = [
    ONE_EFFECTIVE_APPLY,
    VALUES_CONSISTENT,
    CANCELED_LEAVES_NOTHING,
];

#[test]
fn two_participants() {
    let states = check(TandemModel::new(2).with_takeovers(1).with_crashes(1));
    assert!(states > 100_000, "suspiciously few states: {states}");
}

#[test]
fn two_participants_two_takeovers() {
    check(TandemModel::new(2).with_takeovers(2).with_crashes(0));
}

#[test]
fn two_participants_two_crashes() {
    check(
        TandemModel::new(2)
            .with_takeovers(1)
            .with_crashes(2)
            .with_pending(PendingPolicy::RollBack),
    );
}

#[test]
fn three_participants() {
    check(TandemModel::new(3).with_takeovers(1).with_crashes(0));
    check(TandemModel::new(3).with_takeovers(0).with_crashes(1));
    check(
        TandemModel::new(3)
            .with_takeovers(1)
            .with_crashes(1)
            .with_pending(PendingPolicy::RollForward),
    );
}

/// About 5 million states: minutes in a debug build, about 20 s in a release build.
#[test]
#[ignore = "large: run with --release -- --ignored"]
fn two_participants_two_takeovers_and_a_crash() {
    check(TandemModel::new(2).with_takeovers(2).with_crashes(1));
}

/// About 3 million states: a minute or more in a debug build, about 10 s in a release build.
#[test]
#[ignore = "large: run with --release -- --ignored"]
fn three_participants_a_takeover_and_a_crash() {
    check(TandemModel::new(3).with_takeovers(1).with_crashes(1));
}

/// Without the tombstone check, a stalled worker's apply lands after the
/// transaction was compensated or cleared: a second change to the same
/// document, and a change left behind by a canceled transaction.
#[test]
fn without_the_tombstone_fence_a_late_apply_lands() {
    for participants in [2, 3] {
        find_counterexamples(
            TandemModel::new(participants)
                .with_takeovers(1)
                .with_crashes(0)
                .with_variant(Variant::NoTombstoneFence),
            &LATE_APPLY_BREAKS,
        );
    }
}

/// Undoing before fencing leaves a window between the two updates in which a
/// late apply lands and is never undone.
#[test]
fn undoing_before_fencing_lets_a_late_apply_through() {
    for participants in [2, 3] {
        find_counterexamples(
            TandemModel::new(participants)
                .with_takeovers(1)
                .with_crashes(0)
                .with_variant(Variant::UndoBeforeFence),
            &LATE_APPLY_BREAKS,
        );
    }
}

/// With recovery rolling back only, nobody but the coordinator ever applies,
/// so no document is changed twice even without tombstones; the late apply
/// still leaves a canceled transaction's change behind.
#[test]
fn without_the_tombstone_fence_roll_back_only_still_leaves_a_change_behind() {
    let model = TandemModel::new(2)
        .with_takeovers(1)
        .with_crashes(1)
        .with_pending(PendingPolicy::RollBack)
        .with_variant(Variant::NoTombstoneFence);
    let checker = model.clone().checker().spawn_bfs().join();
    assert!(checker.discovery(ONE_EFFECTIVE_APPLY).is_none());
    assert!(checker.discovery(CANCELED_LEAVES_NOTHING).is_some());
    assert!(checker.discovery(VALUES_CONSISTENT).is_some());
    for property in [NEVER_BOTH, COMMIT_HOLDS_ALL, NEVER_NEGATIVE] {
        assert!(checker.discovery(property).is_none(), "{property}");
    }
}

/// The liveness properties are not vacuous: if recovery never claims a
/// crashed worker's record, that transaction stays in flight.
#[test]
fn without_rescue_a_crashed_transaction_stays_in_flight() {
    find_counterexamples(
        TandemModel::new(2)
            .with_takeovers(0)
            .with_crashes(1)
            .with_variant(Variant::NoRescue),
        &[QUIESCENT_FINISHED, EVENTUALLY_FINISHED],
    );
}

/// The smallest configuration, for a quick look at its size: no takeover, no crash.
#[test]
fn without_takeovers_or_crashes() {
    for participants in [2, 3] {
        check(
            TandemModel::new(participants)
                .with_takeovers(0)
                .with_crashes(0),
        );
    }
}
