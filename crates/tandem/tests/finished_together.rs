//! Transactions committed together are finished together, and survive a crash anywhere in between.

mod common;

use std::time::Duration;

use common::*;
use tandem::testing::{audit, scenarios, MemoryFactory};
use tandem::{Coordinator, TxEvent, TxState};

#[tokio::test]
async fn transfers_committed_together_survive_a_crash_after_any_operation() {
    let covered = scenarios::finished_together(&MemoryFactory::new(), "bank").await;
    // 8 transfers: the run without a crash, then a crash after each operation.
    assert!(covered > 8 * 4, "only {covered} runs");
}

#[tokio::test]
async fn the_finisher_moves_and_clears_a_whole_round_in_three_requests() {
    let names: Vec<String> = (0..32).map(|i| format!("acct-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (store, _, seeded) = bank(&names, 1000).await;
    let coordinator = Coordinator::new(store.clone());
    let before = store.command_count();
    // On this single-threaded runtime the sixteen transfers commit (at their
    // applies) before the finisher first runs, so it takes them all in one round.
    let receipts = futures::future::join_all(
        (0..16).map(|i| coordinator.run(transfer(names[2 * i], names[2 * i + 1], 10))),
    )
    .await;
    for r in &receipts {
        assert_eq!(r.as_ref().expect("commits").state, TxState::Applied);
    }
    let committed = store.command_count() - before;
    assert_eq!(committed, 16 * 2, "create, apply (one request)");
    coordinator.drain().await;
    let finishing = store.command_count() - before - committed;
    assert_eq!(
        finishing, 3,
        "every move to applied in one request, every clear in one, every move to done in another"
    );
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Done), 16);
    for i in 0..16 {
        assert_eq!(balance(&store, names[2 * i]).await, 990);
        assert_eq!(balance(&store, names[2 * i + 1]).await, 1010);
    }
}

/// Transfers committed one after another are finished one round each, but
/// their records' moves to `done` wait to share one request: a round costs
/// two requests (the move to `applied`, the clears), not three.
/// (Time is paused: it moves only when every task waits for a timer, so the
/// settled records' linger cannot run out while transfers keep coming.)
#[tokio::test(start_paused = true)]
async fn moves_to_done_of_consecutive_rounds_share_one_request() {
    const TRANSFERS: usize = 10;
    let (store, seeded, names) = pairs(TRANSFERS).await;
    let coordinator = Coordinator::new(store.clone());
    let before = store.command_count();
    for i in 0..TRANSFERS {
        let receipt = coordinator
            .run(transfer(&names[2 * i], &names[2 * i + 1], 10))
            .await
            .expect("commits");
        assert_eq!(receipt.state, TxState::Applied);
        let committed = store.command_count();
        // Let the finisher take this transfer as a round of its own.
        while store.command_count() < committed + 2 {
            tokio::task::yield_now().await;
        }
    }
    let running = store.command_count() - before;
    let settled = audit(&store, &records(), &seeded).await.unwrap();
    assert_eq!(
        settled.count(TxState::Applied),
        TRANSFERS,
        "every round moved and cleared, none moved to done yet"
    );
    let before_drain = store.command_count();
    coordinator.drain().await;
    let requests = running + store.command_count() - before_drain;
    assert_eq!(
        requests,
        TRANSFERS as u64 * (2 + 2) + 1,
        "per transfer: create, apply, move to applied, clears; one move to done for all"
    );
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Done), TRANSFERS);
}

/// A settled record does not wait for company forever: once the linger is
/// over, its move to `done` goes alone, without a drain.
#[tokio::test(start_paused = true)]
async fn a_lone_settled_record_moves_to_done_after_the_linger() {
    let (store, seeded, names) = pairs(1).await;
    let (on_done, mut done_rx) = done_events();
    let coordinator = Coordinator::builder(store.clone())
        .on_event(on_done)
        .build();
    coordinator
        .run(transfer(&names[0], &names[1], 10))
        .await
        .expect("commits");
    let started = tokio::time::Instant::now();
    done_rx.recv().await.expect("the coordinator lives");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(100) && waited < Duration::from_secs(1),
        "moved to done after {waited:?}"
    );
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Done), 1);
}

