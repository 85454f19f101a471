//! The worker process: runs random transactions until told to stop (or killed).
//!
//! The controller starts each worker as `tandem-bank __worker …` (the same
//! binary) with its standard input on a pipe: when the pipe closes (the
//! controller asks it to stop, or died), the worker finishes the transactions
//! it has in flight, waits for their background finishing, and exits.
//!
//! A worker talks to both servers: its coordinators have server 1 as their
//! default store (records, customers, ledger) and server 2 as the store named
//! [`REMOTE`] (merchants, the fee account, vouchers). Before a voucher
//! operation it reads the voucher (outside any transaction) to choose between
//! an issue and a redeem, and to know which issue a redeem takes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use mongodb::options::{Acknowledgment, ClientOptions, WriteConcern};
use tandem::RetryPolicy;
use tandem::{
    CommitPoint, Coordinator, CoordinatorConfig, PendingPolicy, RecoveryConfig, RecoveryWorker,
    Store, StoreErrorKind, Strategy, TxError,
};
use tandem_mongodb::MongoStore;

use crate::bank::{BankNs, BankSpec, Draw, Plan, REMOTE};
use crate::outcome_log::{Logged, OutcomeLog};
use crate::rng::Rng;

/// The longest one transaction may take before the worker gives up on it (and
/// leaves it to recovery, as a crash would).
const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// What a worker process needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerArgs {
    /// Server 1 (the default store), with the driver options every worker uses.
    pub uri: String,
    /// Server 2 (the store named [`REMOTE`]).
    pub uri2: String,
    /// The bank's database on server 1 (server 2's is derived from it, see [`BankNs`]).
    pub db: String,
    /// This worker's index.
    pub index: usize,
    /// How many times this worker was started before (its txids include it).
    pub incarnation: u64,
    /// The bank's shape.
    pub spec: BankSpec,
    /// The run's seed.
    pub seed: u64,
    /// The outcome log.
    pub log: PathBuf,
    /// The lease of the worker's transactions.
    pub lease: Duration,
    /// Concurrent transactions in this worker.
    pub tasks: usize,
    /// The application name sent to the server (failpoints target it).
    pub app_name: String,
    /// Whether failed store commands are repeated (by the store and by the
    /// coordinator). Without, every store error interrupts its transaction
    /// and leaves it to recovery.
    pub retries: bool,
    /// Whether writes are acknowledged before they are journaled (`{w: 1, j: false}`):
    /// unsafe, a server crash may then lose acknowledged writes.
    pub unjournaled: bool,
}

impl WorkerArgs {
    /// Whether worker `index` repeats failed store commands: even workers do,
    /// odd ones do not.
    pub fn retries_for(index: usize) -> bool {
        index % 2 == 0
    }
}

impl WorkerArgs {
    /// The command-line arguments that carry these settings (after `__worker`).
    pub fn to_args(&self) -> Vec<String> {
        vec![
            self.uri.clone(),
            self.uri2.clone(),
            self.db.clone(),
            self.index.to_string(),
            self.incarnation.to_string(),
            self.spec.customers.to_string(),
            self.spec.initial.to_string(),
            self.spec.vouchers.to_string(),
            self.seed.to_string(),
            self.log.display().to_string(),
            self.lease.as_millis().to_string(),
            self.tasks.to_string(),
            self.app_name.clone(),
            self.retries.to_string(),
            self.unjournaled.to_string(),
        ]
    }

    /// Reads the arguments written by [`to_args`](Self::to_args).
    pub fn from_args(args: &[String]) -> Result<Self, String> {
        const COUNT: usize = 15;
        if args.len() != COUNT {
            return Err(format!(
                "a worker takes {COUNT} arguments, got {}",
                args.len()
            ));
        }
        let mut it = args.iter();
        let mut text = || it.next().cloned().unwrap_or_default();
        fn parsed<T: std::str::FromStr>(s: String, what: &str) -> Result<T, String> {
            s.parse().map_err(|_| format!("bad {what}: {s:?}"))
        }
        Ok(WorkerArgs {
            uri: text(),
            uri2: text(),
            db: text(),
            index: parsed(text(), "index")?,
            incarnation: parsed(text(), "incarnation")?,
            spec: BankSpec::new(
                parsed(text(), "accounts")?,
                parsed(text(), "initial balance")?,
            )
            .with_vouchers(parsed(text(), "vouchers")?),
            seed: parsed(text(), "seed")?,
            log: PathBuf::from(text()),
            lease: Duration::from_millis(parsed(text(), "lease")?),
            tasks: parsed::<usize>(text(), "tasks")?.max(1),
            app_name: text(),
            retries: parsed(text(), "retries")?,
            unjournaled: parsed(text(), "unjournaled")?,
        })
    }
}

