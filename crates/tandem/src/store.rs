//! The [`Store`] trait: the few single-document atomic operations the protocol needs.
//!
//! Every method maps to exactly one MongoDB command on one document (or, for
//! [`Store::find`], one query), so a store backed by MongoDB forwards each call
//! as it is, and the embedded [`MemoryStore`](crate::MemoryStore) gives each call
//! the same atomicity that MongoDB gives one document.
//!
//! Filters and updates are ordinary MongoDB query and update documents. The
//! protocol only ever uses this subset, which every store must support:
//!
//! * filter operators: plain equality (including "array contains" on arrays and
//!   dotted paths such as `"a.b"` or `"list.0"`), `$eq`, `$ne`, `$gt`, `$gte`,
//!   `$lt`, `$lte`, `$in`, `$nin`, `$exists`, `$not` (of an operator document),
//!   and top-level `$and` / `$or`;
//! * update operators: `$set`, `$unset`, `$inc`, `$push`, `$pull` (by equality),
//!   `$addToSet`, `$currentDate` (with `true`), `$setOnInsert`, and upserts.

use std::fmt;

use async_trait::async_trait;
use bson::Document;
use serde::{Deserialize, Serialize};

use crate::native::NativeTransactions;

pub use crate::engine::store_identity;

/// A database and collection name: where a document lives in a [`Store`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Namespace {
    /// The database name.
    pub db: String,
    /// The collection name.
    pub collection: String,
}

impl Namespace {
    /// A namespace from a database and a collection name.
    pub fn new(db: impl Into<String>, collection: impl Into<String>) -> Self {
        Namespace {
            db: db.into(),
            collection: collection.into(),
        }
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.db, self.collection)
    }
}

/// What an update or replace did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpdateOutcome {
    /// How many documents matched the filter (0 or 1).
    pub matched: u64,
    /// How many documents were changed (0 or 1).
    pub modified: u64,
    /// Whether the upsert inserted a new document.
    pub upserted: bool,
}

/// Which version of the document `find_one_and_update` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReturnDocument {
    /// The document as it was before the update.
    Before,
    /// The document as it is after the update.
    After,
}

/// Options of [`Store::update_one`].
///
/// ```
/// use tandem::store::UpdateOptions;
///
/// assert!(!UpdateOptions::default().upsert);
/// assert!(UpdateOptions::upsert().upsert);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpdateOptions {
    /// When nothing matches, insert a document made of the filter's
    /// equalities with the update applied. Default: `false`.
    pub upsert: bool,
}

impl UpdateOptions {
    /// Options that upsert.
    pub fn upsert() -> Self {
        UpdateOptions { upsert: true }
    }

    /// These options, upserting or not.
    pub fn with_upsert(mut self, upsert: bool) -> Self {
        self.upsert = upsert;
        self
    }
}

/// Options of [`Store::find_one_and_update`].
///
/// ```
/// use tandem::store::{FindOneAndUpdateOptions, ReturnDocument};
///
/// let options = FindOneAndUpdateOptions::returning(ReturnDocument::After)
///     .with_upsert(true)
///     .with_fields(&["created"]);
/// assert_eq!(options.return_document, ReturnDocument::After);
/// assert!(options.upsert);
/// assert_eq!(options.fields, Some(&["created"][..]));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FindOneAndUpdateOptions {
    /// Which version of the document to return.
    pub return_document: ReturnDocument,
    /// When nothing matches, insert a document made of the filter's
    /// equalities with the update applied.
    pub upsert: bool,
    /// The top-level fields to return, with `_id` (a projection such as
    /// `{created: 1, leaseStart: 1}`); `None` returns the whole document.
    pub fields: Option<&'static [&'static str]>,
}

impl FindOneAndUpdateOptions {
    /// Options returning `return_document`, without upsert.
    pub fn returning(return_document: ReturnDocument) -> Self {
        FindOneAndUpdateOptions {
            return_document,
            upsert: false,
            fields: None,
        }
    }

    /// These options, upserting or not.
    pub fn with_upsert(mut self, upsert: bool) -> Self {
        self.upsert = upsert;
        self
    }

    /// These options, returning only `fields` (top-level names) and `_id`.
    /// A field the document lacks is left out of the answer.
    pub fn with_fields(mut self, fields: &'static [&'static str]) -> Self {
        self.fields = Some(fields);
        self
    }
}

/// Options of [`Store::find`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FindOptions {
    /// Sort specification, e.g. `{ "lastModified": 1 }`.
    pub sort: Option<Document>,
    /// The most documents to return.
    pub limit: Option<i64>,
}