/// An event sink that sends `()` for every record moved to `done`, and the receiver.
fn done_events() -> (
    impl Fn(&TxEvent) + Send + Sync + 'static,
    tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
    let sink = move |e: &TxEvent| {
        if let TxEvent::StateChanged {
            to: TxState::Done, ..
        } = e
        {
            let _ = done_tx.send(());
        }
    };
    (sink, done_rx)
}

/// Seeds `pairs` pairs of accounts and returns the store, its seed, and the names.
async fn pairs(
    pairs: usize,
) -> (
    tandem::MemoryStore,
    Vec<(tandem::Namespace, bson::Document)>,
    Vec<String>,
) {
    let names: Vec<String> = (0..2 * pairs).map(|i| format!("acct-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (store, _, seeded) = bank(&refs, 1000).await;
    (store, seeded, names)
}

#[tokio::test]
async fn a_finish_delay_holds_commits_together_and_drain_does_not_wait_it_out() {
    let (store, seeded, names) = pairs(3).await;
    let coordinator = Coordinator::builder(store.clone())
        .finish_delay(Duration::from_secs(3600))
        .build();
    let before = store.command_count();
    for i in 0..3 {
        let receipt = coordinator
            .run(transfer(&names[2 * i], &names[2 * i + 1], 10))
            .await
            .expect("commits");
        assert_eq!(receipt.state, TxState::Applied);
        // Give the finisher every chance to run: it must keep waiting.
        tokio::task::yield_now().await;
    }
    assert_eq!(
        store.command_count() - before,
        3 * 2,
        "nothing finished yet"
    );
    // Committed at their applies; the records move on when finished.
    let committed = audit(&store, &records(), &seeded).await.unwrap();
    assert_eq!(committed.count(TxState::Pending), 3);
    let before_drain = store.command_count();
    tokio::time::timeout(Duration::from_secs(30), coordinator.drain())
        .await
        .expect("drain finishes at once, without waiting out the delay");
    assert_eq!(
        store.command_count() - before_drain,
        3,
        "the three finished in one round"
    );
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Done), 3);
}

/// A finish delay as long as a `Duration` holds ("finish only when
/// drained or a round is full") holds commits as any long delay does: the
/// finisher added it to each commit's arrival time, which overflowed and
/// panicked the finisher, so every committed transaction was left to
/// recovery, its credit landing only after the lease, and a drain returned
/// with nothing finished.
#[tokio::test]
async fn the_longest_finish_delay_holds_commits_until_a_drain() {
    let (store, seeded, names) = pairs(2).await;
    let coordinator = Coordinator::builder(store.clone())
        .finish_delay(Duration::MAX)
        .build();
    for i in 0..2 {
        let receipt = coordinator
            .run(transfer(&names[2 * i], &names[2 * i + 1], 10))
            .await
            .expect("commits");
        assert_eq!(receipt.state, TxState::Applied);
        tokio::task::yield_now().await;
    }
    tokio::time::timeout(Duration::from_secs(30), coordinator.drain())
        .await
        .expect("drain finishes at once, without waiting out the delay");
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Done), 2, "finished by the drain");
    assert_eq!(balance(&store, &names[1]).await, 1010, "the credit landed");
}

#[tokio::test]
async fn a_full_round_does_not_wait_for_the_finish_delay() {
    const ROUND: usize = 64;
    let (store, seeded, names) = pairs(ROUND).await;
    let (on_done, mut done_rx) = done_events();
    let coordinator = Coordinator::builder(store.clone())
        .finish_delay(Duration::from_secs(3600))
        .on_event(on_done)
        .build();
    for i in 0..ROUND {
        coordinator
            .run(transfer(&names[2 * i], &names[2 * i + 1], 10))
            .await
            .expect("commits");
    }
    // No drain: the round is full, so the finisher must not wait out the hour.
    tokio::time::timeout(Duration::from_secs(30), async {
        for _ in 0..ROUND {
            done_rx.recv().await.expect("the coordinator lives");
        }
    })
    .await
    .expect("a full round is finished without waiting for the delay");
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Done), ROUND);
}

