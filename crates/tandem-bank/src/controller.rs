//! The controller: sets the bank up, runs the workers and the nemesis, then
//! stops everything, recovers to quiescence, and checks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bson::{doc, Document};
use tandem::store::FindOptions;
use tandem::{
    Coordinator, Namespace, PendingPolicy, RecoveryConfig, RecoveryReport, Store, TxState,
};
use tandem_mongodb::MongoStore;

use crate::args::Options;
use crate::bank::{BankNs, BankSpec};
use crate::checker::{check, Check, Report, Snapshot, Violation};
use crate::nemesis::{
    failpoint_off, is_loopback, probe_failpoints, random_failpoint, slow_failpoint, Nemesis,
};
use crate::outcome_log::{LogSummary, LogTail, Logged};
use crate::procs::{locate_secantusd, Server, Worker};
use crate::rng::Rng;
use crate::worker::WorkerArgs;

/// How long the managed server may take to answer after a (re)start.
const SERVER_START: Duration = Duration::from_secs(60);

/// The longest the controller waits for one setup or checking step.
const LONG: Duration = Duration::from_secs(120);

/// The longest the controller waits for one small command.
const SHORT: Duration = Duration::from_secs(30);

/// Awaits `fut` for at most `limit`; running out of time is an error naming `what`.
async fn bounded<T>(
    limit: Duration,
    what: &str,
    fut: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| Err(format!("{what}: no answer within {limit:?}")))
}

/// How often progress is printed.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// What a finished run measured.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Transactions the workers began.
    pub transfers: u64,
    /// Records `done`.
    pub committed: u64,
    /// Records `canceled`.
    pub canceled: u64,
    /// Faults injected.
    pub faults: u64,
    /// Broken invariants.
    pub violations: Vec<Violation>,
}

impl Outcome {
    /// The final line.
    pub fn line(&self) -> String {
        format!(
            "bank: {} transfers, {} committed, {} canceled, {} faults, {} violations",
            self.transfers,
            self.committed,
            self.canceled,
            self.faults,
            self.violations.len()
        )
    }
}

fn say(line: impl AsRef<str>) {
    println!("bank: {}", line.as_ref());
}

/// The faults injected so far, by kind.
type Faults = Arc<Mutex<BTreeMap<Nemesis, u64>>>;

fn faults_text(faults: &Faults) -> (u64, String) {
    let map = faults.lock().unwrap_or_else(|e| e.into_inner());
    let total = map.values().sum();
    let parts: Vec<String> = map.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let text = if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    };
    (total, text)
}

/// The processes of a run. Dropping it kills every one of them.
struct Fleet {
    exe: PathBuf,
    logs: PathBuf,
    server: Option<Server>,
    workers: Vec<Worker>,
}

impl Fleet {
    fn spawn_worker(&self, args: WorkerArgs) -> Result<Worker, String> {
        let stderr = self.logs.join(format!("worker-{}.stderr", args.index));
        Worker::spawn(&self.exe, args, &stderr).map_err(|e| format!("starting a worker: {e}"))
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for w in &mut self.workers {
            w.kill9();
        }
        if let Some(s) = &mut self.server {
            s.kill9();
        }
    }
}

/// Runs the bank test. `Err` means the test could not run (not that it failed).
///
/// Every process it starts is stopped before it returns, and also if the
/// returned future is dropped early or panics.
pub async fn run(options: Options) -> Result<Outcome, String> {
    let server = match &options.uri {
        Some(_) => None,
        None => Some(locate_secantusd(options.secantusd.as_deref())?),
    };
    let run_dir = run_dir(&options);
    run_in(options, server, &run_dir)
        .await
        .map_err(|e| format!("{e} (the run's files are in {})", run_dir.display()))
}

/// The directory of a run's files (logs, and the managed server's storage):
/// `<work-dir>/tandem-bank-<seed>-<pid>`. It is removed after a clean run.
pub fn run_dir(options: &Options) -> PathBuf {
    options.work_dir.join(format!(
        "tandem-bank-{}-{}",
        options.seed,
        std::process::id()
    ))
}

