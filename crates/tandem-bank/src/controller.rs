//! The controller: sets the bank up on two servers, runs the workers, the
//! nemesis, a garbage collector and a sampler of the hot document, then
//! stops everything, recovers to quiescence, and checks.
//!
//! * The garbage collector calls
//!   [`RecoveryWorker::collect_garbage`](tandem::RecoveryWorker::collect_garbage)
//!   every [`GC_EVERY`] with the smallest age allowed, the lease plus the clock
//!   margin, from the start of the run until the workers are stopped. The
//!   bank's transactions have caller-chosen ids, so their records first
//!   become stubs (id and state), kept for an idempotency window of
//!   [`STUB_WINDOWS`] times that age, and are then removed: a run sees full
//!   records, stubs, and records gone.
//! * The recovery job calls
//!   [`RecoveryWorker::run_once`](tandem::RecoveryWorker::run_once) every
//!   [`RECOVER_EVERY`], with the configuration the final recovery uses
//!   ([`recovery_config`]), from the start of the run until the workers are
//!   stopped, as a recovery job runs beside the coordinators of a
//!   deployment: transactions of killed workers are finished or rolled back
//!   while the run goes on, racing the live coordinators and the garbage
//!   collector, not only at the end.
//! * The sampler reads the fee account (the document every transaction
//!   touches) every [`SAMPLE_EVERY`], and once more at the end, and keeps the
//!   peak of its BSON size, which must stay within [`hot_bound`] of
//!   [`hot_markers_bound`] markers: the markers of the transactions the
//!   workers run and of those abandoned and not recovered yet.
//!
//! The file is long because it holds one concern only: the run's timeline,
//! from setup through the nemesis and the garbage collector to quiescence,
//! which reads best in order in one place.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bson::{doc, Document};
use tandem::change::DEFAULT_MARKER;
use tandem::store::FindOptions;
use tandem::{
    Coordinator, Namespace, PendingPolicy, RecoveryConfig, RecoveryReport, Store, TxState,
};
use tandem_mongodb::MongoStore;

use crate::args::Options;
use crate::bank::{hot_bound, BankNs, BankSpec, FEES, HOT_BASE, MARKER_ENTRY_MAX, REMOTE};
use crate::checker::{check, check_collected, Check, Report, Snapshot, Violation};
use crate::nemesis::{
    failpoint_off, is_loopback, probe_failpoints, random_failpoint, slow_failpoint, Nemesis,
};
use crate::noting::{Noting, Sent};
use crate::outcome_log::{LogSummary, LogTail, Logged};
use crate::procs::{locate_libfaketime, locate_secantusd, ClockSkew, Server, Worker};
use crate::rng::Rng;
use crate::worker::WorkerArgs;
use tandem::testing::LosingProxy;

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

/// How often the hot document is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// The pause between two garbage collections.
pub const GC_EVERY: Duration = Duration::from_millis(500);

/// The pause between two recovery passes of the controller during the run.
pub const RECOVER_EVERY: Duration = Duration::from_secs(1);

/// The longest one recovery pass of the controller may take during the run;
/// one that takes longer is dropped, as a crash would leave it, and the next
/// one picks its transactions up.
pub const RECOVER_PASS_LIMIT: Duration = Duration::from_secs(20);

/// The configuration of the controller's recovery, during the run and at the
/// end: stuck `pending` transactions rolled back (the workers' own passes
/// roll them back or forward at random), large batches.
pub fn recovery_config() -> RecoveryConfig {
    RecoveryConfig {
        pending: PendingPolicy::RollBack,
        batch: 1000,
        concurrency: 8,
        ..RecoveryConfig::default()
    }
}

/// The idempotency window of the garbage collector, in multiples of its age:
/// short, so that stubs are removed within a run too.
pub const STUB_WINDOWS: u32 = 3;

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
    /// The largest BSON size of the hot document (the fee account) sampled, in bytes.
    pub hot_peak: usize,
    /// Records removed by garbage collection during the run.
    pub collected: u64,
}

impl Outcome {
    /// The final line.
    pub fn line(&self) -> String {
        format!(
            "bank: {} transfers, {} committed, {} canceled, {} faults, {} violations, hot document peak {} bytes, {} records collected",
            self.transfers,
            self.committed,
            self.canceled,
            self.faults,
            self.violations.len(),
            self.hot_peak,
            self.collected
        )
    }
}

/// The most failed or delayed commands one nemesis round causes (a
/// failpoint's 1 to 8 times; a lost answer or a slow write takes at most 3).
pub const MOST_COMMANDS_PER_ROUND: usize = 8;

/// The most transactions that may have a marker entry on the fee account
/// ([`FEES`]) at once, given the run's settings and the clock margin.
///
/// The workers' tasks run `workers x tasks` transactions at a time. Beside
/// those, a transaction its task gave up on (its worker killed, a store error
/// in a worker that repeats nothing, an answer lost, a write held past the
/// lease, recovery taking it over) keeps its marker until recovery finishes
/// it: the controller's, every [`RECOVER_EVERY`], or a worker's. While the
/// servers answer, that happens within
///
/// ```text
/// W = lease + clock margin + 2 x clock skew + RECOVER_EVERY + RECOVER_PASS_LIMIT
/// ```
///
/// of its last change: it is due once its lease and the margin have passed,
/// its markers on server 2 go once that server's clock (up to twice the skew
/// behind) reads past them, and the next pass, which may take up to
/// [`RECOVER_PASS_LIMIT`], finishes it. A server that is down holds recovery
/// up, but the nemesis round that killed it lasts until it is back and
/// starts no other meanwhile. Rounds start at least half the interval apart,
/// so at most `R = W / (interval / 2) + 1` start within `W`; one round
/// abandons at most `A = max(workers x tasks, MOST_COMMANDS_PER_ROUND)`
/// transactions (a killed server fails every transaction in flight, a killed
/// or paused worker those of its tasks, a failpoint at most 8 commands, a lost
/// answer or a slow write at most 3). One more `A` covers transactions taken
/// over without a fault (a coordinator slower than its lease on a busy
/// machine). So at most
///
/// ```text
/// workers x tasks + A x (R + 1)
/// ```
///
/// transactions have a marker on it at once (`R = 0` without a nemesis). For
/// the defaults (4 x 2, lease 2 s, margin 2 s, a round every 3 s) that is
/// `8 + 8 x 18 = 152`. It does not grow with the length of the run.
pub fn hot_markers_bound(options: &Options, clock_margin: Duration) -> usize {
    let slots = options.workers * options.tasks;
    let per_round = slots.max(MOST_COMMANDS_PER_ROUND);
    let window =
        options.lease + clock_margin + options.clock_skew * 2 + RECOVER_EVERY + RECOVER_PASS_LIMIT;
    let half = (options.nemesis_interval / 2).as_millis().max(1);
    let rounds = if options.nemeses.is_empty() {
        0
    } else {
        usize::try_from(window.as_millis() / half).unwrap_or(usize::MAX) + 1
    };
    slots.saturating_add(per_round.saturating_mul(rounds.saturating_add(1)))
}