/// Garbage collection removes finished records in bulk: one `delete` request
/// for a whole batch, not one per record, and it removes nothing younger than
/// the age it was given.
#[tokio::test]
async fn garbage_collection_removes_a_batch_of_records_with_one_request() {
    let (store, clock, names) = {
        let names: Vec<String> = (0..40).map(|i| format!("acct-{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let (store, clock, _) = bank(&refs, 1000).await;
        (store, clock, names)
    };
    let coordinator = Coordinator::new(store.clone());
    for i in 0..20 {
        coordinator
            .run(transfer(&names[2 * i], &names[2 * i + 1], 10))
            .await
            .expect("commits");
    }
    coordinator.drain().await;
    let worker = coordinator.recovery(tandem::config::RecoveryConfig::default());
    let age = Duration::from_secs(3600);

    // Too young: nothing goes.
    assert_eq!(worker.collect_garbage(age).await.unwrap(), 0);
    assert_eq!(
        tandem::Store::count(&store, &records(), bson::doc! {})
            .await
            .unwrap(),
        20
    );

    clock.advance(age + Duration::from_secs(1));
    let before = store.command_count();
    assert_eq!(worker.collect_garbage(age).await.unwrap(), 20);
    let commands = store.command_count() - before;
    // The clock, the scan, one delete of the batch, the read of the
    // longest registered lease and one delete of stale stubs, and one
    // update dropping the accounts' credit sums.
    assert_eq!(commands, 6, "{commands} commands for 20 records");
    let account = get(&store, &accounts(), &names[1]).await.unwrap();
    assert!(
        account
            .get_document("_tandem")
            .unwrap()
            .get("credit")
            .is_none(),
        "{account}"
    );
    assert_eq!(
        tandem::Store::count(&store, &records(), bson::doc! {})
            .await
            .unwrap(),
        0
    );
}

/// Recovery finishes the transactions of a pass that it finds committed
/// together too: after claiming each and asking each account whether its
/// apply landed, one request moves every record to `applied`, one clears
/// every marker, one moves every record to `done`.
#[tokio::test]
async fn recovery_finishes_the_committed_transactions_of_a_pass_together() {
    const IN_FLIGHT: usize = 8;
    let names: Vec<String> = (0..2 * IN_FLIGHT).map(|i| format!("acct-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (store, clock, seeded) = bank(&refs, 1000).await;
    let shared: std::sync::Arc<dyn tandem::Store> = std::sync::Arc::new(store.clone());
    for i in 0..IN_FLIGHT {
        // Create, apply both accounts, then the crash: committed at the
        // applies, still `pending`.
        let crashed =
            Coordinator::new(tandem::testing::FaultStore::new(shared.clone()).crash_after(3));
        let receipt = crashed
            .run(transfer(&names[2 * i], &names[2 * i + 1], 10))
            .await
            .expect("committed at its applies");
        assert_eq!(receipt.state, TxState::Applied);
        crashed.drain().await;
    }
    let stuck = audit(&store, &records(), &seeded).await.unwrap();
    assert_eq!(stuck.count(TxState::Pending), IN_FLIGHT);
    clock.advance(Duration::from_secs(3600));
    let worker = Coordinator::new(store.clone()).recovery(tandem::config::RecoveryConfig {
        batch: IN_FLIGHT,
        ..Default::default()
    });
    let before = store.command_count();
    let report = worker.run_once().await.unwrap();
    let commands = store.command_count() - before;
    assert_eq!(
        (report.claimed, report.committed),
        (IN_FLIGHT, IN_FLIGHT),
        "{report:?}"
    );
    // The clock and the scan; per record its claim and one read per
    // account (marked, and the clock past the fence, in one read); then one
    // move to `applied`, one request of clears, one move to `done`.
    assert_eq!(
        commands,
        2 + IN_FLIGHT as u64 * 3 + 3,
        "{commands} commands for {IN_FLIGHT} records"
    );
    let audit = audit(&store, &records(), &seeded).await.unwrap();
    audit.assert_clean();
    assert_eq!(audit.count(TxState::Done), IN_FLIGHT);
    for i in 0..IN_FLIGHT {
        assert_eq!(balance(&store, &names[2 * i]).await, 990);
        assert_eq!(balance(&store, &names[2 * i + 1]).await, 1010);
    }
}

/// A finisher that stalls before its shared move to `done`, overtaken by
/// recovery and garbage collection, then by a new transaction reusing the
/// id, reports no move it did not make: the new record is `done` at the same
/// epoch, but under another creation token. (Found by an adversarial review:
/// the move's fallback read took any `done` record of its epoch for its own
/// landed attempt, and emitted `applied -> done` for the stranger's record.)
#[tokio::test]
async fn a_stale_move_to_done_claims_no_move_of_a_record_that_reused_its_id() {
    use std::sync::{Arc, Mutex};
    use tandem::testing::FaultStore;
    use tandem::{DocumentChange, RecoveryConfig, Transaction};

    let keyed = |id: &str, from: &str, to: &str, amount: i64| {
        Transaction::with_id(id)
            .change(
                DocumentChange::update(accounts(), from)
                    .inc("balance", -amount)
                    .require_gte("balance", amount),
            )
            .change(DocumentChange::update(accounts(), to).inc("balance", amount))
    };
    let (store, clock, _) = bank(&["A", "B", "C", "D"], 1000).await;
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let events = events.clone();
        move |e: &TxEvent| events.lock().unwrap().push(e.clone())
    };
    let stale = Coordinator::builder(faulty.clone())
        .on_event(sink)
        .finish_delay(Duration::from_secs(3600))
        .idempotency_window(Duration::from_secs(1))
        .build();
    stale.run(keyed("K", "A", "B", 100)).await.expect("commits");
    stale.run(keyed("L", "C", "D", 100)).await.expect("commits");
    // Creates and applies (6), then the drain's round: the move to applied
    // (1), the clears (4), and the paused shared move to done.
    let pause = faulty.pause_at(6 + 1 + 4 + 1);
    let draining = {
        let stale = stale.clone();
        tokio::spawn(async move { stale.drain().await })
    };
    pause.reached.await.unwrap();
    // Recovery finishes both after the lease; garbage collection removes them.
    clock.advance(Duration::from_secs(33));
    let other = Coordinator::new(store.clone());
    let worker = other.recovery(RecoveryConfig {
        idempotency_window: Duration::from_secs(1),
        ..RecoveryConfig::default()
    });
    assert_eq!(worker.run_once().await.unwrap().committed, 2);
    for _ in 0..2 {
        clock.advance(Duration::from_secs(40));
        worker
            .collect_garbage(Duration::from_secs(32))
            .await
            .unwrap();
    }
    assert!(store.documents(&records()).is_empty(), "collected");
    // A new transaction with the id `K` ends `done` at epoch 0.
    let newer = Coordinator::new(store.clone());
    newer.run(keyed("K", "A", "B", 50)).await.expect("commits");
    newer.drain().await;
    let events_before = events.lock().unwrap().len();
    pause.release.send(()).unwrap();
    draining.await.unwrap();
    let claimed: Vec<String> = events.lock().unwrap()[events_before..]
        .iter()
        .filter(|e| {
            matches!(
                e,
                TxEvent::StateChanged {
                    to: TxState::Done,
                    ..
                }
            )
        })
        .map(ToString::to_string)
        .collect();
    assert!(
        claimed.is_empty(),
        "moves to done it did not make: {claimed:?}"
    );
    assert_eq!(balance(&store, "A").await, 850);
    assert_eq!(balance(&store, "B").await, 1150);
    for name in ["A", "B", "C", "D"] {
        let doc = get(&store, &accounts(), name).await.unwrap();
        let markers = doc.get_array("pendingTransactions").unwrap();
        assert!(markers.is_empty(), "{name} keeps a marker: {doc}");
    }
}

/// A coordinator whose store is wrapped in a fault store, and a transfer
/// committed at its applies with the finisher stopped at its first request
/// (the returned pause lets it go on).
async fn finisher_held_up() -> (
    tandem::MemoryStore,
    Coordinator,
    tandem::testing::FaultStore,
    tandem::testing::Pause,
) {
    let (store, _, _) = bank(&["A", "B"], 1_000_000).await;
    let faulty = tandem::testing::FaultStore::new(std::sync::Arc::new(store.clone()));
    let coordinator = Coordinator::new(faulty.clone());
    let receipt = coordinator.run(transfer("A", "B", 1)).await.unwrap();
    assert_eq!(receipt.state, TxState::Applied);
    // The next operation is the finisher's.
    let pause = faulty.pause_at(faulty.ops() + 1);
    (store, coordinator, faulty, pause)
}

/// Found by an adversarial review: `drain` took the finisher's handle, so a
/// second `drain` at the same time (the one inside `shutdown`, say) returned
/// at once, with the transaction still `pending`, and `shutdown` went on to
/// close the stores under the finisher. Every drain now waits for what was
/// committed before it.
#[tokio::test]
async fn a_second_drain_waits_for_the_work_too() {
    let (store, coordinator, _faulty, pause) = finisher_held_up().await;
    pause.reached.await.unwrap();
    let first = {
        let c = coordinator.clone();
        tokio::spawn(async move { c.drain().await })
    };
    let second = {
        let c = coordinator.clone();
        tokio::spawn(async move { c.drain().await })
    };
    tokio::task::yield_now().await;
    assert!(!first.is_finished() && !second.is_finished());
    pause.release.send(()).unwrap();
    first.await.unwrap();
    second.await.unwrap();
    let states: Vec<String> = store
        .documents(&records())
        .iter()
        .map(|r| r.get_str("state").unwrap().to_owned())
        .collect();
    assert_eq!(states, ["done"]);
}

/// Found by an adversarial review: with the finisher held up, every commit
/// was still answered at once and queued for it, without bound. Past
/// `BACKLOG` (1,024) transactions waiting, `run` waits for room before it
/// answers. (Time is paused: the waiting `run` would otherwise be timed out
/// only by a clock the test does not control.)
#[tokio::test(start_paused = true)]
async fn the_finisher_backlog_is_bounded() {
    let (store, coordinator, _faulty, pause) = finisher_held_up().await;
    pause.reached.await.unwrap();
    // The finisher holds the first transaction; 1,024 more wait for it.
    for _ in 0..1024 {
        coordinator.run(transfer("A", "B", 1)).await.unwrap();
    }
    let next = {
        let c = coordinator.clone();
        tokio::spawn(async move { c.run(transfer("A", "B", 1)).await })
    };
    // Every task waits now: paused time jumps ahead, and the run is still held.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        !next.is_finished(),
        "answered with 1,024 transactions waiting"
    );
    pause.release.send(()).unwrap();
    assert_eq!(next.await.unwrap().unwrap().state, TxState::Applied);
    coordinator.drain().await;
    let done = store
        .documents(&records())
        .iter()
        .filter(|r| r.get_str("state") == Ok("done"))
        .count();
    assert_eq!(done, 1026);
}

/// `drain` waits for what was committed before it, not for the finisher to
/// run out of work: under steady load from other tasks it still returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_returns_under_steady_load() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    let (store, _, _) = bank(&["A", "B", "C", "D"], 1_000_000_000).await;
    let coordinator = Coordinator::new(store.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let mut load = Vec::new();
    for (from, to) in [("A", "B"), ("B", "C"), ("C", "D"), ("D", "A")] {
        let (c, stop, committed) = (coordinator.clone(), stop.clone(), committed.clone());
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                c.run(transfer(from, to, 1)).await.unwrap();
                committed.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        }));
    }
    while committed.load(Ordering::Relaxed) < 200 {
        tokio::task::yield_now().await;
    }
    // A bound for a failing run only: a drain that waited for the load to
    // stop would never return.
    let drained = tokio::time::timeout(Duration::from_secs(60), coordinator.drain()).await;
    let during = committed.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    assert!(drained.is_ok(), "drain did not return while the load ran");
    assert!(during >= 200);
    coordinator.drain().await;
}

