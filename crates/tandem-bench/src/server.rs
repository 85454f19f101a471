//! The server benchmark: one transfer done five ways against one server, interleaved.
//!
//! Each variant has its own accounts collection (a pool of the same accounts)
//! and runs the same sequence of transfers ([`pair`]). Variants take turns in
//! small batches, the order rotating by one each round, so drift of the shared
//! machine (other builds, the server's own warm-up) spreads over all of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::oid::ObjectId;
use bson::{doc, Document};
use mongodb::options::{ClientOptions, CollectionOptions};
use mongodb::results::UpdateResult;
use mongodb::{Client, Collection};
use tandem::store::Namespace;
use tandem::{CommitPoint, Coordinator, CoordinatorConfig, Strategy};
use tandem_mongodb::options::MongoStoreOptions;
use tandem_mongodb::MongoStore;

use crate::cpu::process_cpu;
use crate::embedded::transfer;
use crate::fawn::FawnDriver;
use crate::monitor::{Counts, Monitor};
use crate::workload::{account_doc, account_id, pair, START_BALANCE};

/// The finish delay of variant (b''): how long its background finisher may
/// hold committed transactions to finish them together.
pub const GROUP_DELAY: Duration = Duration::from_millis(20);

/// The database every variant works in (dropped at the start of a run).
pub const DB: &str = "tandem_bench";

/// The five ways (six, counting tandem's two commit points) to make the transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// (a) The tutorial's eight steps, one command after another.
    HandWritten,
    /// (b) tandem, two-phase, returning at `applied` (the default).
    TandemApplied,
    /// (b0) tandem, two-phase, returning at `applied`, with the commit point
    /// at the record's move to `applied` (`early_commit(false)`): the
    /// protocol before the commit at the applies, measured beside it.
    TandemLate,
    /// (b) again, with the background finishing drained (untimed) after each
    /// sequential transfer, so no transfer waits behind the previous one's
    /// finishing on the server. Sequential latency only.
    TandemAppliedIsolated,
    /// (b'') tandem, two-phase, returning at `applied`, with the background
    /// finisher holding commits for up to [`GROUP_DELAY`] to finish them together.
    TandemGrouped,
    /// (b') tandem, two-phase, returning at `done`.
    TandemDone,
    /// (c) tandem, native multi-document transaction.
    TandemNative,
    /// (d) The Node library Fawn 2.1.5.
    Fawn,
    /// (e) The floor: one `$inc` on one account.
    Floor,
}

impl Variant {
    /// Every variant, in report order.
    pub const ALL: [Variant; 9] = [
        Variant::HandWritten,
        Variant::TandemApplied,
        Variant::TandemLate,
        Variant::TandemAppliedIsolated,
        Variant::TandemGrouped,
        Variant::TandemDone,
        Variant::TandemNative,
        Variant::Fawn,
        Variant::Floor,
    ];

    /// The label used in reports.
    pub fn label(self) -> &'static str {
        match self {
            Variant::HandWritten => "(a) hand-written 2PC",
            Variant::TandemApplied => "(b) tandem two-phase, Applied",
            Variant::TandemLate => "(b0) same as (b), committing at the move to applied",
            Variant::TandemAppliedIsolated => "(b) same, finishing drained between transfers",
            Variant::TandemGrouped => "(b'') same as (b), finish_delay 20 ms",
            Variant::TandemDone => "(b') tandem two-phase, Done",
            Variant::TandemNative => "(c) tandem native",
            Variant::Fawn => "(d) Fawn 2.1.5 (Node)",
            Variant::Floor => "(e) floor: one $inc",
        }
    }

    /// The short name, used for collection names.
    pub fn slug(self) -> &'static str {
        match self {
            Variant::HandWritten => "hand",
            Variant::TandemApplied => "applied",
            Variant::TandemLate => "late",
            Variant::TandemAppliedIsolated => "isolated",
            Variant::TandemGrouped => "grouped",
            Variant::TandemDone => "done",
            Variant::TandemNative => "native",
            Variant::Fawn => "fawn",
            Variant::Floor => "floor",
        }
    }

    /// The accounts collection of this variant.
    pub fn accounts(self) -> String {
        format!("{}accounts", self.slug())
    }
}