async fn run_in(
    options: Options,
    server_exe: Option<PathBuf>,
    run_dir: &std::path::Path,
) -> Result<Outcome, String> {
    let started = Instant::now();
    let mut rng = Rng::derive(options.seed, &[u64::MAX]);
    let logs_dir = run_dir.join("logs");
    std::fs::create_dir_all(&logs_dir).map_err(|e| format!("{}: {e}", logs_dir.display()))?;
    let exe = std::env::current_exe().map_err(|e| format!("locating this program: {e}"))?;
    let mut fleet = Fleet {
        exe,
        logs: logs_dir.clone(),
        server: None,
        workers: Vec::new(),
    };

    say(format!(
        "seed {}, {} accounts x {}, {} workers x {} tasks, {:?} of transactions, lease {:?}",
        options.seed,
        options.accounts,
        options.initial,
        options.workers,
        options.tasks,
        options.duration,
        options.lease
    ));
    let mut nemeses = options.nemeses.clone();
    let uri = match (&options.uri, server_exe) {
        (Some(uri), _) => {
            say("server: the one at MONGODB_URI (not managed here)");
            nemeses.remove(&Nemesis::KillServer);
            say("nemesis kill-server skipped: the server is not managed by this run (MONGODB_URI is set)");
            if !is_loopback(uri).await
                && (nemeses.remove(&Nemesis::Failpoint) | nemeses.remove(&Nemesis::SlowWrite))
            {
                say("nemeses failpoint and slow-write skipped: MONGODB_URI is not a server on 127.0.0.1");
            }
            uri.clone()
        }
        (None, exe) => {
            let exe = exe.ok_or("no server to start")?;
            let storage = run_dir.join("db");
            let mut server = Server::new(exe, storage, logs_dir.join("server.log"))
                .map_err(|e| format!("choosing a port: {e}"))?;
            server.start(SERVER_START).await?;
            say(format!(
                "server: SecantusDB started at {} (pid {}, storage {})",
                server.uri(),
                server.pid().unwrap_or(0),
                server.storage().display()
            ));
            let uri = server.uri();
            fleet.server = Some(server);
            uri
        }
    };

    let store = bounded(LONG, "connecting to the server", async {
        MongoStore::builder()
            .server_selection_timeout(Duration::from_secs(10))
            .app_name("tandem-bank-controller")
            .connect(&uri)
            .await
            .map_err(|e| format!("connecting to the server: {e}"))
    })
    .await?;
    let db = format!("tandem_bank_{}_{}", options.seed, std::process::id());
    let ns = BankNs::new(&db);
    let spec = BankSpec::new(options.accounts, options.initial);
    let token = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let seeded = bounded(LONG, "seeding the bank", setup(&store, &ns, &spec, &token)).await?;
    let coordinator = Coordinator::builder(store.clone()).database(&db).build();
    bounded(LONG, "creating indexes", async {
        coordinator
            .ensure_indexes()
            .await
            .map_err(|e| format!("creating indexes: {e}"))
    })
    .await?;

    if nemeses.contains(&Nemesis::Failpoint) || nemeses.contains(&Nemesis::SlowWrite) {
        let probe = probe_failpoints(store.client(), &uri, &db);
        if let Err(why) = bounded(LONG, "the failpoint probe", probe).await {
            say(format!("nemeses failpoint and slow-write skipped: the server does not support failCommand as needed ({why})"));
            nemeses.remove(&Nemesis::Failpoint);
            nemeses.remove(&Nemesis::SlowWrite);
        } else {
            say("failCommand failpoints: supported (probe fired and was scoped by appName)");
            if options.uri.is_some() {
                say("note: failCommand is one server-wide setting; do not run other failpoint users on this server meanwhile");
            }
        }
    }
    let nemeses: Vec<Nemesis> = nemeses.into_iter().collect();
    say(format!(
        "nemesis: every ~{:?}, one of: {}",
        options.nemesis_interval,
        if nemeses.is_empty() {
            "(none)".to_owned()
        } else {
            nemeses
                .iter()
                .map(|n| n.name())
                .collect::<Vec<_>>()
                .join(", ")
        }
    ));

    // Workers.
    let fragile: Vec<String> = (0..options.workers)
        .filter(|i| !WorkerArgs::retries_for(*i))
        .map(|i| i.to_string())
        .collect();
    if !fragile.is_empty() {
        say(format!(
            "workers {} repeat no failed command: each store error leaves its transaction to recovery",
            fragile.join(", ")
        ));
    }
    if options.unjournaled {
        say("workers write with {w: 1, j: false}: a killed server may lose acknowledged writes (unsafe on purpose)");
    }
    let app_name = format!("tandem-bank-{}", std::process::id());
    let mut tail = LogTail::default();
    for index in 0..options.workers {
        let log = logs_dir.join(format!("worker-{index}.log"));
        tail.follow(log.clone());
        let args = WorkerArgs {
            uri: uri.clone(),
            db: db.clone(),
            index,
            incarnation: 0,
            spec,
            seed: options.seed,
            log,
            lease: options.lease,
            tasks: options.tasks,
            app_name: app_name.clone(),
            retries: WorkerArgs::retries_for(index),
            unjournaled: options.unjournaled,
        };
        let w = fleet.spawn_worker(args)?;
        fleet.workers.push(w);
    }
    let tail = Arc::new(Mutex::new(tail));
    let faults: Faults = Arc::new(Mutex::new(BTreeMap::new()));
    let done = Arc::new(AtomicBool::new(false));
    let progress = {
        let (tail, faults, done) = (tail.clone(), faults.clone(), done.clone());
        let t0 = Instant::now();
        tokio::spawn(async move {
            let mut next = t0 + PROGRESS_EVERY;
            while !done.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if Instant::now() < next || done.load(Ordering::SeqCst) {
                    continue;
                }
                next += PROGRESS_EVERY;
                let summary = {
                    let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                    t.poll();
                    t.summary.clone()
                };
                let (total, text) = faults_text(&faults);
                say(format!(
                    "{:>3} s: {} transfers ({} committed, {} canceled, {} unknown so far, as the workers saw them), {} faults ({})",
                    t0.elapsed().as_secs(),
                    summary.begun,
                    summary.count(Logged::Committed),
                    summary.count(Logged::Canceled),
                    summary.count(Logged::Unknown),
                    total,
                    text
                ));
            }
        })
    };

    // The nemesis, until the duration is over.
    let deadline = Instant::now() + options.duration;
    let mut worker_exits = 0;
    let mut next_round = Instant::now() + jitter(&mut rng, options.nemesis_interval);
    let mut sabotage_at = options
        .sabotage
        .then(|| Instant::now() + options.duration / 2);
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        if sabotage_at.is_some_and(|at| now >= at) {
            sabotage_at = None;
            let _ = tokio::time::timeout(SHORT, sabotage(&store, &ns)).await;
        }
        tokio::time::sleep(Duration::from_millis(50).min(deadline - now)).await;
        worker_exits += restart_exited(&mut fleet)?;
        if Instant::now() < next_round || nemeses.is_empty() {
            continue;
        }
        let round_start = Instant::now();
        let nemesis = nemeses[rng.index(nemeses.len())];
        let left = deadline.saturating_duration_since(Instant::now());
        if left < Duration::from_millis(500) {
            continue;
        }
        let target = Target {
            store: &store,
            ns: &ns,
            token: &token,
            app_name: &app_name,
            options: &options,
        };
        let round = strike(nemesis, &mut fleet, &mut rng, &target, left);
        match bounded(SERVER_START * 4, "the nemesis round", round).await {
            Ok(()) => {
                *faults
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(nemesis)
                    .or_default() += 1;
            }
            Err(e) => say(format!("nemesis {nemesis} failed: {e}")),
        }
        // Rounds start every interval on average, however long each one held.
        next_round = (round_start + jitter(&mut rng, options.nemesis_interval)).max(Instant::now());
    }

    // Stop: nemesis off, server up, workers stopped.
    say(format!(
        "{:.1} s of transactions: stopping the nemesis and the workers",
        (Instant::now() - (deadline - options.duration)).as_secs_f64()
    ));
    if nemeses.contains(&Nemesis::Failpoint) || nemeses.contains(&Nemesis::SlowWrite) {
        let _ = store
            .client()
            .database("admin")
            .run_command(failpoint_off())
            .await;
    }
    for w in &mut fleet.workers {
        let _ = w.resume();
    }
    if let Some(server) = &mut fleet.server {
        if !server.is_running() {
            say("the server is down: restarting it for the checks");
            server.start(SERVER_START).await?;
            bounded(
                SHORT,
                "checking the server",
                check_identity(&store, &ns, &token),
            )
            .await?;
        }
    }
    for w in &mut fleet.workers {
        w.ask_to_stop();
    }
    let mut stubborn = 0;
    for w in &mut fleet.workers {
        if !w.finish(Duration::from_secs(30)) {
            stubborn += 1;
        }
    }
    if stubborn > 0 {
        say(format!(
            "{stubborn} worker(s) did not stop within 30 s and were killed"
        ));
    }
    done.store(true, Ordering::SeqCst);
    let _ = progress.await;
    let logs = tail.lock().unwrap_or_else(|e| e.into_inner()).finish();

    // Recovery to quiescence, then the checks.
    let (passes, recovered, quiescent) =
        recover_to_quiescence(&coordinator, &store, &ns, options.lease).await;
    say(format!(
        "final recovery: {passes} pass(es), claimed {}, committed {}, canceled {}, removed {}, failed {}{}",
        recovered.claimed,
        recovered.committed,
        recovered.canceled,
        recovered.removed,
        recovered.failed,
        if quiescent { "; nothing left in flight" } else { "; NOT quiescent (counted below)" }
    ));
    let snapshot = bounded(LONG, "reading the bank", read_snapshot(&store, &ns)).await?;
    let mut report = check(&spec, &ns, &snapshot, Some(&logs));
    let audit = async {
        tandem::testing::audit(&store, &ns.records(), &seeded)
            .await
            .map_err(|e| e.to_string())
    };
    match bounded(LONG, "the audit", audit).await {
        Ok(audit) => {
            for v in audit.violations {
                report.violations.push(Violation {
                    check: Check::Audit,
                    detail: v,
                });
            }
        }
        Err(e) => report.violations.push(Violation {
            check: Check::Audit,
            detail: format!("the audit could not run: {e}"),
        }),
    }
    let (fault_total, fault_text) = faults_text(&faults);
    print_summary(&report, &logs, fault_total, &fault_text, worker_exits);

    // Clean up.
    let clean = report.violations.is_empty();
    if clean && options.uri.is_some() {
        let _ = tokio::time::timeout(SHORT, store.client().database(&db).drop()).await;
    }
    let _ = tokio::time::timeout(SHORT, store.client().clone().shutdown()).await;
    if let Some(server) = &mut fleet.server {
        server.stop();
    }
    drop(fleet);
    if clean && !options.keep {
        let _ = std::fs::remove_dir_all(run_dir);
    } else {
        say(format!(
            "run directory kept: {} (worker logs, server log{})",
            run_dir.display(),
            if options.uri.is_none() {
                ", storage"
            } else {
                ""
            }
        ));
        if options.uri.is_some() {
            say(format!("database kept: {db}"));
        }
    }
    say(format!(
        "took {:.1} s in all",
        started.elapsed().as_secs_f64()
    ));
    Ok(Outcome {
        transfers: logs.begun,
        committed: report.committed,
        canceled: report.canceled,
        faults: fault_total,
        violations: report.violations,
    })
}

