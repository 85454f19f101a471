//! [`MemoryStore`]: an embedded, in-process [`Store`].

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bson::oid::ObjectId;
use bson::{Bson, Document};

use crate::change::DocumentChange;
use crate::clock::{Clock, SystemClock};
use crate::document::NativeCommand;
use crate::error::StepError;
use crate::query::size::document_len;
use crate::query::update::{
    apply_logged_taking, apply_to_new, apply_update, check_update, upsert_seed,
    validate_replacement, UndoLog,
};
use crate::query::{self, is_operator_doc, lookup, total_cmp, Ctx};
use crate::store::{
    FindOptions, IndexSpec, Namespace, ReturnDocument, Store, StoreError, StoreErrorKind,
    UpdateOutcome,
};

/// The largest document a store accepts, as in MongoDB: 16 MiB.
const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

/// An embedded document store that keeps everything in process memory.
///
/// It gives every [`Store`] call the same guarantees MongoDB gives one
/// document: each call is atomic (one lock is held for the whole
/// read-modify-write), and an update that fails leaves the document as it
/// was. Filters and updates are evaluated by [`query`](crate::query), which
/// documents the supported operators. Time comes from a [`Clock`], so tests can
/// drive lease expiry with a [`ManualClock`](crate::clock::ManualClock).
///
/// Documents of a collection are kept ordered by `_id` (in MongoDB's order of
/// values: numbers numerically, then strings, ..., with numerically equal
/// `_id`s of different types being the same `_id`); a query without sort
/// returns them in that order, and "the first match" of an update or delete
/// is the match with the smallest `_id`. A filter with a plain `_id` equality
/// looks the document up directly instead of scanning.
///
/// Cloning is cheap and clones share the data.
///
/// # Limits
///
/// * There are no indexes: [`Store::ensure_index`] does nothing (no TTL
///   expiry, no partial indexes), and no uniqueness other than that of `_id`
///   is enforced. Filters without an `_id` equality scan the collection.
/// * `find` sorts by the value [`lookup`](crate::query::lookup) finds at each
///   sort key (missing sorts as null, first when ascending), across types in
///   MongoDB's bracket order; unlike MongoDB, an array is not sorted by its
///   smallest or largest element. No collations.
/// * Documents over 16 MiB are refused with
///   [`StoreErrorKind::DocumentTooLarge`], as MongoDB does.
/// * Data lives as long as the store (and its clones): there is no persistence.
///
/// # Server time in filters
///
/// * `$$NOW` in a filter's `$expr` (for deadline fencing such as
///   `{$expr: {$lt: [{$toLong: "$$NOW"}, deadline_ms]}}`) is the store's
///   [`Clock`] time, read once per call: one value for every document the
///   call looks at (and, for an update, the same time `$currentDate`
///   writes). With a [`ManualClock`](crate::clock::ManualClock) a fenced
///   step matches until the clock is advanced past its deadline.
/// * An upsert whose filter has an `$expr` and matches nothing inserts, as
///   MongoDB does: the new document takes the filter's equalities, and the
///   `$expr` plays no part in it.
/// * An `$expr` that fails to evaluate on a document the call looks at (a
///   `$toLong` of a non-numeric string) fails the call, as on MongoDB, and
///   changes nothing.
///
/// ```
/// use bson::doc;
/// use tandem::store::{Namespace, Store};
/// use tandem::MemoryStore;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let accounts = Namespace::new("bank", "accounts");
/// store.insert_one(&accounts, doc! { "_id": "alice", "balance": 100 }).await.unwrap();
/// let outcome = store
///     .update_one(&accounts, doc! { "_id": "alice", "balance": { "$gte": 30 } },
///                 doc! { "$inc": { "balance": -30 } }, false)
///     .await
///     .unwrap();
/// assert_eq!(outcome.modified, 1);
/// assert_eq!(store.documents(&accounts), vec![doc! { "_id": "alice", "balance": 70 }]);
/// # });
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    clock: Arc<dyn Clock>,
    data: Mutex<Collections>,
    commands: AtomicU64,
}

/// The collections, by namespace.
type Collections = HashMap<Namespace, Collection, FxBuildHasher>;

type FxBuildHasher = BuildHasherDefault<FxHasher>;

/// One collection: its documents by `_id`, and the `_id`s in order.
///
/// The hash map serves the look-ups by `_id` (most calls) in constant time;
/// the ordered set serves scans, which must follow `_id` order.
#[derive(Default)]
struct Collection {
    docs: HashMap<IdKey, Stored, FxBuildHasher>,
    order: BTreeSet<IdKey>,
}

/// A stored document and its size as BSON, kept up to date by every write
/// so that the 16 MiB limit is checked without measuring the whole document.
#[derive(Debug)]
struct Stored {
    doc: Document,
    len: usize,
}

impl Stored {
    /// `doc`, measured.
    fn new(doc: Document) -> Stored {
        let len = document_len(&doc);
        Stored { doc, len }
    }
}

impl Collection {
    fn get(&self, id: &Bson) -> Option<&Document> {
        self.docs.get(&IdRef(id) as &dyn IdView).map(|s| &s.doc)
    }

    fn get_mut(&mut self, id: &Bson) -> Option<&mut Stored> {
        self.docs.get_mut(&IdRef(id) as &dyn IdView)
    }

    /// The documents in `_id` order.
    fn iter(&self) -> impl Iterator<Item = (&IdKey, &Document)> + '_ {
        self.order
            .iter()
            .filter_map(|key| self.docs.get(key).map(|stored| (key, &stored.doc)))
    }

    /// The documents of this collection matching a validated `filter`, in
    /// `_id` order. An `$expr` error is left in `cx` (check it once done).
    fn matching<'a>(
        &'a self,
        filter: &'a Document,
        cx: &'a Ctx<'a>,
    ) -> impl Iterator<Item = &'a Document> + 'a {
        let (direct, scan) = match id_equality(filter) {
            Some(id) => (self.get(id).filter(|doc| eval_rest(doc, filter, cx)), None),
            None => (None, Some(self.iter().map(|(_, doc)| doc))),
        };
        direct.into_iter().chain(
            scan.into_iter()
                .flatten()
                .filter(move |doc| query::eval_skipping(doc, filter, None, cx)),
        )
    }

    /// The first document matching a validated `filter`. An `$expr` error is
    /// left in `cx` (check it before using the result).
    fn first_match_mut(&mut self, filter: &Document, cx: &Ctx<'_>) -> Option<&mut Stored> {
        match id_equality(filter) {
            Some(id) => self.get_mut(id).filter(|s| eval_rest(&s.doc, filter, cx)),
            None => {
                let docs = &self.docs;
                let key = self.order.iter().find(|key| {
                    docs.get(*key)
                        .is_some_and(|s| query::eval_skipping(&s.doc, filter, None, cx))
                })?;
                self.docs.get_mut(key)
            }
        }
    }

    /// Inserts a measured document whose `_id` is set, unless that `_id` is taken.
    fn insert_new(&mut self, ns: &Namespace, doc: Stored) -> Result<(), StoreError> {
        let id = doc.doc.get("_id").cloned().unwrap_or(Bson::Null);
        if let Some((existing, _)) = self.docs.get_key_value(&IdRef(&id) as &dyn IdView) {
            return Err(StoreError::new(
                StoreErrorKind::DuplicateKey,
                format!(
                    "E11000 duplicate key error collection: {ns} index: _id_ dup key: {{ _id: {} }}",
                    existing.0
                ),
            )
            .with_code(11000));
        }
        self.order.insert(IdKey(id.clone()));
        self.docs.insert(IdKey(id), doc);
        Ok(())
    }

    fn remove(&mut self, id: &Bson) -> Option<Stored> {
        let doc = self.docs.remove(&IdRef(id) as &dyn IdView)?;
        self.order.remove(&IdRef(id) as &dyn IdView);
        Some(doc)
    }
}

/// An `_id` as a map key, ordered by [`total_cmp`].
#[derive(Clone, Debug)]
struct IdKey(Bson);

/// A view of an `_id` that both stored keys ([`IdKey`]) and borrowed
/// look-up values ([`IdRef`]) provide, so that a look-up needs no clone.
trait IdView {
    fn id(&self) -> &Bson;
}

impl IdView for IdKey {
    fn id(&self) -> &Bson {
        &self.0
    }
}

/// A borrowed `_id` to look a document up with.
struct IdRef<'a>(&'a Bson);

impl IdView for IdRef<'_> {
    fn id(&self) -> &Bson {
        self.0
    }
}

impl<'a> Borrow<dyn IdView + 'a> for IdKey {
    fn borrow(&self) -> &(dyn IdView + 'a) {
        self
    }
}