/// A variant implemented in this process.
#[derive(Clone)]
pub enum RustVariant {
    /// The hand-written pattern on the driver.
    HandWritten {
        /// The accounts.
        accounts: Collection<Document>,
        /// The transaction records.
        records: Collection<Document>,
    },
    /// tandem on a [`MongoStore`] of its own (for its own command counters).
    Tandem {
        /// The coordinator.
        coordinator: Coordinator,
        /// Its store.
        store: MongoStore,
        /// The accounts.
        ns: Namespace,
    },
    /// One update of one document.
    Floor {
        /// The accounts.
        accounts: Collection<Document>,
    },
}

/// What one transfer reported.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outcome {
    /// `Receipt::round_trips` for tandem; the fixed count of sequential commands otherwise.
    pub round_trips: u32,
}

fn majority_journaled() -> CollectionOptions {
    let mut options = CollectionOptions::default();
    options.write_concern = Some(MongoStoreOptions::default_write_concern());
    options
}

fn expect_one(step: &str, r: UpdateResult) -> Result<(), String> {
    if r.matched_count == 1 {
        Ok(())
    } else {
        Err(format!(
            "step `{step}` matched {} documents",
            r.matched_count
        ))
    }
}

impl RustVariant {
    /// Transfer number `k` of a pool of `pool` accounts.
    pub async fn transfer(&self, k: u64, pool: usize) -> Result<Outcome, String> {
        let (from, to) = pair(k, pool);
        match self {
            RustVariant::HandWritten { accounts, records } => {
                hand_written(accounts, records, &account_id(from), &account_id(to)).await?;
                Ok(Outcome { round_trips: 8 })
            }
            RustVariant::Tandem {
                coordinator, ns, ..
            } => {
                let receipt = coordinator
                    .run(transfer(ns, from, to))
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Outcome {
                    round_trips: receipt.round_trips,
                })
            }
            RustVariant::Floor { accounts } => {
                let r = accounts
                    .update_one(
                        doc! { "_id": account_id(from) },
                        doc! { "$inc": { "balance": -1_i64 } },
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                expect_one("floor", r)?;
                Ok(Outcome { round_trips: 1 })
            }
        }
    }

    /// Waits for work a variant left in the background (tandem's finishing at `Applied`).
    pub async fn settle(&self) {
        if let RustVariant::Tandem { coordinator, .. } = self {
            coordinator.drain().await;
        }
    }

    /// Commands the variant's own [`MongoStore`] counted (tandem only).
    pub fn store_commands(&self) -> Option<u64> {
        match self {
            RustVariant::Tandem { store, .. } => Some(store.metrics().total),
            _ => None,
        }
    }

    /// Write statements the variant's own [`MongoStore`] counted (tandem
    /// only): one per insert, update, replacement, delete and
    /// `findAndModify`, and one per statement of an `update_each` request.
    pub fn store_writes(&self) -> Option<u64> {
        match self {
            RustVariant::Tandem { store, .. } => Some(store.metrics().write_statements),
            _ => None,
        }
    }
}

/// The tutorial's steps, in order, each one command: record `initial`; `pending`;
/// debit A with its marker (guarded by `$ne` on the marker, and by the balance);
/// credit B likewise; `applied`; pull A's marker; pull B's marker; `done`.
pub async fn hand_written(
    accounts: &Collection<Document>,
    records: &Collection<Document>,
    from: &str,
    to: &str,
) -> Result<(), String> {
    let e = |e: mongodb::error::Error| e.to_string();
    let id = ObjectId::new();
    records
        .insert_one(doc! {
            "_id": id, "source": from, "destination": to, "value": 1_i64,
            "state": "initial", "lastModified": bson::DateTime::now(),
        })
        .await
        .map_err(e)?;
    let moved = |from_state: &str, to_state: &str| {
        (
            doc! { "_id": id, "state": from_state },
            doc! { "$set": { "state": to_state }, "$currentDate": { "lastModified": true } },
        )
    };
    let (f, u) = moved("initial", "pending");
    expect_one("pending", records.update_one(f, u).await.map_err(e)?)?;
    let r = accounts
        .update_one(
            doc! { "_id": from, "pendingTransactions": { "$ne": id }, "balance": { "$gte": 1_i64 } },
            doc! { "$inc": { "balance": -1_i64 }, "$push": { "pendingTransactions": id } },
        )
        .await
        .map_err(e)?;
    expect_one("apply source", r)?;
    let r = accounts
        .update_one(
            doc! { "_id": to, "pendingTransactions": { "$ne": id } },
            doc! { "$inc": { "balance": 1_i64 }, "$push": { "pendingTransactions": id } },
        )
        .await
        .map_err(e)?;
    expect_one("apply destination", r)?;
    let (f, u) = moved("pending", "applied");
    expect_one("applied", records.update_one(f, u).await.map_err(e)?)?;
    for account in [from, to] {
        let r = accounts
            .update_one(
                doc! { "_id": account, "pendingTransactions": id },
                doc! { "$pull": { "pendingTransactions": id } },
            )
            .await
            .map_err(e)?;
        expect_one("clear marker", r)?;
    }
    let (f, u) = moved("applied", "done");
    expect_one("done", records.update_one(f, u).await.map_err(e)?)?;
    Ok(())
}