/// An index a collection should have; created idempotently by [`Store::ensure_index`].
#[derive(Clone, Debug, PartialEq)]
pub struct IndexSpec {
    /// The index name.
    pub name: String,
    /// The key specification, e.g. `{ "state": 1, "lastModified": 1 }`.
    pub keys: Document,
    /// For a TTL index: seconds after the date in the (single) key field.
    pub expire_after_secs: Option<u64>,
    /// An optional partial filter expression.
    pub partial_filter: Option<Document>,
}

/// The kind of a [`StoreError`]: what went wrong, as far as the protocol cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// A document with the same `_id` (or unique key) already exists.
    DuplicateKey,
    /// An operator met a stored value of the wrong type (e.g. `$inc` on a string).
    TypeMismatch,
    /// The document would exceed the 16 MiB limit.
    DocumentTooLarge,
    /// A numeric update would overflow.
    Overflow,
    /// The store refused the command as malformed.
    BadRequest,
    /// The outcome is unknown (network error, failover); the command is safe to repeat.
    Transient,
    /// The store cannot be reached at all.
    Unavailable,
    /// Authentication or authorization failed.
    Unauthorized,
    /// The store stopped on purpose (used by the crash-testing wrappers).
    Crashed,
    /// The document has a transaction in flight, and the request leaves such
    /// documents alone (e.g. [`Coordinator::put`](crate::Coordinator::put)).
    InFlight,
    /// The store lacks a feature the protocol needs (a MongoDB server older
    /// than 4.4), found before anything was written.
    Unsupported,
    /// Anything else.
    Other,
}

impl StoreErrorKind {
    /// Whether repeating the same command may succeed.
    pub fn is_retryable(self) -> bool {
        matches!(self, StoreErrorKind::Transient)
    }

    /// Whether a write that failed so may still have landed, or may still
    /// land later (its request may be in flight): every kind but the store's
    /// definite refusals (duplicate key, type mismatch, too large, overflow,
    /// bad request, unauthorized, unsupported), which answer for the whole request.
    pub fn outcome_unknown(self) -> bool {
        !matches!(
            self,
            StoreErrorKind::DuplicateKey
                | StoreErrorKind::InFlight
                | StoreErrorKind::TypeMismatch
                | StoreErrorKind::DocumentTooLarge
                | StoreErrorKind::Overflow
                | StoreErrorKind::BadRequest
                | StoreErrorKind::Unauthorized
                | StoreErrorKind::Unsupported
        )
    }
}

/// An error from a [`Store`] operation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct StoreError {
    /// What went wrong.
    pub kind: StoreErrorKind,
    /// The store's own error code, when it has one.
    pub code: Option<i32>,
    /// A description safe to log: it never contains credentials.
    pub message: String,
}

impl StoreError {
    /// An error of `kind` with a message.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        StoreError {
            kind,
            code: None,
            message: message.into(),
        }
    }

    /// The same error with the store's error code attached.
    pub fn with_code(mut self, code: i32) -> Self {
        self.code = Some(code);
        self
    }
}