/// A hand-written participant whose `clear_marker` waits at a gate the
/// first time, then panics.
#[derive(Debug)]
struct PanicsOnce {
    gate: std::sync::Arc<tokio::sync::Notify>,
    entered: std::sync::Arc<tokio::sync::Notify>,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait::async_trait]
impl tandem::Participant for PanicsOnce {
    fn kind(&self) -> &str {
        "test.panics-once"
    }
    fn spec(&self) -> Result<bson::Document, tandem::ChangeError> {
        Ok(bson::Document::new())
    }
    fn label(&self) -> String {
        "panics-once".into()
    }
    async fn apply(&self, _: tandem::StepContext<'_>) -> Result<(), tandem::StepError> {
        Ok(())
    }
    async fn compensate(&self, _: tandem::StepContext<'_>) -> Result<(), tandem::StepError> {
        Ok(())
    }
    async fn clear_marker(&self, _: tandem::StepContext<'_>) -> Result<(), tandem::StepError> {
        if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.entered.notify_one();
            self.gate.notified().await;
            panic!("a hand-written participant's clear panics");
        }
        Ok(())
    }
}

/// Found by an adversarial review: when the finisher's task panicked (a
/// hand-written participant's step, an event sink), the transactions
/// waiting for it stayed queued with no finisher: `drain` and `shutdown`
/// waited forever, and with a full queue so did every `run`. Now what it
/// held is left to recovery, what waited is finished by its next round, and
/// a later commit finds a finisher.
#[tokio::test]
async fn a_panic_in_the_finisher_leaves_its_work_to_recovery() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use tokio::sync::Notify;

    let (store, clock, _) = bank(&["A", "B"], 1000).await;
    let armed = Arc::new(AtomicBool::new(true));
    let (gate, entered) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let participant = {
        let (gate, entered, armed) = (gate.clone(), entered.clone(), armed.clone());
        move || PanicsOnce {
            gate: gate.clone(),
            entered: entered.clone(),
            armed: armed.clone(),
        }
    };
    let rebuild = participant.clone();
    let coordinator = Coordinator::builder(store.clone())
        .kind("test.panics-once", move |_| {
            Ok(Box::new(rebuild()) as Box<dyn tandem::Participant>)
        })
        .build();
    coordinator
        .run(tandem::Transaction::new().participant(participant()))
        .await
        .unwrap();
    entered.notified().await;
    // A transfer commits while the finisher is held in that clear.
    let waiting = coordinator.run(transfer("A", "B", 10)).await.unwrap();
    gate.notify_one();
    // A bound for a failing run only: the drain waited forever.
    tokio::time::timeout(Duration::from_secs(60), coordinator.drain())
        .await
        .expect("drain returns after the finisher panicked");
    // A new commit starts a new finisher.
    let next = coordinator.run(transfer("B", "A", 1)).await.unwrap();
    coordinator.drain().await;
    assert_eq!(
        coordinator.record(&next.id).await.unwrap().unwrap().state,
        TxState::Done
    );
    // The transfer that waited for the next round is not taken down with
    // the round that panicked (found by an adversarial review: it was left
    // to recovery, and a reader after `drain` missed its credit).
    assert_eq!(
        coordinator
            .record(&waiting.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        TxState::Done
    );
    assert_eq!(balance(&store, "B").await, 1009);
    // What the panic left, recovery finishes after the lease.
    clock.advance(Duration::from_secs(60));
    coordinator
        .recovery(tandem::RecoveryConfig::default())
        .run_once()
        .await
        .unwrap();
    for record in store.documents(&records()) {
        assert_eq!(record.get_str("state"), Ok("done"), "{record}");
    }
    assert_eq!(balance(&store, "A").await, 991);
}