/// Adds 7 to the first customer's balance with a plain update, outside any
/// transaction: money from nowhere, which the checks must notice.
async fn sabotage(store: &MongoStore, ns: &BankNs) {
    let id = BankSpec::customer(0);
    match store
        .update_one(
            &ns.accounts(),
            doc! { "_id": &id },
            doc! { "$inc": { "balance": 7_i64 } },
            false,
        )
        .await
    {
        Ok(_) => say(format!(
            "sabotage: added 7 to {id} behind tandem's back; the checks must fail"
        )),
        Err(e) => say(format!("sabotage failed: {e}")),
    }
}

/// A duration between half and one and a half `mean`.
fn jitter(rng: &mut Rng, mean: Duration) -> Duration {
    let ms = mean.as_millis() as u64;
    Duration::from_millis(rng.range(ms / 2, ms + ms / 2))
}

/// Drops the bank's database, seeds the accounts. Returns the seeded documents.
async fn setup(
    store: &MongoStore,
    ns: &BankNs,
    spec: &BankSpec,
    token: &str,
) -> Result<Vec<(Namespace, Document)>, String> {
    store
        .client()
        .database(&ns.db)
        .drop()
        .await
        .map_err(|e| format!("dropping {}: {e}", ns.db))?;
    store
        .insert_one(&ns.meta(), doc! { "_id": "run", "token": token })
        .await
        .map_err(|e| format!("writing the run's token: {e}"))?;
    let docs = spec.seed_documents();
    for chunk in docs.chunks(1000) {
        store
            .collection(&ns.accounts())
            .insert_many(chunk.to_vec())
            .await
            .map_err(|e| format!("seeding the accounts: {e}"))?;
    }
    Ok(docs.into_iter().map(|d| (ns.accounts(), d)).collect())
}

