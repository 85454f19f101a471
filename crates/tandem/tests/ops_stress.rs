#![cfg(feature = "test-util")]
//! Randomized races on one bank: coordinators (early and late commit, both
//! commit points, `ConflictPolicy::Wait`), recovery workers rolling forward
//! and back, operator cancels of any record at any time, garbage collection
//! at the smallest age allowed, coordinators paused past their lease, lost
//! requests, lost answers and crashes, a records store and a participant
//! store with clocks that disagree and step back within the margin. Each run
//! ends with recovery to quiescence and checks balances against the ledger,
//! markers, record states and the answers given. `TANDEM_STRESS_SEED` and
//! `TANDEM_STRESS_RUNS` pick the runs (50 of each scenario by default).

use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use tandem::testing::{audit, FaultStore};
use tandem::{
    CommitPoint, ConflictPolicy, Coordinator, DocumentChange, ManualClock, MemoryStore, Namespace,
    PendingPolicy, RecoveryConfig, Store, Transaction, TxId, TxState,
};

/// What one coordinator's task answered: its transaction number and the
/// state it was answered with, or the error's text; `None` if it never ran.
type Answer = Option<(u64, Result<TxState, String>)>;

fn rng(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

fn accounts() -> Namespace {
    Namespace::new("bank", "accounts")
}
fn records() -> Namespace {
    Namespace::new("bank", "transactions")
}

const NAMES: [&str; 4] = ["A", "B", "C", "M"];

fn tx(kind: u64, from: &str, to: &str, amount: i64, n: u64) -> Transaction {
    let t = Transaction::with_id(format!("t{n}"));
    let debit = DocumentChange::update(accounts(), from)
        .inc("balance", -amount)
        .require_gte("balance", amount);
    let credit = match kind % 3 {
        0 => DocumentChange::update(accounts(), to).inc("balance", amount),
        1 => DocumentChange::update(accounts(), to)
            .inc("balance", amount)
            .set("last", format!("p{n}")),
        _ => DocumentChange::update(accounts(), to)
            .inc("balance", amount)
            .inc("count", 1_i64),
    };
    t.change(debit).change(credit)
}

async fn one(seed0: u64) {
    let mut seed = seed0 | 1;
    let clock = Arc::new(ManualClock::new(bson::DateTime::from_millis(
        1_700_000_000_000,
    )));
    let mem = MemoryStore::with_clock(clock.clone());
    let store: Arc<dyn Store> = Arc::new(mem.clone());
    let mut seeded = Vec::new();
    for name in NAMES {
        let d = doc! { "_id": name, "balance": 100_i64, "count": 0_i64, "last": "none", "pendingTransactions": [] };
        store.insert_one(&accounts(), d.clone()).await.unwrap();
        seeded.push((accounts(), d));
    }
    let lease = Duration::from_secs(1);
    let margin = Duration::from_millis(100);
    let mut tasks = Vec::new();
    let ids: Arc<std::sync::Mutex<Vec<TxId>>> = Arc::default();
    for i in 0..6u64 {
        let mut faulty = FaultStore::new(store.clone()).with_yields(rng(&mut seed));
        match rng(&mut seed) % 5 {
            0 => faulty = faulty.crash_after(rng(&mut seed) % 12),
            1 => faulty = faulty.lose_at(1 + rng(&mut seed) % 10),
            2 => faulty = faulty.lose_answer_at(1 + rng(&mut seed) % 10),
            _ => {}
        }
        let mut b = Coordinator::builder(faulty)
            .database("bank")
            .lease(lease)
            .clock_margin(margin)
            .early_commit(rng(&mut seed) % 3 != 0)
            .commit_point(if rng(&mut seed) % 2 == 0 {
                CommitPoint::Done
            } else {
                CommitPoint::Applied
            })
            .retry(tandem::RetryPolicy::default());
        if rng(&mut seed) % 2 == 0 {
            b = b.conflict(ConflictPolicy::Wait {
                timeout: Duration::from_millis(50 + rng(&mut seed) % 2000),
            });
        }
        let c = b.build();
        let from = NAMES[(rng(&mut seed) % 4) as usize];
        let mut to = NAMES[(rng(&mut seed) % 4) as usize];
        if to == from {
            to = if from == "A" { "B" } else { "A" };
        }
        let amount = 1 + (rng(&mut seed) % 60) as i64;
        let t = tx(rng(&mut seed), from, to, amount, i);
        let ids = ids.clone();
        tasks.push(tokio::spawn(async move {
            let id = TxId::new(format!("t{i}")).unwrap();
            ids.lock().unwrap().push(id.clone());
            let r = c.run(t).await;
            c.drain().await;
            (id, Some(r.map(|r| r.state).map_err(|e| format!("{e:?}"))))
        }));
    }
    for r in 0..2u64 {
        let faulty = FaultStore::new(store.clone()).with_yields(rng(&mut seed));
        let faulty = match rng(&mut seed) % 4 {
            0 => faulty.lose_answer_at(1 + rng(&mut seed) % 20),
            1 => faulty.lose_at(1 + rng(&mut seed) % 20),
            _ => faulty,
        };
        let forward = rng(&mut seed) % 2 == 0;
        let worker = Coordinator::builder(faulty)
            .database("bank")
            .owner(format!("rec{r}"))
            .lease(lease)
            .clock_margin(margin)
            .build()
            .recovery(RecoveryConfig {
                pending: if forward {
                    PendingPolicy::RollForward
                } else {
                    PendingPolicy::RollBack
                },
                batch: 1 + (rng(&mut seed) % 3) as usize,
                ..RecoveryConfig::default()
            });
        let rounds = rng(&mut seed) % 8;
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let _ = worker.run_once().await;
                tokio::task::yield_now().await;
            }
            (TxId::new("none").unwrap(), None)
        }));
    }
    // Operator cancels.
    {
        let faulty = FaultStore::new(store.clone()).with_yields(rng(&mut seed));
        let op = Coordinator::builder(faulty)
            .database("bank")
            .owner("cli")
            .lease(lease)
            .clock_margin(margin)
            .build()
            .recovery(RecoveryConfig::default());
        let picks: Vec<u64> = (0..4).map(|_| rng(&mut seed) % 6).collect();
        let waits: Vec<u64> = (0..4).map(|_| rng(&mut seed) % 30).collect();
        tasks.push(tokio::spawn(async move {
            for (p, w) in picks.into_iter().zip(waits) {
                for _ in 0..w {
                    tokio::task::yield_now().await;
                }
                let id = TxId::new(format!("t{p}")).unwrap();
                let _ = op.cancel(&id, "operator").await;
            }
            (TxId::new("none").unwrap(), None)
        }));
    }
    // The clock moves on while everything runs.
    {
        let clock = clock.clone();
        let steps = rng(&mut seed) % 40;
        let by = 50 + rng(&mut seed) % 400;
        tasks.push(tokio::spawn(async move {
            for _ in 0..steps {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                clock.advance(Duration::from_millis(by));
            }
            (TxId::new("none").unwrap(), None)
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        let (id, a) = t.await.unwrap();
        if let Some(a) = a {
            answers.push((id, a));
        }
    }
    // Quiescence.
    let worker = Coordinator::builder_shared(store.clone())
        .database("bank")
        .lease(lease)
        .clock_margin(margin)
        .build()
        .recovery(RecoveryConfig::default());
    for _ in 0..20 {
        clock.advance(Duration::from_secs(30));
        let _ = worker.run_once().await;
    }
    let a = audit(store.as_ref(), &records(), &seeded).await.unwrap();
    if !a.violations.is_empty() {
        let docs = store
            .find(&accounts(), doc! {}, Default::default())
            .await
            .unwrap();
        panic!(
            "seed {seed0}: {:?}\n{docs:#?}\n{:#?}",
            a.violations, a.records
        );
    }
    for r in &a.records {
        assert!(matches!(r.state, TxState::Done | TxState::Canceled));
    }
    for (id, answer) in &answers {
        let rec = a.records.iter().find(|r| &r.id == id);
        let state = rec.map(|r| r.state);
        match answer {
            Ok(_) => assert_eq!(
                state,
                Some(TxState::Done),
                "seed {seed0}: {id} answered committed: {rec:#?}"
            ),
            Err(e) if e.starts_with("Canceled") => assert!(
                state != Some(TxState::Done),
                "seed {seed0}: {id} answered {e} but is done: {rec:#?}"
            ),
            Err(_) => {}
        }
        STATS.with(|s| {
            let mut s = s.borrow_mut();
            match (answer, state) {
                (Ok(_), _) => s.0 += 1,
                (Err(e), _) if e.starts_with("Canceled") => s.1 += 1,
                _ => s.2 += 1,
            }
            match state {
                Some(TxState::Done) => s.3 += 1,
                _ => s.4 += 1,
            }
        });
    }
    let mut total = 0;
    for d in store
        .find(&accounts(), doc! {}, Default::default())
        .await
        .unwrap()
    {
        let b = d.get_i64("balance").unwrap();
        assert!(b >= 0, "seed {seed0}: negative {d:?}");
        total += b;
    }
    assert_eq!(total, 400, "seed {seed0}");
}

thread_local! {
    static STATS: std::cell::RefCell<(u32, u32, u32, u32, u32)> = Default::default();
}

#[test]
fn stress() {
    let start: u64 = std::env::var("TANDEM_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let n: u64 = std::env::var("TANDEM_STRESS_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    for s in start..start + n {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(one(s.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    }
    STATS.with(|s| {
        eprintln!(
            "ok/canceled/other answers, done/not records: {:?}",
            s.borrow()
        )
    });
}

fn ledger() -> Namespace {
    Namespace::new("bank", "ledger")
}

fn tx2(kind: u64, from: &str, to: &str, amount: i64, n: u64, keyed: bool) -> Transaction {
    let t = if keyed {
        Transaction::with_id(format!("k{}", n % 3))
    } else {
        Transaction::new()
    };
    let debit = DocumentChange::update(accounts(), from)
        .inc("balance", -amount)
        .require_gte("balance", amount);
    let credit = match kind % 3 {
        0 => DocumentChange::update(accounts(), to).inc("balance", amount),
        1 => DocumentChange::update(accounts(), to)
            .inc("balance", amount)
            .set("last", format!("p{n}")),
        _ => DocumentChange::update(accounts(), to)
            .inc("balance", amount)
            .inc("count", 1_i64),
    };
    let entry = DocumentChange::insert(
        ledger(),
        format!("L{n}"),
        doc! { "from": from, "to": to, "amount": amount },
    );
    t.change(debit).change(credit).change(entry)
}

async fn two(seed0: u64) {
    let mut seed = seed0 | 1;
    let clock = Arc::new(ManualClock::new(bson::DateTime::from_millis(
        1_700_000_000_000,
    )));
    let mem = MemoryStore::with_clock(clock.clone());
    let store: Arc<dyn Store> = Arc::new(mem.clone());
    for name in NAMES {
        let d = doc! { "_id": name, "balance": 100_i64, "count": 0_i64, "last": "none", "pendingTransactions": [] };
        store.insert_one(&accounts(), d.clone()).await.unwrap();
    }
    let lease = Duration::from_secs(1);
    let margin = Duration::from_millis(100);
    let mut tasks: Vec<tokio::task::JoinHandle<Answer>> = Vec::new();
    for i in 0..8u64 {
        let mut faulty = FaultStore::new(store.clone()).with_yields(rng(&mut seed));
        match rng(&mut seed) % 6 {
            0 => faulty = faulty.crash_after(rng(&mut seed) % 14),
            1 => faulty = faulty.lose_at(1 + rng(&mut seed) % 12),
            2 => faulty = faulty.lose_answer_at(1 + rng(&mut seed) % 12),
            _ => {}
        }
        let pause = (rng(&mut seed) % 3 == 0).then(|| faulty.pause_at(1 + rng(&mut seed) % 10));
        let mut b = Coordinator::builder(faulty)
            .database("bank")
            .lease(lease)
            .clock_margin(margin)
            .early_commit(rng(&mut seed) % 3 != 0)
            .commit_point(if rng(&mut seed) % 2 == 0 {
                CommitPoint::Done
            } else {
                CommitPoint::Applied
            });
        if rng(&mut seed) % 2 == 0 {
            b = b.conflict(ConflictPolicy::Wait {
                timeout: Duration::from_millis(50 + rng(&mut seed) % 2000),
            });
        }
        let c = b.build();
        let from = NAMES[(rng(&mut seed) % 4) as usize];
        let mut to = NAMES[(rng(&mut seed) % 4) as usize];
        if to == from {
            to = if from == "A" { "B" } else { "A" };
        }
        let amount = 1 + (rng(&mut seed) % 60) as i64;
        let keyed = rng(&mut seed) % 3 == 0;
        let t = tx2(rng(&mut seed), from, to, amount, i, keyed);
        tasks.push(tokio::spawn(async move {
            let r = c.run(t).await;
            c.drain().await;
            Some((i, r.map(|r| r.state).map_err(|e| format!("{e:?}"))))
        }));
        if let Some(pause) = pause {
            let clock = clock.clone();
            let store = store.clone();
            let forward = rng(&mut seed) % 2 == 0;
            let wait = rng(&mut seed) % 3;
            tasks.push(tokio::spawn(async move {
                if pause.reached.await.is_err() {
                    return None;
                }
                clock.advance(lease * 3);
                let worker = Coordinator::builder_shared(store)
                    .database("bank")
                    .owner("pauser")
                    .lease(lease)
                    .clock_margin(margin)
                    .build()
                    .recovery(RecoveryConfig {
                        pending: if forward {
                            PendingPolicy::RollForward
                        } else {
                            PendingPolicy::RollBack
                        },
                        ..RecoveryConfig::default()
                    });
                for _ in 0..wait {
                    let _ = worker.run_once().await;
                    clock.advance(lease * 3);
                    let _ = worker.collect_garbage(lease + margin).await;
                }
                let _ = pause.release.send(());
                None
            }));
        }
    }
    for r in 0..2u64 {
        let faulty = FaultStore::new(store.clone()).with_yields(rng(&mut seed));
        let faulty = match rng(&mut seed) % 4 {
            0 => faulty.lose_answer_at(1 + rng(&mut seed) % 20),
            1 => faulty.lose_at(1 + rng(&mut seed) % 20),
            _ => faulty,
        };
        let forward = rng(&mut seed) % 2 == 0;
        let worker = Coordinator::builder(faulty)
            .database("bank")
            .owner(format!("rec{r}"))
            .lease(lease)
            .clock_margin(margin)
            .build()
            .recovery(RecoveryConfig {
                pending: if forward {
                    PendingPolicy::RollForward
                } else {
                    PendingPolicy::RollBack
                },
                batch: 1 + (rng(&mut seed) % 3) as usize,
                idempotency_window: Duration::from_secs(1 + rng(&mut seed) % 5),
                ..RecoveryConfig::default()
            });
        let rounds = rng(&mut seed) % 8;
        let gc = rng(&mut seed) % 2 == 0;
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let _ = worker.run_once().await;
                if gc {
                    let _ = worker.collect_garbage(lease + margin).await;
                }
                tokio::task::yield_now().await;
            }
            None
        }));
    }
    {
        let faulty = FaultStore::new(store.clone()).with_yields(rng(&mut seed));
        let op = Coordinator::builder(faulty)
            .database("bank")
            .owner("cli")
            .lease(lease)
            .clock_margin(margin)
            .build()
            .recovery(RecoveryConfig::default());
        let waits: Vec<u64> = (0..4).map(|_| rng(&mut seed) % 30).collect();
        let store = store.clone();
        let pick = rng(&mut seed);
        tasks.push(tokio::spawn(async move {
            for w in waits {
                for _ in 0..w {
                    tokio::task::yield_now().await;
                }
                let recs = store
                    .find(&records(), doc! {}, Default::default())
                    .await
                    .unwrap();
                if recs.is_empty() {
                    continue;
                }
                let r = &recs[(pick as usize) % recs.len()];
                let id = TxId::new(r.get_str("_id").unwrap()).unwrap();
                let _ = op.cancel(&id, "operator").await;
            }
            None
        }));
    }
    {
        let clock = clock.clone();
        let steps = rng(&mut seed) % 40;
        let by = 50 + rng(&mut seed) % 400;
        tasks.push(tokio::spawn(async move {
            for _ in 0..steps {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                clock.advance(Duration::from_millis(by));
            }
            None
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        if let Some(a) = t.await.unwrap() {
            answers.push(a);
        }
    }
    let worker = Coordinator::builder_shared(store.clone())
        .database("bank")
        .lease(lease)
        .clock_margin(margin)
        .build()
        .recovery(RecoveryConfig::default());
    for _ in 0..20 {
        clock.advance(Duration::from_secs(30));
        let _ = worker.run_once().await;
    }
    let recs = store
        .find(&records(), doc! {}, Default::default())
        .await
        .unwrap();
    for r in &recs {
        let st = r.get_str("state").unwrap();
        assert!(
            st == "done" || st == "canceled",
            "seed {seed0}: in flight {r:#?}"
        );
    }
    let entries = store
        .find(&ledger(), doc! {}, Default::default())
        .await
        .unwrap();
    let mut expect: std::collections::HashMap<String, i64> =
        NAMES.iter().map(|n| (n.to_string(), 100)).collect();
    let mut live = std::collections::HashSet::new();
    for e in &entries {
        let meta = e.get_document("_tandem").ok();
        if meta.is_some_and(|m| m.get_bool("ghost").unwrap_or(false)) {
            continue;
        }
        let bad = e
            .get_array("pendingTransactions")
            .map(|a| !a.is_empty())
            .unwrap_or(false)
            || meta.is_some_and(|m| m.get("lock").is_some_and(|l| *l != bson::Bson::Null));
        assert!(!bad, "seed {seed0}: marker left on {e:#?}");
        let amount = e.get_i64("amount").unwrap();
        *expect.get_mut(e.get_str("from").unwrap()).unwrap() -= amount;
        *expect.get_mut(e.get_str("to").unwrap()).unwrap() += amount;
        live.insert(e.get_str("_id").unwrap().to_owned());
    }
    let docs = store
        .find(&accounts(), doc! {}, Default::default())
        .await
        .unwrap();
    for d in &docs {
        let name = d.get_str("_id").unwrap();
        let bad = d
            .get_array("pendingTransactions")
            .map(|a| !a.is_empty())
            .unwrap_or(false)
            || d.get_document("_tandem").ok().is_some_and(|m| {
                m.get("lock").is_some_and(|l| *l != bson::Bson::Null)
                    || m.get("pending")
                        .is_some_and(|p| p.as_i64().or(p.as_i32().map(i64::from)) != Some(0))
            });
        assert!(!bad, "seed {seed0}: marker left on {d:#?}\n{recs:#?}");
        assert_eq!(
            d.get_i64("balance").unwrap(),
            expect[name],
            "seed {seed0}: {name}\n{docs:#?}\n{entries:#?}\n{recs:#?}\n{answers:#?}"
        );
    }
    for (i, a) in &answers {
        let present = live.contains(&format!("L{i}"));
        match a {
            Ok(_) => assert!(
                present,
                "seed {seed0}: t{i} answered committed, no ledger entry\n{answers:#?}\n{recs:#?}"
            ),
            Err(e) if e.starts_with("Canceled") => {
                assert!(
                    !present,
                    "seed {seed0}: t{i} answered {e}, ledger entry there\n{recs:#?}"
                )
            }
            Err(_) => {}
        }
    }
}

fn tx3(kind: u64, from: &str, to: &str, amount: i64, n: u64, keyed: bool) -> Transaction {
    let t = if keyed {
        Transaction::with_id(format!("k{}", n % 3))
    } else {
        Transaction::new()
    };
    let debit = DocumentChange::update(accounts(), from)
        .in_store("p")
        .inc("balance", -amount)
        .require_gte("balance", amount);
    let credit = match kind % 3 {
        0 => DocumentChange::update(accounts(), to)
            .in_store("p")
            .inc("balance", amount),
        1 => DocumentChange::update(accounts(), to)
            .in_store("p")
            .inc("balance", amount)
            .set("last", format!("p{n}")),
        _ => DocumentChange::update(accounts(), to)
            .in_store("p")
            .inc("balance", amount)
            .inc("count", 1_i64),
    };
    let entry = DocumentChange::insert(
        ledger(),
        format!("L{n}"),
        doc! { "from": from, "to": to, "amount": amount },
    )
    .in_store("p");
    t.change(debit).change(credit).change(entry)
}

async fn three(seed0: u64) {
    let mut seed = seed0 | 1;
    let clock = Arc::new(ManualClock::new(bson::DateTime::from_millis(
        1_700_000_000_000,
    )));
    let mem = MemoryStore::with_clock(clock.clone());
    let records_store: Arc<dyn Store> = Arc::new(mem.clone());
    let skew = (rng(&mut seed) % 10_000) as i64 - 5_000;
    let pclock = Arc::new(ManualClock::new(bson::DateTime::from_millis(
        1_700_000_000_000 + skew,
    )));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(pclock.clone()));
    for name in NAMES {
        let d = doc! { "_id": name, "balance": 100_i64, "count": 0_i64, "last": "none", "pendingTransactions": [] };
        store.insert_one(&accounts(), d.clone()).await.unwrap();
    }
    let lease = Duration::from_secs(1);
    let margin = Duration::from_millis(100);
    let mut tasks: Vec<tokio::task::JoinHandle<Answer>> = Vec::new();
    for i in 0..8u64 {
        let mut faulty = FaultStore::new(records_store.clone()).with_yields(rng(&mut seed));
        match rng(&mut seed) % 6 {
            0 => faulty = faulty.crash_after(rng(&mut seed) % 14),
            1 => faulty = faulty.lose_at(1 + rng(&mut seed) % 12),
            2 => faulty = faulty.lose_answer_at(1 + rng(&mut seed) % 12),
            _ => {}
        }
        let pause = (rng(&mut seed) % 3 == 0).then(|| faulty.pause_at(1 + rng(&mut seed) % 10));
        let mut b = Coordinator::builder(faulty)
            .store_shared("p", store.clone())
            .database("bank")
            .lease(lease)
            .clock_margin(margin)
            .early_commit(rng(&mut seed) % 3 != 0)
            .commit_point(if rng(&mut seed) % 2 == 0 {
                CommitPoint::Done
            } else {
                CommitPoint::Applied
            });
        if rng(&mut seed) % 2 == 0 {
            b = b.conflict(ConflictPolicy::Wait {
                timeout: Duration::from_millis(50 + rng(&mut seed) % 2000),
            });
        }
        let c = b.build();
        let from = NAMES[(rng(&mut seed) % 4) as usize];
        let mut to = NAMES[(rng(&mut seed) % 4) as usize];
        if to == from {
            to = if from == "A" { "B" } else { "A" };
        }
        let amount = 1 + (rng(&mut seed) % 60) as i64;
        let keyed = rng(&mut seed) % 3 == 0;
        let t = tx3(rng(&mut seed), from, to, amount, i, keyed);
        tasks.push(tokio::spawn(async move {
            let r = c.run(t).await;
            c.drain().await;
            Some((i, r.map(|r| r.state).map_err(|e| format!("{e:?}"))))
        }));
        if let Some(pause) = pause {
            let clock = clock.clone();
            let pclock = pclock.clone();
            let records_store = records_store.clone();
            let pstore = store.clone();
            let forward = rng(&mut seed) % 2 == 0;
            let wait = rng(&mut seed) % 3;
            tasks.push(tokio::spawn(async move {
                if pause.reached.await.is_err() {
                    return None;
                }
                clock.advance(lease * 3);
                pclock.advance(lease * 3);
                let worker = Coordinator::builder_shared(records_store)
                    .store_shared("p", pstore)
                    .database("bank")
                    .owner("pauser")
                    .lease(lease)
                    .clock_margin(margin)
                    .build()
                    .recovery(RecoveryConfig {
                        pending: if forward {
                            PendingPolicy::RollForward
                        } else {
                            PendingPolicy::RollBack
                        },
                        ..RecoveryConfig::default()
                    });
                for _ in 0..wait {
                    let _ = worker.run_once().await;
                    clock.advance(lease * 3);
                    pclock.advance(lease * 3);
                    let _ = worker.collect_garbage(lease + margin).await;
                }
                let _ = pause.release.send(());
                None
            }));
        }
    }
    for r in 0..2u64 {
        let faulty = FaultStore::new(records_store.clone()).with_yields(rng(&mut seed));
        let faulty = match rng(&mut seed) % 4 {
            0 => faulty.lose_answer_at(1 + rng(&mut seed) % 20),
            1 => faulty.lose_at(1 + rng(&mut seed) % 20),
            _ => faulty,
        };
        let forward = rng(&mut seed) % 2 == 0;
        let worker = Coordinator::builder(faulty)
            .store_shared("p", store.clone())
            .database("bank")
            .owner(format!("rec{r}"))
            .lease(lease)
            .clock_margin(margin)
            .build()
            .recovery(RecoveryConfig {
                pending: if forward {
                    PendingPolicy::RollForward
                } else {
                    PendingPolicy::RollBack
                },
                batch: 1 + (rng(&mut seed) % 3) as usize,
                idempotency_window: Duration::from_secs(1 + rng(&mut seed) % 5),
                ..RecoveryConfig::default()
            });
        let rounds = rng(&mut seed) % 8;
        let gc = rng(&mut seed) % 2 == 0;
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let _ = worker.run_once().await;
                if gc {
                    let _ = worker.collect_garbage(lease + margin).await;
                }
                tokio::task::yield_now().await;
            }
            None
        }));
    }
    {
        let faulty = FaultStore::new(records_store.clone()).with_yields(rng(&mut seed));
        let op = Coordinator::builder(faulty)
            .store_shared("p", store.clone())
            .database("bank")
            .owner("cli")
            .lease(lease)
            .clock_margin(margin)
            .build()
            .recovery(RecoveryConfig::default());
        let waits: Vec<u64> = (0..4).map(|_| rng(&mut seed) % 30).collect();
        let store = records_store.clone();
        let pick = rng(&mut seed);
        tasks.push(tokio::spawn(async move {
            for w in waits {
                for _ in 0..w {
                    tokio::task::yield_now().await;
                }
                let recs = store
                    .find(&records(), doc! {}, Default::default())
                    .await
                    .unwrap();
                if recs.is_empty() {
                    continue;
                }
                let r = &recs[(pick as usize) % recs.len()];
                let id = TxId::new(r.get_str("_id").unwrap()).unwrap();
                let _ = op.cancel(&id, "operator").await;
            }
            None
        }));
    }
    {
        let clock = clock.clone();
        let pclock = pclock.clone();
        let steps = rng(&mut seed) % 40;
        let by = 50 + rng(&mut seed) % 400;
        let pby = 50 + rng(&mut seed) % 400;
        tasks.push(tokio::spawn(async move {
            for _ in 0..steps {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                clock.advance(Duration::from_millis(by));
                pclock.advance(Duration::from_millis(pby));
                if pby % 3 == 0 {
                    pclock.rewind(Duration::from_millis(pby.min(100)));
                }
                if by % 3 == 0 {
                    clock.rewind(Duration::from_millis(by.min(100)));
                }
            }
            None
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        if let Some(a) = t.await.unwrap() {
            answers.push(a);
        }
    }
    let worker = Coordinator::builder_shared(records_store.clone())
        .store_shared("p", store.clone())
        .database("bank")
        .lease(lease)
        .clock_margin(margin)
        .build()
        .recovery(RecoveryConfig::default());
    for _ in 0..20 {
        clock.advance(Duration::from_secs(30));
        pclock.advance(Duration::from_secs(30));
        let _ = worker.run_once().await;
    }
    let recs = records_store
        .find(&records(), doc! {}, Default::default())
        .await
        .unwrap();
    for r in &recs {
        let st = r.get_str("state").unwrap();
        assert!(
            st == "done" || st == "canceled",
            "seed {seed0}: in flight {r:#?}"
        );
    }
    let entries = store
        .find(&ledger(), doc! {}, Default::default())
        .await
        .unwrap();
    let mut expect: std::collections::HashMap<String, i64> =
        NAMES.iter().map(|n| (n.to_string(), 100)).collect();
    let mut live = std::collections::HashSet::new();
    for e in &entries {
        let meta = e.get_document("_tandem").ok();
        if meta.is_some_and(|m| m.get_bool("ghost").unwrap_or(false)) {
            continue;
        }
        let bad = e
            .get_array("pendingTransactions")
            .map(|a| !a.is_empty())
            .unwrap_or(false)
            || meta.is_some_and(|m| m.get("lock").is_some_and(|l| *l != bson::Bson::Null));
        assert!(!bad, "seed {seed0}: marker left on {e:#?}");
        let amount = e.get_i64("amount").unwrap();
        *expect.get_mut(e.get_str("from").unwrap()).unwrap() -= amount;
        *expect.get_mut(e.get_str("to").unwrap()).unwrap() += amount;
        live.insert(e.get_str("_id").unwrap().to_owned());
    }
    let docs = store
        .find(&accounts(), doc! {}, Default::default())
        .await
        .unwrap();
    for d in &docs {
        let name = d.get_str("_id").unwrap();
        let bad = d
            .get_array("pendingTransactions")
            .map(|a| !a.is_empty())
            .unwrap_or(false)
            || d.get_document("_tandem").ok().is_some_and(|m| {
                m.get("lock").is_some_and(|l| *l != bson::Bson::Null)
                    || m.get("pending")
                        .is_some_and(|p| p.as_i64().or(p.as_i32().map(i64::from)) != Some(0))
            });
        assert!(!bad, "seed {seed0}: marker left on {d:#?}\n{recs:#?}");
        assert_eq!(
            d.get_i64("balance").unwrap(),
            expect[name],
            "seed {seed0}: {name}\n{docs:#?}\n{entries:#?}\n{recs:#?}\n{answers:#?}"
        );
    }
    if std::env::var("TANDEM_STRESS_SHOW").is_ok() {
        eprintln!(
            "entries {} answers {:?}",
            live.len(),
            answers
                .iter()
                .map(|(_, a)| a.as_ref().map(|_| "ok").unwrap_or_else(|e| &e[..12]))
                .collect::<Vec<_>>()
        );
    }
    for (i, a) in &answers {
        let present = live.contains(&format!("L{i}"));
        match a {
            Ok(_) => assert!(
                present,
                "seed {seed0}: t{i} answered committed, no ledger entry\n{answers:#?}\n{recs:#?}"
            ),
            Err(e) if e.starts_with("Canceled") => {
                assert!(
                    !present,
                    "seed {seed0}: t{i} answered {e}, ledger entry there\n{recs:#?}"
                )
            }
            Err(_) => {}
        }
    }
}

#[test]
fn stress_gc() {
    let start: u64 = std::env::var("TANDEM_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let n: u64 = std::env::var("TANDEM_STRESS_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    for s in start..start + n {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(two(s.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    }
}

#[test]
fn stress_skew() {
    let start: u64 = std::env::var("TANDEM_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let n: u64 = std::env::var("TANDEM_STRESS_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    for s in start..start + n {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(three(s.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    }
}
