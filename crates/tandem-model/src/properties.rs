//! The properties checked, by name, and their conditions.

use stateright::Property;

use crate::model::{TandemModel, Variant};
use crate::scenario::Scenario;
use crate::state::{Answer, Event, Presence, State, TxState};

/// Safety: no apply (or fill, or plain insert) of a transaction lands twice
/// on its participant: no debit taken twice, no insert landing twice, no
/// delete marking a document twice.
pub const ONE_EFFECTIVE_APPLY: &str = "at most one effective apply per transaction and participant";
/// Safety: no marker removal of a transaction takes effect twice on its
/// participant: no credit landing twice, no debit undone twice, no delete
/// removing a second (re-created) document, no insert undone twice.
pub const ONE_EFFECTIVE_REMOVAL: &str = "at most one effective clear or compensate per participant";
/// Safety: no transaction reaches both `applied` and `canceling`.
pub const NEVER_BOTH: &str = "never both committed and canceled";
/// Safety: the guards keep every balance at zero or more.
pub const NEVER_NEGATIVE: &str = "no balance goes negative";
/// Safety: a document marked or locked by `T` implies that a record of `T`
/// (with that token, under token fencing) exists, is not terminal, and has
/// the document among its participants. No transient exception: the
/// terminal move comes only after every marker removal answered, and no
/// marker can appear afterwards.
pub const MARKERS_HAVE_LIVE_OWNER: &str = "every marker and lock belongs to a live transaction";
/// Safety: while a record is `applied`, every participant of it holds its
/// marker or has been cleared.
pub const COMMIT_HOLDS_ALL: &str = "applied: every participant holds the change";
/// Safety: answers match outcomes. "committed" ⇒ every participant's apply
/// landed, the record reached `applied` (with early commit: not necessarily
/// yet), never `canceling`, no change of it was compensated, and once
/// finished it is `done`; "canceled" ⇒ never `applied`, and once finished
/// not `done`; "canceled, every change undone" ⇒ that too, and every apply
/// of it that landed was undone (none lands after); "duplicate" ⇒ the
/// coordinator wrote nothing (a ghost aside).
pub const ANSWERS_HOLD: &str = "answers match outcomes";
/// Safety: a transaction answered "committed", or whose record reached
/// `applied`, never reaches `canceling` and none of its changes is
/// compensated (its markers are only ever cleared).
pub const COMMITTED_NEVER_UNDONE: &str = "a committed transaction is never rolled back";
/// All-or-nothing: whenever every transaction is finished, every document is
/// what the serial execution (committed transactions applied whole at their
/// commit points, and the application's inserts and deletes) holds, with no
/// marker and no lock.
pub const FINISHED_CONSISTENT: &str = "finished: documents are the serial execution's";
/// Safety, for keyed runs ([`Scenario::keyed`]): two runs under one key of
/// which one began (fixed its create deadline) before the other's record
/// finished never both pay (reach `applied`, or answer "committed"). A run
/// that began only after the other's record finished may pay again: the
/// model's idempotency window is zero.
pub const KEY_PAYS_ONCE: &str = "overlapping runs under one key pay once";
/// Liveness (bounded): in a state where no step is enabled, every transaction is finished.
pub const QUIESCENT_FINISHED: &str = "quiescent: every transaction is finished";
/// Liveness (on paths, as far as stateright's `eventually` sees: it misses
/// paths through revisited states): every transaction finishes.
pub const EVENTUALLY_FINISHED: &str = "every transaction eventually finishes";