/// What the sampler of the hot document saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotStats {
    /// The largest size sampled, in bytes.
    pub peak: usize,
    /// Marker entries on the document at that peak.
    pub markers_at_peak: usize,
    /// The most marker entries sampled.
    pub most_markers: usize,
    /// The largest size sampled of the document without its marker array, in bytes.
    pub rest_peak: usize,
    /// Samples taken.
    pub samples: u64,
    /// Samples that found no answer (a server down, a failpoint).
    pub missed: u64,
}

impl HotStats {
    /// Takes one sample of the fee account into account.
    pub fn add(&mut self, doc: &Document) {
        let size = bson::to_vec(doc).map_or(0, |b| b.len());
        let markers = doc.get_array(DEFAULT_MARKER).map_or(0, Vec::len);
        let mut rest = doc.clone();
        rest.remove(DEFAULT_MARKER);
        let rest = bson::to_vec(&rest).map_or(0, |b| b.len());
        self.rest_peak = self.rest_peak.max(rest);
        self.samples += 1;
        self.most_markers = self.most_markers.max(markers);
        if size > self.peak {
            self.peak = size;
            self.markers_at_peak = markers;
        }
    }
}

/// Reads the fee account from server 2, waiting at most a second.
async fn read_hot(store: &MongoStore, ns: &BankNs) -> Option<Document> {
    let accounts = ns.remote_accounts();
    let read = store.find_one(&accounts, doc! { "_id": FEES });
    tokio::time::timeout(Duration::from_secs(1), read)
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
}

/// What the garbage collector did.
#[derive(Debug, Default)]
struct GcStats {
    /// Records removed.
    collected: AtomicU64,
    /// Calls made.
    calls: AtomicU64,
    /// Calls that failed or found no answer in time.
    failed: AtomicU64,
    /// The last failure.
    last_error: Mutex<Option<String>>,
    /// The ids of the records it asked to remove or reduce to stubs.
    sent: Sent,
    /// The longest call, in milliseconds.
    slowest_ms: AtomicU64,
}

/// What the controller's recovery did during the run.
#[derive(Debug, Default)]
struct RecoveryStats {
    /// The passes' reports, summed.
    total: Mutex<RecoveryReport>,
    /// Passes made.
    passes: AtomicU64,
    /// Passes that failed or found no answer in time.
    failed: AtomicU64,
    /// The last failure.
    last_error: Mutex<Option<String>>,
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
    /// The managed servers: none (MONGODB_URI), or server 1 and server 2.
    servers: Vec<Server>,
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
        for s in &mut self.servers {
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

/// The directory of a run's files (logs, and the managed servers' storage):
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
        servers: Vec::new(),
        workers: Vec::new(),
    };

    say(format!(
        "seed {}, {} accounts x {}, {} vouchers, {} workers x {} tasks, {:?} of transactions, lease {:?}",
        options.seed,
        options.accounts,
        options.initial,
        options.vouchers,
        options.workers,
        options.tasks,
        options.duration,
        options.lease
    ));
    let mut nemeses = options.nemeses.clone();
    let uris: [String; 2] = match (&options.uri, server_exe) {
        (Some(uri), _) => {
            say("servers: the one at MONGODB_URI serves both stores, in two databases (not managed here)");
            nemeses.remove(&Nemesis::KillServer);
            say("nemesis kill-server skipped: the server is not managed by this run (MONGODB_URI is set)");
            if !is_loopback(uri).await
                && (nemeses.remove(&Nemesis::Failpoint) | nemeses.remove(&Nemesis::SlowWrite))
            {
                say("nemeses failpoint and slow-write skipped: MONGODB_URI is not a server on 127.0.0.1");
            }
            [uri.clone(), uri.clone()]
        }
        (None, exe) => {
            let exe = exe.ok_or("no server to start")?;
            for n in 1..=2 {
                let storage = run_dir.join(format!("db{n}"));
                let mut server = Server::new(
                    exe.clone(),
                    storage,
                    logs_dir.join(format!("server-{n}.log")),
                )
                .map_err(|e| format!("choosing a port: {e}"))?;
                if n == 2 && !options.clock_skew.is_zero() {
                    let lib = locate_libfaketime()?;
                    server = server.with_clock_skew(ClockSkew::new(
                        lib,
                        options.clock_skew,
                        options.seed ^ 0x5eed_c10c,
                    ));
                }
                server.start(SERVER_START).await?;
                say(format!(
                    "server {n}: SecantusDB started at {} (pid {}, storage {}){}",
                    server.uri(),
                    server.pid().unwrap_or(0),
                    server.storage().display(),
                    skew_text(&server)
                ));
                fleet.servers.push(server);
            }
            [fleet.servers[0].uri(), fleet.servers[1].uri()]
        }
    };

