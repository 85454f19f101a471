//! Tools to test transactions, your own participants included.
//!
//! * [`FaultStore`] wraps any [`Store`] and crashes after a given number of
//!   operations, pauses at one, or yields to the scheduler before each, so a
//!   test can stop a coordinator anywhere, stall it, or interleave several.
//! * [`audit`] checks the invariants every run must end with: every record
//!   terminal, no marker or lock left, and each numeric field equal to its
//!   initial value plus the increments of the committed transactions only.
//! * [`CrashHarness`] stops a transaction after every single store operation
//!   in turn, runs recovery, and audits the result.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bson::{doc, Bson, Document};
use tokio::sync::oneshot;

use crate::change::{DocumentChange, DocumentOp, FieldOp, META_FIELD};
use crate::clock::ManualClock;
use crate::config::{CommitPoint, PendingPolicy, RecoveryConfig};
use crate::coordinator::{Coordinator, Receipt, Transaction};
use crate::error::TxError;
use crate::memory::MemoryStore;
use crate::query;
use crate::record::{TxRecord, TxState};
use crate::store::{
    FindOptions, IndexSpec, Namespace, ReturnDocument, Store, StoreError, StoreErrorKind,
    UpdateOutcome,
};

/// A pause at one operation: the test learns when it is reached and decides when it goes on.
#[derive(Debug)]
pub struct Pause {
    /// Completes when the paused operation is reached (before it runs).
    pub reached: oneshot::Receiver<()>,
    /// Send (or drop) to let the operation run.
    pub release: oneshot::Sender<()>,
}

#[derive(Default)]
struct Plan {
    crash_after: Option<u64>,
    pause_at: Option<(u64, oneshot::Sender<()>, oneshot::Receiver<()>)>,
    yield_seed: Option<u64>,
}

/// A [`Store`] wrapper that injects crashes, pauses and scheduling noise.
#[derive(Clone)]
pub struct FaultStore {
    inner: Arc<dyn Store>,
    ops: Arc<AtomicU64>,
    plan: Arc<Mutex<Plan>>,
}

impl std::fmt::Debug for FaultStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultStore")
            .field("inner", &self.inner.name())
            .field("ops", &self.ops())
            .finish()
    }
}