/// Runs a worker until its standard input closes. Returns the process exit code.
pub async fn run(args: WorkerArgs) -> i32 {
    match run_inner(args).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("worker: {e}");
            1
        }
    }
}

async fn connect(args: &WorkerArgs, uri: &str) -> Result<MongoStore, String> {
    let mut options = ClientOptions::parse(uri)
        .await
        .map_err(|e| format!("bad URI: {e}"))?;
    options.app_name = Some(args.app_name.clone());
    // Short waits: a dead server fails a transaction quickly, leaving it to recovery.
    options.server_selection_timeout = Some(Duration::from_secs(2));
    options.connect_timeout = Some(Duration::from_secs(2));
    // A failpoint's state-change error marks the server unknown until the next heartbeat.
    options.heartbeat_freq = Some(Duration::from_millis(500));
    if !args.retries {
        options.retry_reads = Some(false);
        options.retry_writes = Some(false);
    }
    let client = mongodb::Client::with_options(options).map_err(|e| e.to_string())?;
    let mut builder = MongoStore::builder();
    if args.unjournaled {
        builder = builder.write_concern(
            WriteConcern::builder()
                .w(Acknowledgment::Nodes(1))
                .journal(false)
                .build(),
        );
    }
    Ok(builder.build(client))
}

async fn run_inner(args: WorkerArgs) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    {
        // The controller closes our standard input to stop us (or by dying).
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
            stop.store(true, Ordering::SeqCst);
        });
    }
    let store = connect(&args, &args.uri).await?;
    let remote = connect(&args, &args.uri2).await?;
    let log =
        Arc::new(OutcomeLog::open(&args.log).map_err(|e| format!("{}: {e}", args.log.display()))?);
    let ns = BankNs::new(&args.db);
    let config = CoordinatorConfig {
        retry: if args.retries {
            RetryPolicy {
                max_attempts: 6,
                base_delay: Duration::from_millis(20),
                max_delay: Duration::from_millis(500),
                budget: Duration::from_secs(4),
            }
        } else {
            RetryPolicy::NONE
        },
        // No window of the workers' own: the collector's short one decides
        // (`STUB_WINDOWS`), so that stubs are removed within a run too.
        idempotency_window: Duration::ZERO,
        ..CoordinatorConfig::default()
    };
    let build = |point: CommitPoint| {
        Coordinator::builder(store.clone())
            .store(REMOTE, remote.clone())
            .config(config.clone())
            .database(&args.db)
            .lease(args.lease)
            .commit_point(point)
            .strategy(Strategy::TwoPhase)
            .owner(format!(
                "bank-w{}.{}-{}",
                args.index,
                args.incarnation,
                std::process::id()
            ))
            .build()
    };
    let coordinators = [build(CommitPoint::Applied), build(CommitPoint::Done)];

    let mut handles = Vec::new();
    for task in 0..args.tasks {
        let rng = Rng::derive(
            args.seed,
            &[args.index as u64, args.incarnation, task as u64],
        );
        let coordinators = coordinators.clone();
        let (log, ns, stop) = (log.clone(), ns.clone(), stop.clone());
        let prefix = format!("w{}.{}.{}", args.index, args.incarnation, task);
        let spec = args.spec;
        let remote = remote.clone();
        handles.push(tokio::spawn(async move {
            let task = Task {
                spec,
                ns: &ns,
                remote: &remote,
                coordinators: &coordinators,
                log: &log,
                stop: &stop,
            };
            task.transactions(rng, &prefix).await
        }));
    }
    {
        let workers = [PendingPolicy::RollBack, PendingPolicy::RollForward].map(|pending| {
            coordinators[0].recovery(RecoveryConfig {
                pending,
                batch: 200,
                concurrency: 4,
                ..RecoveryConfig::default()
            })
        });
        let rng = Rng::derive(args.seed, &[args.index as u64, args.incarnation, 1 << 32]);
        let stop = stop.clone();
        handles.push(tokio::spawn(async move {
            recovery(workers, rng, &stop).await;
            Ok(())
        }));
    }
    let mut result = Ok(());
    for h in handles {
        match h.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = Err(e),
            Err(e) => result = Err(format!("task failed: {e}")),
        }
    }
    for c in &coordinators {
        let _ = tokio::time::timeout(Duration::from_secs(10), c.drain()).await;
    }
    result
}