    let mut stores = Vec::with_capacity(2);
    for (n, uri) in uris.iter().enumerate() {
        let store = bounded(LONG, "connecting to the servers", async {
            MongoStore::builder()
                .server_selection_timeout(Duration::from_secs(10))
                .app_name("tandem-bank-controller")
                .connect(uri)
                .await
                .map_err(|e| format!("connecting to server {}: {e}", n + 1))
        })
        .await?;
        stores.push(store);
    }
    let stores: [MongoStore; 2] = [stores[0].clone(), stores[1].clone()];
    if !options.clock_skew.is_zero() {
        if fleet.servers.len() == 2 {
            say(format!(
                "clock nemesis: server 2's clock is off by up to {:?} either way, drawn anew at every restart (clock margin {:?}); measured now: server 1 {}, server 2 {}",
                options.clock_skew,
                tandem::CoordinatorConfig::default().clock_margin,
                measured_offset(&stores[0]).await,
                measured_offset(&stores[1]).await,
            ));
        } else {
            say(
                "clock nemesis skipped: the server is not managed by this run (MONGODB_URI is set)",
            );
        }
    }
    let db = format!("tandem_bank_{}_{}", options.seed, std::process::id());
    let ns = BankNs::new(&db);
    let spec = BankSpec::new(options.accounts, options.initial).with_vouchers(options.vouchers);
    let token = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let seeded = bounded(LONG, "seeding the bank", setup(&stores, &ns, &spec, &token)).await?;
    say(format!(
        "layout: {}.accounts (customers), {}.ledger, {}.transactions on server 1; {}.accounts (merchants, {FEES}), {}.vouchers on server 2 (store {REMOTE:?})",
        ns.db, ns.db, ns.db, ns.db2, ns.db2
    ));
    let coordinator = Coordinator::builder(stores[0].clone())
        .store(REMOTE, stores[1].clone())
        .database(&db)
        .lease(options.lease)
        .build();
    bounded(LONG, "creating indexes", async {
        coordinator
            .ensure_indexes()
            .await
            .map_err(|e| format!("creating indexes: {e}"))
    })
    .await?;