impl FaultStore {
    /// Wraps `inner`; it behaves exactly like `inner` until told otherwise.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        FaultStore {
            inner,
            ops: Arc::new(AtomicU64::new(0)),
            plan: Arc::new(Mutex::new(Plan::default())),
        }
    }

    /// Operations started so far (including refused ones).
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::SeqCst)
    }

    /// Lets the first `n` operations run; every later one fails with [`StoreErrorKind::Crashed`].
    pub fn crash_after(self, n: u64) -> Self {
        self.lock().crash_after = Some(n);
        self
    }

    /// From now on, every operation fails with [`StoreErrorKind::Crashed`].
    pub fn crash_now(&self) {
        let done = self.ops();
        self.lock().crash_after = Some(done);
    }

    /// Pauses before operation number `n` (1-based) until released.
    pub fn pause_at(&self, n: u64) -> Pause {
        let (reached_tx, reached_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        self.lock().pause_at = Some((n, reached_tx, release_rx));
        Pause {
            reached: reached_rx,
            release: release_tx,
        }
    }

    /// Before each operation, yields to the scheduler a pseudo-random number of times
    /// (0 to 3) drawn from `seed`: on a single-threaded runtime this picks an interleaving.
    pub fn with_yields(self, seed: u64) -> Self {
        self.lock().yield_seed = Some(seed);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn gate(&self) -> Result<(), StoreError> {
        let n = self.ops.fetch_add(1, Ordering::SeqCst) + 1;
        let (crash_after, pause, yields) = {
            let mut plan = self.lock();
            let pause = match &plan.pause_at {
                Some((at, _, _)) if *at == n => plan.pause_at.take(),
                _ => None,
            };
            let yields = plan.yield_seed.map(|seed| {
                // splitmix64 of (seed, n): deterministic per operation.
                let mut z = seed.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) % 4
            });
            (plan.crash_after, pause, yields)
        };
        if let Some((_, reached, release)) = pause {
            let _ = reached.send(());
            let _ = release.await;
        }
        for _ in 0..yields.unwrap_or(0) {
            tokio::task::yield_now().await;
        }
        match crash_after {
            Some(limit) if n > limit => Err(StoreError::new(
                StoreErrorKind::Crashed,
                format!("injected crash before operation {n}"),
            )),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Store for FaultStore {
    fn name(&self) -> &str {
        "fault"
    }
    async fn now(&self) -> Result<bson::DateTime, StoreError> {
        self.gate().await?;
        self.inner.now().await
    }
    async fn insert_one(&self, ns: &Namespace, doc: Document) -> Result<(), StoreError> {
        self.gate().await?;
        self.inner.insert_one(ns, doc).await
    }
    async fn update_one(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        upsert: bool,
    ) -> Result<UpdateOutcome, StoreError> {
        self.gate().await?;
        self.inner.update_one(ns, filter, update, upsert).await
    }
    async fn find_one_and_update(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        ret: ReturnDocument,
        upsert: bool,
    ) -> Result<Option<Document>, StoreError> {
        self.gate().await?;
        self.inner.find_one_and_update(ns, filter, update, ret, upsert).await
    }
    async fn replace_one(
        &self,
        ns: &Namespace,
        filter: Document,
        replacement: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        self.gate().await?;
        self.inner.replace_one(ns, filter, replacement).await
    }
    async fn delete_one(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.gate().await?;
        self.inner.delete_one(ns, filter).await
    }
    async fn find_one(
        &self,
        ns: &Namespace,
        filter: Document,
    ) -> Result<Option<Document>, StoreError> {
        self.gate().await?;
        self.inner.find_one(ns, filter).await
    }
    async fn find(
        &self,
        ns: &Namespace,
        filter: Document,
        options: FindOptions,
    ) -> Result<Vec<Document>, StoreError> {
        self.gate().await?;
        self.inner.find(ns, filter, options).await
    }
    async fn ensure_index(&self, ns: &Namespace, index: IndexSpec) -> Result<(), StoreError> {
        self.gate().await?;
        self.inner.ensure_index(ns, index).await
    }
}

/// What [`audit`] found.
#[derive(Clone, Debug, Default)]
pub struct Audit {
    /// Every transaction record.
    pub records: Vec<TxRecord>,
    /// Every broken invariant, described.
    pub violations: Vec<String>,
}

impl Audit {
    /// How many records ended in `state`.
    pub fn count(&self, state: TxState) -> usize {
        self.records.iter().filter(|r| r.state == state).count()
    }

    /// Panics with every violation if there is any.
    pub fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "{} violation(s):\n{}",
            self.violations.len(),
            self.violations.join("\n")
        );
    }
}

/// A numeric field of one document, as a key of the expected-totals ledger.
pub type FieldKey = (Namespace, String, String);

fn id_text(id: &Bson) -> String {
    match id {
        Bson::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn as_f64(b: &Bson) -> Option<f64> {
    match b {
        Bson::Int32(i) => Some(f64::from(*i)),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(d) => Some(*d),
        _ => None,
    }
}

/// Checks the invariants a run must end with.
///
/// * every record in `records_ns` is `done` or `canceled`;
/// * no document of `documents` has a marker entry (in any marker field the
///   records name) or a `_tandem.lock`;
/// * every numeric field in `initial` equals its initial value plus the
///   increments of the `done` transactions, so nothing was applied twice, lost,
///   or left uncompensated.
///
/// `initial` holds the documents as they were before the run.
pub async fn audit(
    store: &dyn Store,
    records_ns: &Namespace,
    initial: &[(Namespace, Document)],
) -> Result<Audit, StoreError> {
    let mut result = Audit::default();
    for doc in store.find(records_ns, doc! {}, FindOptions::default()).await? {
        match TxRecord::from_document(doc) {
            Ok(r) => result.records.push(r),
            Err(e) => result.violations.push(format!("unreadable record: {e}")),
        }
    }
    let mut markers = vec![crate::change::DEFAULT_MARKER.to_owned()];
    let mut namespaces: Vec<Namespace> = initial.iter().map(|(ns, _)| ns.clone()).collect();
    let mut expected: BTreeMap<FieldKey, f64> = BTreeMap::new();
    for (ns, doc) in initial {
        let id = doc.get("_id").map(id_text).unwrap_or_default();
        collect_numbers(doc, "", &mut |path, v| {
            expected.insert((ns.clone(), id.clone(), path), v);
        });
    }
    for record in &result.records {
        if !record.state.is_terminal() {
            result
                .violations
                .push(format!("transaction {} left in state {}", record.id, record.state));
        }
        for entry in &record.participants {
            let Ok(change) = bson::from_document::<DocumentChange>(entry.spec.clone()) else {
                continue;
            };
            if !markers.contains(&change.marker) {
                markers.push(change.marker.clone());
            }
            namespaces.push(change.namespace.clone());
            if record.state != TxState::Done {
                continue;
            }
            if let DocumentOp::Update { ops } = &change.op {
                for op in ops {
                    if let FieldOp::Inc { path, by } = op {
                        let key = (change.namespace.clone(), id_text(&change.id), path.clone());
                        if let (Some(total), Some(by)) = (expected.get_mut(&key), as_f64(by)) {
                            *total += by;
                        }
                    }
                }
            }
        }
    }
    namespaces.sort();
    namespaces.dedup();
    let mut actual: HashMap<FieldKey, f64> = HashMap::new();
    for ns in &namespaces {
        for doc in store.find(ns, doc! {}, FindOptions::default()).await? {
            let id = doc.get("_id").map(id_text).unwrap_or_default();
            for marker in &markers {
                if let Some(Bson::Array(list)) = doc.get(marker) {
                    if !list.is_empty() {
                        result
                            .violations
                            .push(format!("{ns}/{id} keeps markers {list:?}"));
                    }
                }
            }
            if let Some(lock) = query::lookup(&doc, &format!("{META_FIELD}.lock")) {
                result.violations.push(format!("{ns}/{id} keeps lock {lock}"));
            }
            collect_numbers(&doc, "", &mut |path, v| {
                actual.insert((ns.clone(), id.clone(), path), v);
            });
        }
    }
    for (key, want) in &expected {
        match actual.get(key) {
            Some(got) if (got - want).abs() < 1e-9 => {}
            got => result.violations.push(format!(
                "{}/{} field {}: expected {want}, found {got:?}",
                key.0, key.1, key.2
            )),
        }
    }
    Ok(result)
}

fn collect_numbers(doc: &Document, prefix: &str, out: &mut dyn FnMut(String, f64)) {
    for (k, v) in doc {
        if k == META_FIELD {
            continue;
        }
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Bson::Document(d) => collect_numbers(d, &path, out),
            other => {
                if let Some(n) = as_f64(other) {
                    out(path, n);
                }
            }
        }
    }
}

/// What a [`CrashHarness`] run covered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// How many crash points were exercised (one per store operation of the transaction).
    pub crash_points: usize,
    /// How often the transaction ended in each state after recovery (`None`: record removed).
    pub outcomes: BTreeMap<String, usize>,
}

/// Stops a transaction after every single store operation in turn, recovers, and audits.
///
/// For crash point `k`, a fresh [`MemoryStore`] is seeded with `documents`;
/// a coordinator whose store crashes after `k` operations runs the
/// transaction; then, once the lease has expired by the store's clock, a
/// recovery worker on the intact store finishes it, and [`audit`] must be clean.
/// It stops at the first `k` the transaction survives.
#[derive(Clone, Debug)]
pub struct CrashHarness {
    /// Where `run` returns (crashes in background finishing are covered either way).
    pub commit_point: CommitPoint,
    /// What recovery does with `pending`.
    pub pending: PendingPolicy,
    /// The database of the records.
    pub database: String,
}

impl Default for CrashHarness {
    fn default() -> Self {
        CrashHarness {
            commit_point: CommitPoint::Done,
            pending: PendingPolicy::RollBack,
            database: "tandem".into(),
        }
    }
}

impl CrashHarness {
    /// Runs the crash points of the transaction `make_tx` builds, over `documents`.
    /// `check` may assert more about each final state; it gets the store and the run's result.
    pub async fn run<T, C, CF>(
        &self,
        documents: &[(Namespace, Document)],
        make_tx: T,
        check: C,
    ) -> CrashReport
    where
        T: Fn() -> Transaction,
        C: Fn(MemoryStore, Result<Receipt, TxError>) -> CF,
        CF: Future<Output = ()>,
    {
        let mut report = CrashReport::default();
        for k in 0.. {
            let clock = Arc::new(ManualClock::default());
            let store = MemoryStore::with_clock(clock.clone());
            for (ns, doc) in documents {
                store
                    .insert_one(ns, doc.clone())
                    .await
                    .expect("seeding documents");
            }
            let faulty = FaultStore::new(Arc::new(store.clone())).crash_after(k);
            let coordinator = Coordinator::builder(faulty.clone())
                .database(&self.database)
                .commit_point(self.commit_point)
                .build();
            let result = coordinator.run(make_tx()).await;
            coordinator.drain().await;
            let survived = faulty.ops() <= k;

            let lease = coordinator.config().lease;
            clock.advance(lease + Duration::from_secs(1));
            let healthy = Coordinator::builder(store.clone())
                .database(&self.database)
                .build();
            let worker = healthy.recovery(RecoveryConfig {
                pending: self.pending,
                ..RecoveryConfig::default()
            });
            let pass = worker.run_once().await.expect("recovery pass");
            assert_eq!(pass.failed, 0, "crash point {k}: recovery failed: {pass:?}");
            let records = Namespace::new(&self.database, "transactions");
            let audit = audit(&store, &records, documents).await.expect("audit");
            if !audit.violations.is_empty() {
                panic!(
                    "crash point {k}: {} violation(s) after recovery:\n{}",
                    audit.violations.len(),
                    audit.violations.join("\n")
                );
            }
            let outcome = audit
                .records
                .first()
                .map(|r| r.state.to_string())
                .unwrap_or_else(|| "removed".into());
            *report.outcomes.entry(outcome).or_default() += 1;
            check(store, result).await;
            if survived {
                break;
            }
            report.crash_points += 1;
        }
        report
    }
}