/// Checks that the server answering is this run's, with its data: it holds
/// the token written at setup (a restarted server kept its storage, and no
/// other server took its port while it was down).
async fn check_identity(store: &MongoStore, ns: &BankNs, token: &str) -> Result<(), String> {
    let found = store
        .find_one(&ns.meta(), doc! { "_id": "run" })
        .await
        .map_err(|e| format!("reading the run's token: {e}"))?;
    match found.as_ref().and_then(|d| d.get_str("token").ok()) {
        Some(t) if t == token => Ok(()),
        other => Err(format!(
            "the server on the run's port is not this run's, or lost its data (token {other:?})"
        )),
    }
}

/// Restarts workers that exited on their own (they should not). Returns how many.
fn restart_exited(fleet: &mut Fleet) -> Result<u64, String> {
    let mut restarted = 0;
    for i in 0..fleet.workers.len() {
        if let Some(status) = fleet.workers[i].exited() {
            let mut args = fleet.workers[i].args.clone();
            say(format!(
                "worker {} exited by itself ({status}); restarting it (see {})",
                args.index,
                fleet
                    .logs
                    .join(format!("worker-{}.stderr", args.index))
                    .display()
            ));
            args.incarnation += 1;
            fleet.workers[i] = fleet.spawn_worker(args)?;
            restarted += 1;
        }
    }
    Ok(restarted)
}