/// How a variant is driven.
pub enum Driver {
    /// In this process.
    Rust(RustVariant),
    /// Through the Node child process.
    Fawn(Box<FawnDriver>),
}

/// Everything measured of one variant.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// Latencies of the sequential transfers.
    pub latencies: Vec<Duration>,
    /// Client CPU time spent in the sequential batches.
    pub seq_cpu: Duration,
    /// Commands on the wire during the sequential batches.
    pub seq_commands: u64,
    /// Commands counted by the variant's `MongoStore::metrics()` in the sequential batches.
    pub store_commands: Option<u64>,
    /// Sum of `Receipt::round_trips` (or the fixed count) over the sequential transfers.
    pub reported_round_trips: u64,
    /// Per concurrency level: transfers and wall time, summed over batches.
    pub throughput: Vec<(usize, u64, Duration)>,
    /// The probe: wire counts of one transfer alone, until the call returned.
    pub probe_until_return: Counts,
    /// The probe: wire counts of one transfer alone, background finishing included.
    pub probe_total: Counts,
    /// The probe: each command of one transfer alone, with the driver's duration
    /// (until the call returned, then the background finishing).
    pub probe_trace: Vec<(String, Duration)>,
    /// Errors seen (transfers that failed), with the first message.
    pub errors: u64,
    /// The first error message.
    pub first_error: Option<String>,
    /// Transfers started over the whole run (warm-up, probe, sequential and
    /// concurrent), failed ones included.
    pub run_transfers: u64,
    /// Write commands the variant's [`MongoStore`] counted over the whole run,
    /// background finishing included (tandem only; see [`RustVariant::store_writes`]).
    pub run_store_writes: Option<u64>,
}

impl Measured {
    /// Transfers per second at concurrency `c`, if measured.
    pub fn tps(&self, c: usize) -> Option<f64> {
        self.throughput
            .iter()
            .find(|(level, _, _)| *level == c)
            .filter(|(_, _, wall)| !wall.is_zero())
            .map(|(_, n, wall)| *n as f64 / wall.as_secs_f64())
    }

    fn add_throughput(&mut self, c: usize, n: u64, wall: Duration) {
        match self.throughput.iter_mut().find(|(level, _, _)| *level == c) {
            Some(slot) => {
                slot.1 += n;
                slot.2 += wall;
            }
            None => self.throughput.push((c, n, wall)),
        }
    }

    fn error(&mut self, e: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e);
        }
    }
}

/// One variant under test.
pub struct Entry {
    /// Which one.
    pub variant: Variant,
    /// How it is driven.
    pub driver: Driver,
    /// The next transfer number.
    pub next: u64,
    /// What was measured.
    pub measured: Measured,
}

/// Sizes of a run.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Accounts per pool.
    pub pool: usize,
    /// Unmeasured transfers per variant before anything is measured.
    pub warmup: u64,
    /// Sequential transfers measured per variant.
    pub sequential: u64,
    /// Transfers per sequential batch.
    pub seq_batch: u64,
    /// Transfers measured per variant at each concurrency level.
    pub concurrent: u64,
    /// Transfers per concurrent batch.
    pub conc_batch: u64,
    /// The concurrency levels.
    pub levels: [usize; 3],
}

impl Plan {
    /// The full run.
    pub fn full() -> Self {
        Plan {
            pool: 256,
            warmup: 20,
            sequential: 500,
            seq_batch: 10,
            concurrent: 240,
            conc_batch: 48,
            levels: [1, 4, 16],
        }
    }