/// Example: a transaction is done.
pub const SOMETIMES_COMMITS: &str = "sometimes a transaction commits";
/// Example: every transaction is done.
pub const SOMETIMES_ALL_COMMIT: &str = "sometimes every transaction commits";
/// Example: a coordinator answers "canceled" (after a definite refusal) and its transaction ends canceled.
pub const SOMETIMES_REFUSAL_CANCELS: &str = "sometimes a refusal cancels a transaction";
/// Example: a late apply in flight lands after its deadline and is fenced off by it.
pub const SOMETIMES_LATE_APPLY_FENCED: &str = "sometimes a late apply is fenced by its deadline";
/// Example: a marker removal waits (`NotYet`) for its own in-doubt apply's deadline plus the margin.
pub const SOMETIMES_WAITS_FOR_DOUBT: &str = "sometimes an in-doubt participant waits for its fence";
/// Example: a request lands after its transaction's record was collected.
pub const SOMETIMES_LANDS_AFTER_GC: &str = "sometimes a request lands after GC";
/// Example: the application re-creates a document a committed transaction deleted.
pub const SOMETIMES_RECREATED: &str = "sometimes a deleted document is re-created";
/// Example: a forced cancel, and every transaction finishes.
pub const SOMETIMES_FORCED_CANCEL: &str = "sometimes a forced cancel";
/// Example: recovery claims a record whose owner is alive.
pub const SOMETIMES_TAKEOVER: &str = "sometimes recovery takes over from a live worker";
/// Example: recovery claims a record whose owner is gone.
pub const SOMETIMES_RESCUE: &str = "sometimes recovery rescues a record";
/// Example: a coordinator answers "unknown" and its transaction ends done.
pub const SOMETIMES_UNKNOWN_COMMITTED: &str = "sometimes an unknown outcome ends committed";
/// Example: a coordinator answers "unknown" and its transaction ends canceled.
pub const SOMETIMES_UNKNOWN_CANCELED: &str = "sometimes an unknown outcome ends canceled";
/// Example: a coordinator answers "duplicate".
pub const SOMETIMES_DUPLICATE: &str = "sometimes a coordinator gets a duplicate";
/// Example: both coordinators of one id create a record, one after the other's was collected.
pub const SOMETIMES_ID_REUSED: &str = "sometimes an id is reused after GC";
/// Example: a clock steps back.
pub const SOMETIMES_STEPPED_BACK: &str = "sometimes a clock steps back";

/// Example (keyed runs): a create that would land live meets the finished
/// record of another run under its key, which only the lease registry kept.
pub const SOMETIMES_KEPT_FOR_LATE_CREATE: &str =
    "sometimes the lease registry keeps a key taken for a late create";

/// Example (early commit): recovery probes every participant of a `pending`
/// record, finds every marker, and moves the record to `applied`.
pub const SOMETIMES_PROBE_COMMITS: &str = "sometimes recovery's probe commits a pending record";

/// Every safety and liveness property (not the examples, nor
/// [`KEY_PAYS_ONCE`], which only keyed scenarios have).
pub const SAFETY_AND_LIVENESS: [&str; 11] = [
    ONE_EFFECTIVE_APPLY,
    ONE_EFFECTIVE_REMOVAL,
    NEVER_BOTH,
    NEVER_NEGATIVE,
    MARKERS_HAVE_LIVE_OWNER,
    COMMIT_HOLDS_ALL,
    ANSWERS_HOLD,
    COMMITTED_NEVER_UNDONE,
    FINISHED_CONSISTENT,
    QUIESCENT_FINISHED,
    EVENTUALLY_FINISHED,
];

fn coords(m: &TandemModel) -> std::ops::Range<usize> {
    0..m.scenario.coords().len()
}

fn markers_have_live_owner(m: &TandemModel, s: &State) -> bool {
    s.docs.iter().enumerate().all(|(d, doc)| {
        let owned = |marker: usize| {
            coords(m).any(|c| {
                m.marker(c) == marker
                    && s.records[m.spec(c).tx].is_some_and(|r| {
                        !r.state.is_terminal()
                            && m.marker(usize::from(r.token)) == marker
                            && m.spec(usize::from(r.token))
                                .changes
                                .iter()
                                .any(|ch| ch.doc == d)
                    })
            })
        };
        doc.markers.iter().all(owned)
            && doc
                .lock
                .is_none_or(|l| doc.markers.contains(usize::from(l)) && owned(usize::from(l)))
    })
}

