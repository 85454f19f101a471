//! Exhaustive (breadth-first) checks of the model of the proposed "decide
//! by inserting" protocol; see `tandem_model::insert_decide` for what the
//! model covers and the rules it forced.
//!
//! `cargo test -p tandem-model` runs the fast checks (about half a minute
//! in a debug build): one full configuration, the happy path's cost, and
//! the searches for the counterexamples of the cheaper mutations. The
//! larger configurations and the two costlier mutation searches are
//! ignored by default; run them in a release build:
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-model cargo test -p tandem-model --release --test insert_decide -- --ignored --nocapture --test-threads 1
//! ```

use std::time::Instant;

use stateright::{Checker, Model};
use tandem_model::insert_decide::*;
use tandem_model::{Ticks, MARGIN, R};

/// States the counterexample searches may visit.
const SEARCH_LIMIT: usize = 20_000_000;

/// Explores every reachable state of `model` and asserts every property: no
/// counterexample to a safety or liveness property, an example for each
/// `sometimes` property. Prints and returns the number of unique states.
fn check(label: &str, model: InsertDecideModel) -> usize {
    let started = Instant::now();
    let checker = model.clone().checker().threads(2).spawn_bfs().join();
    let states = checker.unique_state_count();
    println!(
        "{label}: {states} unique states, depth {}, {:.1?}",
        checker.max_depth(),
        started.elapsed()
    );
    for property in model.properties() {
        if property.expectation.discovery_is_failure() {
            if let Some(path) = checker.discovery(property.name) {
                println!(
                    "counterexample to {:?}:\n{}",
                    property.name,
                    model.explain(&path.into_actions())
                );
            }
        }
    }
    checker.assert_properties();
    states
}

/// Searches `model` for a shortest path to a violation of one of `broken`,
/// prints it, and fails if there is none. Returns its length.
fn counterexample(label: &str, model: InsertDecideModel, broken: &[&str]) -> usize {
    let started = Instant::now();
    let search = model.search(broken, SEARCH_LIMIT);
    let Some((property, path)) = search.found else {
        panic!(
            "{label}: no counterexample to any of {broken:?} in {} states",
            search.states
        );
    };
    println!(
        "{label}: counterexample to {property:?}, {} steps (shortest; {} states searched, {:.1?}):\n{}",
        path.len(),
        search.states,
        started.elapsed(),
        model.explain(&path)
    );
    path.len()
}

/// One transfer, one lost answer (any step), the registry modelled,
/// clocks `R` 0..=4, `P1` 0..=5, `P2` 1..=6 ticking on their own.
fn transfer() -> InsertDecideModel {
    InsertDecideModel::new(Scenario::Transfer)
}

/// Two coordinators under one id; clocks ticking together (`P2` one ahead
/// of `R` and `P1`) up to `R` = 5: long enough for one coordinator to begin
/// after the other's deadline, and for the other's record to be collected
/// while it runs. Registry left out; one lost answer, of the kinds in `lose`.
fn same_id_in_step(lose: Lose) -> InsertDecideModel {
    InsertDecideModel::new(Scenario::SameId)
        .with_registry(false)
        .with_lost(1, lose)
        .with_ticks(Ticks::Global)
        .with_clocks([0, 0, 1], [5, 6, 7])
}

/// Two coordinators under one id; clocks ticking on their own (drift: a
/// participant store may run ahead of the records store by more than the
/// margin), no lost answer (stalled coordinators and recovery tasks instead).
fn same_id_drifting() -> InsertDecideModel {
    InsertDecideModel::new(Scenario::SameId)
        .with_registry(false)
        .with_lost(0, Lose::ALL)
        .with_clocks([0, 0, 1], [4, 5, 6])
}

/// Only one kind of step loses its answer.
fn only(kind: &str) -> Lose {
    Lose {
        apply: kind == "apply",
        commit: kind == "commit",
        remove: kind == "remove",
        recovery: kind == "recovery",
        register: false,
    }
}

// ----- fast checks (debug build) -----

#[test]
fn fast_transfer_one_lost_answer() {
    let states = check(
        "transfer, 1 lost answer, clocks R 0..4 P1 0..5 P2 1..6",
        transfer(),
    );
    assert!(states > 100_000, "suspiciously few states: {states}");
}