impl PartialEq for dyn IdView + '_ {
    fn eq(&self, other: &Self) -> bool {
        total_cmp(self.id(), other.id()) == Ordering::Equal
    }
}

impl Eq for dyn IdView + '_ {}

impl PartialOrd for dyn IdView + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn IdView + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        total_cmp(self.id(), other.id())
    }
}

impl PartialEq for IdKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for IdKey {}

impl PartialOrd for IdKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IdKey {
    fn cmp(&self, other: &Self) -> Ordering {
        total_cmp(&self.0, &other.0)
    }
}

impl Hash for dyn IdView + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_bson(self.id(), state);
    }
}

impl Hash for IdKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_bson(&self.0, state);
    }
}

/// Hashes a value consistently with [`total_cmp`]: values it calls equal
/// (such as `Int32(1)` and `Double(1.0)`) hash alike.
fn hash_bson<H: Hasher>(v: &Bson, state: &mut H) {
    // 2^63, exactly representable as f64.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    match v {
        Bson::ObjectId(id) => state.write(&id.bytes()),
        Bson::String(s) | Bson::Symbol(s) => state.write(s.as_bytes()),
        Bson::Int32(i) => state.write_i64(i64::from(*i)),
        Bson::Int64(i) => state.write_i64(*i),
        Bson::Double(f) => {
            if f.is_nan() {
                state.write_u8(0);
            } else if f.fract() == 0.0 && *f >= -TWO_63 && *f < TWO_63 {
                // Integral and in range: hash as the equal integer (-0.0 too).
                state.write_i64(*f as i64);
            } else {
                state.write_u64(f.to_bits());
            }
        }
        Bson::Document(d) => {
            for (k, v) in d {
                state.write(k.as_bytes());
                hash_bson(v, state);
            }
        }
        Bson::Array(a) => {
            for v in a {
                hash_bson(v, state);
            }
        }
        Bson::Boolean(b) => state.write_u8(u8::from(*b)),
        Bson::DateTime(d) => state.write_i64(d.timestamp_millis()),
        Bson::Binary(b) => state.write(&b.bytes),
        Bson::Decimal128(d) => state.write(&d.bytes()),
        Bson::Timestamp(t) => {
            state.write_u32(t.time);
            state.write_u32(t.increment);
        }
        // Rare as `_id`s: equal values share the (constant) hash.
        _ => state.write_u8(1),
    }
}