/// The single-document atomic operations of a document database.
///
/// Implementations must make every method atomic on the one document it
/// touches, as MongoDB does. See the [module documentation](self) for the
/// filter and update operators they must understand.
///
/// Each call sends its request once. A request whose outcome is unknown
/// (network error, failover) is returned as
/// [`Transient`](StoreErrorKind::Transient), never repeated inside the call:
/// the coordinator repeats it ([`RetryPolicy`](crate::RetryPolicy)), and must
/// know that an earlier copy may still land.
///
/// Every read sees every write the store has acknowledged, and `$$NOW` is
/// the clock of the server that holds the documents: a read from a copy
/// that lags (a MongoDB secondary) could miss an apply, and its `$$NOW`
/// would be another server's clock. `MongoStore` sends everything to the
/// primary for this reason. The read recovery decides on,
/// [`exists`](Store::exists), must see more: every write that reached the
/// store, acknowledged yet or not.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// A short name for logs and metrics, e.g. `"memory"` or `"mongodb"`.
    fn name(&self) -> &str;

    /// The store's clock. Leases are judged by this clock, never by the caller's.
    async fn now(&self) -> Result<bson::DateTime, StoreError>;

    /// A recent reading of the store's clock, advanced by the time elapsed
    /// here since: never ahead of [`Store::now`] by more than the clock drift
    /// over that time, and behind it by at most the round trip of the reading.
    ///
    /// A coordinator reads it before it writes a record, to fix the record's
    /// create deadline. The default reads [`Store::now`]; a store whose clock
    /// costs a round trip keeps a reading and estimates from it.
    async fn clock_estimate(&self) -> Result<bson::DateTime, StoreError> {
        self.now().await
    }

    /// Closes the store's connections and stops its background work, waiting
    /// for what is in progress; later calls fail. The default does nothing
    /// (a store with nothing to close). Called by
    /// [`Coordinator::shutdown`](crate::Coordinator::shutdown).
    async fn shutdown(&self) {}

    /// `insertOne`: inserts `doc`, failing with [`StoreErrorKind::DuplicateKey`] if its `_id` exists.
    async fn insert_one(&self, ns: &Namespace, doc: Document) -> Result<(), StoreError>;

    /// `updateOne`: applies `update` to the first document matching `filter`.
    async fn update_one(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: UpdateOptions,
    ) -> Result<UpdateOutcome, StoreError>;

    /// `findAndModify`: updates the first match and returns it as it was before or after.
    async fn find_one_and_update(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: FindOneAndUpdateOptions,
    ) -> Result<Option<Document>, StoreError>;

    /// `replaceOne`: replaces the first match by `replacement` (which keeps the `_id`).
    async fn replace_one(
        &self,
        ns: &Namespace,
        filter: Document,
        replacement: Document,
    ) -> Result<UpdateOutcome, StoreError>;

    /// `deleteOne`: deletes the first match; returns how many were deleted (0 or 1).
    async fn delete_one(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError>;

    /// `deleteMany`: deletes every match in one request; returns how many
    /// were deleted. Each deletion is atomic on its own document; together
    /// they are not (a document may start or stop matching while the request
    /// runs, as on MongoDB), and after an error any of them may have landed.
    /// The default deletes the matches [`find`](Store::find) returns one by
    /// one, each still under `filter`.
    async fn delete_many(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        let mut deleted = 0;
        for one in each_match(self, ns, &filter).await? {
            deleted += self.delete_one(ns, one).await?;
        }
        Ok(deleted)
    }

    /// `updateMany`: applies `update` to every document matching `filter`,
    /// in one request; returns how many matched and were modified. Each
    /// update is atomic on its own document; together they are not (a
    /// document may start or stop matching while the request runs, as on
    /// MongoDB), and after an error any of them may have landed. The
    /// default updates the matches [`find`](Store::find) returns one by one,
    /// each still under `filter`.
    async fn update_many(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        let mut total = UpdateOutcome::default();
        for one in each_match(self, ns, &filter).await? {
            let outcome = self
                .update_one(ns, one, update.clone(), UpdateOptions::default())
                .await?;
            total.matched += outcome.matched;
            total.modified += outcome.modified;
        }
        Ok(total)
    }

    /// `findOne`: the first match, if any.
    async fn find_one(
        &self,
        ns: &Namespace,
        filter: Document,
    ) -> Result<Option<Document>, StoreError>;

    /// `find`: all matches, sorted and limited as `options` say.
    async fn find(
        &self,
        ns: &Namespace,
        filter: Document,
        options: FindOptions,
    ) -> Result<Vec<Document>, StoreError>;

    /// Whether any document matches `filter`, read back as nothing but the
    /// answer: the read tandem decides on. Recovery asks it of every
    /// participant of a stuck transaction ("is my marker there?"), and a
    /// coordinator whose record's `_id` is taken asks it whether the record
    /// is its own.
    ///
    /// It must see every write that reached the store before it, whether
    /// acknowledged yet or not, and none that the store could still lose:
    /// an apply that landed but is not acknowledged yet will be, and an
    /// answer "not there" would roll back a transaction its coordinator is
    /// about to answer committed. MongoDB: `find` with `limit: 1`, the
    /// projection `{_id: 1}` and the read concern `linearizable`. The
    /// default reads with [`find_one`](Store::find_one), enough for a store
    /// whose every read sees its latest writes, as the embedded one does.
    async fn exists(&self, ns: &Namespace, filter: Document) -> Result<bool, StoreError> {
        Ok(self.find_one(ns, filter).await?.is_some())
    }

    /// Several single-document updates in one request, each `(filter, update)`
    /// statement updating at most one document atomically on its own; returns
    /// how many statements matched a document.
    ///
    /// Together the statements are not atomic and may land in any order; after
    /// an error any subset of them may have been applied, so callers send only
    /// updates that are harmless to repeat. MongoDB: one `update` command with
    /// several statements (`ordered: false`). The default sends
    /// [`update_one`](Store::update_one) for each statement, one after another.
    async fn update_each(
        &self,
        ns: &Namespace,
        statements: Vec<(Document, Document)>,
    ) -> Result<u64, StoreError> {
        let mut matched = 0;
        for (filter, update) in statements {
            matched += self
                .update_one(ns, filter, update, UpdateOptions::default())
                .await?
                .matched;
        }
        Ok(matched)
    }

    /// `countDocuments`: how many documents match. The default counts the results of [`find`](Store::find).
    async fn count(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        Ok(self.find(ns, filter, FindOptions::default()).await?.len() as u64)
    }

    /// The store's native multi-document transactions, if it has them (the
    /// second, optional contract: [`NativeTransactions`]). The default: none.
    fn native(&self) -> Option<&dyn NativeTransactions> {
        None
    }

    /// `createIndexes`, idempotently. Stores without indexes may do nothing.
    async fn ensure_index(&self, ns: &Namespace, index: IndexSpec) -> Result<(), StoreError> {
        let _ = (ns, index);
        Ok(())
    }

    /// `dropIndexes` of the index named `name`, idempotently: an index (or
    /// a collection) that does not exist is not an error. Stores without
    /// indexes may do nothing.
    async fn drop_index(&self, ns: &Namespace, name: &str) -> Result<(), StoreError> {
        let _ = (ns, name);
        Ok(())
    }
}