/// The everyday path, step by step: two applies (sent together: one round
/// trip), the `committed` insert (the second round trip, and the commit
/// point), two clears in the background. Five writes; the namespace
/// registrations are once per namespace per process, and GC reads the
/// participants instead of a `done` write.
#[test]
fn happy_path_costs_five_writes_and_two_round_trips() {
    let model = transfer();
    let mut s = model.init_states().remove(0);
    let apply = |part| Action::Apply {
        coord: 0,
        part,
        lose: false,
    };
    let register = |ns| Action::Register {
        coord: 0,
        ns,
        lose: false,
    };
    let clear = |part| Action::Remove {
        coord: 0,
        part,
        lose: false,
    };
    let commit = Action::Commit {
        coord: 0,
        lose: false,
    };
    let script = [
        Action::Begin { coord: 0 },
        register(A),
        register(B),
        apply(A),
        apply(B),
        commit,
        clear(A),
        clear(B),
    ];
    let mut writes = 0;
    for action in script {
        let mut enabled = Vec::new();
        model.actions(&s, &mut enabled);
        assert!(enabled.contains(&action), "{action:?} not enabled");
        s = model.next_state(&s, action).expect("a next state");
        if matches!(
            action,
            Action::Apply { .. } | Action::Commit { .. } | Action::Remove { .. }
        ) {
            writes += 1;
        }
        if action == commit {
            assert_eq!(s.answers[0], Answer::Committed, "answered at the insert");
        }
    }
    assert_eq!(writes, 5);
    assert!(model.is_settled(&s) && model.is_consistent(&s));
    assert_eq!(s.docs.map(|d| d.value), [0, 2]);
    // GC, once the create deadline plus the margin has passed on R.
    while model.now(&s, R) < s.record.expect("the record").deadline + MARGIN {
        s = model
            .next_state(&s, Action::Tick { store: R })
            .expect("a tick");
    }
    let mut enabled = Vec::new();
    model.actions(&s, &mut enabled);
    assert!(enabled.contains(&Action::Collect));
}

/// Finding 1, replayed (the shortest counterexample of
/// `mutation_duplicate_after_doubt`): `K1`'s insert lands but its answer
/// is lost; recovery rolls `K1` forward and GC collects its record; `K2`,
/// under the same id, inserts its own (inert: past its deadline); `K1`'s
/// retry meets it. Answering `Duplicate` would deny a commit: the answer is
/// `Unknown`.
#[test]
fn finding_a_lost_insert_cannot_answer_duplicate() {
    let run = |variant| {
        let model = same_id_in_step(only("commit"))
            .with_clocks([0, 0, 1], [4, 5, 6])
            .with_variant(variant);
        let apply = |coord, part| Action::Apply {
            coord,
            part,
            lose: false,
        };
        let commit = |coord, lose| Action::Commit { coord, lose };
        let tick = Action::Tick {
            store: tandem_model::STORES,
        };
        let decide = Action::Decide {
            task: 0,
            lose: false,
        };
        let recover = Action::Recover {
            task: 0,
            lose: false,
        };
        let script = [
            Action::Begin { coord: 0 },
            apply(0, A),
            apply(0, B),
            tick,
            commit(0, true),
            Action::Begin { coord: 1 },
            apply(1, A),
            apply(1, B),
            Action::Deliver { index: 0 },
            tick,
            tick,
            Action::Discover { doc: A, ident: 0 },
            Action::Discover { doc: B, ident: 0 },
            decide,
            recover,
            decide,
            recover,
            Action::Collect,
            commit(1, false),
            commit(0, false),
        ];
        let mut s = model.init_states().remove(0);
        for action in script {
            let mut enabled = Vec::new();
            model.actions(&s, &mut enabled);
            assert!(enabled.contains(&action), "{action:?} not enabled");
            s = model.next_state(&s, action).expect("a next state");
        }
        println!("{variant:?}:\n{}", model.explain(&script));
        assert!(s.history[0].committed, "K1 committed");
        let holds = model
            .properties()
            .iter()
            .find(|p| p.name == ANSWERS_HOLD)
            .map(|p| (p.condition)(&model, &s))
            .expect("the property");
        (s.answers[0], holds)
    };
    assert_eq!(run(Variant::Proposed), (Answer::Unknown, true));
    assert_eq!(
        run(Variant::DuplicateAfterDoubt),
        (Answer::Duplicate, false)
    );
}

