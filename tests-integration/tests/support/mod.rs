//! Helpers shared by `tests/bad_input.rs` and `tests/security.rs`:
//!
//! * [`Backend`]: makes a fresh [`Fixture`] (a store and a database of its own)
//!   on the embedded `MemoryStore` or on the MongoDB server at `MONGODB_URI`,
//!   so one case function runs unchanged against both;
//! * [`Fixture::assert_after`]: what every refused or committed case checks
//!   afterwards (documents, markers, locks, stray documents, records);
//! * [`Secantus`]: a SecantusDB server of a test's own (`--auth`, TLS), started
//!   from `.venv/bin/secantusd-py` on a free loopback port and stopped on drop.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use tandem::store::FindOptions;
use tandem::testing::audit;
use tandem::{
    CommitPoint, Coordinator, CoordinatorBuilder, MemoryStore, Namespace, Store, TxRecord, TxState,
};
use tandem_mongodb::MongoStore;

pub use tandem::testing::server::{mongodb_required, mongodb_uri, unique_name};

/// Where a case runs: the [`StoreFactory`](tandem::testing::StoreFactory) of
/// these tests, which also hands out the database name and cleans up after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A new `MemoryStore`.
    Embedded,
    /// The server at `MONGODB_URI`, with a database of the case's own.
    MongoDb,
}

impl Backend {
    /// A fresh fixture; `None` when the MongoDB half is skipped.
    pub async fn fixture(self, case: &str) -> Option<Fixture> {
        let db = unique_name(case);
        match self {
            Backend::Embedded => Some(Fixture {
                store: Arc::new(MemoryStore::new()),
                db,
                backend: self,
                mongo: None,
            }),
            Backend::MongoDb => {
                let uri = mongodb_uri()?;
                let store = MongoStore::builder()
                    .server_selection_timeout(Duration::from_secs(10))
                    .connect(&uri)
                    .await
                    .expect("connect to the server at MONGODB_URI");
                Some(Fixture {
                    store: Arc::new(store.clone()),
                    db,
                    backend: self,
                    mongo: Some(store),
                })
            }
        }
    }

    /// Runs `case` on a fresh fixture, then drops the fixture's database,
    /// whether the case passed or panicked (the panic is passed on).
    pub async fn run<F, Fut>(self, name: &str, case: F)
    where
        F: FnOnce(Fixture) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Some(fixture) = self.fixture(name).await else {
            return;
        };
        let outcome = tokio::spawn(case(fixture.clone())).await;
        fixture.cleanup().await;
        if let Err(e) = outcome {
            match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(e) => panic!("{name} on {self:?}: {e}"),
            }
        }
    }
}

/// A store and a database of one case's own.
#[derive(Clone)]
pub struct Fixture {
    /// The store under test.
    pub store: Arc<dyn Store>,
    /// The case's database: its documents and its transaction records live there.
    pub db: String,
    /// Which store this is.
    pub backend: Backend,
    mongo: Option<MongoStore>,
}

impl Fixture {
    /// A fixture on a MongoDB store of the caller's (e.g. a server with
    /// authentication or TLS), with a fresh database named after `case`.
    pub fn on_mongodb(store: MongoStore, case: &str) -> Fixture {
        Fixture {
            store: Arc::new(store.clone()),
            db: unique_name(case),
            backend: Backend::MongoDb,
            mongo: Some(store),
        }
    }

    /// A collection of the case's database.
    pub fn ns(&self, collection: &str) -> Namespace {
        Namespace::new(self.db.clone(), collection)
    }

    /// The `accounts` collection most cases use.
    pub fn accounts(&self) -> Namespace {
        self.ns("accounts")
    }

    /// Where the coordinator keeps its records.
    pub fn records(&self) -> Namespace {
        self.ns("transactions")
    }

    /// The participant label of document `id` of `accounts`.
    pub fn label(&self, id: &str) -> String {
        format!("{}/{id}", self.accounts())
    }

    /// A coordinator on this store, with its records in the case's database,
    /// returning only when a transaction is `done` or `canceled`.
    pub fn builder(&self) -> CoordinatorBuilder {
        Coordinator::builder_shared(self.store.clone())
            .database(self.db.clone())
            .commit_point(CommitPoint::Done)
    }

    /// [`builder`](Self::builder), built.
    pub fn coordinator(&self) -> Coordinator {
        self.builder().build()
    }