    /// The quick run (`--quick`).
    pub fn quick() -> Self {
        Plan {
            pool: 256,
            warmup: 5,
            sequential: 100,
            seq_batch: 10,
            concurrent: 128,
            conc_batch: 32,
            levels: [1, 4, 16],
        }
    }
}

/// A connected benchmark: the client, its monitor, and the variants.
pub struct ServerBench {
    /// The shared driver client of the Rust variants.
    pub client: Client,
    /// Its command monitor.
    pub monitor: Arc<Monitor>,
    /// The plan.
    pub plan: Plan,
    /// The variants, in report order.
    pub entries: Vec<Entry>,
}

/// Connects a client with a command monitor and a pool large enough for 16
/// concurrent transfers of two concurrent commands each.
pub async fn connect(uri: &str) -> Result<(Client, Arc<Monitor>), String> {
    let monitor = Monitor::new();
    let mut options = ClientOptions::parse(uri).await.map_err(|e| e.to_string())?;
    options.max_pool_size = Some(64);
    // No variant needs the driver's retryable writes: tandem's steps and the
    // tutorial's are all guarded, so sending one again is harmless, and Fawn's
    // driver predates them. The test server keeps a record of each retryable
    // write and looks through all of them on every one, which slowed every
    // variant using this client down as the run went on.
    options.retry_writes = Some(false);
    options.app_name = Some("tandem-bench".into());
    options.command_event_handler = Some(monitor.handler());
    let client = Client::with_options(options).map_err(|e| e.to_string())?;
    Ok((client, monitor))
}

impl ServerBench {
    /// Drops the benchmark database, fills one account pool per variant, and
    /// builds the Rust variants. `fawn` drives variant (d) when present.
    pub async fn prepare(
        client: Client,
        monitor: Arc<Monitor>,
        plan: Plan,
        fawn: Option<FawnDriver>,
    ) -> Result<Self, String> {
        let db = client.database(DB);
        db.drop().await.map_err(|e| e.to_string())?;
        let pool: Vec<Document> = (0..plan.pool).map(account_doc).collect();
        for v in Variant::ALL {
            db.collection::<Document>(&v.accounts())
                .insert_many(pool.clone())
                .await
                .map_err(|e| format!("filling {}: {e}", v.accounts()))?;
        }
        let tandem = |point: CommitPoint, strategy: Strategy, v: Variant| {
            let store = MongoStore::builder().build(client.clone());
            let finish_delay = if v == Variant::TandemGrouped {
                GROUP_DELAY
            } else {
                Duration::ZERO
            };
            let coordinator = Coordinator::builder(store.clone())
                .config(CoordinatorConfig {
                    database: DB.into(),
                    collection: format!("{}transactions", v.slug()),
                    commit_point: point,
                    strategy,
                    finish_delay,
                    early_commit: v != Variant::TandemLate,
                    ..CoordinatorConfig::default()
                })
                .build();
            RustVariant::Tandem {
                coordinator,
                store,
                ns: Namespace::new(DB, v.accounts()),
            }
        };
        let mut fawn = fawn;
        let mut entries = Vec::new();
        for v in Variant::ALL {
            let driver = match v {
                Variant::HandWritten => Driver::Rust(RustVariant::HandWritten {
                    accounts: db.collection_with_options(&v.accounts(), majority_journaled()),
                    records: db.collection_with_options("handtransactions", majority_journaled()),
                }),
                Variant::TandemApplied
                | Variant::TandemLate
                | Variant::TandemAppliedIsolated
                | Variant::TandemGrouped => {
                    Driver::Rust(tandem(CommitPoint::Applied, Strategy::TwoPhase, v))
                }
                Variant::TandemDone => {
                    Driver::Rust(tandem(CommitPoint::Done, Strategy::TwoPhase, v))
                }
                Variant::TandemNative => {
                    Driver::Rust(tandem(CommitPoint::Applied, Strategy::Native, v))
                }
                Variant::Fawn => match fawn.take() {
                    Some(f) => Driver::Fawn(Box::new(f)),
                    None => continue,
                },
                Variant::Floor => Driver::Rust(RustVariant::Floor {
                    accounts: db.collection_with_options(&v.accounts(), majority_journaled()),
                }),
            };
            entries.push(Entry {
                variant: v,
                driver,
                next: 0,
                measured: Measured::default(),
            });
        }
        Ok(ServerBench {
            client,
            monitor,
            plan,
            entries,
        })
    }

