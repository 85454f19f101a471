//! The native strategy beside two-phase: one declaration gets one answer,
//! whichever strategy runs it, and every answer holds.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tandem::testing::FaultStore;
use tandem::{
    CommitPoint, ConflictPolicy, Coordinator, DocumentChange, StepError, Store, Strategy,
    Transaction, TxError, TxState,
};

/// An idempotency key is taken by whatever its first run ended as, a
/// refusal included, under every strategy: a native refusal aborts its
/// transaction, record and all, so the coordinator then takes the key with
/// a `canceled` record (before, a retry after a top-up paid).
#[tokio::test]
async fn a_refused_keyed_payment_keeps_its_key_under_every_strategy() {
    let mut outcomes = Vec::new();
    for strategy in [Strategy::TwoPhase, Strategy::Auto, Strategy::Native] {
        let (store, _, _) = bank(&["A", "B"], 50).await;
        let coordinator = Coordinator::builder(store.clone())
            .strategy(strategy)
            .commit_point(CommitPoint::Done)
            .build();
        // First run: refused by its guard (50 < 100).
        let first = coordinator.run(keyed_payment("pay-order-1", 100)).await;
        assert!(
            matches!(
                &first,
                Err(TxError::Canceled {
                    cause: StepError::GuardFailed { .. },
                    ..
                })
            ),
            "{strategy:?}: {first:?}"
        );
        // The customer tops up; a redelivered message retries under the key.
        store
            .update_one(
                &accounts(),
                bson::doc! { "_id": "A" },
                bson::doc! { "$inc": { "balance": 1000_i64 } },
                Default::default(),
            )
            .await
            .unwrap();
        let again = coordinator.run(keyed_payment("pay-order-1", 100)).await;
        outcomes.push((
            strategy,
            format!("{:?}", again.as_ref().map(|r| r.state)),
            balance(&store, "A").await,
        ));
    }
    for (strategy, answer, a) in &outcomes {
        assert!(
            answer.contains("Duplicate") && answer.contains("Some(Canceled)") && *a == 1050,
            "{strategy:?}: the retry under the refused key answered {answer} and A = {a} (expected Duplicate {{ Canceled }}, A = 1050); all: {outcomes:?}"
        );
    }
}

/// `ConflictPolicy::Wait` holds for the native strategy too: a document held
/// by a two-phase transaction is waited for, as a two-phase apply waits
/// (before, the native run was refused at once).
#[tokio::test]
async fn conflict_policy_wait_holds_for_native_too() {
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let (store, _, _) = bank(&["A", "B"], 1000).await;
        let faulty = FaultStore::new(Arc::new(store.clone()));
        let pause = faulty.pause_at(6); // A held exclusively; waiting before `applied`
        let holder = Coordinator::builder(faulty)
            .commit_point(CommitPoint::Done)
            .build();
        let held = Transaction::new()
            .change(DocumentChange::update(accounts(), "A").set("tier", "gold"))
            .change(DocumentChange::update(accounts(), "B").inc("balance", 1_i64));
        let first = tokio::spawn(async move { holder.run(held).await });
        pause.reached.await.unwrap();
        let waiting = Coordinator::builder(store.clone())
            .strategy(strategy)
            .commit_point(CommitPoint::Done)
            .conflict(ConflictPolicy::Wait {
                timeout: Duration::from_secs(5),
            })
            .build();
        let before = store.command_count();
        let second = tokio::spawn(async move { waiting.run(transfer("A", "B", 5)).await });
        // The holder is paused and sends nothing: the next command is the
        // second transaction's first try, which finds A held.
        let mut turns = 0;
        while store.command_count() == before {
            turns += 1;
            assert!(turns < 1_000_000, "the second transaction never tried");
            tokio::task::yield_now().await;
        }
        pause.release.send(()).unwrap();
        first.await.unwrap().unwrap();
        let answer = second.await.unwrap();
        assert!(
            matches!(&answer, Ok(r) if r.state == TxState::Done),
            "{strategy:?} under ConflictPolicy::Wait: {answer:?}"
        );
        assert_eq!(balance(&store, "A").await, 995, "{strategy:?}");
    }
}