// ----- mutations (each search stops at its first counterexample) -----

#[test]
fn mutation_1_apply_without_deadline() {
    counterexample(
        "mutation (1): the apply's filter has no deadline",
        transfer().with_variant(Variant::NoApplyDeadline),
        &SAFETY_AND_LIVENESS,
    );
}

#[test]
fn mutation_2_recovery_does_not_wait() {
    counterexample(
        "mutation (2): recovery acts on a marker before its deadline plus the margin",
        transfer().with_variant(Variant::RecoveryNoWait),
        &SAFETY_AND_LIVENESS,
    );
}

#[test]
fn mutation_3_gc_does_not_wait() {
    counterexample(
        "mutation (3): GC does not wait for C + MARGIN",
        transfer().with_variant(Variant::GcNoWait),
        &SAFETY_AND_LIVENESS,
    );
}

#[test]
fn mutation_4_commit_without_create_deadline() {
    counterexample(
        "mutation (4): the committed insert has no create deadline",
        transfer().with_variant(Variant::UnfencedCommit),
        &SAFETY_AND_LIVENESS,
    );
}

#[test]
fn mutation_5_no_tags() {
    counterexample(
        "mutation (5): markers and the record without the tag",
        same_id_in_step(Lose::ALL)
            .with_clocks([0, 0, 1], [4, 5, 6])
            .with_variant(Variant::NoTags),
        &SAFETY_AND_LIVENESS,
    );
}

#[test]
fn mutation_gc_ignores_markers() {
    counterexample(
        "mutation: GC collects a committed record with markers left",
        transfer().with_variant(Variant::GcIgnoresMarkers),
        &SAFETY_AND_LIVENESS,
    );
}

#[test]
fn mutation_cancel_without_create_deadline() {
    counterexample(
        "mutation: recovery's canceled insert has no create deadline",
        transfer().with_variant(Variant::UnfencedCancel),
        &SAFETY_AND_LIVENESS,
    );
}

#[test]
fn mutation_coordinator_ignores_its_doubt() {
    counterexample(
        "mutation: the coordinator removes an in-doubt participant's marker at once",
        transfer().with_variant(Variant::IgnoreDoubt),
        &SAFETY_AND_LIVENESS,
    );
}

#[test]
fn mutation_register_in_parallel() {
    counterexample(
        "mutation: the registry write in parallel with the first apply",
        transfer().with_variant(Variant::RegisterInParallel),
        &SAFETY_AND_LIVENESS,
    );
}

/// With a clock that may step back by the margin, an insert past its
/// deadline must still write its (inert) record, keeping the `_id` taken.
#[test]
fn mutation_inert_insert_writes_nothing() {
    counterexample(
        "mutation: an insert past its deadline writes nothing (R steps back by the margin)",
        transfer()
            .with_variant(Variant::InertWritesNothing)
            .with_step_back(MARGIN)
            .with_clocks([1, 1, 2], [5, 6, 7]),
        &SAFETY_AND_LIVENESS,
    );
}

#[test]
fn mutation_clock_steps_back_past_the_margin() {
    counterexample(
        "mutation: a clock steps back by MARGIN + 1",
        transfer()
            .with_step_back(MARGIN + 1)
            .with_clocks([1, 1, 2], [5, 6, 7])
            .with_examples(false),
        &SAFETY_AND_LIVENESS,
    );
}

#[test]
fn mutation_duplicate_at_once() {
    counterexample(
        "mutation: a coordinator with its insert in doubt takes another tag's record for a duplicate at once",
        same_id_in_step(only("commit"))
            .with_variant(Variant::DuplicateAtOnce)
            .with_examples(false),
        &SAFETY_AND_LIVENESS,
    );
}

/// The flaw the model found in the proposal as first modelled: a
/// coordinator whose insert lost its answer cannot answer "duplicate"
/// (or "canceled") from another tag's record, however long it waits.
#[test]
#[ignore = "1.9 M states: run with --release -- --ignored"]
fn mutation_duplicate_after_doubt() {
    counterexample(
        "mutation: a coordinator with its insert in doubt answers duplicate after waiting",
        same_id_in_step(only("commit"))
            .with_clocks([0, 0, 1], [4, 5, 6])
            .with_variant(Variant::DuplicateAfterDoubt)
            .with_examples(false),
        &[ANSWERS_HOLD],
    );
}