    /// Runs the whole plan: warm-up, probes, sequential batches, then each concurrency level.
    /// `progress` receives one line per phase.
    pub async fn run(&mut self, progress: &mut dyn FnMut(&str)) -> Result<(), String> {
        let plan = self.plan;
        progress("warm-up");
        for i in 0..self.entries.len() {
            self.sequential_batch(i, plan.warmup, false).await?;
        }
        progress("probes: one transfer alone per variant");
        for i in 0..self.entries.len() {
            self.probe(i).await?;
        }
        let rounds = plan.sequential.div_ceil(plan.seq_batch.max(1));
        progress(&format!(
            "sequential: {} transfers per variant, {rounds} rounds of {}",
            plan.sequential, plan.seq_batch
        ));
        for round in 0..rounds as usize {
            for j in 0..self.entries.len() {
                let i = (round + j) % self.entries.len();
                self.sequential_batch(i, plan.seq_batch, true).await?;
            }
        }
        for c in plan.levels {
            let rounds = plan.concurrent.div_ceil(plan.conc_batch.max(1));
            progress(&format!(
                "throughput at {c} concurrent: {} transfers per variant, {rounds} rounds of {}",
                plan.concurrent, plan.conc_batch
            ));
            for round in 0..rounds as usize {
                for j in 0..self.entries.len() {
                    let i = (round + j) % self.entries.len();
                    self.concurrent_batch(i, plan.conc_batch, c).await?;
                }
            }
        }
        Ok(())
    }

    /// One transfer alone, counted on the wire (the Fawn side counts its own).
    async fn probe(&mut self, i: usize) -> Result<(), String> {
        let pool = self.plan.pool;
        let monitor = Arc::clone(&self.monitor);
        let entry = &mut self.entries[i];
        let k = entry.next;
        entry.next += 1;
        match &mut entry.driver {
            Driver::Rust(v) => {
                v.settle().await;
                monitor.start_trace();
                let c0 = monitor.counts();
                v.transfer(k, pool).await?;
                let c1 = monitor.counts();
                v.settle().await;
                let c2 = monitor.counts();
                entry.measured.probe_trace = monitor.take_trace();
                entry.measured.probe_until_return = c1 - c0;
                entry.measured.probe_total = c2 - c0;
            }
            Driver::Fawn(f) => {
                let r = f.sequential(k, 1).await?;
                entry.measured.probe_until_return = Counts {
                    commands: r.commands,
                    waves: r.waves,
                };
                entry.measured.probe_total = entry.measured.probe_until_return;
            }
        }
        Ok(())
    }

