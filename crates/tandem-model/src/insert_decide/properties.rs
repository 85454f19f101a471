//! The properties checked on the "decide by inserting" model.

use stateright::Property;

use super::state::{Answer, Event, State, DOCS};
use super::{InsertDecideModel, Scenario, Variant};

/// Safety: no apply of a transaction lands twice on its participant.
pub const ONE_APPLY: &str = "at most one apply lands per transaction and participant";
/// Safety: at most one clear or compensate of a transaction takes effect on
/// its participant (no credit landing twice, no debit undone twice).
pub const ONE_REMOVAL: &str = "at most one clear or compensate takes effect per participant";
/// Safety: no transaction is decided both ways: never a live `committed`
/// and a live `canceled` record for the same tag, even at different times
/// (a record collected in between).
pub const DECISIONS_AGREE: &str = "never decided both committed and canceled";
/// Safety: a committed transaction never has a participant rolled back
/// (before or after its commit).
pub const COMMITTED_NEVER_UNDONE: &str = "a committed transaction is never rolled back";
/// Safety: a participant is cleared (its credit lands) only for a committed transaction.
pub const CLEARED_ONLY_IF_COMMITTED: &str = "only a committed transaction is cleared";
/// Safety: "committed" ⇒ a live `committed` record of its tag was inserted;
/// "canceled" and "duplicate" ⇒ never (checked in every state, so also later).
pub const ANSWERS_HOLD: &str = "answers match outcomes";
/// Safety: no balance goes negative.
pub const NEVER_NEGATIVE: &str = "no balance goes negative";
/// All-or-nothing: once settled (no marker, no task, nothing in flight, no
/// coordinator mid-way), a committed transaction is applied exactly once on
/// both participants and cleared, any other is undone on both, and the
/// balances are the initial ones plus the committed changes.
pub const SETTLED_CONSISTENT: &str = "settled: all or nothing";
/// Liveness (bounded): in a state where no step is enabled, all is settled
/// (in particular no marker is left on any document).
pub const QUIESCENT_SETTLED: &str = "quiescent: settled, no marker left";

/// Example: a transaction commits and all settles.
pub const SOMETIMES_COMMITS: &str = "sometimes a transaction commits";
/// Example: recovery inserts a live `canceled` record.
pub const SOMETIMES_RECOVERY_CANCELS: &str = "sometimes recovery decides canceled";
/// Example: recovery clears a committed transaction's marker.
pub const SOMETIMES_RECOVERY_CLEARS: &str = "sometimes recovery rolls a commit forward";
/// Example: a coordinator's insert meets its transaction canceled by recovery.
pub const SOMETIMES_COMMIT_LOSES_RACE: &str = "sometimes recovery's cancel wins the race";
/// Example: a late apply is refused by its deadline alone.
pub const SOMETIMES_LATE_APPLY_FENCED: &str = "sometimes a late apply is fenced by its deadline";
/// Example: a late `committed` insert finds no record and lands inert.
pub const SOMETIMES_LATE_COMMIT_INERT: &str = "sometimes a late commit lands inert";
/// Example: GC deletes a record.
pub const SOMETIMES_COLLECTED: &str = "sometimes a record is collected";
/// Example: a request lands after GC.
pub const SOMETIMES_LANDS_AFTER_GC: &str = "sometimes a request lands after GC";
/// Example: an "unknown" answer, and the transaction committed.
pub const SOMETIMES_UNKNOWN_COMMITTED: &str = "sometimes an unknown outcome ends committed";
/// Example: an "unknown" answer, and the transaction did not commit.
pub const SOMETIMES_UNKNOWN_CANCELED: &str = "sometimes an unknown outcome ends canceled";
/// Example: a coordinator is told "duplicate".
pub const SOMETIMES_DUPLICATE: &str = "sometimes a coordinator gets a duplicate";
/// Example: both coordinators commit under the same id, one after the
/// other's record was collected.
pub const SOMETIMES_ID_REUSED: &str = "sometimes an id is reused after GC";
/// Example: recovery rolls back a marker whose id another tag holds, by time.
pub const SOMETIMES_PRESUMED_ABORT_BY_TIME: &str = "sometimes recovery presumes an abort by time";
/// Example: a clock steps back.
pub const SOMETIMES_STEPPED_BACK: &str = "sometimes a clock steps back";

/// Every safety and liveness property (not the examples).
pub const SAFETY_AND_LIVENESS: [&str; 9] = [
    ONE_APPLY,
    ONE_REMOVAL,
    DECISIONS_AGREE,
    COMMITTED_NEVER_UNDONE,
    CLEARED_ONLY_IF_COMMITTED,
    ANSWERS_HOLD,
    NEVER_NEGATIVE,
    SETTLED_CONSISTENT,
    QUIESCENT_SETTLED,
];

type Condition = fn(&InsertDecideModel, &State) -> bool;

fn coords(m: &InsertDecideModel) -> std::ops::Range<usize> {
    0..m.scenario.coords()
}

fn answers_hold(m: &InsertDecideModel, s: &State) -> bool {
    coords(m).all(|c| {
        let committed = s.history[c].committed;
        match s.answers[c] {
            Answer::Committed => committed,
            Answer::Canceled | Answer::Duplicate => !committed,
            Answer::None | Answer::Unknown => true,
        }
    })
}