/// A small, fast hasher (the FxHash function) for namespaces and `_id`s. This
/// in-process store serves tests and embedded use, where hash flooding by
/// an adversary choosing `_id`s is not a concern, and speed is.
#[derive(Default)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        // The multiply carries entropy only upwards, and the hash table picks
        // buckets by the low bits: without this finalizer (SplitMix64's),
        // ObjectId strings, which differ only in their last characters, fill
        // a handful of buckets and every look-up walks a long probe chain.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
        }
        for &byte in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(byte)).wrapping_mul(K);
        }
    }
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        MemoryStore::with_clock(Arc::new(SystemClock))
    }

    /// An empty store on `clock`, e.g. a [`ManualClock`](crate::clock::ManualClock).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            inner: Arc::new(Inner {
                clock,
                data: Mutex::new(Collections::default()),
                commands: AtomicU64::new(0),
            }),
        }
    }

    /// For tests: the store's clock.
    pub fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.inner.clock)
    }

    /// For tests: every document of `ns`, in `_id` order (empty if the
    /// collection does not exist). Not counted by [`command_count`](Self::command_count).
    pub fn documents(&self, ns: &Namespace) -> Vec<Document> {
        self.lock()
            .get(ns)
            .map(|c| c.iter().map(|(_, doc)| doc.clone()).collect())
            .unwrap_or_default()
    }

    /// For tests and benchmarks: how many [`Store`] calls this store (and its
    /// clones) has served, counting every async method, `now` and
    /// `ensure_index` included, whether it succeeded or not. [`Store::name`]
    /// and the testing helpers are not counted.
    pub fn command_count(&self) -> u64 {
        self.inner.commands.load(AtomicOrdering::Relaxed)
    }

    fn count(&self) {
        self.inner.commands.fetch_add(1, AtomicOrdering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Collections> {
        // Writes either complete or are undone before an error is returned;
        // only a panic in the middle of applying an update (a bug) could
        // leave that one document half-updated. Keep serving regardless.
        self.inner
            .data
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Shared by `update_one`, `update_each` and `find_one_and_update`:
    /// returns the outcome and, if `ret` asks for one, the document before or
    /// after. `now` is the store's time for this call: the value of `$$NOW`
    /// and of `$currentDate`.
    fn update(
        &self,
        ns: &Namespace,
        filter: &Document,
        mut update: Document,
        upsert: bool,
        ret: Option<ReturnDocument>,
        now: bson::DateTime,
    ) -> Result<(UpdateOutcome, Option<Document>), StoreError> {
        query::validate(filter)?;
        let cx = Ctx::at(Some(now));
        let mut data = self.lock();
        let found = data
            .get_mut(ns)
            .and_then(|coll| coll.first_match_mut(filter, &cx));
        cx.check()?;
        if let Some(stored) = found {
            // Applied in place, with an undo log: the stored document is
            // restored unless every operator succeeded and the result fits.
            let before = match ret {
                Some(ReturnDocument::Before) => Some(stored.doc.clone()),
                _ => None,
            };
            let mut undo = UndoLog::default();
            let applied = apply_logged_taking(&mut stored.doc, &mut update, now, false, &mut undo)
                .and_then(|()| {
                    let len = stored.len.checked_add_signed(undo.size_delta());
                    debug_assert_eq!(len, Some(document_len(&stored.doc)), "{}", stored.doc);
                    // (A size that went negative would be a bug: measure instead.)
                    let len = len.unwrap_or_else(|| document_len(&stored.doc));
                    check_len(len).map(|()| len)
                });
            match applied {
                Ok(len) => stored.len = len,
                Err(e) => {
                    undo.rollback(&mut stored.doc);
                    return Err(e);
                }
            }
            let modified = undo.changed(&stored.doc);
            let returned = match ret {
                None => None,
                Some(ReturnDocument::Before) => before,
                Some(ReturnDocument::After) => Some(stored.doc.clone()),
            };
            let outcome = UpdateOutcome {
                matched: 1,
                modified: u64::from(modified),
                upserted: false,
            };
            return Ok((outcome, returned));
        }
        if !upsert {
            // MongoDB rejects a malformed update even when nothing matches.
            check_update(&update)?;
            return Ok((UpdateOutcome::default(), None));
        }
        // The seed takes the filter's equalities; an `$expr` adds nothing (as in MongoDB).
        let mut created = upsert_seed(filter);
        apply_to_new(&mut created, update, now)?;
        let created = with_id_first(created);
        check_id(&created)?;
        let created = checked(created)?;
        let returned = match ret {
            Some(ReturnDocument::After) => Some(created.doc.clone()),
            _ => None,
        };
        collection(&mut data, ns).insert_new(ns, created)?;
        let outcome = UpdateOutcome {
            matched: 0,
            modified: 0,
            upserted: true,
        };
        Ok((outcome, returned))
    }
}

impl MemoryStore {
    /// A native transaction: every change under one lock, undone on the first refusal.
    fn native(&self, changes: &[DocumentChange]) -> Result<(), StepError> {
        let now = self.inner.clock.now();
        let cx = Ctx::at(Some(now));
        let mut data = self.lock();
        let mut undo: Vec<(Namespace, Bson, Option<Stored>)> = Vec::new();
        let result = changes.iter().try_for_each(|change| {
            let ns = &change.namespace;
            let failed = |e: StoreError| match e.kind {
                StoreErrorKind::TypeMismatch => StepError::TypeMismatch {
                    participant: change.label(),
                    path: String::new(),
                    message: e.message,
                },
                StoreErrorKind::DocumentTooLarge => StepError::TooLarge {
                    participant: change.label(),
                },
                StoreErrorKind::Overflow => StepError::Overflow {
                    participant: change.label(),
                    message: e.message,
                },
                _ => StepError::Store {
                    participant: change.label(),
                    source: e,
                },
            };
            let refusal = |data: &Collections| {
                let current = data.get(ns).and_then(|c| c.get(&change.id)).cloned();
                change
                    .explain(current.as_ref(), None)
                    .and(Err(StepError::Conflict {
                        participant: change.label(),
                        holder: "(concurrent write)".into(),
                    }))
            };
            match change.native_command() {
                NativeCommand::Insert { doc } => {
                    let doc = checked(with_id_first(doc)).map_err(failed)?;
                    collection(&mut data, ns).insert_new(ns, doc).map_err(|_| {
                        StepError::AlreadyExists {
                            participant: change.label(),
                        }
                    })?;
                    undo.push((ns.clone(), change.id.clone(), None));
                    Ok(())
                }
                NativeCommand::Update { filter, update } => {
                    let found = data
                        .get_mut(ns)
                        .and_then(|c| c.first_match_mut(&filter, &cx));
                    cx.check().map_err(failed)?;
                    let Some(stored) = found else {
                        return refusal(&data);
                    };
                    let mut next = stored.doc.clone();
                    apply_update(&mut next, &update, now, false).map_err(failed)?;
                    let next = checked(next).map_err(failed)?;
                    let before = std::mem::replace(stored, next);
                    undo.push((ns.clone(), change.id.clone(), Some(before)));
                    Ok(())
                }
                NativeCommand::Delete { filter } => {
                    let matched = data
                        .get(ns)
                        .and_then(|c| c.matching(&filter, &cx).next().is_some().then_some(()));
                    cx.check().map_err(failed)?;
                    if matched.is_none() {
                        return refusal(&data);
                    }
                    let before = data.get_mut(ns).and_then(|c| c.remove(&change.id));
                    undo.push((ns.clone(), change.id.clone(), before));
                    Ok(())
                }
            }
        });
        if result.is_err() {
            for (ns, id, before) in undo.into_iter().rev() {
                let coll = collection(&mut data, &ns);
                coll.remove(&id);
                if let Some(doc) = before {
                    // It was there a moment ago under the same lock: re-inserting cannot collide.
                    let _ = coll.insert_new(&ns, doc);
                }
            }
        }
        result
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("commands", &self.command_count())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn name(&self) -> &str {
        "memory"
    }

    async fn now(&self) -> Result<bson::DateTime, StoreError> {
        self.count();
        Ok(self.inner.clock.now())
    }

    /// The clock itself, read in place: not a command.
    async fn clock_estimate(&self) -> Result<bson::DateTime, StoreError> {
        Ok(self.inner.clock.now())
    }

    async fn insert_one(&self, ns: &Namespace, doc: Document) -> Result<(), StoreError> {
        self.count();
        let doc = with_id_first(doc);
        check_id(&doc)?;
        let doc = checked(doc)?;
        let mut data = self.lock();
        collection(&mut data, ns).insert_new(ns, doc)
    }

    async fn update_one(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        upsert: bool,
    ) -> Result<UpdateOutcome, StoreError> {
        self.count();
        let now = self.inner.clock.now();
        self.update(ns, &filter, update, upsert, None, now)
            .map(|(outcome, _)| outcome)
    }

    /// One command, as on MongoDB: every statement is tried (unordered), and
    /// the first error, if any, is returned after all of them ran. The clock
    /// is read once, for all of them.
    async fn update_each(
        &self,
        ns: &Namespace,
        statements: Vec<(Document, Document)>,
    ) -> Result<u64, StoreError> {
        self.count();
        let now = self.inner.clock.now();
        let mut matched = 0;
        let mut first_error = None;
        for (filter, update) in statements {
            match self.update(ns, &filter, update, false, None, now) {
                Ok((outcome, _)) => matched += outcome.matched,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(matched),
        }
    }

    async fn find_one_and_update(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        ret: ReturnDocument,
        upsert: bool,
    ) -> Result<Option<Document>, StoreError> {
        self.count();
        let now = self.inner.clock.now();
        let (_, returned) = self.update(ns, &filter, update, upsert, Some(ret), now)?;
        Ok(returned)
    }

    async fn replace_one(
        &self,
        ns: &Namespace,
        filter: Document,
        replacement: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        self.count();
        query::validate(&filter)?;
        validate_replacement(&replacement)?;
        let cx = Ctx::clock(&*self.inner.clock);
        let mut data = self.lock();
        let found = data
            .get_mut(ns)
            .and_then(|coll| coll.first_match_mut(&filter, &cx));
        cx.check()?;
        let Some(stored) = found else {
            return Ok(UpdateOutcome::default());
        };
        let id = stored.doc.get("_id").cloned().unwrap_or(Bson::Null);
        let mut new = Document::new();
        new.insert("_id", id.clone());
        for (k, v) in replacement {
            if k == "_id" {
                if v != id {
                    return Err(StoreError::new(
                        StoreErrorKind::BadRequest,
                        format!(
                            "After applying the update, the (immutable) field '_id' was found to have been altered to _id: {v}"
                        ),
                    )
                    .with_code(66));
                }
            } else {
                new.insert(k, v);
            }
        }
        let new = checked(new)?;
        let modified = !same_document(&stored.doc, &new.doc);
        if modified {
            *stored = new;
        }
        Ok(UpdateOutcome {
            matched: 1,
            modified: u64::from(modified),
            upserted: false,
        })
    }

    fn supports_native(&self) -> bool {
        true
    }

    async fn run_native(&self, changes: &[DocumentChange]) -> Result<(), StepError> {
        self.count();
        self.native(changes)
    }

    async fn delete_one(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.count();
        query::validate(&filter)?;
        let cx = Ctx::clock(&*self.inner.clock);
        let mut data = self.lock();
        let Some(coll) = data.get_mut(ns) else {
            return Ok(0);
        };
        let found = coll.matching(&filter, &cx).next();
        cx.check()?;
        let id = match found {
            Some(doc) => doc.get("_id").cloned().unwrap_or(Bson::Null),
            None => return Ok(0),
        };
        Ok(u64::from(coll.remove(&id).is_some()))
    }

    async fn find_one(
        &self,
        ns: &Namespace,
        filter: Document,
    ) -> Result<Option<Document>, StoreError> {
        self.count();
        query::validate(&filter)?;
        let cx = Ctx::clock(&*self.inner.clock);
        let data = self.lock();
        let Some(coll) = data.get(ns) else {
            return Ok(None);
        };
        let found = coll.matching(&filter, &cx).next().cloned();
        cx.check()?;
        Ok(found)
    }

    async fn find(
        &self,
        ns: &Namespace,
        filter: Document,
        options: FindOptions,
    ) -> Result<Vec<Document>, StoreError> {
        self.count();
        query::validate(&filter)?;
        let sort = match &options.sort {
            Some(spec) => sort_keys(spec)?,
            None => Vec::new(),
        };
        // MongoDB: 0 means no limit, a negative limit is a limit of its magnitude.
        let limit = match options.limit.map(i64::unsigned_abs) {
            None | Some(0) => usize::MAX,
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        };
        let cx = Ctx::clock(&*self.inner.clock);
        let data = self.lock();
        let Some(coll) = data.get(ns) else {
            return Ok(Vec::new());
        };
        if sort.is_empty() {
            let found = coll.matching(&filter, &cx).take(limit).cloned().collect();
            cx.check()?;
            return Ok(found);
        }
        let mut found: Vec<&Document> = coll.matching(&filter, &cx).collect();
        cx.check()?;
        // A stable sort: ties stay in `_id` order.
        found.sort_by(|a, b| {
            for (path, descending) in &sort {
                let null = Bson::Null;
                let x = lookup(a, path).unwrap_or(&null);
                let y = lookup(b, path).unwrap_or(&null);
                let o = total_cmp(x, y);
                let o = if *descending { o.reverse() } else { o };
                if o != Ordering::Equal {
                    return o;
                }
            }
            Ordering::Equal
        });
        Ok(found.into_iter().take(limit).cloned().collect())
    }

    /// There are no indexes: does nothing (but counts as a call).
    async fn ensure_index(&self, ns: &Namespace, index: IndexSpec) -> Result<(), StoreError> {
        self.count();
        let _ = (ns, index);
        Ok(())
    }
}

/// The collection `ns`, created empty if needed.
fn collection<'a>(data: &'a mut Collections, ns: &Namespace) -> &'a mut Collection {
    if !data.contains_key(ns) {
        data.insert(ns.clone(), Collection::default());
    }
    data.get_mut(ns).expect("collection was just created")
}

/// Whether `doc`, found by looking up the `_id` equality of `filter`,
/// satisfies the rest of it. (The look-up already checked the `_id` clause:
/// it finds the document whose `_id` compares equal to the value.)
fn eval_rest(doc: &Document, filter: &Document, cx: &Ctx<'_>) -> bool {
    query::eval_skipping(doc, filter, Some("_id"), cx)
}

/// The value of a plain `_id` equality in `filter` (`{_id: v}` or
/// `{_id: {$eq: v}}`), which allows a direct look-up.
fn id_equality(filter: &Document) -> Option<&Bson> {
    match filter.get("_id")? {
        Bson::Document(ops) if is_operator_doc(ops) => match ops.get("$eq") {
            Some(Bson::Array(_) | Bson::RegularExpression(_)) => None,
            Some(v) if ops.len() == 1 => Some(v),
            _ => None,
        },
        // Array equality also matches arrays containing the value: scan.
        Bson::Array(_) => None,
        v => Some(v),
    }
}

/// `doc` with `_id` as its first field, as MongoDB stores documents; a new
/// ObjectId is generated when it has none.
fn with_id_first(mut doc: Document) -> Document {
    if doc.keys().next().is_some_and(|k| k == "_id") {
        return doc;
    }
    let id = doc
        .remove("_id")
        .unwrap_or_else(|| Bson::ObjectId(ObjectId::new()));
    let mut out = Document::new();
    out.insert("_id", id);
    out.extend(doc);
    out
}

/// MongoDB refuses some types as `_id`.
fn check_id(doc: &Document) -> Result<(), StoreError> {
    match doc.get("_id") {
        Some(v @ (Bson::Array(_) | Bson::RegularExpression(_) | Bson::Undefined)) => {
            Err(StoreError::new(
                StoreErrorKind::BadRequest,
                format!("can't use a {} for _id", query::type_name(v)),
            )
            .with_code(53))
        }
        _ => Ok(()),
    }
}

/// `doc`, measured, if it is within the size limit.
fn checked(doc: Document) -> Result<Stored, StoreError> {
    let stored = Stored::new(doc);
    check_len(stored.len)?;
    Ok(stored)
}

/// Refuses a document of `size` bytes over the limit.
fn check_len(size: usize) -> Result<(), StoreError> {
    if size > MAX_DOCUMENT_BYTES {
        return Err(StoreError::new(
            StoreErrorKind::DocumentTooLarge,
            format!(
                "BSONObj size: {size} (0x{size:X}) is invalid. Size must be between 0 and {MAX_DOCUMENT_BYTES}(16MB)"
            ),
        )
        .with_code(10334));
    }
    Ok(())
}

/// Equal with the same field order at the top level (the order of an
/// update's result only changes when a field is added or removed).
fn same_document(a: &Document, b: &Document) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((ka, va), (kb, vb))| ka == kb && va == vb)
}