/// A store call that never returns (a hung connection) held `shutdown` up
/// for good, and a process calling it at exit could not exit (found by an
/// adversarial review). `shutdown_within` waits its limit, says that the
/// work did not finish, and recovery finishes the transaction after the
/// lease; with nothing hung, it finishes and answers `true`.
#[tokio::test(start_paused = true)]
async fn shutdown_within_bounds_the_wait_for_a_hung_store() {
    use std::sync::Arc;
    use tandem::testing::FaultStore;
    let (store, clock, _) = bank(&["A", "B"], 100).await;
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let coordinator = tandem::Coordinator::builder(faulty.clone())
        .commit_point(tandem::CommitPoint::Applied)
        .build();
    let receipt = coordinator.run(transfer("A", "B", 1)).await.unwrap();
    // The finisher's next call never returns.
    let mut pause = faulty.pause_at(faulty.ops() + 1);
    tokio::time::timeout(Duration::from_secs(60), &mut pause.reached)
        .await
        .expect("the finisher's call is reached")
        .expect("the pause is armed");
    let started = tokio::time::Instant::now();
    assert!(!coordinator.shutdown_within(Duration::from_secs(60)).await);
    assert!(
        started.elapsed() >= Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    // Committed: recovery finishes it after the lease, the finisher still hung.
    clock.advance(Duration::from_secs(3600));
    let report = tandem::Coordinator::new(store.clone())
        .recovery(tandem::RecoveryConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.committed, 1, "{report:?}");
    let record = tandem::Coordinator::new(store.clone())
        .record(&receipt.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state, tandem::TxState::Done);
    assert_eq!(balance(&store, "A").await, 99);
    assert_eq!(balance(&store, "B").await, 101);
    drop(pause);

    // Nothing hung: it finishes, and says so.
    let (store, _, _) = bank(&["A", "B"], 100).await;
    let coordinator = tandem::Coordinator::new(store.clone());
    coordinator.run(transfer("A", "B", 1)).await.unwrap();
    assert!(coordinator.shutdown_within(Duration::from_secs(60)).await);
    assert_eq!(balance(&store, "B").await, 101);
}

/// Found by an adversarial review: when more than a round's worth of
/// transactions waited (they committed while a round was held up by a slow
/// store), the finisher took a full round and counted the `finish_delay` of
/// the rest from that moment, not from when they committed: they were held
/// up to twice the delay. (Time is paused: it moves only when every task
/// waits for a timer, or when the test advances it.)
#[tokio::test(start_paused = true)]
async fn transactions_left_over_from_a_full_round_wait_no_longer_than_the_delay() {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use tandem::testing::FaultStore;

    const DELAY: Duration = Duration::from_secs(1);
    let (store, _, _) = bank(&["A", "B"], 1_000_000).await;
    let faulty = FaultStore::new(Arc::new(store.clone()));
    let applied_at = Arc::new(Mutex::new(HashMap::new()));
    let sink = {
        let applied_at = applied_at.clone();
        move |e: &TxEvent| {
            if let TxEvent::StateChanged {
                id,
                to: TxState::Applied,
                ..
            } = e
            {
                applied_at
                    .lock()
                    .unwrap()
                    .insert(id.to_string(), tokio::time::Instant::now());
            }
        }
    };
    let coordinator = Coordinator::builder(faulty.clone())
        .finish_delay(DELAY)
        .on_event(sink)
        .build();
    coordinator.run(transfer("A", "B", 1)).await.unwrap();
    // The finisher's first request (after the delay) is held up.
    let pause = faulty.pause_at(faulty.ops() + 1);
    pause.reached.await.unwrap();
    // A full round and one more commit meanwhile.
    let committed = tokio::time::Instant::now();
    let mut last = None;
    for _ in 0..65 {
        last = Some(coordinator.run(transfer("A", "B", 1)).await.unwrap().id);
    }
    let last = last.unwrap().to_string();
    tokio::time::advance(DELAY * 9 / 10).await;
    pause.release.send(()).unwrap();
    // No drain: it would not wait out the delay.
    let applied = loop {
        if let Some(at) = applied_at.lock().unwrap().get(&last) {
            break *at;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let held = applied - committed;
    assert!(held <= DELAY, "held {held:?}, past the delay of {DELAY:?}");
    coordinator.drain().await;
}