/// Injects one fault. `left` is what remains of the run: holds never last longer.
/// What the nemesis needs to know about the run.
struct Target<'a> {
    store: &'a MongoStore,
    ns: &'a BankNs,
    token: &'a str,
    app_name: &'a str,
    options: &'a Options,
}

async fn strike(
    nemesis: Nemesis,
    fleet: &mut Fleet,
    rng: &mut Rng,
    target: &Target<'_>,
    left: Duration,
) -> Result<(), String> {
    let Target {
        store,
        ns,
        token,
        app_name,
        options,
    } = *target;
    match nemesis {
        Nemesis::KillWorker => {
            let i = rng.index(fleet.workers.len());
            let pid = fleet.workers[i].pid();
            fleet.workers[i].kill9();
            let mut args = fleet.workers[i].args.clone();
            args.incarnation += 1;
            let incarnation = args.incarnation;
            fleet.workers[i] = fleet.spawn_worker(args)?;
            say(format!(
                "nemesis: kill -9 worker {i} (pid {pid}); restarted (incarnation {incarnation}, pid {})",
                fleet.workers[i].pid()
            ));
        }
        Nemesis::KillServer => {
            let server = fleet.server.as_mut().ok_or("no managed server")?;
            let pid = server.pid().unwrap_or(0);
            server.kill9();
            let down = Duration::from_millis(rng.range(0, 1500)).min(left);
            tokio::time::sleep(down).await;
            let t = Instant::now();
            let mut attempt = 0;
            while let Err(e) = server.start(SERVER_START).await {
                attempt += 1;
                if attempt >= 3 {
                    return Err(format!("restarting the server: {e}"));
                }
                say(format!("restarting the server failed ({e}); trying again"));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            bounded(
                SHORT,
                "checking the server",
                check_identity(store, ns, token),
            )
            .await?;
            say(format!(
                "nemesis: kill -9 server (pid {pid}); down {:.1} s, restarted on port {} in {:.1} s (pid {})",
                down.as_secs_f64(),
                server.port(),
                t.elapsed().as_secs_f64(),
                server.pid().unwrap_or(0)
            ));
        }
        Nemesis::Failpoint | Nemesis::SlowWrite => {
            let (command, text) = if nemesis == Nemesis::Failpoint {
                random_failpoint(rng, app_name)
            } else {
                slow_failpoint(rng, app_name, options.lease)
            };
            let admin = store.client().database("admin");
            admin
                .run_command(command)
                .await
                .map_err(|e| format!("arming failCommand: {e}"))?;
            let hold = Duration::from_millis(rng.range(500, 2000)).min(left);
            tokio::time::sleep(hold).await;
            admin
                .run_command(failpoint_off())
                .await
                .map_err(|e| format!("turning failCommand off: {e}"))?;
            say(format!("nemesis: {text}, for {:.1} s", hold.as_secs_f64()));
        }
        Nemesis::Pause => {
            let i = rng.index(fleet.workers.len());
            let w = &mut fleet.workers[i];
            if w.exited().is_some() {
                return Err(format!("worker {i} is not running"));
            }
            let hold = (options.lease + Duration::from_millis(rng.range(200, 2000))).min(left);
            w.pause().map_err(|e| format!("SIGSTOP: {e}"))?;
            tokio::time::sleep(hold).await;
            w.resume().map_err(|e| format!("SIGCONT: {e}"))?;
            say(format!(
                "nemesis: SIGSTOP worker {i} (pid {}) for {:.1} s (lease {:?}), then SIGCONT",
                w.pid(),
                hold.as_secs_f64(),
                options.lease
            ));
        }
    }
    Ok(())
}

/// Runs recovery passes until no record is in flight, waiting for leases to
/// end between passes; gives up after a bounded time. Returns the number of
/// passes, their totals, and whether nothing was left in flight.
async fn recover_to_quiescence(
    coordinator: &Coordinator,
    store: &MongoStore,
    ns: &BankNs,
    lease: Duration,
) -> (u32, RecoveryReport, bool) {
    let worker = coordinator.recovery(RecoveryConfig {
        pending: PendingPolicy::RollBack,
        batch: 1000,
        concurrency: 8,
        ..RecoveryConfig::default()
    });
    let give_up = Instant::now() + lease * 3 + Duration::from_secs(60);
    let in_flight: Vec<bson::Bson> = TxState::in_flight().into_iter().map(Into::into).collect();
    let mut total = RecoveryReport::default();
    let mut passes = 0;
    loop {
        passes += 1;
        if let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(60), worker.run_once()).await {
            total.claimed += r.claimed;
            total.committed += r.committed;
            total.canceled += r.canceled;
            total.removed += r.removed;
            total.failed += r.failed;
        }
        let records = ns.records();
        let left = store.find(
            &records,
            doc! { "state": { "$in": in_flight.clone() } },
            FindOptions {
                sort: None,
                limit: Some(1),
            },
        );
        let left = tokio::time::timeout(SHORT, left).await;
        if matches!(&left, Ok(Ok(v)) if v.is_empty()) {
            return (passes, total, true);
        }
        if Instant::now() >= give_up {
            return (passes, total, false);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn read_snapshot(store: &MongoStore, ns: &BankNs) -> Result<Snapshot, String> {
    let all = |n: Namespace| async move {
        store
            .find(&n, doc! {}, FindOptions::default())
            .await
            .map_err(|e| format!("reading {n}: {e}"))
    };
    Ok(Snapshot {
        accounts: all(ns.accounts()).await?,
        ledger: all(ns.ledger()).await?,
        records: all(ns.records()).await?,
    })
}

fn print_summary(
    report: &Report,
    logs: &LogSummary,
    faults: u64,
    fault_text: &str,
    worker_exits: u64,
) {
    say(format!("faults injected: {faults} ({fault_text})"));
    if worker_exits > 0 {
        say(format!(
            "workers that exited by themselves and were restarted: {worker_exits}"
        ));
    }
    say(format!(
        "workers saw: {} begun, {} committed, {} canceled, {} unknown{}",
        logs.begun,
        logs.count(Logged::Committed),
        logs.count(Logged::Canceled),
        logs.count(Logged::Unknown),
        if logs.malformed > 0 {
            format!(", {} torn log line(s)", logs.malformed)
        } else {
            String::new()
        }
    ));
    let mut unknown: Vec<String> = logs
        .unknown_reasons
        .iter()
        .map(|(why, n)| format!("{why} {n}"))
        .collect();
    if !logs.unanswered.is_empty() {
        unknown.push(format!(
            "no answer (worker killed mid-transaction) {}",
            logs.unanswered.len()
        ));
    }
    if !unknown.is_empty() {
        say(format!("unknown outcomes: {}", unknown.join(", ")));
    }
    say(format!(
        "records: {} done, {} canceled, {} in flight; ledger: {} entries, {} undone-insert placeholders; total balance {}",
        report.committed, report.canceled, report.in_flight, report.ledger_entries, report.ghosts, report.total
    ));
    if !report.cancel_causes.is_empty() {
        let causes: Vec<String> = report
            .cancel_causes
            .iter()
            .map(|(cause, n)| format!("{cause} {n}"))
            .collect();
        say(format!("canceled because of: {}", causes.join(", ")));
    }
    let by = report.by_check();
    let passed: Vec<&str> = ALL_CHECKS
        .iter()
        .filter(|c| !by.contains_key(c))
        .map(|c| c.name())
        .collect();
    say(format!("checks passed: {}", passed.join(", ")));
    if !by.is_empty() {
        let failed: Vec<String> = by.iter().map(|(c, n)| format!("{c} {n}")).collect();
        say(format!("checks FAILED: {}", failed.join(", ")));
        for v in report.violations.iter().take(40) {
            say(format!("violation: {v}"));
        }
        if report.violations.len() > 40 {
            say(format!("... and {} more", report.violations.len() - 40));
        }
    }
}

/// Every check, in the order they are reported.
const ALL_CHECKS: [Check; 19] = [
    Check::Conservation,
    Check::Negative,
    Check::Accounts,
    Check::Unreadable,
    Check::InFlight,
    Check::Marker,
    Check::Lock,
    Check::Ledger,
    Check::Balance,
    Check::PaymentsCounter,
    Check::LastPayment,
    Check::CommittedMissing,
    Check::Orphan,
    Check::LostCompensation,
    Check::RecordMismatch,
    Check::AcknowledgedCommit,
    Check::AcknowledgedCancel,
    Check::Log,
    Check::Audit,
];