/// Parses a sort specification into (path, descending) pairs.
fn sort_keys(spec: &Document) -> Result<Vec<(&str, bool)>, StoreError> {
    spec.iter()
        .map(|(path, dir)| {
            let descending = match dir {
                Bson::Int32(1) | Bson::Int64(1) => false,
                Bson::Int32(-1) | Bson::Int64(-1) => true,
                Bson::Double(f) if *f == 1.0 => false,
                Bson::Double(f) if *f == -1.0 => true,
                _ => {
                    return Err(StoreError::new(
                        StoreErrorKind::BadRequest,
                        format!(
                            "$sort key ordering must be 1 (for ascending) or -1 (for descending), got {path}: {dir}"
                        ),
                    )
                    .with_code(15975))
                }
            };
            Ok((path.as_str(), descending))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use bson::{doc, DateTime};
    use std::time::Duration;

    fn ns() -> Namespace {
        Namespace::new("db", "c")
    }

    #[test]
    fn ids_that_differ_only_at_the_end_spread_over_the_low_bits() {
        // Transaction ids are ObjectIds in hex: made in one second by one
        // process, they share all but their last characters. The hash table
        // picks buckets by the low bits of the hash.
        let buckets: std::collections::HashSet<u64> = (0..4096)
            .map(|_| {
                let id = Bson::String(bson::oid::ObjectId::new().to_hex());
                let mut h = FxHasher::default();
                hash_bson(&id, &mut h);
                h.finish() & 4095
            })
            .collect();
        assert!(
            buckets.len() > 2048,
            "4096 ids fell into {} of 4096 buckets",
            buckets.len()
        );
    }

    async fn store_with(docs: Vec<Document>) -> MemoryStore {
        let s = MemoryStore::new();
        for d in docs {
            s.insert_one(&ns(), d).await.unwrap();
        }
        s
    }

    #[tokio::test]
    async fn insert_generates_ids_and_rejects_duplicates() {
        let s = MemoryStore::new();
        s.insert_one(&ns(), doc! { "a": 1 }).await.unwrap();
        let docs = s.documents(&ns());
        assert_eq!(docs.len(), 1);
        assert!(matches!(docs[0].get("_id"), Some(Bson::ObjectId(_))));
        assert_eq!(docs[0].keys().next().map(String::as_str), Some("_id"));

        s.insert_one(&ns(), doc! { "x": 1, "_id": 5 })
            .await
            .unwrap();
        // _id is moved first, as MongoDB does.
        assert_eq!(
            s.find_one(&ns(), doc! { "_id": 5 }).await.unwrap(),
            Some(doc! { "_id": 5, "x": 1 })
        );
        let e = s
            .insert_one(&ns(), doc! { "_id": 5, "y": 2 })
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::DuplicateKey);
        assert_eq!(e.code, Some(11000));
        // Numerically equal _ids are the same _id.
        let e = s.insert_one(&ns(), doc! { "_id": 5.0 }).await.unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::DuplicateKey);
        assert_eq!(
            s.find_one(&ns(), doc! { "_id": 5_i64 }).await.unwrap(),
            Some(doc! { "_id": 5, "x": 1 })
        );
        let e = s.insert_one(&ns(), doc! { "_id": [1] }).await.unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        // Namespaces are separate.
        s.insert_one(&Namespace::new("db", "other"), doc! { "_id": 5 })
            .await
            .unwrap();
        assert_eq!(s.documents(&ns()).len(), 2);
        assert!(s.documents(&Namespace::new("nope", "nope")).is_empty());
    }

    #[tokio::test]
    async fn documents_are_ordered_by_id() {
        let s = store_with(vec![
            doc! { "_id": "b" },
            doc! { "_id": 10 },
            doc! { "_id": "a" },
            doc! { "_id": 2.5 },
            doc! { "_id": ObjectId::from_bytes([0; 12]) },
            doc! { "_id": 3_i64 },
        ])
        .await;
        let ids: Vec<Bson> = s
            .documents(&ns())
            .into_iter()
            .map(|d| d.get("_id").unwrap().clone())
            .collect();
        assert_eq!(
            ids,
            vec![
                Bson::Double(2.5),
                Bson::Int64(3),
                Bson::Int32(10),
                Bson::String("a".into()),
                Bson::String("b".into()),
                Bson::ObjectId(ObjectId::from_bytes([0; 12])),
            ]
        );
        let found = s
            .find(&ns(), doc! {}, FindOptions::default())
            .await
            .unwrap();
        assert_eq!(found.len(), 6);
        assert_eq!(found[0], doc! { "_id": 2.5 });
    }

    #[tokio::test]
    async fn update_each_runs_every_statement_and_counts_one_command() {
        let s = store_with(vec![
            doc! { "_id": 1, "n": 1 },
            doc! { "_id": 2, "n": 1, "s": "text" },
            doc! { "_id": 3, "n": 1 },
        ])
        .await;
        let before = s.command_count();
        let matched = s
            .update_each(
                &ns(),
                vec![
                    (doc! { "_id": 1 }, doc! { "$inc": { "n": 1 } }),
                    (doc! { "_id": 2, "n": 5 }, doc! { "$inc": { "n": 1 } }),
                    (
                        doc! { "_id": 3, "n": { "$gte": 1 } },
                        doc! { "$inc": { "n": 2 } },
                    ),
                ],
            )
            .await
            .unwrap();
        assert_eq!(matched, 2);
        assert_eq!(s.command_count() - before, 1);
        // Unordered: a failing statement does not stop the ones after it.
        let err = s
            .update_each(
                &ns(),
                vec![
                    (doc! { "_id": 2 }, doc! { "$inc": { "s": 1 } }),
                    (doc! { "_id": 3 }, doc! { "$inc": { "n": 10 } }),
                ],
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind, StoreErrorKind::TypeMismatch, "{err}");
        let n = |d: Option<Document>| d.unwrap().get_i32("n").unwrap();
        assert_eq!(n(s.find_one(&ns(), doc! { "_id": 1 }).await.unwrap()), 2);
        assert_eq!(n(s.find_one(&ns(), doc! { "_id": 2 }).await.unwrap()), 1);
        assert_eq!(n(s.find_one(&ns(), doc! { "_id": 3 }).await.unwrap()), 13);
    }

    #[tokio::test]
    async fn update_one_and_outcomes() {
        let s = store_with(vec![
            doc! { "_id": 1, "n": 1, "tag": "x" },
            doc! { "_id": 2, "n": 1, "tag": "x" },
        ])
        .await;
        let o = s
            .update_one(
                &ns(),
                doc! { "tag": "x" },
                doc! { "$inc": { "n": 1 } },
                false,
            )
            .await
            .unwrap();
        assert_eq!(
            o,
            UpdateOutcome {
                matched: 1,
                modified: 1,
                upserted: false
            }
        );
        // Only the first match (smallest _id) changed.
        assert_eq!(
            s.documents(&ns()),
            vec![
                doc! { "_id": 1, "n": 2, "tag": "x" },
                doc! { "_id": 2, "n": 1, "tag": "x" }
            ]
        );
        // A no-op update matches without modifying.
        let o = s
            .update_one(&ns(), doc! { "_id": 2 }, doc! { "$set": { "n": 1 } }, false)
            .await
            .unwrap();
        assert_eq!(
            o,
            UpdateOutcome {
                matched: 1,
                modified: 0,
                upserted: false
            }
        );
        // Guarded updates: the _id matches but the guard does not.
        let o = s
            .update_one(
                &ns(),
                doc! { "_id": 2, "n": 5 },
                doc! { "$set": { "n": 9 } },
                false,
            )
            .await
            .unwrap();
        assert_eq!(o, UpdateOutcome::default());
        let o = s
            .update_one(&ns(), doc! { "_id": 3 }, doc! { "$set": { "n": 9 } }, false)
            .await
            .unwrap();
        assert_eq!(o, UpdateOutcome::default());
        let o = s
            .update_one(
                &Namespace::new("x", "y"),
                doc! {},
                doc! { "$set": { "n": 9 } },
                false,
            )
            .await
            .unwrap();
        assert_eq!(o, UpdateOutcome::default());
        // _id via $eq also takes the direct path.
        let o = s
            .update_one(
                &ns(),
                doc! { "_id": { "$eq": 2 } },
                doc! { "$set": { "n": 7 } },
                false,
            )
            .await
            .unwrap();
        assert_eq!(o.modified, 1);
        assert_eq!(
            s.find_one(&ns(), doc! { "n": 7 }).await.unwrap(),
            Some(doc! { "_id": 2, "n": 7, "tag": "x" })
        );
        // Filters with _id operators scan.
        let o = s
            .update_one(
                &ns(),
                doc! { "_id": { "$gt": 1 } },
                doc! { "$set": { "n": 8 } },
                false,
            )
            .await
            .unwrap();
        assert_eq!(o.modified, 1);
        assert_eq!(
            s.find_one(&ns(), doc! { "_id": 2 })
                .await
                .unwrap()
                .unwrap()
                .get_i32("n")
                .unwrap(),
            8
        );
    }

    #[tokio::test]
    async fn failed_updates_leave_the_document_untouched() {
        let s = store_with(vec![doc! { "_id": 1, "a": 1, "s": "text" }]).await;
        let before = s.documents(&ns());
        // $set applies before $inc fails: nothing may be kept.
        let e = s
            .update_one(
                &ns(),
                doc! { "_id": 1 },
                doc! { "$set": { "a": 2 }, "$inc": { "s": 1 } },
                false,
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
        assert_eq!(e.code, Some(14));
        assert_eq!(s.documents(&ns()), before);
        let e = s
            .find_one_and_update(
                &ns(),
                doc! { "_id": 1 },
                doc! { "$set": { "a": 2 }, "$push": { "s": 1 } },
                ReturnDocument::After,
                false,
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
        assert_eq!(s.documents(&ns()), before);
        let e = s
            .update_one(
                &ns(),
                doc! { "_id": 1 },
                doc! { "$set": { "_id": 2 } },
                false,
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        let e = s
            .update_one(
                &ns(),
                doc! { "a": { "$bogus": 1 } },
                doc! { "$set": { "a": 2 } },
                false,
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        assert!(e.message.contains("$bogus"));
        assert_eq!(s.documents(&ns()), before);
    }

    #[tokio::test]
    async fn upserts() {
        let s = MemoryStore::with_clock(Arc::new(ManualClock::default()));
        let o = s
            .update_one(
                &ns(),
                doc! { "_id": "t1", "state": { "$ne": "done" }, "meta.kind": "transfer" },
                doc! { "$set": { "state": "initial" }, "$setOnInsert": { "created": true }, "$currentDate": { "at": true } },
                true,
            )
            .await
            .unwrap();
        assert_eq!(
            o,
            UpdateOutcome {
                matched: 0,
                modified: 0,
                upserted: true
            }
        );
        let now = s.clock().now();
        assert_eq!(
            s.documents(&ns()),
            vec![
                doc! { "_id": "t1", "meta": { "kind": "transfer" }, "state": "initial", "created": true, "at": now }
            ]
        );
        // Matching now: $setOnInsert is not applied.
        let o = s
            .update_one(
                &ns(),
                doc! { "_id": "t1" },
                doc! { "$set": { "state": "pending" }, "$setOnInsert": { "created": false } },
                true,
            )
            .await
            .unwrap();
        assert_eq!(
            o,
            UpdateOutcome {
                matched: 1,
                modified: 1,
                upserted: false
            }
        );
        assert!(s
            .find_one(&ns(), doc! {})
            .await
            .unwrap()
            .unwrap()
            .get_bool("created")
            .unwrap());
        // An upsert whose seed _id exists (the guard failed) is a duplicate, as in MongoDB.
        let e = s
            .update_one(
                &ns(),
                doc! { "_id": "t1", "state": "initial" },
                doc! { "$set": { "x": 1 } },
                true,
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::DuplicateKey);
        // Without an _id in the filter, one is generated and put first.
        let d = s
            .find_one_and_update(
                &ns(),
                doc! { "k": 1 },
                doc! { "$inc": { "n": 1 } },
                ReturnDocument::After,
                true,
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d.keys().collect::<Vec<_>>(), vec!["_id", "k", "n"]);
        assert!(matches!(d.get("_id"), Some(Bson::ObjectId(_))));
        // Before is None for an upsert.
        let before = s
            .find_one_and_update(
                &ns(),
                doc! { "k": 2 },
                doc! { "$inc": { "n": 1 } },
                ReturnDocument::Before,
                true,
            )
            .await
            .unwrap();
        assert_eq!(before, None);
        assert_eq!(s.documents(&ns()).len(), 3);
        // A failing upsert inserts nothing.
        let e = s
            .update_one(
                &ns(),
                doc! { "_id": "u", "s": "x" },
                doc! { "$inc": { "s": 1 } },
                true,
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
        assert_eq!(s.documents(&ns()).len(), 3);
        // No upsert without the flag.
        let d = s
            .find_one_and_update(
                &ns(),
                doc! { "k": 3 },
                doc! { "$inc": { "n": 1 } },
                ReturnDocument::After,
                false,
            )
            .await
            .unwrap();
        assert_eq!(d, None);
        assert_eq!(s.documents(&ns()).len(), 3);
    }

    #[tokio::test]
    async fn find_one_and_update_returns_before_or_after() {
        let s = store_with(vec![doc! { "_id": 1, "n": 1 }]).await;
        let before = s
            .find_one_and_update(
                &ns(),
                doc! { "_id": 1 },
                doc! { "$inc": { "n": 1 } },
                ReturnDocument::Before,
                false,
            )
            .await
            .unwrap();
        assert_eq!(before, Some(doc! { "_id": 1, "n": 1 }));
        let after = s
            .find_one_and_update(
                &ns(),
                doc! { "_id": 1 },
                doc! { "$inc": { "n": 1 } },
                ReturnDocument::After,
                false,
            )
            .await
            .unwrap();
        assert_eq!(after, Some(doc! { "_id": 1, "n": 3 }));
        let none = s
            .find_one_and_update(
                &ns(),
                doc! { "_id": 1, "n": 1 },
                doc! { "$inc": { "n": 1 } },
                ReturnDocument::After,
                false,
            )
            .await
            .unwrap();
        assert_eq!(none, None);
    }

    #[tokio::test]
    async fn replace_keeps_the_id() {
        let s = store_with(vec![doc! { "_id": 1, "a": 1, "b": 2 }]).await;
        let o = s
            .replace_one(&ns(), doc! { "a": 1 }, doc! { "c": 3 })
            .await
            .unwrap();
        assert_eq!(
            o,
            UpdateOutcome {
                matched: 1,
                modified: 1,
                upserted: false
            }
        );
        assert_eq!(s.documents(&ns()), vec![doc! { "_id": 1, "c": 3 }]);
        let o = s
            .replace_one(&ns(), doc! { "_id": 1 }, doc! { "c": 4, "_id": 1 })
            .await
            .unwrap();
        assert_eq!(o.modified, 1);
        assert_eq!(s.documents(&ns()), vec![doc! { "_id": 1, "c": 4 }]);
        let o = s
            .replace_one(&ns(), doc! { "_id": 1 }, doc! { "c": 4 })
            .await
            .unwrap();
        assert_eq!(
            o,
            UpdateOutcome {
                matched: 1,
                modified: 0,
                upserted: false
            }
        );
        // Never upserts.
        let o = s
            .replace_one(&ns(), doc! { "_id": 2 }, doc! { "c": 5 })
            .await
            .unwrap();
        assert_eq!(o, UpdateOutcome::default());
        assert_eq!(s.documents(&ns()).len(), 1);
        let e = s
            .replace_one(&ns(), doc! { "_id": 1 }, doc! { "_id": 2 })
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        let e = s
            .replace_one(&ns(), doc! { "_id": 1 }, doc! { "$set": { "c": 1 } })
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        assert_eq!(s.documents(&ns()), vec![doc! { "_id": 1, "c": 4 }]);
    }

    #[tokio::test]
    async fn delete_one_deletes_the_first_match() {
        let s = store_with(vec![
            doc! { "_id": 1, "k": "a" },
            doc! { "_id": 2, "k": "a" },
            doc! { "_id": 3, "k": "b" },
        ])
        .await;
        assert_eq!(s.delete_one(&ns(), doc! { "k": "a" }).await.unwrap(), 1);
        assert_eq!(
            s.documents(&ns()),
            vec![doc! { "_id": 2, "k": "a" }, doc! { "_id": 3, "k": "b" }]
        );
        assert_eq!(
            s.delete_one(&ns(), doc! { "_id": 3, "k": "a" })
                .await
                .unwrap(),
            0
        );
        assert_eq!(s.delete_one(&ns(), doc! { "_id": 3 }).await.unwrap(), 1);
        assert_eq!(s.delete_one(&ns(), doc! { "_id": 3 }).await.unwrap(), 0);
        assert_eq!(
            s.delete_one(&Namespace::new("x", "y"), doc! {})
                .await
                .unwrap(),
            0
        );
        assert_eq!(s.documents(&ns()), vec![doc! { "_id": 2, "k": "a" }]);
    }

    #[tokio::test]
    async fn find_sorts_and_limits() {
        let s = store_with(vec![
            doc! { "_id": 1, "state": "pending", "at": DateTime::from_millis(30), "p": 1 },
            doc! { "_id": 2, "state": "done", "at": DateTime::from_millis(10), "p": 2 },
            doc! { "_id": 3, "state": "pending", "at": DateTime::from_millis(20), "p": 1 },
            doc! { "_id": 4, "state": "pending", "p": 2 },
            doc! { "_id": 5, "state": "pending", "at": DateTime::from_millis(5), "p": 1.5 },
        ])
        .await;
        let ids = |docs: Vec<Document>| {
            docs.iter()
                .map(|d| d.get_i32("_id").unwrap())
                .collect::<Vec<_>>()
        };
        let opts = |sort: Document, limit: Option<i64>| FindOptions {
            sort: Some(sort),
            limit,
        };

        let found = s
            .find(
                &ns(),
                doc! { "state": "pending" },
                opts(doc! { "at": 1 }, None),
            )
            .await
            .unwrap();
        // Missing sorts first.
        assert_eq!(ids(found), vec![4, 5, 3, 1]);
        let found = s
            .find(
                &ns(),
                doc! { "state": "pending" },
                opts(doc! { "at": -1 }, Some(2)),
            )
            .await
            .unwrap();
        assert_eq!(ids(found), vec![1, 3]);
        let found = s
            .find(&ns(), doc! {}, opts(doc! { "p": -1, "_id": 1 }, None))
            .await
            .unwrap();
        assert_eq!(ids(found), vec![2, 4, 5, 1, 3]);
        let found = s
            .find(&ns(), doc! {}, opts(doc! { "p": 1 }, Some(-3)))
            .await
            .unwrap();
        assert_eq!(ids(found), vec![1, 3, 5]);
        let found = s
            .find(
                &ns(),
                doc! {},
                FindOptions {
                    sort: None,
                    limit: Some(2),
                },
            )
            .await
            .unwrap();
        assert_eq!(ids(found), vec![1, 2]);
        let found = s
            .find(
                &ns(),
                doc! {},
                FindOptions {
                    sort: None,
                    limit: Some(0),
                },
            )
            .await
            .unwrap();
        assert_eq!(found.len(), 5);
        let found = s
            .find(&ns(), doc! { "_id": 3 }, FindOptions::default())
            .await
            .unwrap();
        assert_eq!(ids(found), vec![3]);
        let e = s
            .find(&ns(), doc! {}, opts(doc! { "p": 2 }, None))
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        assert!(s
            .find(&Namespace::new("x", "y"), doc! {}, FindOptions::default())
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn documents_over_16_mib_are_refused() {
        let s = store_with(vec![doc! { "_id": 1, "small": "x" }]).await;
        let before = s.documents(&ns());
        let half = "x".repeat(9 * 1024 * 1024);
        // One field fits; the second would exceed the limit.
        s.update_one(
            &ns(),
            doc! { "_id": 1 },
            doc! { "$set": { "a": half.clone() } },
            false,
        )
        .await
        .unwrap();
        let fitting = s.documents(&ns());
        let e = s
            .update_one(
                &ns(),
                doc! { "_id": 1 },
                doc! { "$set": { "b": half.clone() } },
                false,
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::DocumentTooLarge);
        assert_eq!(e.code, Some(10334));
        assert_eq!(s.documents(&ns()), fitting);
        let e = s
            .find_one_and_update(
                &ns(),
                doc! { "_id": 1 },
                doc! { "$push": { "l": half.clone() } },
                ReturnDocument::After,
                false,
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::DocumentTooLarge);
        assert_eq!(s.documents(&ns()), fitting);
        let e = s
            .replace_one(
                &ns(),
                doc! { "_id": 1 },
                doc! { "a": half.clone(), "b": half.clone() },
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::DocumentTooLarge);
        assert_eq!(s.documents(&ns()), fitting);
        let e = s
            .insert_one(
                &ns(),
                doc! { "_id": 2, "a": half.clone(), "b": half.clone() },
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::DocumentTooLarge);
        let e = s
            .update_one(
                &ns(),
                doc! { "_id": 3 },
                doc! { "$set": { "a": half.clone(), "b": half } },
                true,
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::DocumentTooLarge);
        assert_eq!(s.documents(&ns()).len(), 1);
        assert_ne!(fitting, before);
    }

    #[test]
    fn document_len_matches_serialization() {
        let samples = vec![
            doc! {},
            doc! { "a": 1, "b": 2_i64, "c": 1.5, "d": "text", "e": true, "f": Bson::Null },
            doc! { "n": { "x": [1, "two", { "three": 3 }, [4]] }, "long": (0..120).collect::<Vec<i32>>() },
            doc! {
                "oid": ObjectId::new(), "date": DateTime::now(),
                "ts": bson::Timestamp { time: 1, increment: 2 },
                "bin": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2, 3] },
                "old": bson::Binary { subtype: bson::spec::BinarySubtype::BinaryOld, bytes: vec![1, 2] },
                "re": Bson::RegularExpression(bson::Regex { pattern: "a+".into(), options: "i".into() }),
                "js": Bson::JavaScriptCode("f()".into()),
                "jss": Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code: "g()".into(), scope: doc! { "v": 1 } }),
                "sym": Bson::Symbol("s".into()), "min": Bson::MinKey, "max": Bson::MaxKey, "u": Bson::Undefined,
                "dec": Bson::Decimal128(bson::Decimal128::from_bytes([0; 16])),
                "ünï": "çødé",
            },
        ];
        for d in samples {
            assert_eq!(document_len(&d), bson::to_vec(&d).unwrap().len(), "{d}");
        }
    }

    #[tokio::test]
    async fn stored_sizes_follow_updates() {
        let s = store_with(vec![doc! { "_id": "a", "n": 1, "l": ["t0"] }]).await;
        let sizes_match = |s: &MemoryStore| {
            let data = s.lock();
            for stored in data.get(&ns()).unwrap().docs.values() {
                assert_eq!(
                    stored.len,
                    bson::to_vec(&stored.doc).unwrap().len(),
                    "{}",
                    stored.doc
                );
            }
        };
        for u in [
            doc! { "$push": { "l": { "$each": (1..12).map(|i| format!("t{i}")).collect::<Vec<_>>() } } },
            doc! { "$pull": { "l": { "$in": ["t0", "t5"] } }, "$set": { "m.x": [1, 2] } },
            doc! { "$addToSet": { "_tandem.tombstones": "tx1" }, "$inc": { "n": 2_i64 } },
            doc! { "$unset": { "m": "", "n": "" }, "$currentDate": { "at": true } },
            doc! { "$set": { "l.20": { "k": "v" } }, "$pull": { "_tandem.tombstones": "tx1" } },
        ] {
            s.update_one(&ns(), doc! { "_id": "a" }, u.clone(), false)
                .await
                .unwrap();
            sizes_match(&s);
            // A refused update leaves the size as it was.
            let e = s
                .update_one(
                    &ns(),
                    doc! { "_id": "a" },
                    doc! { "$set": { "z": 1 }, "$inc": { "l": 1 } },
                    false,
                )
                .await
                .unwrap_err();
            assert_eq!(e.kind, StoreErrorKind::TypeMismatch, "{u}");
            sizes_match(&s);
        }
        s.update_one(
            &ns(),
            doc! { "_id": "b" },
            doc! { "$setOnInsert": { "p": [1, 2] } },
            true,
        )
        .await
        .unwrap();
        s.replace_one(&ns(), doc! { "_id": "a" }, doc! { "r": "x" })
            .await
            .unwrap();
        sizes_match(&s);
    }

    #[tokio::test]
    async fn clock_and_counters() {
        let clock = Arc::new(ManualClock::default());
        let s = MemoryStore::with_clock(clock.clone());
        assert_eq!(s.name(), "memory");
        let t0 = s.now().await.unwrap();
        clock.advance(Duration::from_secs(5));
        assert_eq!(
            s.now().await.unwrap().timestamp_millis(),
            t0.timestamp_millis() + 5000
        );
        assert_eq!(s.clock().now(), clock.now());
        s.insert_one(&ns(), doc! { "_id": 1 }).await.unwrap();
        let _ = s.insert_one(&ns(), doc! { "_id": 1 }).await;
        s.find_one(&ns(), doc! {}).await.unwrap();
        s.find(&ns(), doc! {}, FindOptions::default())
            .await
            .unwrap();
        s.update_one(&ns(), doc! {}, doc! { "$set": { "a": 1 } }, false)
            .await
            .unwrap();
        s.find_one_and_update(
            &ns(),
            doc! {},
            doc! { "$set": { "a": 2 } },
            ReturnDocument::After,
            false,
        )
        .await
        .unwrap();
        s.replace_one(&ns(), doc! {}, doc! { "a": 3 })
            .await
            .unwrap();
        s.delete_one(&ns(), doc! {}).await.unwrap();
        s.ensure_index(
            &ns(),
            crate::store::IndexSpec {
                name: "i".into(),
                keys: doc! { "a": 1 },
                expire_after_secs: None,
                partial_filter: None,
            },
        )
        .await
        .unwrap();
        // Clones share data and counters.
        let c = s.clone();
        c.now().await.unwrap();
        assert_eq!(s.command_count(), 12);
        assert_eq!(MemoryStore::default().command_count(), 0);
    }

    /// A store on a manual clock holding `docs`, and the clock's time in ms.
    async fn clocked_store_with(docs: Vec<Document>) -> (MemoryStore, Arc<ManualClock>, i64) {
        let clock = Arc::new(ManualClock::default());
        let s = MemoryStore::with_clock(clock.clone());
        for d in docs {
            s.insert_one(&ns(), d).await.unwrap();
        }
        let t0 = clock.now().timestamp_millis();
        (s, clock, t0)
    }

    /// Applies only before `deadline` (ms since the epoch).
    fn before(deadline: i64) -> Document {
        doc! { "$lt": [ { "$toLong": "$$NOW" }, deadline ] }
    }

    /// Applies only at or after `time` (ms since the epoch).
    fn from(time: i64) -> Document {
        doc! { "$gte": [ { "$toLong": "$$NOW" }, time ] }
    }

    #[tokio::test]
    async fn expr_now_fences_update_one_before_a_deadline() {
        let (s, clock, t0) = clocked_store_with(vec![doc! { "_id": "A", "n": 0 }]).await;
        let deadline = t0 + 1000;
        let fenced = doc! { "_id": "A", "$expr": before(deadline) };
        let inc = doc! { "$inc": { "n": 1 } };
        let o = s
            .update_one(&ns(), fenced.clone(), inc.clone(), false)
            .await
            .unwrap();
        assert_eq!((o.matched, o.modified), (1, 1));
        clock.advance(Duration::from_millis(999));
        let o = s
            .update_one(&ns(), fenced.clone(), inc.clone(), false)
            .await
            .unwrap();
        assert_eq!(o.matched, 1);
        // At the deadline the step no longer applies.
        clock.advance(Duration::from_millis(1));
        let o = s
            .update_one(&ns(), fenced.clone(), inc.clone(), false)
            .await
            .unwrap();
        assert_eq!(o, UpdateOutcome::default());
        let returned = s
            .find_one_and_update(
                &ns(),
                fenced.clone(),
                inc.clone(),
                ReturnDocument::After,
                false,
            )
            .await
            .unwrap();
        assert_eq!(returned, None);
        assert_eq!(
            s.update_each(&ns(), vec![(fenced.clone(), inc.clone())])
                .await
                .unwrap(),
            0
        );
        assert_eq!(s.documents(&ns()), vec![doc! { "_id": "A", "n": 2 }]);
        // A filter without `_id` (a scan) is fenced the same way.
        let scan = doc! { "n": 2, "$expr": before(deadline + 10) };
        let o = s
            .update_one(&ns(), scan.clone(), inc.clone(), false)
            .await
            .unwrap();
        assert_eq!(o.matched, 1);
        clock.advance(Duration::from_millis(10));
        let o = s
            .update_one(
                &ns(),
                doc! { "n": 3, "$expr": before(deadline + 10) },
                inc,
                false,
            )
            .await
            .unwrap();
        assert_eq!(o.matched, 0);
        assert_eq!(s.documents(&ns()), vec![doc! { "_id": "A", "n": 3 }]);
    }

    #[tokio::test]
    async fn expr_now_fences_delete_find_count_and_replace() {
        let (s, clock, t0) = clocked_store_with(vec![
            doc! { "_id": "A", "k": 1 },
            doc! { "_id": "B", "k": 1 },
        ])
        .await;
        let deadline = t0 + 50;
        let all = doc! { "$expr": before(deadline) };
        let found = s
            .find(&ns(), all.clone(), FindOptions::default())
            .await
            .unwrap();
        assert_eq!(found.len(), 2);
        let sorted = FindOptions {
            sort: Some(doc! { "_id": -1 }),
            limit: None,
        };
        assert_eq!(
            s.find(&ns(), all.clone(), sorted.clone())
                .await
                .unwrap()
                .len(),
            2
        );
        assert!(s
            .find_one(&ns(), doc! { "_id": "A", "$expr": before(deadline) })
            .await
            .unwrap()
            .is_some());
        assert_eq!(Store::count(&s, &ns(), all.clone()).await.unwrap(), 2);
        let o = s
            .replace_one(
                &ns(),
                doc! { "_id": "B", "$expr": before(deadline) },
                doc! { "k": 2 },
            )
            .await
            .unwrap();
        assert_eq!(o.modified, 1);
        clock.advance(Duration::from_millis(50));
        assert!(s
            .find(&ns(), all.clone(), FindOptions::default())
            .await
            .unwrap()
            .is_empty());
        assert!(s.find(&ns(), all.clone(), sorted).await.unwrap().is_empty());
        assert!(s
            .find_one(&ns(), doc! { "_id": "A", "$expr": before(deadline) })
            .await
            .unwrap()
            .is_none());
        assert_eq!(Store::count(&s, &ns(), all.clone()).await.unwrap(), 0);
        let o = s
            .replace_one(
                &ns(),
                doc! { "_id": "B", "$expr": before(deadline) },
                doc! { "k": 3 },
            )
            .await
            .unwrap();
        assert_eq!(o.matched, 0);
        assert_eq!(
            s.delete_one(&ns(), doc! { "_id": "A", "$expr": before(deadline) })
                .await
                .unwrap(),
            0
        );
        assert_eq!(s.delete_one(&ns(), all).await.unwrap(), 0);
        assert_eq!(
            s.documents(&ns()),
            vec![doc! { "_id": "A", "k": 1 }, doc! { "_id": "B", "k": 2 }]
        );
        // Before a later deadline the delete applies.
        assert_eq!(
            s.delete_one(&ns(), doc! { "_id": "A", "$expr": before(deadline + 1) })
                .await
                .unwrap(),
            1
        );
        assert_eq!(s.documents(&ns()), vec![doc! { "_id": "B", "k": 2 }]);
    }

    #[tokio::test]
    async fn expr_now_opens_a_step_at_a_time() {
        let (s, clock, t0) =
            clocked_store_with(vec![doc! { "_id": "A", "pendingTransactions": ["T"] }]).await;
        let at = t0 + 5000;
        let filter = doc! { "_id": "A", "pendingTransactions": "T", "$expr": from(at) };
        let pull = doc! { "$pull": { "pendingTransactions": "T" } };
        assert!(s.find_one(&ns(), filter.clone()).await.unwrap().is_none());
        assert_eq!(
            s.update_one(&ns(), filter.clone(), pull.clone(), false)
                .await
                .unwrap()
                .matched,
            0
        );
        assert_eq!(s.delete_one(&ns(), filter.clone()).await.unwrap(), 0);
        clock.advance(Duration::from_millis(4999));
        assert_eq!(
            s.update_one(&ns(), filter.clone(), pull.clone(), false)
                .await
                .unwrap()
                .matched,
            0
        );
        clock.advance(Duration::from_millis(1));
        assert!(s.find_one(&ns(), filter.clone()).await.unwrap().is_some());
        assert_eq!(
            s.update_one(&ns(), filter.clone(), pull, false)
                .await
                .unwrap()
                .modified,
            1
        );
        assert_eq!(
            s.documents(&ns()),
            vec![doc! { "_id": "A", "pendingTransactions": [] }]
        );
        // The guard on the marker still counts.
        assert_eq!(s.delete_one(&ns(), filter).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn expr_compares_now_with_a_field() {
        let t0 = ManualClock::default().now().timestamp_millis();
        let (s, clock, _) = clocked_store_with(vec![
            doc! { "_id": "A", "until": t0 + 100, "expires": DateTime::from_millis(t0 + 100) },
        ])
        .await;
        let by_millis = doc! { "$expr": { "$lt": [ { "$toLong": "$$NOW" }, "$until" ] } };
        let by_date = doc! { "$expr": { "$lt": [ "$$NOW", "$expires" ] } };
        for f in [&by_millis, &by_date] {
            assert!(s.find_one(&ns(), f.clone()).await.unwrap().is_some(), "{f}");
        }
        clock.advance(Duration::from_millis(100));
        for f in [&by_millis, &by_date] {
            assert!(s.find_one(&ns(), f.clone()).await.unwrap().is_none(), "{f}");
            let o = s
                .update_one(&ns(), f.clone(), doc! { "$set": { "x": 1 } }, false)
                .await
                .unwrap();
            assert_eq!(o.matched, 0);
        }
    }

    #[tokio::test]
    async fn unsupported_expr_is_a_bad_request_and_changes_nothing() {
        let (s, _clock, t0) = clocked_store_with(vec![doc! { "_id": "A", "n": 1, "s": "x" }]).await;
        let inc = doc! { "$inc": { "n": 1 } };
        for (filter, name) in [
            (
                doc! { "_id": "A", "$expr": { "$lt": [ { "$add": [ { "$toLong": "$$NOW" }, 1 ] }, t0 + 10 ] } },
                "$add",
            ),
            (
                doc! { "_id": "A", "$expr": { "$lt": [ { "$toLong": "$$CLUSTER_TIME" }, t0 + 10 ] } },
                "$$CLUSTER_TIME",
            ),
        ] {
            let e = s
                .update_one(&ns(), filter.clone(), inc.clone(), true)
                .await
                .unwrap_err();
            assert_eq!(e.kind, StoreErrorKind::BadRequest, "{filter}");
            assert!(e.message.contains(name), "{}", e.message);
            let e = s.delete_one(&ns(), filter.clone()).await.unwrap_err();
            assert_eq!(e.kind, StoreErrorKind::BadRequest);
            let e = s
                .find(&ns(), filter.clone(), FindOptions::default())
                .await
                .unwrap_err();
            assert_eq!(e.kind, StoreErrorKind::BadRequest);
            let e = s
                .find_one_and_update(
                    &ns(),
                    filter.clone(),
                    inc.clone(),
                    ReturnDocument::After,
                    true,
                )
                .await
                .unwrap_err();
            assert_eq!(e.kind, StoreErrorKind::BadRequest);
        }
        // `$expr` has no place in a `$pull` condition.
        let e = s
            .update_one(
                &ns(),
                doc! { "_id": "A" },
                doc! { "$pull": { "l": { "$expr": true } } },
                false,
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        // A conversion that fails while evaluating fails the call, as on MongoDB.
        let e = s
            .update_one(
                &ns(),
                doc! { "$expr": { "$lt": [ { "$toLong": "$s" }, 5 ] } },
                inc.clone(),
                false,
            )
            .await
            .unwrap_err();
        assert_eq!((e.kind, e.code), (StoreErrorKind::Other, Some(241)), "{e}");
        let e = s
            .delete_one(&ns(), doc! { "_id": "A", "$expr": { "$toLong": "$s" } })
            .await
            .unwrap_err();
        assert_eq!(e.code, Some(241));
        assert_eq!(
            s.documents(&ns()),
            vec![doc! { "_id": "A", "n": 1, "s": "x" }]
        );
        // ... but only when it is evaluated.
        let o = s
            .update_one(
                &ns(),
                doc! { "_id": "B", "$expr": { "$toLong": "$s" } },
                inc,
                false,
            )
            .await
            .unwrap();
        assert_eq!(o, UpdateOutcome::default());
    }

    #[tokio::test]
    async fn upsert_with_expr_that_matches_nothing_inserts() {
        let (s, _clock, t0) = clocked_store_with(vec![]).await;
        // The deadline has passed: nothing matches, so the upsert inserts.
        let o = s
            .update_one(
                &ns(),
                doc! { "_id": "A", "state": "new", "$expr": before(t0) },
                doc! { "$set": { "n": 1 } },
                true,
            )
            .await
            .unwrap();
        assert_eq!((o.matched, o.upserted), (0, true));
        assert_eq!(
            s.documents(&ns()),
            vec![doc! { "_id": "A", "state": "new", "n": 1 }]
        );
        let returned = s
            .find_one_and_update(
                &ns(),
                doc! { "_id": "B", "$and": [ { "$expr": from(t0 + 1) } ] },
                doc! { "$setOnInsert": { "n": 0 } },
                ReturnDocument::After,
                true,
            )
            .await
            .unwrap();
        assert_eq!(returned, Some(doc! { "_id": "B", "n": 0 }));
        // A matching `$expr` updates instead.
        let o = s
            .update_one(
                &ns(),
                doc! { "_id": "A", "$expr": before(t0 + 1) },
                doc! { "$set": { "n": 2 } },
                true,
            )
            .await
            .unwrap();
        assert_eq!((o.matched, o.upserted), (1, false));
        assert_eq!(s.documents(&ns()).len(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_increments_are_atomic() {
        let s = store_with(vec![doc! { "_id": "counter", "n": 0, "log": [] }]).await;
        let mut tasks = Vec::new();
        for t in 0..8 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..1000 {
                    if (t + i) % 2 == 0 {
                        s.update_one(
                            &ns(),
                            doc! { "_id": "counter" },
                            doc! { "$inc": { "n": 1 } },
                            false,
                        )
                        .await
                        .unwrap();
                    } else {
                        s.find_one_and_update(
                            &ns(),
                            doc! { "_id": "counter" },
                            doc! { "$inc": { "n": 1 } },
                            ReturnDocument::After,
                            false,
                        )
                        .await
                        .unwrap();
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let d = s
            .find_one(&ns(), doc! { "_id": "counter" })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d.get_i32("n").unwrap(), 8000);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_guarded_claims_succeed_once() {
        // Compare-and-set through a guarded update: exactly one claimant wins each round.
        let s = store_with(vec![
            doc! { "_id": "lock", "owner": Bson::Null, "round": 0 },
        ])
        .await;
        let mut tasks = Vec::new();
        for t in 0..8 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let mut wins = 0;
                for round in 0..200 {
                    let o = s
                        .update_one(
                            &ns(),
                            doc! { "_id": "lock", "round": round, "owner": Bson::Null },
                            doc! { "$set": { "owner": t } },
                            false,
                        )
                        .await
                        .unwrap();
                    wins += o.modified;
                    // Whoever holds it releases it and opens the next round.
                    s.update_one(
                        &ns(),
                        doc! { "_id": "lock", "round": round, "owner": t },
                        doc! { "$set": { "owner": Bson::Null }, "$inc": { "round": 1 } },
                        false,
                    )
                    .await
                    .unwrap();
                    while s
                        .find_one(&ns(), doc! { "_id": "lock", "round": { "$lte": round } })
                        .await
                        .unwrap()
                        .is_some()
                    {
                        tokio::task::yield_now().await;
                    }
                }
                wins
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        assert_eq!(total, 200);
    }
}