/// The properties checked for `model`; examples its bounds cannot reach are left out.
pub fn properties(model: &InsertDecideModel) -> Vec<Property<InsertDecideModel>> {
    let always =
        |name, condition: Condition| Property::<InsertDecideModel>::always(name, condition);
    let sometimes =
        |name, condition: Condition| Property::<InsertDecideModel>::sometimes(name, condition);
    let mut p = vec![
        always(ONE_APPLY, |m, s| {
            coords(m).all(|c| s.history[c].applies.iter().all(|&n| n <= 1))
        }),
        always(ONE_REMOVAL, |m, s| {
            coords(m).all(|c| {
                let h = s.history[c];
                (0..DOCS).all(|p| h.clears[p] + h.undos[p] <= 1)
            })
        }),
        always(DECISIONS_AGREE, |m, s| {
            coords(m).all(|c| !(s.history[c].committed && s.history[c].canceled))
        }),
        always(COMMITTED_NEVER_UNDONE, |m, s| {
            coords(m).all(|c| !s.history[c].committed || s.history[c].undos.iter().all(|&n| n == 0))
        }),
        always(CLEARED_ONLY_IF_COMMITTED, |m, s| {
            coords(m).all(|c| s.history[c].committed || s.history[c].clears.iter().all(|&n| n == 0))
        }),
        always(ANSWERS_HOLD, answers_hold),
        always(NEVER_NEGATIVE, |_, s| s.docs.iter().all(|d| d.value >= 0)),
        always(SETTLED_CONSISTENT, |m, s| {
            !m.is_settled(s) || m.is_consistent(s)
        }),
        always(QUIESCENT_SETTLED, |m, s| {
            m.is_settled(s) || !m.is_quiescent(s)
        }),
        sometimes(SOMETIMES_COMMITS, |m, s| {
            m.is_settled(s)
                && coords(m).any(|c| s.history[c].committed && s.answers[c] == Answer::Committed)
        }),
    ];
    if !model.examples {
        p.retain(|p| p.expectation != stateright::Expectation::Sometimes);
        return p;
    }
    let lost = model.lost > 0;
    let proposed = model.variant == Variant::Proposed;
    if lost || model.crashes > 0 {
        p.push(sometimes(SOMETIMES_RECOVERY_CLEARS, |_, s| {
            s.event == Event::RecoveryCleared
        }));
    }
    if lost && model.lose.apply {
        p.push(sometimes(SOMETIMES_LATE_APPLY_FENCED, |_, s| {
            s.event == Event::LateApplyFenced
        }));
        p.push(sometimes(SOMETIMES_UNKNOWN_CANCELED, |m, s| {
            m.is_settled(s)
                && coords(m).any(|c| s.answers[c] == Answer::Unknown && !s.history[c].committed)
        }));
    }
    if lost && model.lose.commit {
        p.push(sometimes(SOMETIMES_LATE_COMMIT_INERT, |_, s| {
            s.event == Event::LateCommitInert
        }));
        p.push(sometimes(SOMETIMES_UNKNOWN_COMMITTED, |m, s| {
            m.is_settled(s)
                && coords(m).any(|c| s.answers[c] == Answer::Unknown && s.history[c].committed)
        }));
    }
    // Recovery's insert is live only while R.now < D, and it looks only once
    // a participant store reads D + MARGIN: it needs a participant clock
    // ahead of R's by more than the margin, which only drift gives.
    let drift = model.ticks == crate::model::Ticks::PerStore && !model.records_on_p1;
    if (lost || model.crashes > 0) && proposed && drift {
        p.push(sometimes(SOMETIMES_RECOVERY_CANCELS, |_, s| {
            s.event == Event::RecoveryCanceled
        }));
        p.push(sometimes(SOMETIMES_COMMIT_LOSES_RACE, |_, s| {
            s.event == Event::CommitLostRace
        }));
    }
    if model.gc {
        p.push(sometimes(SOMETIMES_COLLECTED, |_, s| {
            s.event == Event::Collected
        }));
        if lost {
            p.push(sometimes(SOMETIMES_LANDS_AFTER_GC, |_, s| {
                s.event == Event::LandedAfterGc
            }));
        }
    }
    if model.scenario == Scenario::SameId && proposed {
        p.push(sometimes(SOMETIMES_DUPLICATE, |m, s| {
            coords(m).any(|c| s.answers[c] == Answer::Duplicate)
        }));
        p.push(sometimes(SOMETIMES_PRESUMED_ABORT_BY_TIME, |_, s| {
            s.event == Event::PresumedAbortByTime
        }));
        if model.gc && model.clock_end[crate::scenario::R] >= 5 {
            p.push(sometimes(SOMETIMES_ID_REUSED, |m, s| {
                coords(m).all(|c| s.history[c].committed)
            }));
        }
    }
    if model.step_back > 0 {
        p.push(sometimes(SOMETIMES_STEPPED_BACK, |_, s| {
            s.event == Event::SteppedBack
        }));
    }
    p
}