    if nemeses.contains(&Nemesis::Failpoint) || nemeses.contains(&Nemesis::SlowWrite) {
        let probes = async {
            probe_failpoints(stores[0].client(), &uris[0], &ns.db).await?;
            probe_failpoints(stores[1].client(), &uris[1], &ns.db2).await
        };
        if let Err(why) = bounded(LONG, "the failpoint probe", probes).await {
            say(format!("nemeses failpoint and slow-write skipped: a server does not support failCommand as needed ({why})"));
            nemeses.remove(&Nemesis::Failpoint);
            nemeses.remove(&Nemesis::SlowWrite);
        } else {
            say("failCommand failpoints: supported on both servers (probe fired and was scoped by appName)");
            if options.uri.is_some() {
                say("note: failCommand is one server-wide setting; do not run other failpoint users on this server meanwhile");
            }
        }
    }
    // The workers reach each server through a proxy that can lose answers.
    let mut proxies = Vec::new();
    let mut worker_uris = uris.clone();
    if nemeses.contains(&Nemesis::LoseAnswer) {
        match losing_proxies(&uris).await {
            Ok((started, via)) => {
                say(format!(
                    "lose-answer: the workers reach server 1 through 127.0.0.1:{} and server 2 through 127.0.0.1:{}, proxies that can lose the answers of write commands and deliver the requests later",
                    started[0].port(),
                    started[1].port()
                ));
                proxies = started;
                worker_uris = via;
            }
            Err(why) => {
                say(format!("nemesis lose-answer skipped: {why}"));
                nemeses.remove(&Nemesis::LoseAnswer);
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
            uri: worker_uris[0].clone(),
            uri2: worker_uris[1].clone(),
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
    let hot = Arc::new(Mutex::new(HotStats::default()));
    let gc = Arc::new(GcStats::default());
    let most_markers = hot_markers_bound(&options, coordinator.config().clock_margin);
    let bound = hot_bound(most_markers);
    let age = options.lease + coordinator.config().clock_margin;
    say(format!(
        "hot document {}/{FEES}: sampled every {SAMPLE_EVERY:?}, bound {bound} bytes ({HOT_BASE} beside the markers + {most_markers} x {MARKER_ENTRY_MAX} marker bytes: {} run by the workers' tasks, the rest abandoned ones awaiting recovery)",
        ns.db2,
        options.workers * options.tasks,
    ));
    let sampler = {
        let (hot, done, store, ns) = (hot.clone(), done.clone(), stores[1].clone(), ns.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let sample = read_hot(&store, &ns).await;
                {
                    let mut h = hot.lock().unwrap_or_else(|e| e.into_inner());
                    match &sample {
                        Some(doc) => h.add(doc),
                        None => h.missed += 1,
                    }
                }
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
        })
    };
    let collector = if options.gc {
        say(format!(
            "garbage collection: every {GC_EVERY:?}, records older than {age:?} (the lease plus the clock margin); stubs kept {:?}",
            age * STUB_WINDOWS
        ));
        // Its own coordinator over the same stores, but whose records' store
        // notes the ids each removal or stub write names, before sending it.
        let noting = Noting::new(stores[0].clone(), ns.records(), gc.sent.clone());
        let worker = Coordinator::builder(noting)
            .store(REMOTE, stores[1].clone())
            .database(&db)
            .lease(options.lease)
            .build()
            .recovery(RecoveryConfig {
                batch: 1000,
                idempotency_window: age * STUB_WINDOWS,
                ..RecoveryConfig::default()
            });
        let (gc, done) = (gc.clone(), done.clone());
        Some(tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                gc.calls.fetch_add(1, Ordering::SeqCst);
                let began = Instant::now();
                let outcome =
                    tokio::time::timeout(Duration::from_secs(20), worker.collect_garbage(age))
                        .await;
                let took = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
                gc.slowest_ms.fetch_max(took, Ordering::SeqCst);
                match outcome {
                    Ok(Ok(n)) => {
                        gc.collected.fetch_add(n as u64, Ordering::SeqCst);
                    }
                    Ok(Err(e)) => {
                        gc.failed.fetch_add(1, Ordering::SeqCst);
                        *gc.last_error.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(e.to_string());
                    }
                    Err(_) => {
                        gc.failed.fetch_add(1, Ordering::SeqCst);
                        *gc.last_error.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some("no answer within 20 s".into());
                    }
                }
                tokio::time::sleep(GC_EVERY).await;
            }
        }))
    } else {
        say("garbage collection: off (--no-gc)");
        None
    };
    say(format!(
        "recovery: every {RECOVER_EVERY:?} during the run (pending rolled back), besides the workers' own passes, then to quiescence at the end"
    ));
    let recovering = Arc::new(RecoveryStats::default());
    let recoverer = {
        let worker = coordinator.recovery(recovery_config());
        let (stats, done) = (recovering.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                stats.passes.fetch_add(1, Ordering::SeqCst);
                let outcome = tokio::time::timeout(RECOVER_PASS_LIMIT, worker.run_once()).await;
                let failure = match outcome {
                    Ok(Ok(r)) => {
                        *stats.total.lock().unwrap_or_else(|e| e.into_inner()) += &r;
                        None
                    }
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(_) => Some(format!("no answer within {RECOVER_PASS_LIMIT:?}")),
                };
                if let Some(why) = failure {
                    stats.failed.fetch_add(1, Ordering::SeqCst);
                    *stats.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
                }
                tokio::time::sleep(RECOVER_EVERY).await;
            }
        })
    };
    let progress = {
        let (tail, faults, done) = (tail.clone(), faults.clone(), done.clone());
        let (hot, gc) = (hot.clone(), gc.clone());
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
                let peak = hot.lock().unwrap_or_else(|e| e.into_inner()).peak;
                say(format!(
                    "{:>3} s: {} transfers ({} committed, {} canceled, {} unknown so far, as the workers saw them), {} faults ({}), hot document peak {} bytes, {} records collected",
                    t0.elapsed().as_secs(),
                    summary.begun,
                    summary.count(Logged::Committed),
                    summary.count(Logged::Canceled),
                    summary.count(Logged::Unknown),
                    total,
                    text,
                    peak,
                    gc.collected.load(Ordering::SeqCst)
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
            let _ = tokio::time::timeout(SHORT, sabotage(&stores[0], &ns)).await;
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
            stores: &stores,
            proxies: &proxies,
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

    // Stop: nemesis off, servers up, workers stopped.
    say(format!(
        "{:.1} s of transactions: stopping the nemesis and the workers",
        (Instant::now() - (deadline - options.duration)).as_secs_f64()
    ));
    if nemeses.contains(&Nemesis::Failpoint) || nemeses.contains(&Nemesis::SlowWrite) {
        for store in &stores {
            let _ = tokio::time::timeout(
                SHORT,
                store
                    .client()
                    .database("admin")
                    .run_command(failpoint_off()),
            )
            .await;
        }
    }
    for w in &mut fleet.workers {
        let _ = w.resume();
    }
    for (i, server) in fleet.servers.iter_mut().enumerate() {
        if !server.is_running() {
            say(format!(
                "server {} is down: restarting it for the checks",
                i + 1
            ));
            server.start(SERVER_START).await?;
            bounded(
                SHORT,
                "checking the server",
                check_identity(&stores[i], &meta_of(&ns, i), &token),
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
    let _ = sampler.await;
    if let Some(collector) = collector {
        let _ = collector.await;
    }
    let _ = recoverer.await;
    {
        let r = recovering
            .total
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let last = recovering
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        say(format!(
            "recovery during the run: {} passes, claimed {}, committed {}, canceled {}, removed {}, waited {}; {} passes failed{}",
            recovering.passes.load(Ordering::SeqCst),
            r.claimed,
            r.committed,
            r.canceled,
            r.removed,
            r.waiting,
            recovering.failed.load(Ordering::SeqCst),
            last.map(|e| format!(", the last with: {e}"))
                .unwrap_or_default()
        ));
    }
    let logs = tail.lock().unwrap_or_else(|e| e.into_inner()).finish();
    let collected = gc.collected.load(Ordering::SeqCst);
    // Every request whose answer was lost reaches its server before the
    // final recovery: after that nothing of the workers is still on its way.
    if !proxies.is_empty() {
        for p in &proxies {
            p.disarm();
        }
        for p in &proxies {
            bounded(LONG, "delivering the held requests", async {
                p.all_delivered().await;
                Ok::<(), String>(())
            })
            .await?;
        }
        let (held, delivered) = proxies
            .iter()
            .map(LosingProxy::counts)
            .fold((0, 0), |(h, d), (h2, d2)| (h + h2, d + d2));
        say(format!(
            "lose-answer: {held} answers lost in all, {delivered} of their requests delivered late"
        ));
    }

    // Recovery to quiescence, then the checks.
    let q = recover_to_quiescence(
        &coordinator,
        &stores[0],
        &ns,
        options.lease,
        options.clock_skew,
    )
    .await;
    say(format!(
        "final recovery: {} pass(es) in {:.1} s from {} record(s) in flight, claimed {}, committed {}, canceled {}, removed {}, failed {}, waited {}; {}",
        q.passes,
        q.took.as_secs_f64(),
        q.at_start.map_or("?".to_owned(), |n| n.to_string()),
        q.total.claimed,
        q.total.committed,
        q.total.canceled,
        q.total.removed,
        q.total.failed,
        q.total.waiting,
        match &q.left {
            None => "nothing left in flight".to_owned(),
            Some(left) => format!("NOT quiescent (counted below): it stopped because {left}"),
        }
    ));
    let hot = {
        let last = read_hot(&stores[1], &ns).await;
        let mut h = hot.lock().unwrap_or_else(|e| e.into_inner());
        match &last {
            Some(doc) => h.add(doc),
            None => h.missed += 1,
        }
        *h
    };
    let snapshot = bounded(LONG, "reading the bank", read_snapshot(&stores, &ns)).await?;
    let mut report = check(&spec, &ns, &snapshot, Some(&logs));
    let sent = gc.sent.lock().unwrap_or_else(|e| e.into_inner()).clone();
    check_collected(&mut report, &sent);
    if hot.rest_peak > HOT_BASE {
        report.violations.push(Violation {
            check: Check::HotDocument,
            detail: format!(
                "{FEES} reached {} bytes beside its markers, above its bound of {HOT_BASE} bytes",
                hot.rest_peak
            ),
        });
    }
    if hot.most_markers > most_markers {
        report.violations.push(Violation {
            check: Check::HotDocument,
            detail: format!(
                "{FEES} held {} markers at once, above the {most_markers} transactions that can have one at once",
                hot.most_markers
            ),
        });
    }
    if hot.peak > bound {
        report.violations.push(Violation {
            check: Check::HotDocument,
            detail: format!(
                "{FEES} reached {} bytes ({} markers), above its bound of {bound} bytes",
                hot.peak, hot.markers_at_peak
            ),
        });
    }
    if hot.samples == 0 {
        report.violations.push(Violation {
            check: Check::HotDocument,
            detail: format!("{FEES} could not be sampled even once"),
        });
    }
    let audit_ran = collected == 0;
    if audit_ran {
        let audit = async {
            tandem::testing::audit(&stores[0], &ns.records(), &seeded)
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
    }
    let (fault_total, fault_text) = faults_text(&faults);
    let gc_text = if options.gc {
        let failed = gc.failed.load(Ordering::SeqCst);
        let last = gc
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        format!(
            "garbage collection: {collected} records collected (removed, or reduced to stubs and removed later) in {} calls (the slowest {:.1} s; {failed} failed{})",
            gc.calls.load(Ordering::SeqCst),
            gc.slowest_ms.load(Ordering::SeqCst) as f64 / 1000.0,
            last.map(|e| format!(", the last with: {e}"))
                .unwrap_or_default()
        )
    } else {
        "garbage collection: off".to_owned()
    };
    say(gc_text);
    say(format!(
        "hot document {FEES}: peak {} bytes with {} markers (at most {} markers seen, bound {most_markers}; at most {} bytes beside them, bound {HOT_BASE}), {} samples ({} missed while a server was away); bound {bound} bytes",
        hot.peak, hot.markers_at_peak, hot.most_markers, hot.rest_peak, hot.samples, hot.missed
    ));
    print_summary(
        &report,
        &logs,
        fault_total,
        &fault_text,
        worker_exits,
        audit_ran,
    );

    // Clean up.
    let clean = report.violations.is_empty();
    if clean && options.uri.is_some() {
        for (store, name) in stores.iter().zip([&ns.db, &ns.db2]) {
            let _ = tokio::time::timeout(SHORT, store.client().database(name).drop()).await;
        }
    }
    for store in &stores {
        let _ = tokio::time::timeout(SHORT, store.client().clone().shutdown()).await;
    }
    for server in &mut fleet.servers {
        server.stop();
    }
    drop(fleet);
    if clean && !options.keep {
        let _ = std::fs::remove_dir_all(run_dir);
    } else {
        say(format!(
            "run directory kept: {} (worker logs, server logs{})",
            run_dir.display(),
            if options.uri.is_none() {
                ", storage"
            } else {
                ""
            }
        ));
        if options.uri.is_some() {
            say(format!("databases kept: {} and {}", ns.db, ns.db2));
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
        hot_peak: hot.peak,
        collected,
    })
}

/// The meta collection of server `i` (0: server 1, 1: server 2).
fn meta_of(ns: &BankNs, i: usize) -> Namespace {
    if i == 0 {
        ns.meta()
    } else {
        ns.remote_meta()
    }
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
            tandem::store::UpdateOptions::default(),
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

/// Drops the bank's databases, writes the run's token on both servers,
/// seeds the accounts. Returns the documents seeded on server 1 (what the
/// audit, which reads server 1, compares with).
async fn setup(
    stores: &[MongoStore; 2],
    ns: &BankNs,
    spec: &BankSpec,
    token: &str,
) -> Result<Vec<(Namespace, Document)>, String> {
    let [local, remote] = stores;
    for (store, db) in [(local, &ns.db), (remote, &ns.db2)] {
        store
            .client()
            .database(db)
            .drop()
            .await
            .map_err(|e| format!("dropping {db}: {e}"))?;
    }
    for (store, meta) in [(local, ns.meta()), (remote, ns.remote_meta())] {
        store
            .insert_one(&meta, doc! { "_id": "run", "token": token })
            .await
            .map_err(|e| format!("writing the run's token: {e}"))?;
    }
    let docs = spec.local_documents();
    for chunk in docs.chunks(1000) {
        local
            .collection(&ns.accounts())
            .insert_many(chunk.to_vec())
            .await
            .map_err(|e| format!("seeding the accounts: {e}"))?;
    }
    remote
        .collection(&ns.remote_accounts())
        .insert_many(spec.remote_documents())
        .await
        .map_err(|e| format!("seeding the accounts of server 2: {e}"))?;
    Ok(docs.into_iter().map(|d| (ns.accounts(), d)).collect())
}

/// Checks that the server answering is this run's, with its data: it holds
/// the token written at setup in `meta` (a restarted server kept its storage,
/// and no other server took its port while it was down).
/// `", clock off by +N ms"` for a server under a clock skew, else nothing.
fn skew_text(server: &Server) -> String {
    match server.clock_offset_millis() {
        Some(ms) => format!(", clock off by {ms:+} ms"),
        None => String::new(),
    }
}

/// The server's clock (`hello`'s `localTime`) minus this machine's, in
/// milliseconds, as text: shows that the skew reaches the server's `$$NOW`.
async fn measured_offset(store: &MongoStore) -> String {
    use tandem::Store;
    let sent = std::time::SystemTime::now();
    let Ok(Ok(server)) = tokio::time::timeout(SHORT, store.now()).await else {
        return "unreadable".into();
    };
    let Ok(sent) = sent.duration_since(std::time::UNIX_EPOCH) else {
        return "unreadable".into();
    };
    let local = i64::try_from(sent.as_millis()).unwrap_or(i64::MAX);
    format!("{:+} ms", server.timestamp_millis().saturating_sub(local))
}

async fn check_identity(store: &MongoStore, meta: &Namespace, token: &str) -> Result<(), String> {
    let found = store
        .find_one(meta, doc! { "_id": "run" })
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

/// What the nemesis needs to know about the run.
struct Target<'a> {
    /// The stores of server 1 and server 2.
    stores: &'a [MongoStore; 2],
    /// The proxies the workers reach the servers through (none without the
    /// `lose-answer` nemesis).
    proxies: &'a [LosingProxy],
    ns: &'a BankNs,
    token: &'a str,
    app_name: &'a str,
    options: &'a Options,
}

/// Injects one fault. `left` is what remains of the run: holds never last longer.
async fn strike(
    nemesis: Nemesis,
    fleet: &mut Fleet,
    rng: &mut Rng,
    target: &Target<'_>,
    left: Duration,
) -> Result<(), String> {
    let Target {
        stores,
        proxies,
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
            if fleet.servers.is_empty() {
                return Err("no managed server".into());
            }
            let i = rng.index(fleet.servers.len());
            let server = &mut fleet.servers[i];
            let pid = server.pid().unwrap_or(0);
            server.kill9();
            let down = Duration::from_millis(rng.range(0, 1500)).min(left);
            tokio::time::sleep(down).await;
            let t = Instant::now();
            let mut attempt = 0;
            while let Err(e) = server.start(SERVER_START).await {
                attempt += 1;
                if attempt >= 3 {
                    return Err(format!("restarting server {}: {e}", i + 1));
                }
                say(format!(
                    "restarting server {} failed ({e}); trying again",
                    i + 1
                ));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            bounded(
                SHORT,
                "checking the server",
                check_identity(&stores[i], &meta_of(ns, i), token),
            )
            .await?;
            let offset = match server.clock_offset_millis() {
                Some(_) => format!(
                    "{}, measured {}",
                    skew_text(server),
                    measured_offset(&stores[i]).await
                ),
                None => String::new(),
            };
            say(format!(
                "nemesis: kill -9 server {} (pid {pid}); down {:.1} s, restarted on port {} in {:.1} s (pid {}){offset}",
                i + 1,
                down.as_secs_f64(),
                server.port(),
                t.elapsed().as_secs_f64(),
                server.pid().unwrap_or(0)
            ));
        }
        Nemesis::Failpoint | Nemesis::SlowWrite => {
            let i = rng.index(stores.len());
            let (command, text) = if nemesis == Nemesis::Failpoint {
                random_failpoint(rng, app_name)
            } else {
                slow_failpoint(rng, app_name, options.lease)
            };
            let admin = stores[i].client().database("admin");
            admin
                .run_command(command)
                .await
                .map_err(|e| format!("arming failCommand on server {}: {e}", i + 1))?;
            let hold = Duration::from_millis(rng.range(500, 2000)).min(left);
            tokio::time::sleep(hold).await;
            admin
                .run_command(failpoint_off())
                .await
                .map_err(|e| format!("turning failCommand off on server {}: {e}", i + 1))?;
            say(format!(
                "nemesis: server {}: {text}, for {:.1} s",
                i + 1,
                hold.as_secs_f64()
            ));
        }
        Nemesis::LoseAnswer => {
            if proxies.is_empty() {
                return Err("no proxy".into());
            }
            let i = rng.index(proxies.len());
            let count = u32::try_from(rng.range(1, 3)).unwrap_or(1);
            // From at once to past the lease: some copies land while their
            // worker still waits, others after recovery took over.
            let delay = Duration::from_millis(rng.range(0, 1500))
                + options.lease.mul_f64(rng.below(100) as f64 / 100.0);
            let (held_before, _) = proxies[i].counts();
            proxies[i].arm(count, delay);
            let hold = Duration::from_millis(rng.range(500, 2000)).min(left);
            tokio::time::sleep(hold).await;
            proxies[i].disarm();
            let (held, _) = proxies[i].counts();
            say(format!(
                "nemesis: server {}: the next {count} write commands lose their answers, each landing {} ms later; {} held in {:.1} s",
                i + 1,
                delay.as_millis(),
                held - held_before,
                hold.as_secs_f64()
            ));
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

/// Starts a [`LosingProxy`] in front of each server and returns the proxies
/// and the URIs the workers use to reach the servers through them. Needs a
/// single loopback host per URI (a proxy stands for one server).
async fn losing_proxies(uris: &[String; 2]) -> Result<(Vec<LosingProxy>, [String; 2]), String> {
    let mut proxies = Vec::new();
    let mut via = uris.clone();
    for (n, uri) in uris.iter().enumerate() {
        if !is_loopback(uri).await {
            return Err(format!("server {} is not on 127.0.0.1", n + 1));
        }
        let options = mongodb::options::ClientOptions::parse(uri)
            .await
            .map_err(|e| e.to_string())?;
        let [mongodb::options::ServerAddress::Tcp { host, port }] = options.hosts.as_slice() else {
            return Err(format!("server {} is not a single host", n + 1));
        };
        let upstream = format!("{host}:{}", port.unwrap_or(27017));
        let proxy = LosingProxy::start(upstream.clone())
            .await
            .map_err(|e| format!("starting a proxy: {e}"))?;
        via[n] = through(uri, proxy.port())?;
        proxies.push(proxy);
    }
    Ok((proxies, via))
}

/// `uri` with its one host replaced by the proxy's, and `directConnection=true`.
fn through(uri: &str, port: u16) -> Result<String, String> {
    let (scheme, rest) = uri
        .split_once("://")
        .ok_or_else(|| format!("not a URI: {uri:?}"))?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let userinfo = authority.rsplit_once('@').map(|(u, _)| format!("{u}@"));
    let tail = if tail.is_empty() { "/" } else { tail };
    let sep = if tail.contains('?') {
        "&"
    } else if tail.ends_with('/') {
        "?"
    } else {
        "/?"
    };
    Ok(format!(
        "{scheme}://{}127.0.0.1:{port}{tail}{sep}directConnection=true",
        userinfo.unwrap_or_default()
    ))
}

/// The longest one pass of the final recovery may take; one that takes
/// longer is dropped (as a crash would leave it) and the next picks up.
const FINAL_PASS_LIMIT: Duration = Duration::from_secs(60);

/// What the final recovery may spend per record in flight when it starts,
/// on top of [`quiet_limit`]: its overall bound grows with what is left.
const FINAL_PER_RECORD: Duration = Duration::from_millis(200);

/// In-flight records the final recovery names when it gives up.
const FINAL_NAMED: usize = 5;

/// How long the final recovery goes on while no record in flight finishes.
///
/// A record left in flight becomes due once its lease has passed on the
/// records' server and the clock margin after that; a rolled-back record's
/// markers on server 2 may be removed only once that server's clock, which
/// may be up to `2 x clock_skew` behind server 1's, reads past its deadline
/// plus the margin (a waiting record, finished by a later pass). Three leases,
/// two margins and twice the skew cover that for every record, and 30 s more
/// cover the passes themselves on a busy machine: a quiet spell longer than
/// this is a record recovery cannot finish.
pub fn quiet_limit(lease: Duration, clock_margin: Duration, clock_skew: Duration) -> Duration {
    lease * 3 + clock_margin * 2 + clock_skew * 2 + Duration::from_secs(30)
}

/// What the final recovery did.
#[derive(Debug, Default)]
struct Quiescence {
    /// Passes made.
    passes: u32,
    /// Their reports, summed.
    total: RecoveryReport,
    /// Records in flight when it started, if they could be counted.
    at_start: Option<u64>,
    /// How long it took.
    took: Duration,
    /// `None` when nothing was left in flight; otherwise why it stopped and
    /// what was left.
    left: Option<String>,
}

/// Counts the records in flight, by state; `None` when the server does not
/// answer in time.
async fn in_flight_by_state(store: &MongoStore, ns: &BankNs) -> Option<Vec<(TxState, u64)>> {
    let records = ns.records();
    let mut counts = Vec::new();
    for state in TxState::in_flight() {
        let count = store.count(&records, doc! { "state": state.as_str() });
        match tokio::time::timeout(SHORT, count).await {
            Ok(Ok(n)) => counts.push((state, n)),
            _ => return None,
        }
    }
    Some(counts)
}

/// What is still in flight, in words: the count by state and the oldest few
/// records (id, state, owner, last change).
async fn describe_in_flight(store: &MongoStore, ns: &BankNs) -> String {
    let counts = match in_flight_by_state(store, ns).await {
        Some(c) => {
            let total: u64 = c.iter().map(|(_, n)| n).sum();
            let parts: Vec<String> = c
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(s, n)| format!("{n} {s}"))
                .collect();
            format!("{total} record(s) in flight ({})", parts.join(", "))
        }
        None => "the records could not be counted".to_owned(),
    };
    let in_flight: Vec<bson::Bson> = TxState::in_flight().into_iter().map(Into::into).collect();
    let records = ns.records();
    let oldest = store.find(
        &records,
        doc! { "state": { "$in": in_flight } },
        FindOptions {
            sort: Some(doc! { "lastModified": 1 }),
            limit: Some(FINAL_NAMED as i64),
        },
    );
    let named = match tokio::time::timeout(SHORT, oldest).await {
        Ok(Ok(docs)) => docs
            .iter()
            .map(|d| {
                format!(
                    "{} ({}, owner {}, last changed {})",
                    id_of(d),
                    d.get_str("state").unwrap_or("?"),
                    d.get_str("owner").unwrap_or("?"),
                    d.get_datetime("lastModified")
                        .map_or("?".to_owned(), |t| t.to_string())
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        _ => "(the records could not be read)".to_owned(),
    };
    format!("{counts}; the oldest: {named}")
}

fn id_of(doc: &Document) -> String {
    match doc.get("_id") {
        Some(bson::Bson::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "(no _id)".into(),
    }
}

/// Runs recovery passes until no record is in flight.
///
/// It goes on as long as the records in flight keep finishing: it stops when
/// none is left, when none has finished for [`quiet_limit`], or at an overall
/// bound that grows with what was left when it started ([`quiet_limit`] plus
/// [`FINAL_PER_RECORD`] per record in flight). Records that are not due yet
/// are waited for between passes. When it stops short, it says what is left.
async fn recover_to_quiescence(
    coordinator: &Coordinator,
    store: &MongoStore,
    ns: &BankNs,
    lease: Duration,
    clock_skew: Duration,
) -> Quiescence {
    let worker = coordinator.recovery(recovery_config());
    let started = Instant::now();
    let quiet = quiet_limit(lease, coordinator.config().clock_margin, clock_skew);
    let count = || async {
        in_flight_by_state(store, ns)
            .await
            .map(|c| c.iter().map(|(_, n)| n).sum::<u64>())
    };
    let at_start = count().await;
    let per_record = FINAL_PER_RECORD * u32::try_from(at_start.unwrap_or(0)).unwrap_or(u32::MAX);
    let give_up = started + quiet + per_record;
    let mut q = Quiescence {
        at_start,
        ..Quiescence::default()
    };
    let mut fewest = at_start.unwrap_or(u64::MAX);
    let mut last_progress = Instant::now();
    loop {
        q.passes += 1;
        if let Ok(Ok(r)) = tokio::time::timeout(FINAL_PASS_LIMIT, worker.run_once()).await {
            q.total += &r;
        }
        let left = count().await;
        if left == Some(0) {
            q.took = started.elapsed();
            return q;
        }
        if let Some(n) = left.filter(|n| *n < fewest) {
            fewest = n;
            last_progress = Instant::now();
        }
        let now = Instant::now();
        let why = if now >= give_up {
            Some(format!(
                "its overall bound of {:?} ({quiet:?}, plus {FINAL_PER_RECORD:?} for each of the {} record(s) in flight at the start) ran out",
                give_up - started,
                at_start.map_or("?".to_owned(), |n| n.to_string())
            ))
        } else if now.duration_since(last_progress) >= quiet {
            Some(format!(
                "no record in flight finished for {quiet:?} (three leases, two clock margins, twice the clock skew and 30 s)"
            ))
        } else {
            None
        };
        if let Some(why) = why {
            q.took = started.elapsed();
            q.left = Some(format!("{why}; {}", describe_in_flight(store, ns).await));
            return q;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn read_snapshot(stores: &[MongoStore; 2], ns: &BankNs) -> Result<Snapshot, String> {
    let all = |store: &MongoStore, n: Namespace| {
        let store = store.clone();
        async move {
            store
                .find(&n, doc! {}, FindOptions::default())
                .await
                .map_err(|e| format!("reading {n}: {e}"))
        }
    };
    let [local, remote] = stores;
    Ok(Snapshot {
        accounts: all(local, ns.accounts()).await?,
        remote_accounts: all(remote, ns.remote_accounts()).await?,
        vouchers: all(remote, ns.vouchers()).await?,
        ledger: all(local, ns.ledger()).await?,
        records: all(local, ns.records()).await?,
    })
}

fn print_summary(
    report: &Report,
    logs: &LogSummary,
    faults: u64,
    fault_text: &str,
    worker_exits: u64,
    audit_ran: bool,
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
        "records: {} done, {} canceled ({} of them stubs, {} done ones with a ledger entry checked against the logs), {} in flight; without a record (collected): {} committed (by their ledger entries), {} canceled (as their workers were told)",
        report.done_records,
        report.canceled_records,
        report.stub_records,
        report.stubbed_committed,
        report.in_flight,
        report.unrecorded_committed,
        report.unrecorded_canceled
    ));
    say(format!(
        "ledger: {} entries, {} undone-insert placeholders; fee account counts {}; total money {}",
        report.ledger_entries, report.ghosts, report.fee_count, report.total
    ));
    let v = &report.vouchers;
    say(format!(
        "vouchers: {} issued, {} redeemed, {} live at the end, {} ids issued again after a redeem, {} placeholders",
        v.issued, v.redeemed, v.live, v.reissued, v.placeholders
    ));
    say(format!(
        "vault {}: balance i64::MAX - {} after {} committed credits near the limit (credits that would not fit with those pending are canceled as overflow)",
        crate::bank::VAULT,
        i64::MAX - report.vault_balance,
        report.vault_credits
    ));
    if !report.cancel_causes.is_empty() {
        let causes: Vec<String> = report
            .cancel_causes
            .iter()
            .map(|(cause, n)| format!("{cause} {n}"))
            .collect();
        say(format!(
            "canceled records canceled because of: {}",
            causes.join(", ")
        ));
    }
    let by = report.by_check();
    let passed: Vec<&str> = Check::ALL
        .iter()
        .filter(|c| !by.contains_key(c))
        .filter(|c| audit_ran || **c != Check::Audit)
        .map(|c| c.name())
        .collect();
    say(format!("checks passed: {}", passed.join(", ")));
    if !audit_ran {
        say("audit skipped: it sums the increments of the done records, and garbage collection removed some (run with --no-gc to have it)");
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_reach_a_server_through_its_proxy() {
        assert_eq!(
            through("mongodb://127.0.0.1:27017/", 4000).unwrap(),
            "mongodb://127.0.0.1:4000/?directConnection=true"
        );
        assert_eq!(
            through(
                "mongodb://alice:pw@localhost:27017/bank?authSource=admin",
                4000
            )
            .unwrap(),
            "mongodb://alice:pw@127.0.0.1:4000/bank?authSource=admin&directConnection=true"
        );
        assert_eq!(
            through("mongodb://127.0.0.1:27017", 4000).unwrap(),
            "mongodb://127.0.0.1:4000/?directConnection=true"
        );
        assert!(through("127.0.0.1:27017", 4000).is_err());
    }

    #[test]
    fn the_last_line_keeps_its_prefix_and_appends_the_new_fields() {
        let outcome = Outcome {
            transfers: 10,
            committed: 6,
            canceled: 3,
            faults: 2,
            violations: Vec::new(),
            hot_peak: 337,
            collected: 5,
        };
        assert_eq!(
            outcome.line(),
            "bank: 10 transfers, 6 committed, 3 canceled, 2 faults, 0 violations, \
             hot document peak 337 bytes, 5 records collected"
        );
    }

    #[test]
    fn hot_samples_keep_the_peak() {
        let mut hot = HotStats::default();
        let small = doc! { "_id": FEES, "balance": 1_i64, "pendingTransactions": ["w0.0.0-1"] };
        let big = doc! {
            "_id": FEES,
            "balance": 1_i64,
            "pendingTransactions": ["w0.0.0-1", "w1.0.1-22", "w2.3.1-333"],
        };
        hot.add(&small);
        hot.add(&big);
        hot.add(&small);
        assert_eq!(hot.samples, 3);
        assert_eq!(hot.peak, bson::to_vec(&big).unwrap().len());
        assert_eq!((hot.markers_at_peak, hot.most_markers), (3, 3));
        // Each marker entry stays within the bound's allowance.
        let per_entry = (hot.peak - bson::to_vec(&small).unwrap().len()) / 2;
        assert!(per_entry <= crate::bank::MARKER_ENTRY_MAX, "{per_entry}");
        // The rest of the document is measured without the marker array.
        let bare = doc! { "_id": FEES, "balance": 1_i64 };
        assert_eq!(hot.rest_peak, bson::to_vec(&bare).unwrap().len());
    }

    #[test]
    fn the_marker_bound_counts_abandoned_transactions_not_the_run_length() {
        let margin = Duration::from_secs(2);
        let defaults = Options::default();
        // 8 slots + 8 per round x (25 s / 1.5 s + 1 + 1) rounds.
        assert_eq!(hot_markers_bound(&defaults, margin), 8 + 8 * 18);
        let longer = Options {
            duration: Duration::from_secs(3600),
            ..defaults.clone()
        };
        assert_eq!(
            hot_markers_bound(&longer, margin),
            hot_markers_bound(&defaults, margin)
        );
        let quiet = Options {
            nemeses: Default::default(),
            ..defaults.clone()
        };
        assert_eq!(hot_markers_bound(&quiet, margin), 8 + 8);
        let harsh = Options {
            nemesis_interval: Duration::from_millis(300),
            ..defaults
        };
        assert_eq!(
            hot_markers_bound(&harsh, margin),
            8 + 8 * (25_000 / 150 + 2)
        );
    }
}