/// What one task of a worker runs with.
struct Task<'a> {
    spec: BankSpec,
    ns: &'a BankNs,
    remote: &'a MongoStore,
    coordinators: &'a [Coordinator; 2],
    log: &'a OutcomeLog,
    stop: &'a AtomicBool,
}

impl Task<'_> {
    /// The next plan: drawn at random; for a voucher operation, made after
    /// reading the voucher (an unreadable voucher is issued, blindly).
    async fn next_plan(&self, rng: &mut Rng, txid: String) -> Plan {
        match Plan::draw(&self.spec, rng, txid.clone()) {
            Draw::Plan(plan) => plan,
            Draw::Voucher { voucher, blind } => {
                let current = if blind {
                    None
                } else {
                    let vouchers = self.ns.vouchers();
                    let read = self
                        .remote
                        .find_one(&vouchers, doc! { "_id": voucher.as_str() });
                    tokio::time::timeout(Duration::from_secs(2), read)
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .flatten()
                };
                Plan::for_voucher(&self.spec, rng, txid, &voucher, current.as_ref())
            }
        }
    }

    /// One task's loop: a transaction at a time, its outcome logged.
    async fn transactions(&self, mut rng: Rng, prefix: &str) -> Result<(), String> {
        let mut seq: u64 = 0;
        while !self.stop.load(Ordering::SeqCst) {
            seq += 1;
            let plan = self.next_plan(&mut rng, format!("{prefix}-{seq}")).await;
            self.log
                .begin(&plan)
                .map_err(|e| format!("writing the log: {e}"))?;
            let coordinator = &self.coordinators[rng.index(2)];
            let result =
                tokio::time::timeout(RUN_TIMEOUT, coordinator.run(plan.transaction(self.ns))).await;
            let (outcome, why, pause) = match result {
                Ok(Ok(_receipt)) => (Logged::Committed, String::new(), false),
                Ok(Err(TxError::Canceled { .. })) => (Logged::Canceled, String::new(), false),
                Ok(Err(TxError::Interrupted { source, .. })) => {
                    let unavailable = matches!(
                        source.kind,
                        StoreErrorKind::Unavailable | StoreErrorKind::Transient
                    );
                    (
                        Logged::Unknown,
                        format!("interrupted:{:?}", source.kind),
                        unavailable,
                    )
                }
                Ok(Err(TxError::Superseded { .. })) => {
                    (Logged::Unknown, "superseded".into(), false)
                }
                Ok(Err(e)) => (Logged::Unknown, format!("error:{e}"), false),
                Err(_) => (Logged::Unknown, "timeout".into(), false),
            };
            self.log
                .outcome(&plan.txid, outcome, &why)
                .map_err(|e| format!("writing the log: {e}"))?;
            if pause {
                // A server is away (killed, or failing on purpose): do not spin.
                tokio::time::sleep(Duration::from_millis(rng.range(100, 300))).await;
            }
        }
        Ok(())
    }
}

/// Recovery passes every second or so, each rolling `pending` back or forward at random.
async fn recovery(workers: [RecoveryWorker; 2], mut rng: Rng, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let wait = Duration::from_millis(rng.range(500, 1500));
        let deadline = tokio::time::Instant::now() + wait;
        while tokio::time::Instant::now() < deadline && !stop.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let worker = &workers[rng.index(2)];
        let _ = tokio::time::timeout(Duration::from_secs(20), worker.run_once()).await;
    }
}