/// A native transaction the store refuses (nothing written) is answered
/// `Canceled`, as the same declaration run two-phase is (before: `Interrupted`,
/// "not known", with no record to read): the embedded store refuses an
/// `$inc` that overflows a 64-bit integer.
#[tokio::test]
async fn a_native_store_refusal_is_answered_like_two_phase() {
    let mut answers = Vec::new();
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let store = tandem::MemoryStore::new();
        store
            .insert_one(&accounts(), bson::doc! { "_id": "d", "a": i64::MAX })
            .await
            .unwrap();
        let c = Coordinator::builder(store.clone())
            .strategy(strategy)
            .commit_point(CommitPoint::Done)
            .build();
        let tx = Transaction::new().change(
            DocumentChange::update(accounts(), "d")
                .inc("a", 1_i64)
                .require_gte("a", 1_i64),
        );
        let answer = c.run(tx).await;
        answers.push(format!("{strategy:?}: {answer:?}"));
        assert!(
            matches!(answer, Err(TxError::Canceled { .. })),
            "nothing was written, and nothing will be; the answers: {answers:#?}"
        );
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Lose(u64),
    LoseAnswer(u64),
}

/// Sweep: a lost request or a lost answer at every store operation of a
/// keyed transfer with a ledger insert; the answer must hold once recovery
/// has settled, and a retry under the key must not pay twice.
#[tokio::test]
async fn answers_hold_under_every_lost_answer() {
    use tandem::{ManualClock, MemoryStore, RecoveryConfig, RetryPolicy};
    let ledger = tandem::Namespace::new("bank", "ledger");
    let mut bad = Vec::new();
    for commit_point in [CommitPoint::Applied, CommitPoint::Done] {
        for retry in [RetryPolicy::default(), RetryPolicy::NONE] {
            for keyed in [true, false] {
                for n in 1..16 {
                    for fault in [Fault::Lose(n), Fault::LoseAnswer(n)] {
                        let clock = Arc::new(ManualClock::default());
                        let store = MemoryStore::with_clock(clock.clone());
                        for name in ["A", "B"] {
                            store
                                .insert_one(
                                    &accounts(),
                                    bson::doc! { "_id": name, "balance": 1000_i64 },
                                )
                                .await
                                .unwrap();
                        }
                        let faulty = FaultStore::new(Arc::new(store.clone()));
                        let faulty = match fault {
                            Fault::Lose(n) => faulty.lose_at(n),
                            Fault::LoseAnswer(n) => faulty.lose_answer_at(n),
                        };
                        let c = Coordinator::builder(faulty)
                            .commit_point(commit_point)
                            .retry(RetryPolicy {
                                base_delay: Duration::from_millis(1),
                                max_delay: Duration::from_millis(2),
                                ..retry
                            })
                            .lease(Duration::from_secs(5))
                            .build();
                        let tx = || {
                            let t = if keyed {
                                Transaction::with_id("k-1")
                            } else {
                                Transaction::new()
                            };
                            t.change(
                                DocumentChange::update(accounts(), "A")
                                    .inc("balance", -100_i64)
                                    .require_gte("balance", 100_i64),
                            )
                            .change(DocumentChange::update(accounts(), "B").inc("balance", 100_i64))
                            .change(DocumentChange::insert(
                                ledger.clone(),
                                "L",
                                bson::doc! { "amount": 100_i64 },
                            ))
                        };
                        let answer = c.run(tx()).await;
                        c.drain().await;
                        let id = match &answer {
                            Ok(r) => Some(r.id.clone()),
                            Err(e) => e.id().cloned(),
                        };
                        // Settle.
                        let fixer = Coordinator::builder(store.clone())
                            .lease(Duration::from_secs(5))
                            .build();
                        let worker = fixer.recovery(RecoveryConfig::default());
                        for _ in 0..6 {
                            clock.advance(Duration::from_secs(30));
                            let _ = worker.run_once().await;
                        }
                        fixer.drain().await;
                        let state = match &id {
                            Some(id) => fixer.record(id).await.unwrap().map(|r| r.state),
                            None => None,
                        };
                        let a = get(&store, &accounts(), "A")
                            .await
                            .unwrap()
                            .get_i64("balance")
                            .unwrap();
                        let b = get(&store, &accounts(), "B")
                            .await
                            .unwrap()
                            .get_i64("balance")
                            .unwrap();
                        let l = store
                            .find_one(
                                &ledger,
                                bson::doc! { "_id": "L", "_tandem.ghost": { "$exists": false } },
                            )
                            .await
                            .unwrap()
                            .is_some();
                        let applied = (a, b, l) == (900, 1100, true);
                        let none = (a, b, l) == (1000, 1000, false);
                        let ctx = format!("{commit_point:?} retry={} keyed={keyed} {fault:?}: answer {answer:?}, state {state:?}, A={a} B={b} L={l}", retry.max_attempts);
                        if !(applied || none) {
                            bad.push(format!("partial: {ctx}"));
                        }
                        if applied != (state == Some(TxState::Done)) {
                            bad.push(format!("state/effect: {ctx}"));
                        }
                        match &answer {
                            Ok(_) if !applied => bad.push(format!("Ok not applied: {ctx}")),
                            Err(TxError::Canceled { .. }) if applied => {
                                bad.push(format!("Canceled but applied: {ctx}"))
                            }
                            Err(TxError::Duplicate { .. }) => {
                                bad.push(format!("Duplicate on first run: {ctx}"))
                            }
                            _ => {}
                        }
                        if keyed {
                            let again = fixer.run(tx()).await;
                            fixer.drain().await;
                            let a2 = get(&store, &accounts(), "A")
                                .await
                                .unwrap()
                                .get_i64("balance")
                                .unwrap();
                            if applied && a2 != 900 {
                                bad.push(format!("paid twice on retry ({again:?}): {ctx}"));
                            }
                            if let Err(TxError::Duplicate { state: s, .. }) = &again {
                                if *s != state {
                                    bad.push(format!("retry Duplicate says {s:?}: {ctx}"));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} problems:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Stress: native and two-phase transfers, exclusive sets and exclusive
/// increments on the same accounts at once; every answer must hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_and_two_phase_on_the_same_accounts() {
    use tandem::MemoryStore;
    for seed in 0..20_u64 {
        let store = MemoryStore::new();
        let names = ["A", "B", "C"];
        for name in names {
            store
                .insert_one(
                    &accounts(),
                    bson::doc! { "_id": name, "balance": 300_i64, "n": 0_i64 },
                )
                .await
                .unwrap();
        }
        let noisy = FaultStore::new(Arc::new(store.clone())).with_yields(seed);
        let two_phase = Coordinator::builder(noisy)
            .commit_point(if seed % 2 == 0 {
                CommitPoint::Applied
            } else {
                CommitPoint::Done
            })
            .conflict(ConflictPolicy::Wait {
                timeout: Duration::from_millis(50),
            })
            .build();
        let native = Coordinator::builder(store.clone())
            .strategy(Strategy::Native)
            .build();
        let mut tasks = Vec::new();
        let mut rng = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        for i in 0..60_u64 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = rng >> 33;
            let from = names[(r % 3) as usize];
            let to = names[((r % 3 + 1 + (r / 3) % 2) % 3) as usize];
            let amount = (r / 9 % 200) as i64 + 1;
            let kind = r / 2000 % 4;
            let tx = match kind {
                // exclusive: an increment under an upper bound, and a counter
                0 => Transaction::new()
                    .change(
                        DocumentChange::update(accounts(), from)
                            .inc("balance", -amount)
                            .inc("n", 1_i64)
                            .require_gte("balance", amount)
                            .require_lte("balance", 100_000_i64),
                    )
                    .change(DocumentChange::update(accounts(), to).inc("balance", amount)),
                _ => transfer(from, to, amount),
            };
            let c = if i % 2 == 0 {
                native.clone()
            } else {
                two_phase.clone()
            };
            tasks.push(tokio::spawn(async move {
                let answer = c.run(tx).await;
                (answer, from, to, amount, kind)
            }));
        }
        let mut expected = std::collections::HashMap::new();
        for n in names {
            expected.insert(n, (300_i64, 0_i64));
        }
        let mut unknown = 0;
        for t in tasks {
            let (answer, from, to, amount, kind) = t.await.unwrap();
            match answer {
                Ok(_) => {
                    expected.get_mut(from).unwrap().0 -= amount;
                    expected.get_mut(to).unwrap().0 += amount;
                    if kind == 0 {
                        expected.get_mut(from).unwrap().1 += 1;
                    }
                }
                Err(TxError::Canceled { .. }) => {}
                Err(other) => {
                    unknown += 1;
                    eprintln!("seed {seed}: {other:?}");
                }
            }
        }
        two_phase.drain().await;
        assert_eq!(unknown, 0);
        for n in names {
            let d = get(&store, &accounts(), n).await.unwrap();
            let got = (d.get_i64("balance").unwrap(), d.get_i64("n").unwrap());
            assert_eq!(got, expected[n], "seed {seed}, account {n}: {d}");
            assert!(got.0 >= 0);
        }
    }
}

/// A store name that does not exist is `UnknownStore` under every strategy,
/// keyed or not (a keyed native one was told to "run it two-phase").
#[tokio::test]
async fn a_keyed_native_transaction_on_an_unknown_store_is_unknown_store() {
    let (store, _, _) = bank(&["A"], 1000).await;
    let mut answers = Vec::new();
    for (strategy, keyed) in [
        (Strategy::TwoPhase, true),
        (Strategy::Native, false),
        (Strategy::Native, true),
    ] {
        let c = Coordinator::builder(store.clone())
            .strategy(strategy)
            .build();
        let t = if keyed {
            Transaction::with_id("k-unknown")
        } else {
            Transaction::new()
        };
        let tx = t.change(
            DocumentChange::update(accounts(), "A")
                .inc("balance", -1_i64)
                .require_gte("balance", 1_i64)
                .in_store("nope"),
        );
        let answer = c.run(tx).await;
        answers.push(format!("{strategy:?} keyed={keyed}: {answer:?}"));
    }
    for a in &answers {
        assert!(a.contains("UnknownStore"), "{answers:#?}");
    }
}

/// Sweep: a two-phase {debit A, insert L} crashes after each operation; a
/// native insert of L (and a native transfer touching A) runs; recovery,
/// either policy; the outcome must be all-or-nothing with the native one
/// kept.
#[tokio::test]
async fn native_beside_a_crashed_two_phase_insert() {
    use tandem::{ManualClock, MemoryStore, PendingPolicy, RecoveryConfig};
    let ledger = tandem::Namespace::new("bank", "ledger");
    let mut bad = Vec::new();
    for policy in [PendingPolicy::RollBack, PendingPolicy::RollForward] {
        for n in 1..12 {
            let clock = Arc::new(ManualClock::default());
            let store = MemoryStore::with_clock(clock.clone());
            for name in ["A", "B"] {
                store
                    .insert_one(&accounts(), bson::doc! { "_id": name, "balance": 1000_i64 })
                    .await
                    .unwrap();
            }
            let faulty = FaultStore::new(Arc::new(store.clone())).crash_after(n);
            let c = Coordinator::builder(faulty)
                .lease(Duration::from_secs(5))
                .commit_point(CommitPoint::Done)
                .build();
            let tx = Transaction::new()
                .change(
                    DocumentChange::update(accounts(), "A")
                        .inc("balance", -100_i64)
                        .require_gte("balance", 100_i64),
                )
                .change(DocumentChange::insert(
                    ledger.clone(),
                    "L",
                    bson::doc! { "by": "two-phase" },
                ));
            let answer = c.run(tx).await;
            let native = Coordinator::builder(store.clone())
                .strategy(Strategy::Native)
                .build();
            let nat = native
                .run(
                    Transaction::new()
                        .change(DocumentChange::insert(
                            ledger.clone(),
                            "L",
                            bson::doc! { "by": "native" },
                        ))
                        .change(
                            DocumentChange::update(accounts(), "B")
                                .inc("balance", -10_i64)
                                .require_gte("balance", 10_i64),
                        ),
                )
                .await;
            let fixer = Coordinator::builder(store.clone())
                .lease(Duration::from_secs(5))
                .build();
            let worker = fixer.recovery(RecoveryConfig {
                pending: policy,
                ..RecoveryConfig::default()
            });
            for _ in 0..6 {
                clock.advance(Duration::from_secs(30));
                let _ = worker.run_once().await;
            }
            fixer.drain().await;
            let a = get(&store, &accounts(), "A")
                .await
                .unwrap()
                .get_i64("balance")
                .unwrap();
            let b = get(&store, &accounts(), "B")
                .await
                .unwrap()
                .get_i64("balance")
                .unwrap();
            let l = store
                .find_one(&ledger, bson::doc! { "_id": "L" })
                .await
                .unwrap();
            let by = l
                .as_ref()
                .and_then(|d| d.get_str("by").ok().map(str::to_owned));
            let ctx = format!("{policy:?} crash after {n}: two-phase {answer:?}; native {nat:?}; A={a} B={b} L={l:?}");
            match (&nat, by.as_deref()) {
                (Ok(_), Some("native")) if b == 990 && a == 1000 => {}
                (Err(_), Some("two-phase")) if b == 1000 && a == 900 => {}
                (Err(_), None) if b == 1000 && a == 1000 => {}
                _ => bad.push(ctx),
            }
            if let Ok(r) = &answer {
                let _ = r;
                if a != 900 {
                    bad.push(format!("answered Ok: {policy:?} {n}"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The record of a keyed native run says it ran natively when read back,
/// committed or refused (the flag was written and dropped on reading).
#[tokio::test]
async fn a_keyed_native_record_reads_back_as_native() {
    let (store, _, _) = bank(&["A", "B"], 50).await;
    let coordinator = Coordinator::builder(store.clone())
        .strategy(Strategy::Native)
        .build();
    coordinator.run(keyed_payment("paid", 10)).await.unwrap();
    let refused = coordinator.run(keyed_payment("refused", 100)).await;
    assert!(
        matches!(refused, Err(TxError::Canceled { .. })),
        "{refused:?}"
    );
    for (key, state) in [("paid", TxState::Done), ("refused", TxState::Canceled)] {
        let record = coordinator
            .record(&tandem::TxId::new(key).unwrap())
            .await
            .unwrap()
            .expect("the record");
        assert!(record.native && record.keyed, "{key}: {record:?}");
        assert_eq!(record.state, state, "{key}");
        assert_eq!(
            record.to_document().unwrap().get_bool("native"),
            Ok(true),
            "{key}"
        );
    }
}

/// A keyed payment refused before its record could be written (the order
/// it marks paid does not exist yet, found where the two-phase strategy
/// reads the order's before-image, before the record) takes its key as a
/// refusal at an apply does, under every strategy: before, the two-phase
/// run left the key free, and the redelivered payment, once the order
/// existed, paid (natively it was told `Duplicate`).
#[tokio::test]
async fn a_keyed_payment_refused_before_its_record_keeps_its_key_under_every_strategy() {
    let orders = tandem::Namespace::new("shop", "orders");
    let pay = || {
        Transaction::with_id("pay-order-7")
            .change(
                DocumentChange::update(accounts(), "A")
                    .inc("balance", -30_i64)
                    .require_gte("balance", 30_i64),
            )
            .change(DocumentChange::update(orders.clone(), "o7").set("state", "paid"))
    };
    let mut outcomes = Vec::new();
    for strategy in [Strategy::TwoPhase, Strategy::Auto, Strategy::Native] {
        let (store, _, _) = bank(&["A"], 100).await;
        let coordinator = Coordinator::builder(store.clone())
            .strategy(strategy)
            .commit_point(CommitPoint::Done)
            .build();
        let first = coordinator.run(pay()).await;
        assert!(
            matches!(
                &first,
                Err(TxError::Canceled {
                    cause: StepError::NotFound { .. },
                    undone: true,
                    ..
                })
            ),
            "{strategy:?}: {first:?}"
        );
        // The order is created; a redelivered message retries under the key.
        store
            .insert_one(&orders, bson::doc! { "_id": "o7", "state": "open" })
            .await
            .unwrap();
        let again = coordinator.run(pay()).await;
        outcomes.push((
            strategy,
            format!("{:?}", again.as_ref().map(|r| r.state)),
            balance(&store, "A").await,
        ));
    }
    for (strategy, answer, a) in &outcomes {
        assert!(
            answer.contains("Duplicate") && answer.contains("Some(Canceled)") && *a == 100,
            "{strategy:?}: the retry under the refused key answered {answer} and A = {a} (expected Duplicate {{ Canceled }}, A = 100); all: {outcomes:?}"
        );
    }
}