/// A shared store is a store: `Arc<dyn Store>` plugs in wherever a store is expected.
/// For the defaults of the many-document calls: a filter for each document
/// that matches `filter` now, naming its `_id` and keeping `filter`, so that a
/// document that stops matching before its turn is left alone.
async fn each_match<S: Store + ?Sized>(
    store: &S,
    ns: &Namespace,
    filter: &Document,
) -> Result<Vec<Document>, StoreError> {
    Ok(store
        .find(ns, filter.clone(), FindOptions::default())
        .await?
        .into_iter()
        .filter_map(|doc| doc.get("_id").cloned())
        .map(|id| bson::doc! { "$and": [filter.clone(), { "_id": id }] })
        .collect())
}

#[async_trait]
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn now(&self) -> Result<bson::DateTime, StoreError> {
        (**self).now().await
    }
    async fn clock_estimate(&self) -> Result<bson::DateTime, StoreError> {
        (**self).clock_estimate().await
    }
    async fn shutdown(&self) {
        (**self).shutdown().await
    }
    async fn insert_one(&self, ns: &Namespace, doc: Document) -> Result<(), StoreError> {
        (**self).insert_one(ns, doc).await
    }
    async fn update_one(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: UpdateOptions,
    ) -> Result<UpdateOutcome, StoreError> {
        (**self).update_one(ns, filter, update, options).await
    }
    async fn update_each(
        &self,
        ns: &Namespace,
        statements: Vec<(Document, Document)>,
    ) -> Result<u64, StoreError> {
        (**self).update_each(ns, statements).await
    }
    async fn find_one_and_update(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: FindOneAndUpdateOptions,
    ) -> Result<Option<Document>, StoreError> {
        (**self)
            .find_one_and_update(ns, filter, update, options)
            .await
    }
    async fn replace_one(
        &self,
        ns: &Namespace,
        filter: Document,
        replacement: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        (**self).replace_one(ns, filter, replacement).await
    }
    async fn delete_one(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        (**self).delete_one(ns, filter).await
    }
    async fn delete_many(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        (**self).delete_many(ns, filter).await
    }
    async fn update_many(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        (**self).update_many(ns, filter, update).await
    }
    async fn find_one(
        &self,
        ns: &Namespace,
        filter: Document,
    ) -> Result<Option<Document>, StoreError> {
        (**self).find_one(ns, filter).await
    }
    async fn find(
        &self,
        ns: &Namespace,
        filter: Document,
        options: FindOptions,
    ) -> Result<Vec<Document>, StoreError> {
        (**self).find(ns, filter, options).await
    }
    async fn exists(&self, ns: &Namespace, filter: Document) -> Result<bool, StoreError> {
        (**self).exists(ns, filter).await
    }
    async fn count(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        (**self).count(ns, filter).await
    }
    fn native(&self) -> Option<&dyn NativeTransactions> {
        (**self).native()
    }
    async fn ensure_index(&self, ns: &Namespace, index: IndexSpec) -> Result<(), StoreError> {
        (**self).ensure_index(ns, index).await
    }
    async fn drop_index(&self, ns: &Namespace, name: &str) -> Result<(), StoreError> {
        (**self).drop_index(ns, name).await
    }
}