    /// Inserts `docs` into `ns`; returns them as the audit's initial state.
    pub async fn seed(&self, ns: &Namespace, docs: Vec<Document>) -> Vec<(Namespace, Document)> {
        let mut seeded = Vec::with_capacity(docs.len());
        for d in docs {
            self.store
                .insert_one(ns, d.clone())
                .await
                .unwrap_or_else(|e| panic!("seed {ns}: {e}"));
            seeded.push((ns.clone(), d));
        }
        seeded
    }

    /// Accounts with an `i64` balance each.
    pub async fn accounts_with(&self, balances: &[(&str, i64)]) -> Vec<(Namespace, Document)> {
        let docs = balances
            .iter()
            .map(|(id, balance)| doc! { "_id": *id, "balance": *balance })
            .collect();
        self.seed(&self.accounts(), docs).await
    }

    /// Every document of `ns`.
    pub async fn docs(&self, ns: &Namespace) -> Vec<Document> {
        self.store
            .find(ns, doc! {}, FindOptions::default())
            .await
            .unwrap_or_else(|e| panic!("find in {ns}: {e}"))
    }

    /// Document `id` of `ns`.
    pub async fn get(&self, ns: &Namespace, id: impl Into<Bson>) -> Option<Document> {
        self.store
            .find_one(ns, doc! { "_id": id.into() })
            .await
            .unwrap_or_else(|e| panic!("find_one in {ns}: {e}"))
    }

    /// Every transaction record.
    pub async fn tx_records(&self) -> Vec<TxRecord> {
        self.docs(&self.records())
            .await
            .into_iter()
            .map(|d| TxRecord::from_document(d).expect("a readable record"))
            .collect()
    }

    /// Checks the documents after a case:
    ///
    /// * the invariant audit against `initial` is clean (records terminal, no
    ///   marker entry, no `_tandem.lock`, numbers equal to the initial values
    ///   plus the increments of `done` transactions only);
    /// * the records' states are exactly `states` (in any order);
    /// * every collection of `expected` holds exactly the expected `_id`s (no
    ///   stray document, no placeholder), and each document's own fields equal
    ///   the expected ones; tandem's bookkeeping may only be an empty marker
    ///   array, a zero `_tandem.pending` and zero sums in `_tandem.credit`.
    pub async fn assert_after(
        &self,
        initial: &[(Namespace, Document)],
        expected: &[(Namespace, Document)],
        states: &[TxState],
    ) {
        let report = audit(self.store.as_ref(), &self.records(), initial)
            .await
            .expect("audit");
        report.assert_clean();

        let mut found: Vec<&str> = report.records.iter().map(|r| r.state.as_str()).collect();
        let mut want: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
        found.sort_unstable();
        want.sort_unstable();
        assert_eq!(found, want, "transaction records of {:?}", self.backend);

        let mut by_ns: BTreeMap<Namespace, Vec<&Document>> = BTreeMap::new();
        for (ns, d) in expected {
            by_ns.entry(ns.clone()).or_default().push(d);
        }
        for (ns, want_docs) in by_ns {
            let actual = self.docs(&ns).await;
            let mut actual_ids: Vec<String> = actual.iter().map(id_text).collect();
            let mut want_ids: Vec<String> = want_docs.iter().map(|d| id_text(d)).collect();
            actual_ids.sort();
            want_ids.sort();
            assert_eq!(
                actual_ids, want_ids,
                "documents of {ns} on {:?} (a stray or a missing one)",
                self.backend
            );
            for want in want_docs {
                let id = want.get("_id").cloned().unwrap_or(Bson::Null);
                let got = actual
                    .iter()
                    .find(|d| d.get("_id") == Some(&id))
                    .expect("listed above");
                assert_bookkeeping_clean(got);
                assert_eq!(
                    own_fields(got),
                    own_fields(want),
                    "{ns}/{id} on {:?}",
                    self.backend
                );
            }
        }
    }

    /// [`assert_after`](Self::assert_after) for a case that must change nothing.
    pub async fn assert_unchanged(&self, initial: &[(Namespace, Document)], states: &[TxState]) {
        self.assert_after(initial, initial, states).await;
    }

    /// Drops the case's database (MongoDB); nothing to do for the embedded store.
    pub async fn cleanup(&self) {
        if let Some(store) = &self.mongo {
            if let Err(e) = store.client().database(&self.db).drop().await {
                eprintln!("could not drop test database {}: {e}", self.db);
            }
        }
    }
}