#[test]
#[ignore = "2.8 M states: run with --release -- --ignored"]
fn mutation_foreign_record_aborts_at_once() {
    counterexample(
        "mutation: recovery rolls back a marker at once when another tag holds the id",
        same_id_drifting()
            .with_clocks([0, 0, 1], [5, 6, 7])
            .with_variant(Variant::ForeignAbortsAtOnce)
            .with_examples(false),
        &SAFETY_AND_LIVENESS,
    );
}

// ----- larger configurations (release build) -----

/// Waiting for the deadline before deciding is not needed for safety (only
/// the removal's time condition is): recovery may insert `canceled` as
/// soon as it sees a marker. It then cancels transactions still running.
#[test]
#[ignore = "large: run with --release -- --ignored"]
fn relaxation_recovery_decides_early_holds() {
    check(
        "recovery decides early, transfer, 1 lost answer",
        transfer().with_variant(Variant::RecoveryDecidesEarly),
    );
}

#[test]
#[ignore = "large: run with --release -- --ignored"]
fn transfer_two_lost_answers() {
    check(
        "transfer, 2 lost answers",
        transfer().with_lost(2, Lose::ALL),
    );
    check(
        "transfer, 2 lost answers, clocks R 0..5 P1 0..6 P2 1..7 (no examples)",
        transfer()
            .with_lost(2, Lose::ALL)
            .with_clocks([0, 0, 1], [5, 6, 7])
            .with_examples(false),
    );
}

#[test]
#[ignore = "large: run with --release -- --ignored"]
fn transfer_crashes() {
    check(
        "transfer, 1 crash, 1 lost answer",
        transfer().with_crashes(1),
    );
    check(
        "transfer, 1 crash, 2 lost answers (no examples)",
        transfer()
            .with_crashes(1)
            .with_lost(2, Lose::ALL)
            .with_examples(false),
    );
}

#[test]
#[ignore = "large: run with --release -- --ignored"]
fn transfer_two_recovery_workers_per_marker() {
    check(
        "transfer, 2 recovery workers per marker, 1 lost answer",
        transfer().with_workers_per_marker(2),
    );
}

#[test]
#[ignore = "large: run with --release -- --ignored"]
fn transfer_clock_steps_back_by_the_margin() {
    check(
        "transfer, a clock steps back by MARGIN once, 1 lost answer",
        transfer()
            .with_step_back(MARGIN)
            .with_clocks([1, 1, 2], [5, 6, 7]),
    );
}

#[test]
#[ignore = "large: run with --release -- --ignored"]
fn transfer_records_on_a_participant_store() {
    check(
        "transfer, records on P1, 2 lost answers",
        transfer().with_records_on_p1(true).with_lost(2, Lose::ALL),
    );
}

#[test]
#[ignore = "large: run with --release -- --ignored"]
fn same_id_lost_commits() {
    check(
        "same id, clocks in step, 1 lost insert",
        same_id_in_step(only("commit")),
    );
}

#[test]
#[ignore = "large: run with --release -- --ignored"]
fn same_id_lost_applies() {
    check(
        "same id, clocks in step, 1 lost apply (no examples)",
        same_id_in_step(only("apply")).with_examples(false),
    );
}

#[test]
#[ignore = "large: run with --release -- --ignored"]
fn same_id_lost_removals() {
    check(
        "same id, clocks in step, 1 lost clear or compensate (no examples)",
        same_id_in_step(only("remove")).with_examples(false),
    );
    check(
        "same id, clocks in step, 1 lost recovery step (no examples)",
        same_id_in_step(only("recovery")).with_examples(false),
    );
}

#[test]
#[ignore = "large: run with --release -- --ignored"]
fn same_id_drifting_clocks() {
    check(
        "same id, drifting clocks, no lost answer",
        same_id_drifting(),
    );
    check(
        "same id, drifting clocks, 1 crash (no examples)",
        same_id_drifting().with_crashes(1).with_examples(false),
    );
}