fn answers_hold(m: &TandemModel, s: &State) -> bool {
    coords(m).all(|c| {
        let h = s.history[c];
        match s.answers[c] {
            Answer::Committed => {
                (h.applied || m.fixes.early_commit)
                    && h.applies[..m.spec(c).changes.len()].iter().all(|&n| n > 0)
                    && !h.canceled
                    && !h.undone
                    && (!m.is_finished(s, c) || h.terminal == Some(TxState::Done))
            }
            Answer::Canceled => {
                !h.applied && (!m.is_finished(s, c) || h.terminal != Some(TxState::Done))
            }
            // And nothing of it is applied, now or later: every apply that
            // landed was undone, and none lands after.
            Answer::CanceledUndone => {
                let parts = m.spec(c).changes.len();
                !h.applied
                    && (!m.is_finished(s, c) || h.terminal != Some(TxState::Done))
                    && h.applies[..parts] == h.effects[..parts]
            }
            Answer::Duplicate => !h.wrote,
            Answer::None | Answer::Unknown => true,
        }
    })
}

fn key_pays_once(m: &TandemModel, s: &State) -> bool {
    let paid = |c: usize| s.history[c].applied || s.answers[c] == Answer::Committed;
    coords(m).all(|c| {
        coords(m).all(|o| {
            o == c
                || m.spec(o).tx != m.spec(c).tx
                || !(s.history[c].overlapped && paid(c) && paid(o))
        })
    })
}

fn commit_holds_all(m: &TandemModel, s: &State) -> bool {
    s.records.iter().flatten().all(|r| {
        r.state != TxState::Applied || {
            let token = usize::from(r.token);
            m.spec(token).changes.iter().enumerate().all(|(p, ch)| {
                s.docs[ch.doc].markers.contains(m.marker(token)) || s.history[token].effects[p] > 0
            })
        }
    })
}