fn id_text(d: &Document) -> String {
    match d.get("_id") {
        Some(Bson::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "(no _id)".into(),
    }
}

/// A document's own fields, without tandem's bookkeeping, in key order.
pub fn own_fields(d: &Document) -> BTreeMap<String, Bson> {
    d.iter()
        .filter(|(k, _)| k.as_str() != "_tandem" && k.as_str() != "pendingTransactions")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Panics if `d` keeps a marker entry, a lock, a pending delete, a ghost flag
/// or a non-zero count of pending transactions.
pub fn assert_bookkeeping_clean(d: &Document) {
    if let Some(marker) = d.get("pendingTransactions") {
        assert_eq!(
            marker,
            &Bson::Array(Vec::new()),
            "marker left on {}",
            id_text(d)
        );
    }
    if let Ok(meta) = d.get_document("_tandem") {
        let zero = |v: &Bson| matches!(v, Bson::Int32(0) | Bson::Int64(0));
        for (key, value) in meta {
            let clean = match (key.as_str(), value) {
                ("pending", n) => zero(n),
                // The room the changes pending here reserved.
                ("room", n) => zero(n),
                // Sums of pending credits, by field path.
                ("credit", Bson::Document(sums)) => {
                    fn all_zero(d: &Document) -> bool {
                        d.values().all(|v| match v {
                            Bson::Document(inner) => all_zero(inner),
                            v => matches!(v, Bson::Int32(0) | Bson::Int64(0)),
                        })
                    }
                    all_zero(sums)
                }
                _ => false,
            };
            assert!(clean, "_tandem.{key} left on {}: {meta}", id_text(d));
        }
    }
}

// ---------------------------------------------------------------------------
// A SecantusDB server of a test's own.

/// `.venv/bin/secantusd-py` of this repository.
pub fn secantusd() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/secantusd-py")
}

/// The server binary, or `None` (after printing why) when it is missing and
/// `TANDEM_REQUIRE_MONGODB` is not `1`; panics when it is missing but required.
pub fn secantusd_or_skip() -> Option<PathBuf> {
    let bin = secantusd();
    if bin.exists() {
        return Some(bin);
    }
    assert!(
        !mongodb_required(),
        "{} is missing but TANDEM_REQUIRE_MONGODB=1 requires it (run: bash scripts/db.sh install)",
        bin.display()
    );
    println!(
        "skipped: {} is missing (run: bash scripts/db.sh install)",
        bin.display()
    );
    None
}

/// A free TCP port on 127.0.0.1 (free when asked; the server binds it right after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A directory of a test's own, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new, empty directory under the system's temporary directory.
    pub fn new(prefix: &str) -> TempDir {
        let path = std::env::temp_dir().join(unique_name(prefix));
        std::fs::create_dir_all(&path).expect("create a temporary directory");
        TempDir(path)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `secantusd-py` on 127.0.0.1, stopped (SIGTERM, then SIGKILL) on drop.
pub struct Secantus {
    child: Option<Child>,
    /// Its port.
    pub port: u16,
    log: PathBuf,
}

impl Secantus {
    /// Starts `bin` on a free port with `--storage-path storage` and `extra`
    /// flags, and waits (at most 60 s) until it accepts TCP connections.
    ///
    /// The server gets an empty `--config` file so that no `secantusd.toml`
    /// lying around changes it, and logs into `dir`.
    pub fn start(bin: &Path, dir: &Path, storage: &str, extra: &[&str]) -> Secantus {
        let port = free_port();
        let config = dir.join("secantusd-empty.toml");
        std::fs::write(&config, "").expect("write an empty config");
        let log = dir.join(format!("secantus-{port}.log"));
        let log_file = std::fs::File::create(&log).expect("create the server log");
        let err_file = log_file.try_clone().expect("clone the log handle");
        let child = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--storage-path", storage])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(err_file)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let mut server = Secantus {
            child: Some(child),
            port,
            log,
        };
        server.wait_until_listening(Duration::from_secs(60));
        server
    }

    fn wait_until_listening(&mut self, limit: Duration) {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let started = Instant::now();
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "secantusd-py exited during start-up ({status}):\n{}",
                        self.log_tail()
                    );
                }
            }
            assert!(
                started.elapsed() < limit,
                "secantusd-py did not listen on {addr} within {limit:?}:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `mongodb://[userinfo@]127.0.0.1:PORT/[?query]`.
    pub fn uri(&self, userinfo: Option<&str>, query: &str) -> String {
        let userinfo = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        format!("mongodb://{userinfo}127.0.0.1:{}/{query}", self.port)
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Stops the server: SIGTERM, up to 20 s for a clean shutdown (so that
    /// its storage can be reopened), then SIGKILL.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Secantus {
    fn drop(&mut self) {
        self.stop();
    }
}