    /// `n` transfers one after another; measured unless it is the warm-up.
    async fn sequential_batch(&mut self, i: usize, n: u64, measure: bool) -> Result<(), String> {
        let pool = self.plan.pool;
        let monitor = Arc::clone(&self.monitor);
        let entry = &mut self.entries[i];
        let start = entry.next;
        entry.next += n;
        let isolate = entry.variant == Variant::TandemAppliedIsolated;
        match &mut entry.driver {
            Driver::Rust(v) => {
                let store0 = v.store_commands();
                let c0 = monitor.counts();
                let cpu0 = process_cpu();
                let mut latencies = Vec::with_capacity(n as usize);
                let mut round_trips = 0_u64;
                for k in start..start + n {
                    let t0 = Instant::now();
                    let r = v.transfer(k, pool).await;
                    let took = t0.elapsed();
                    if isolate {
                        v.settle().await;
                    }
                    match r {
                        Ok(o) => {
                            latencies.push(took);
                            round_trips += u64::from(o.round_trips);
                        }
                        Err(e) => entry.measured.error(e),
                    }
                }
                v.settle().await;
                let cpu = process_cpu().saturating_sub(cpu0);
                let c1 = monitor.counts();
                if measure {
                    let m = &mut entry.measured;
                    m.latencies.extend(latencies);
                    m.seq_cpu += cpu;
                    m.seq_commands += (c1 - c0).commands;
                    m.reported_round_trips += round_trips;
                    if let (Some(a), Some(b)) = (store0, v.store_commands()) {
                        *m.store_commands.get_or_insert(0) += b - a;
                    }
                }
            }
            Driver::Fawn(f) => {
                let r = f.sequential(start, n).await?;
                if measure {
                    let m = &mut entry.measured;
                    m.latencies.extend(r.latencies);
                    m.seq_cpu += r.cpu;
                    m.seq_commands += r.commands;
                    m.reported_round_trips += r.commands;
                    for e in r.errors {
                        m.error(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// `n` transfers by `c` concurrent tasks (promises, for Fawn); wall time until all finished.
    async fn concurrent_batch(&mut self, i: usize, n: u64, c: usize) -> Result<(), String> {
        let pool = self.plan.pool;
        let entry = &mut self.entries[i];
        if entry.variant == Variant::TandemAppliedIsolated {
            // The same as (b) under concurrency: only its sequential latency differs.
            return Ok(());
        }
        let start = entry.next;
        entry.next += n;
        match &mut entry.driver {
            Driver::Rust(v) => {
                let next = Arc::new(AtomicU64::new(start));
                let end = start + n;
                let t0 = Instant::now();
                let tasks: Vec<_> = (0..c)
                    .map(|_| {
                        let v = v.clone();
                        let next = Arc::clone(&next);
                        tokio::spawn(async move {
                            let mut errors = Vec::new();
                            // Bounded: each pass takes a fresh transfer number below `end`.
                            for _ in 0..n {
                                let k = next.fetch_add(1, Ordering::SeqCst);
                                if k >= end {
                                    break;
                                }
                                if let Err(e) = v.transfer(k, pool).await {
                                    errors.push(e);
                                }
                            }
                            errors
                        })
                    })
                    .collect();
                let mut errors = Vec::new();
                for t in tasks {
                    errors.extend(t.await.map_err(|e| e.to_string())?);
                }
                v.settle().await;
                let wall = t0.elapsed();
                let m = &mut entry.measured;
                m.add_throughput(c, n - errors.len() as u64, wall);
                for e in errors {
                    m.error(e);
                }
            }
            Driver::Fawn(f) => {
                let r = f.concurrent(start, n, c).await?;
                let m = &mut entry.measured;
                m.add_throughput(c, n - r.errors.len() as u64, r.wall);
                for e in r.errors {
                    m.error(e);
                }
            }
        }
        Ok(())
    }

    /// Checks that no variant created or lost money: the balances of each pool
    /// add up to what they started with, minus the floor's debits. Returns one
    /// line per variant.
    pub async fn audit(&self) -> Result<Vec<(Variant, bool, String)>, String> {
        let db = self.client.database(DB);
        let mut out = Vec::new();
        for entry in &self.entries {
            let coll = db.collection::<Document>(&entry.variant.accounts());
            let mut cursor = coll.find(doc! {}).await.map_err(|e| e.to_string())?;
            let mut total = 0_i64;
            let mut markers = 0_usize;
            while cursor.advance().await.map_err(|e| e.to_string())? {
                let d = cursor.deserialize_current().map_err(|e| e.to_string())?;
                total += d.get_i64("balance").unwrap_or(0);
                markers += d
                    .get_array("pendingTransactions")
                    .map(|a| a.len())
                    .unwrap_or(0);
            }
            let expected = START_BALANCE * self.plan.pool as i64;
            let (ok, note) = if entry.variant == Variant::Floor {
                let debited = expected - total;
                (
                    debited >= 0,
                    format!("{debited} units debited by single updates"),
                )
            } else {
                (
                    total == expected && markers == 0,
                    format!(
                        "sum of balances {total} (expected {expected}), {markers} markers left"
                    ),
                )
            };
            out.push((entry.variant, ok, note));
        }
        Ok(out)
    }

    /// Records in each variant's [`Measured`] the transfers it started over the
    /// whole run and, for tandem, the write commands its store counted. Call
    /// after [`run`](Self::run): background finishing is drained first.
    pub async fn count_run(&mut self) {
        for entry in &mut self.entries {
            entry.measured.run_transfers = entry.next;
            if let Driver::Rust(v) = &entry.driver {
                v.settle().await;
                entry.measured.run_store_writes = v.store_writes();
            }
        }
    }

    /// Ends the Fawn child process, if any.
    pub async fn shutdown(&mut self) {
        for entry in &mut self.entries {
            if let Driver::Fawn(f) = &mut entry.driver {
                f.quit().await;
            }
        }
    }
}