/// The properties checked for `model`; examples that its bounds cannot reach are left out.
pub fn properties(model: &TandemModel) -> Vec<Property<TandemModel>> {
    let mut p = vec![
        Property::<TandemModel>::always(ONE_EFFECTIVE_APPLY, |m, s| {
            coords(m).all(|c| s.history[c].applies.iter().all(|&n| n <= 1))
        }),
        Property::<TandemModel>::always(ONE_EFFECTIVE_REMOVAL, |m, s| {
            coords(m).all(|c| s.history[c].effects.iter().all(|&n| n <= 1))
        }),
        Property::<TandemModel>::always(NEVER_BOTH, |m, s| {
            coords(m).all(|c| !(s.history[c].applied && s.history[c].canceled))
        }),
        Property::<TandemModel>::always(NEVER_NEGATIVE, |_, s| {
            s.docs
                .iter()
                .all(|d| d.presence != Presence::Real || d.value >= 0)
        }),
        Property::<TandemModel>::always(MARKERS_HAVE_LIVE_OWNER, markers_have_live_owner),
        Property::<TandemModel>::always(COMMIT_HOLDS_ALL, commit_holds_all),
        Property::<TandemModel>::always(ANSWERS_HOLD, answers_hold),
        Property::<TandemModel>::always(COMMITTED_NEVER_UNDONE, |m, s| {
            coords(m).all(|c| {
                let h = s.history[c];
                !(h.applied || s.answers[c] == Answer::Committed) || !(h.canceled || h.undone)
            })
        }),
        Property::<TandemModel>::always(FINISHED_CONSISTENT, |m, s| {
            !m.all_finished(s) || m.is_consistent(s)
        }),
        Property::<TandemModel>::always(QUIESCENT_FINISHED, |m, s| {
            m.all_finished(s) || !m.is_quiescent(s)
        }),
        Property::<TandemModel>::eventually(EVENTUALLY_FINISHED, |m, s| m.all_finished(s)),
        Property::<TandemModel>::sometimes(SOMETIMES_COMMITS, |m, s| {
            coords(m).any(|c| s.history[c].terminal == Some(TxState::Done))
        }),
        Property::<TandemModel>::sometimes(SOMETIMES_REFUSAL_CANCELS, |m, s| {
            coords(m).any(|c| {
                matches!(s.answers[c], Answer::Canceled | Answer::CanceledUndone)
                    && s.history[c].terminal == Some(TxState::Canceled)
            })
        }),
    ];
    let sometimes = |name, condition: fn(&TandemModel, &State) -> bool| {
        Property::<TandemModel>::sometimes(name, condition)
    };
    let event = |name, e: Event| {
        let condition: fn(&TandemModel, &State) -> bool = match e {
            Event::LateApplyFenced => |_, s| s.event == Event::LateApplyFenced,
            Event::WaitedForDoubt => |_, s| s.event == Event::WaitedForDoubt,
            Event::LandedAfterGc => |_, s| s.event == Event::LandedAfterGc,
            Event::Recreated => |_, s| s.event == Event::Recreated,
            Event::Takeover => |_, s| s.event == Event::Takeover,
            Event::Rescue => |_, s| s.event == Event::Rescue,
            Event::SteppedBack => |_, s| s.event == Event::SteppedBack,
            Event::ProbeCommitted => |_, s| s.event == Event::ProbeCommitted,
            Event::KeptForLateCreate => |_, s| s.event == Event::KeptForLateCreate,
            Event::ForcedCancel | Event::None => |_, _| true,
        };
        Property::<TandemModel>::sometimes(name, condition)
    };
    let coords_n = model.scenario.coords().len();
    if coords_n > 1 && model.scenario != Scenario::SameId && !model.scenario.keyed() {
        p.push(sometimes(SOMETIMES_ALL_COMMIT, |m, s| {
            coords(m).all(|c| s.history[c].terminal == Some(TxState::Done))
        }));
    }
    let lost = model.lost > 0;
    if lost && model.lose.apply {
        p.push(event(SOMETIMES_LATE_APPLY_FENCED, Event::LateApplyFenced));
        p.push(event(SOMETIMES_WAITS_FOR_DOUBT, Event::WaitedForDoubt));
        p.push(sometimes(SOMETIMES_UNKNOWN_COMMITTED, |m, s| {
            coords(m).any(|c| {
                s.answers[c] == Answer::Unknown && s.history[c].terminal == Some(TxState::Done)
            })
        }));
        p.push(sometimes(SOMETIMES_UNKNOWN_CANCELED, |m, s| {
            coords(m).any(|c| {
                s.answers[c] == Answer::Unknown && s.history[c].terminal == Some(TxState::Canceled)
            })
        }));
    }
    if lost && model.gc {
        p.push(event(SOMETIMES_LANDS_AFTER_GC, Event::LandedAfterGc));
    }
    if model.app_ops >= 1 && model.scenario.app_docs().contains(&crate::scenario::D) {
        p.push(event(SOMETIMES_RECREATED, Event::Recreated));
    }
    if model.forced_cancels > 0 {
        p.push(sometimes(SOMETIMES_FORCED_CANCEL, |m, s| {
            s.forced > 0 && m.all_finished(s) && coords(m).any(|c| s.history[c].canceled)
        }));
    }
    if model.takeovers > 0 {
        p.push(event(SOMETIMES_TAKEOVER, Event::Takeover));
    }
    if lost || model.crashes > 0 {
        p.push(event(SOMETIMES_RESCUE, Event::Rescue));
    }
    if model.scenario.keyed() {
        p.push(Property::<TandemModel>::always(
            KEY_PAYS_ONCE,
            key_pays_once,
        ));
        if lost && model.lose.create && model.gc {
            p.push(event(
                SOMETIMES_KEPT_FOR_LATE_CREATE,
                Event::KeptForLateCreate,
            ));
        }
    }
    if (model.scenario == Scenario::SameId || model.scenario.keyed())
        && model.variant != Variant::OwnerNameOnly
    {
        p.push(sometimes(SOMETIMES_DUPLICATE, |m, s| {
            coords(m).any(|c| s.answers[c] == Answer::Duplicate)
        }));
        if model.gc {
            p.push(sometimes(SOMETIMES_ID_REUSED, |m, s| {
                coords(m).all(|c| s.history[c].created)
            }));
        }
    }
    // A probe finds every marker of a record whose owner stopped after
    // its applies: lost apply or record answers, a crash, a takeover or a
    // forced cancel (a lost create alone leaves at most an owner that never
    // applied).
    if model.fixes.early_commit
        && ((lost && (model.lose.apply || model.lose.cas))
            || model.crashes > 0
            || model.takeovers > 0
            || model.forced_cancels > 0)
    {
        p.push(event(SOMETIMES_PROBE_COMMITS, Event::ProbeCommitted));
    }
    if model.step_back > 0 {
        p.push(event(SOMETIMES_STEPPED_BACK, Event::SteppedBack));
    }
    p
}
