//! [`MemoryStore`]: an embedded, in-process [`Store`].

use std::cmp::Ordering;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bson::oid::ObjectId;
use bson::{Bson, Document};

use crate::change::DocumentChange;
use crate::clock::{Clock, SystemClock};
use crate::query::size::document_len;
use crate::query::update::{
    apply_logged_taking, apply_to_new, apply_validated, apply_validated_taking, check_update,
    check_update_touching_id, checked_upsert_seed, path_count, validate_replacement, UndoLog,
};
use crate::query::{self, is_operator_doc, lookup, total_cmp, Ctx};
use crate::store::{
    FindOneAndUpdateOptions, FindOptions, IndexSpec, Namespace, ReturnDocument, Store, StoreError,
    StoreErrorKind, UpdateOutcome,
};
use storage::{Collection, Collections, Stored};

mod id;
mod native;
mod storage;

/// The largest document a store accepts, as in MongoDB: 16 MiB.
const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

/// An embedded document store that keeps everything in process memory.
///
/// It gives every [`Store`] call the same guarantees MongoDB gives one
/// document: each call is atomic (one lock is held for the whole
/// read-modify-write), and an update that fails leaves the document as it
/// was. It evaluates the subset of MongoDB's filter and update operators that
/// tandem and its guards use, as MongoDB does, and refuses the rest with
/// [`StoreErrorKind::BadRequest`](crate::StoreErrorKind::BadRequest); the
/// guide's Stores chapter lists them. Time comes from a [`Clock`], so tests can
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
/// * `find` sorts by the value found at each dotted sort-key path
///   sort key (missing sorts as null, first when ascending), across types in
///   MongoDB's bracket order; unlike MongoDB, an array is not sorted by its
///   smallest or largest element. No collations.
/// * Documents over 16 MiB are refused with
///   [`StoreErrorKind::DocumentTooLarge`], as MongoDB does; so are those
///   nesting documents and arrays more than 180 levels deep, themselves
///   included (empty ones do not count), with [`StoreErrorKind::Overflow`]
///   (code 15), as MongoDB does with its default `maxBSONDepth`.
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
/// use tandem::store::{Namespace, Store, UpdateOptions};
/// use tandem::MemoryStore;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let accounts = Namespace::new("bank", "accounts");
/// store.insert_one(&accounts, doc! { "_id": "alice", "balance": 100 }).await.unwrap();
/// let outcome = store
///     .update_one(&accounts, doc! { "_id": "alice", "balance": { "$gte": 30 } },
///                 doc! { "$inc": { "balance": -30 } }, UpdateOptions::default())
///     .await
///     .unwrap();
/// assert_eq!(outcome.modified, 1);
/// let alice = store.find_one(&accounts, doc! { "_id": "alice" }).await.unwrap();
/// assert_eq!(alice, Some(doc! { "_id": "alice", "balance": 70 }));
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

    #[cfg(any(test, feature = "test-util"))]
    /// For tests: the store's clock.
    pub fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.inner.clock)
    }

    #[cfg(any(test, feature = "test-util"))]
    /// For tests: every document of `ns`, in `_id` order (empty if the
    /// collection does not exist). Not counted by [`command_count`](Self::command_count).
    pub fn documents(&self, ns: &Namespace) -> Vec<Document> {
        self.lock()
            .get(ns)
            .map(|c| c.iter().map(|(_, doc)| doc.clone()).collect())
            .unwrap_or_default()
    }

    #[cfg(any(test, feature = "test-util"))]
    /// For tests and benchmarks: how many [`Store`] calls this store (and its
    /// clones) has served, counting every async method, `now` and
    /// `ensure_index` included, whether it succeeded or not. [`Store::name`]
    /// and the testing helpers are not counted.
    pub fn command_count(&self) -> u64 {
        self.inner.commands.load(AtomicOrdering::Relaxed)
    }

    fn count_command(&self) {
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
        ret: Option<FindOneAndUpdateOptions>,
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
            return update_stored(stored, UpdateArg::Taken(&mut update), ret, now);
        }
        if !upsert {
            // MongoDB rejects a malformed update even when nothing matches.
            check_update(&update)?;
            return Ok((UpdateOutcome::default(), None));
        }
        // The seed takes the filter's equalities; an `$expr` adds nothing (as in MongoDB).
        let mut created = checked_upsert_seed(filter)?;
        apply_to_new(&mut created, update, now)?;
        let created = with_id_first(created);
        check_id(&created)?;
        let created = checked(created)?;
        let returned = match ret {
            Some(o) if o.return_document == ReturnDocument::After => {
                Some(returned(&created.doc, o.fields))
            }
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

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field(
                "commands",
                &self.inner.commands.load(AtomicOrdering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn name(&self) -> &str {
        "memory"
    }

    async fn now(&self) -> Result<bson::DateTime, StoreError> {
        self.count_command();
        Ok(self.inner.clock.now())
    }

    /// The clock itself, read in place: not a command.
    async fn clock_estimate(&self) -> Result<bson::DateTime, StoreError> {
        Ok(self.inner.clock.now())
    }

    async fn insert_one(&self, ns: &Namespace, doc: Document) -> Result<(), StoreError> {
        self.count_command();
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
        options: crate::store::UpdateOptions,
    ) -> Result<UpdateOutcome, StoreError> {
        self.count_command();
        let now = self.inner.clock.now();
        self.update(ns, &filter, update, options.upsert, None, now)
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
        self.count_command();
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

    /// One command, as on MongoDB: the matches are found first, then each
    /// is updated on its own, still under `filter`, with one clock reading.
    async fn update_many(
        &self,
        ns: &Namespace,
        filter: Document,
        mut update: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        self.count_command();
        query::validate(&filter)?;
        let now = self.inner.clock.now();
        let cx = Ctx::at(Some(now));
        // Matched and updated under one hold of the lock: each match is
        // updated as it was matched.
        let mut data = self.lock();
        let Some(coll) = data.get_mut(ns) else {
            check_update(&update)?;
            return Ok(UpdateOutcome::default());
        };
        let ids: Vec<Bson> = coll
            .matching(&filter, &cx)
            .map(|doc| doc.get("_id").cloned().unwrap_or(Bson::Null))
            .collect();
        cx.check()?;
        // Checked once for every match (the check reads the update alone):
        // a malformed update is refused before the first match is touched,
        // as each match's own check refused it.
        let touches_id = check_update_touching_id(&update)?;
        let mut total = UpdateOutcome::default();
        // Every match but the last reads the update; the last takes its values.
        let last = ids.len().saturating_sub(1);
        for (i, id) in ids.iter().enumerate() {
            let stored = coll.get_mut(id).expect("a match found under this lock");
            let arg = if i == last {
                UpdateArg::TakenChecked(&mut update, touches_id)
            } else {
                UpdateArg::SharedChecked(&update, touches_id)
            };
            let (outcome, _) = update_stored(stored, arg, None, now)?;
            total.matched += outcome.matched;
            total.modified += outcome.modified;
        }
        Ok(total)
    }

    async fn find_one_and_update(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: crate::store::FindOneAndUpdateOptions,
    ) -> Result<Option<Document>, StoreError> {
        self.count_command();
        let now = self.inner.clock.now();
        let (_, returned) = self.update(ns, &filter, update, options.upsert, Some(options), now)?;
        Ok(returned)
    }

    async fn replace_one(
        &self,
        ns: &Namespace,
        filter: Document,
        replacement: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        self.count_command();
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
                // Compared as MongoDB compares values (see `check_id_kept`).
                if !query::total_cmp(&v, &id).is_eq() {
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

    fn native(&self) -> Option<&dyn crate::NativeTransactions> {
        Some(self)
    }

    async fn delete_one(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.count_command();
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

    async fn delete_many(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.count_command();
        query::validate(&filter)?;
        let cx = Ctx::clock(&*self.inner.clock);
        let mut data = self.lock();
        let Some(coll) = data.get_mut(ns) else {
            return Ok(0);
        };
        let ids: Vec<Bson> = coll
            .matching(&filter, &cx)
            .map(|doc| doc.get("_id").cloned().unwrap_or(Bson::Null))
            .collect();
        cx.check()?;
        let mut deleted = 0;
        for id in ids {
            deleted += u64::from(coll.remove(&id).is_some());
        }
        Ok(deleted)
    }

    async fn find_one(
        &self,
        ns: &Namespace,
        filter: Document,
    ) -> Result<Option<Document>, StoreError> {
        self.count_command();
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

    /// Looks, without copying the document.
    async fn exists(&self, ns: &Namespace, filter: Document) -> Result<bool, StoreError> {
        self.count_command();
        query::validate(&filter)?;
        let cx = Ctx::clock(&*self.inner.clock);
        let data = self.lock();
        let found = data
            .get(ns)
            .is_some_and(|coll| coll.matching(&filter, &cx).next().is_some());
        cx.check()?;
        Ok(found)
    }

    async fn count(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.count_command();
        query::validate(&filter)?;
        let cx = Ctx::clock(&*self.inner.clock);
        let data = self.lock();
        let n = data
            .get(ns)
            .map_or(0, |coll| coll.matching(&filter, &cx).count());
        cx.check()?;
        Ok(n as u64)
    }

    async fn find(
        &self,
        ns: &Namespace,
        filter: Document,
        options: FindOptions,
    ) -> Result<Vec<Document>, StoreError> {
        self.count_command();
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
        // Each match with its sort keys, looked up once, and its place in
        // `_id` order, which breaks ties: the order is total, so the first
        // `limit` can be selected before they are sorted (a recovery scan
        // takes a page of a hundred from all records in flight).
        const NULL: Bson = Bson::Null;
        let mut found: Vec<(Vec<&Bson>, usize, &Document)> = coll
            .matching(&filter, &cx)
            .enumerate()
            .map(|(at, d)| {
                let keys = sort
                    .iter()
                    .map(|(path, _)| lookup(d, path).unwrap_or(&NULL))
                    .collect();
                (keys, at, d)
            })
            .collect();
        cx.check()?;
        let order = |a: &(Vec<&Bson>, usize, &Document), b: &(Vec<&Bson>, usize, &Document)| {
            for ((x, y), (_, descending)) in a.0.iter().zip(&b.0).zip(&sort) {
                let o = total_cmp(x, y);
                let o = if *descending { o.reverse() } else { o };
                if o != Ordering::Equal {
                    return o;
                }
            }
            a.1.cmp(&b.1)
        };
        if limit < found.len() {
            found.select_nth_unstable_by(limit, order);
            found.truncate(limit);
        }
        found.sort_unstable_by(order);
        Ok(found.into_iter().map(|(_, _, d)| d.clone()).collect())
    }

    /// There are no indexes: does nothing (but counts as a call).
    async fn ensure_index(&self, ns: &Namespace, index: IndexSpec) -> Result<(), StoreError> {
        self.count_command();
        let _ = (ns, index);
        Ok(())
    }

    /// There are no indexes: does nothing (but counts as a call).
    async fn drop_index(&self, ns: &Namespace, name: &str) -> Result<(), StoreError> {
        self.count_command();
        let _ = (ns, name);
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

/// The update [`update_stored`] applies: one the caller drops afterwards,
/// whose values are moved into the document, or one it applies to further
/// documents, whose values are cloned.
enum UpdateArg<'a> {
    /// Left partly emptied.
    Taken(&'a mut Document),
    /// [`Taken`](Self::Taken), already checked
    /// ([`check_update_touching_id`], which answered the `bool`).
    TakenChecked(&'a mut Document, bool),
    /// Left as it is; already checked, as [`TakenChecked`](Self::TakenChecked).
    SharedChecked(&'a Document, bool),
}

/// Applies `update` to one stored document in place, with an undo log: the
/// document is restored unless every operator succeeded and the result
/// fits. Returns the outcome and, if `ret` asks for one, the document
/// before or after. `now` is the value of `$$NOW` and of `$currentDate`.
fn update_stored(
    stored: &mut Stored,
    update: UpdateArg<'_>,
    ret: Option<FindOneAndUpdateOptions>,
    now: bson::DateTime,
) -> Result<(UpdateOutcome, Option<Document>), StoreError> {
    // Applied in place, with an undo log: the stored document is
    // restored unless every operator succeeded and the result fits.
    let before = match ret {
        Some(o) if o.return_document == ReturnDocument::Before => {
            Some(returned(&stored.doc, o.fields))
        }
        _ => None,
    };
    let paths = match &update {
        UpdateArg::Taken(u) | UpdateArg::TakenChecked(u, _) => path_count(u),
        UpdateArg::SharedChecked(u, _) => path_count(u),
    };
    let mut undo = UndoLog::with_capacity(paths);
    let applied = match update {
        UpdateArg::Taken(update) => {
            apply_logged_taking(&mut stored.doc, update, now, false, &mut undo)
        }
        UpdateArg::TakenChecked(update, touches_id) => {
            apply_validated_taking(&mut stored.doc, update, touches_id, now, false, &mut undo)
        }
        UpdateArg::SharedChecked(update, touches_id) => {
            apply_validated(&mut stored.doc, update, touches_id, now, false, &mut undo)
        }
    };
    let applied = applied.and_then(|()| {
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
        Some(o) => match o.return_document {
            ReturnDocument::Before => before,
            ReturnDocument::After => Some(returned(&stored.doc, o.fields)),
        },
    };
    let outcome = UpdateOutcome {
        matched: 1,
        modified: u64::from(modified),
        upserted: false,
    };
    Ok((outcome, returned))
}

/// The answer of a `find_one_and_update`: `doc`, or only its `_id` and
/// `fields` (those it has, in its order), copied.
fn returned(doc: &Document, fields: Option<&[&str]>) -> Document {
    match fields {
        None => doc.clone(),
        Some(fields) => doc
            .iter()
            .filter(|(k, _)| *k == "_id" || fields.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
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

/// The values of a plain `_id: {$in: [...]}` in `filter`, which allows a
/// look-up per value; `None` if any value would match more than equal
/// `_id`s (a regular expression, an array) or the clause has other operators.
fn id_list(filter: &Document) -> Option<&Vec<Bson>> {
    let Bson::Document(ops) = filter.get("_id")? else {
        return None;
    };
    match ops.get("$in") {
        Some(Bson::Array(ids))
            if ops.len() == 1
                && ids
                    .iter()
                    .all(|id| !matches!(id, Bson::Array(_) | Bson::RegularExpression(_))) =>
        {
            Some(ids)
        }
        _ => None,
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

/// `doc`, measured, if it is within the size and depth limits.
fn checked(doc: Document) -> Result<Stored, StoreError> {
    let (doc, len) = query::depth::measured(doc)?;
    check_len(len)?;
    Ok(Stored { doc, len })
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

/// The same BSON: the same fields in the same order at every depth, each
/// value of the same type and bits (`0.0` is not `-0.0`), as MongoDB tells
/// a replacement that changes nothing. (`Bson`'s `==` ignores the order of
/// a sub-document's fields and equates the zeros: a replacement differing
/// only so was dropped.)
fn same_document(a: &Document, b: &Document) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb))
}

fn identical(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Document(a), Bson::Document(b)) => same_document(a, b),
        (Bson::Array(a), Bson::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| identical(x, y))
        }
        (Bson::Double(a), Bson::Double(b)) => a.to_bits() == b.to_bits(),
        (Bson::JavaScriptCodeWithScope(a), Bson::JavaScriptCodeWithScope(b)) => {
            a.code == b.code && same_document(&a.scope, &b.scope)
        }
        _ => a == b,
    }
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
mod tests;

#[async_trait]
impl crate::NativeTransactions for MemoryStore {
    async fn run_native(
        &self,
        changes: &[DocumentChange],
        retry: crate::RetryPolicy,
    ) -> Result<(), crate::NativeFailure> {
        // One call, under the store's lock: nothing can fail transiently,
        // and a failure leaves nothing applied.
        let _ = retry;
        self.count_command();
        self.run_locked(changes)
            .map_err(crate::NativeFailure::Aborted)
    }
}
