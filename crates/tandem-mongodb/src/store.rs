//! [`MongoStore`]: the [`Store`] trait on the official MongoDB driver.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bson::{doc, Document};
use futures::TryStreamExt;
use mongodb::action::Action;
use mongodb::options::{ClientOptions, CollectionOptions, IndexOptions, ReadConcern};
use mongodb::{Client, Collection, IndexModel};
use tandem::store::{
    FindOptions, IndexSpec, Namespace, ReturnDocument, Store, StoreError, StoreErrorKind,
    UpdateOutcome,
};
use tandem::DocumentChange;

use crate::error::{map_driver_error, uri_secrets};
use crate::metrics::{Command, CommandCounts, Counters};
use crate::options::{MongoStoreBuilder, MongoStoreOptions};

/// Where every command of the store goes: the primary.
pub(crate) fn primary() -> mongodb::options::SelectionCriteria {
    mongodb::options::SelectionCriteria::ReadPreference(mongodb::options::ReadPreference::Primary)
}

/// A [`Store`] on a MongoDB deployment, through the official driver.
///
/// Each [`Store`] method sends exactly one command, once (a transient error
/// is returned, and the coordinator repeats as its
/// [`RetryPolicy`](tandem::RetryPolicy) allows), on a store from
/// [`MongoStore::connect`], which turns the driver's retryable writes and
/// reads off. Over a client built elsewhere ([`MongoStore::new`]) the driver
/// may send a retryable command a second time on its own; the server
/// de-duplicates a retryable write by its transaction number, and the
/// command counters ([`MongoStore::metrics`]) count it once:
///
/// | method | command |
/// | --- | --- |
/// | [`now`](Store::now) | `hello` (its `localTime`) |
/// | [`insert_one`](Store::insert_one) | `insert` |
/// | [`update_one`](Store::update_one) | `update` (`multi: false`, optional `upsert`) |
/// | [`update_each`](Store::update_each) | one `update` with a statement per document (`ordered: false`) |
/// | [`find_one_and_update`](Store::find_one_and_update) | `findAndModify` |
/// | [`replace_one`](Store::replace_one) | `update` with a replacement document |
/// | [`delete_one`](Store::delete_one) | `delete` (`limit: 1`) |
/// | [`delete_many`](Store::delete_many) | `delete` (`limit: 0`) |
/// | [`update_many`](Store::update_many) | `update` (`multi: true`) |
/// | [`find_one`](Store::find_one) | `find` (`limit: 1`) |
/// | [`find`](Store::find) | `find` (and `getMore` for further batches) |
/// | [`exists`](Store::exists) | `find` (`limit: 1`, projection `{_id: 1}`, read concern `linearizable`, and again at `local` when a standalone server refuses it, `maxTimeMS` 10 s) |
/// | [`ensure_index`](Store::ensure_index) | `createIndexes` |
///
/// Writes use the configured write concern (default `{ w: "majority", j: true }`),
/// `find` and `findOne` the configured read concern (default `majority`);
/// `exists`, which recovery's decisions rest on, reads `linearizable`.
///
/// Cloning is cheap: clones share the client, the collection handles and the
/// [metrics](MongoStore::metrics).
///
/// # Tracing
///
/// Every attempt of a command emits one `tracing` event at `DEBUG` level on the
/// target `tandem_mongodb`, with the fields `command` (the store method, e.g.
/// `"find_one_and_update"`), `namespace` (`db.collection`, or `admin` for
/// `hello` and `ping`), `attempt` (1 for the first), `duration_ms`, and on
/// failure `error_kind` and `error`.
#[derive(Clone)]
pub struct MongoStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    options: MongoStoreOptions,
    /// Strings never to show in an error message (from the URI's userinfo).
    secrets: Vec<String>,
    collections: RwLock<HashMap<Namespace, Collection<Document>>>,
    counters: Counters,
    /// The last reading of the server's clock and when it arrived here.
    clock: std::sync::Mutex<Option<(Instant, bson::DateTime)>>,
}

/// How long a reading of the server's clock serves [`Store::clock_estimate`].
const CLOCK_READING_KEPT: Duration = Duration::from_secs(10);

/// How long [`Store::exists`] (a `linearizable` read) waits for a majority
/// to hold what it read before it gives up (`maxTimeMS`).
const DECISIVE_READ_MAX_TIME: Duration = Duration::from_secs(10);

/// The server's answer to a read concern that needs a replica set, from a
/// standalone server (`NotAReplicaSet`).
const NOT_A_REPLICA_SET: i32 = 123;

impl fmt::Debug for MongoStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MongoStore")
            .field("options", &self.inner.options)
            .field("metrics", &self.metrics())
            .finish_non_exhaustive()
    }
}

impl MongoStore {
    /// A store on `client` with the default options.
    ///
    /// The client's server selection timeout, application name and retryable
    /// writes stay as they are; use [`MongoStore::builder`] to change the other
    /// options. tandem needs no retryable writes (see
    /// [`MongoStoreBuilder::connect`]): a client made for the store can turn
    /// them off with `retryWrites=false`.
    pub fn new(client: Client) -> Self {
        MongoStore::from_parts(client, MongoStoreOptions::default(), Vec::new())
    }

    /// Connects to `uri` with the default options: see [`MongoStoreBuilder::connect`].
    pub async fn connect(uri: &str) -> Result<Self, StoreError> {
        connect(uri, MongoStoreOptions::default()).await
    }

    /// A builder for a store with non-default options.
    pub fn builder() -> MongoStoreBuilder {
        MongoStoreBuilder::new()
    }

    pub(crate) fn from_parts(
        client: Client,
        options: MongoStoreOptions,
        secrets: Vec<String>,
    ) -> Self {
        MongoStore {
            inner: Arc::new(Inner {
                client,
                options,
                secrets,
                collections: RwLock::new(HashMap::new()),
                counters: Counters::default(),
                clock: std::sync::Mutex::new(None),
            }),
        }
    }

    /// The driver client.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The store's options.
    pub fn options(&self) -> &MongoStoreOptions {
        &self.inner.options
    }

    /// A snapshot of the command counters (shared by all clones of this store).
    pub fn metrics(&self) -> CommandCounts {
        self.inner.counters.snapshot()
    }

    /// The collection handle of `ns`, with the store's write and read concern.
    /// Handles are made once per namespace and reused.
    pub fn collection(&self, ns: &Namespace) -> Collection<Document> {
        if let Some(c) = self
            .inner
            .collections
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(ns)
        {
            return c.clone();
        }
        let mut map = self
            .inner
            .collections
            .write()
            .unwrap_or_else(|e| e.into_inner());
        map.entry(ns.clone())
            .or_insert_with(|| {
                let mut options = CollectionOptions::default();
                options.write_concern = self.inner.options.write_concern.clone();
                options.read_concern = self.inner.options.read_concern.clone();
                // Every read goes to the primary, whatever the client's read
                // preference: a probe on a secondary that lags could miss a
                // marker whose apply was acknowledged, and roll back a
                // transaction answered committed; its `$$NOW` would be
                // another server's clock.
                options.selection_criteria = Some(primary());
                self.inner
                    .client
                    .database(&ns.db)
                    .collection_with_options(&ns.collection, options)
            })
            .clone()
    }

    /// Sends `ping` to the deployment, once: a transient error comes back as
    /// it is, as for every command of the store.
    ///
    /// Fails with [`Unavailable`](StoreErrorKind::Unavailable) when no server
    /// can be selected within the server selection timeout.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let db = self.inner.client.database("admin");
        self.run(Command::Ping, "admin", || {
            let db = db.clone();
            async move { db.run_command(doc! { "ping": 1 }).await.map(|_| ()) }
        })
        .await
    }

    /// Sends one command once, counting it and logging its outcome. A
    /// transient error is returned as it is: the coordinator decides whether
    /// to repeat it ([`RetryPolicy`](tandem::RetryPolicy)), because only it
    /// knows what an unanswered request means for the protocol.
    async fn run<T, F, Fut>(
        &self,
        command: Command,
        namespace: &str,
        op: F,
    ) -> Result<T, StoreError>
    where
        F: FnOnce() -> Fut + Send,
        Fut: Future<Output = mongodb::error::Result<T>> + Send,
        T: Send,
    {
        self.inner.counters.sent(command);
        let t0 = Instant::now();
        let result = op().await;
        let duration_ms = duration_ms(t0.elapsed());
        match result {
            Ok(value) => {
                tracing::debug!(
                    command = command.name(),
                    namespace,
                    duration_ms,
                    "mongodb command succeeded"
                );
                Ok(value)
            }
            Err(e) => {
                self.inner.counters.failed();
                let err = map_driver_error(&e, &self.inner.secrets);
                tracing::debug!(
                    command = command.name(),
                    namespace,
                    duration_ms,
                    error_kind = ?err.kind,
                    error = %err.message,
                    "mongodb command failed"
                );
                Err(err)
            }
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// [`MongoStoreBuilder::connect`].
pub(crate) async fn connect(
    uri: &str,
    options: MongoStoreOptions,
) -> Result<MongoStore, StoreError> {
    let secrets = uri_secrets(uri);
    let mut client_options = ClientOptions::parse(uri).await.map_err(|e| {
        let err = map_driver_error(&e, &secrets);
        let kind = match err.kind {
            StoreErrorKind::Unavailable => StoreErrorKind::Unavailable,
            _ => StoreErrorKind::BadRequest,
        };
        StoreError {
            kind,
            code: err.code,
            message: format!("invalid MongoDB URI: {}", err.message),
        }
    })?;
    if let Some(timeout) = options.server_selection_timeout {
        client_options.server_selection_timeout = Some(timeout);
    }
    if let Some(app_name) = &options.app_name {
        client_options.app_name = Some(app_name.clone());
    }
    // Every step tandem sends is guarded, so sending it again is harmless, and
    // the coordinator repeats what failed transiently (`RetryPolicy`). The driver's
    // retryable writes would only add a record per write on the server (kept
    // for 30 minutes, and looked up on every retryable write), so they are
    // off unless the URI asks for them.
    if client_options.retry_writes.is_none() {
        client_options.retry_writes = Some(false);
    }
    // Nor are reads sent twice: a probe or a diagnosis that met a network
    // fault says so (and the counters count what was sent).
    if client_options.retry_reads.is_none() {
        client_options.retry_reads = Some(false);
    }
    let client = Client::with_options(client_options).map_err(|e| {
        let err = map_driver_error(&e, &secrets);
        StoreError {
            kind: StoreErrorKind::BadRequest,
            code: err.code,
            message: format!("invalid MongoDB client options: {}", err.message),
        }
    })?;
    let store = MongoStore::from_parts(client, options, secrets);
    store.ping().await?;
    Ok(store)
}

/// The first write error or write concern error of a write command's reply,
/// which the driver's `run_command` returns as it came.
fn write_errors(reply: &Document) -> Result<(), StoreError> {
    let failure = |e: &Document, write_concern_error: bool| {
        let code = e.get_i32("code").unwrap_or(0);
        let message = e.get_str("errmsg").unwrap_or("").to_owned();
        let kind = crate::error::classify_code(code, &message, write_concern_error);
        StoreError::new(kind, format!("{code}: {message}")).with_code(code)
    };
    if let Ok(errors) = reply.get_array("writeErrors") {
        if let Some(e) = errors.iter().find_map(bson::Bson::as_document) {
            return Err(failure(e, false));
        }
    }
    if let Ok(e) = reply.get_document("writeConcernError") {
        return Err(failure(e, true));
    }
    Ok(())
}

fn outcome(result: mongodb::results::UpdateResult) -> UpdateOutcome {
    UpdateOutcome {
        matched: result.matched_count,
        modified: result.modified_count,
        upserted: result.upserted_id.is_some(),
    }
}

/// The oldest wire version tandem's steps run on: MongoDB 4.4, the first
/// with `$bsonSize` (the room every apply reserves for its clear or undo is
/// checked with it; `$$NOW`, for the deadlines, came in 4.2).
pub(crate) const MIN_WIRE_VERSION: i64 = 9;

/// Refuses a server older than [`MIN_WIRE_VERSION`] by the `maxWireVersion`
/// of its `hello` reply (a reply without one is let through: the steps
/// themselves then say what they lack).
pub(crate) fn check_version(reply: &Document) -> Result<(), StoreError> {
    let version = match reply.get("maxWireVersion") {
        Some(bson::Bson::Int32(v)) => i64::from(*v),
        Some(bson::Bson::Int64(v)) => *v,
        _ => return Ok(()),
    };
    if version >= MIN_WIRE_VERSION {
        return Ok(());
    }
    Err(StoreError::new(
        StoreErrorKind::Unsupported,
        format!(
            "the server speaks wire version {version}, older than MongoDB 4.4 (wire version \
             {MIN_WIRE_VERSION}): tandem's steps need `$bsonSize` (4.4) and `$$NOW` (4.2); \
             nothing was written"
        ),
    ))
}

fn server_time(reply: &Document) -> Option<bson::DateTime> {
    if let Ok(t) = reply.get_datetime("localTime") {
        return Some(*t);
    }
    // A server without `localTime` still stamps its replies with its cluster
    // time, in whole seconds: truncated, the reading lags the server's clock
    // by under a second, never leads it, so a wait for a time on it (a
    // claim's, a marker removal's `notBefore`) only waits longer.
    reply
        .get_timestamp("operationTime")
        .ok()
        .map(|ts| bson::DateTime::from_millis(i64::from(ts.time) * 1000))
}

#[async_trait]
impl Store for MongoStore {
    fn name(&self) -> &str {
        "mongodb"
    }

    fn native(&self) -> Option<&dyn tandem::NativeTransactions> {
        Some(self)
    }

    async fn count(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        let coll = self.collection(ns);
        let ns_name = ns.to_string();
        self.run(Command::Find, &ns_name, || {
            let coll = coll.clone();
            let filter = filter.clone();
            async move { coll.count_documents(filter).await }
        })
        .await
    }

    async fn now(&self) -> Result<bson::DateTime, StoreError> {
        let db = self.inner.client.database("admin");
        let reply = self
            .run(Command::Hello, "admin", || {
                let db = db.clone();
                async move { db.run_command(doc! { "hello": 1 }).await }
            })
            .await?;
        check_version(&reply)?;
        server_time(&reply).ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::Other,
                "the server's hello reply has neither localTime nor operationTime",
            )
        })
    }

    /// Closes the client's connections and stops its monitors (the driver's
    /// `Client::shutdown`), waiting for operations in progress. Every clone of
    /// this store shares the client: none may be used afterwards.
    async fn shutdown(&self) {
        self.inner.client.clone().shutdown().await;
    }

    /// The last `hello`'s time plus the time elapsed here since it arrived,
    /// read again once it is ten seconds old: behind the server's
    /// clock by at most the reading's round trip (and the drift since).
    async fn clock_estimate(&self) -> Result<bson::DateTime, StoreError> {
        let kept = *self.inner.clock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, time)) = kept {
            let age = at.elapsed();
            if age < CLOCK_READING_KEPT {
                let age = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
                return Ok(bson::DateTime::from_millis(
                    time.timestamp_millis().saturating_add(age),
                ));
            }
        }
        let time = self.now().await?;
        *self.inner.clock.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), time));
        Ok(time)
    }

    async fn insert_one(&self, ns: &Namespace, doc: Document) -> Result<(), StoreError> {
        let coll = self.collection(ns);
        let ns_name = ns.to_string();
        self.run(Command::InsertOne, &ns_name, || {
            let coll = coll.clone();
            let doc = doc.clone();
            async move { coll.insert_one(doc).await.map(|_| ()) }
        })
        .await
    }

    async fn update_one(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: tandem::store::UpdateOptions,
    ) -> Result<UpdateOutcome, StoreError> {
        let coll = self.collection(ns);
        let ns_name = ns.to_string();
        self.run(Command::UpdateOne, &ns_name, || {
            let coll = coll.clone();
            let filter = filter.clone();
            let update = update.clone();
            async move { coll.update_one(filter, update).upsert(options.upsert).await }
        })
        .await
        .map(outcome)
    }

    async fn update_each(
        &self,
        ns: &Namespace,
        statements: Vec<(Document, Document)>,
    ) -> Result<u64, StoreError> {
        let statements_sent = statements.len() as u64;
        let updates: Vec<Document> = statements
            .into_iter()
            .map(|(q, u)| doc! { "q": q, "u": u, "multi": false, "upsert": false })
            .collect();
        let mut command = doc! {
            "update": ns.collection.as_str(),
            "updates": updates,
            "ordered": false,
        };
        // The write concern of the store's other writes: the store's, or
        // the client's when the store has none (the collection handle's,
        // which inherits it). `run_command` adds none of its own: without
        // this the server's default would apply (`w: 1` on MongoDB 4.4),
        // and an apply acknowledged so could be rolled back by a failover.
        let coll = self.collection(ns);
        if let Some(wc) = coll.write_concern() {
            let wc = bson::to_bson(wc).map_err(|e| {
                StoreError::new(
                    StoreErrorKind::BadRequest,
                    format!("unserializable write concern: {e}"),
                )
            })?;
            command.insert("writeConcern", wc);
        }
        let db = self.inner.client.database(&ns.db);
        let ns_name = ns.to_string();
        self.inner.counters.statements(statements_sent);
        let reply = self
            .run(Command::UpdateEach, &ns_name, || {
                let db = db.clone();
                let command = command.clone();
                async move { db.run_command(command).await }
            })
            .await?;
        if let Err(e) = write_errors(&reply) {
            // Failed inside an `ok: 1` reply: a failure all the same.
            self.inner.counters.failed();
            tracing::debug!(
                command = Command::UpdateEach.name(),
                namespace = ns_name.as_str(),
                error_kind = ?e.kind,
                error = %e.message,
                "mongodb command failed"
            );
            return Err(e);
        }
        Ok(match reply.get("n") {
            Some(bson::Bson::Int32(n)) => u64::try_from(*n).unwrap_or(0),
            Some(bson::Bson::Int64(n)) => u64::try_from(*n).unwrap_or(0),
            Some(bson::Bson::Double(n)) => *n as u64,
            _ => 0,
        })
    }

    async fn find_one_and_update(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: tandem::store::FindOneAndUpdateOptions,
    ) -> Result<Option<Document>, StoreError> {
        let coll = self.collection(ns);
        let ns_name = ns.to_string();
        let ret = match options.return_document {
            ReturnDocument::Before => mongodb::options::ReturnDocument::Before,
            ReturnDocument::After => mongodb::options::ReturnDocument::After,
        };
        let projection = options.fields.map(|fields| {
            fields
                .iter()
                .map(|f| ((*f).to_owned(), bson::Bson::Int32(1)))
                .collect::<Document>()
        });
        self.run(Command::FindOneAndUpdate, &ns_name, || {
            let coll = coll.clone();
            let filter = filter.clone();
            let update = update.clone();
            let ret = ret.clone();
            let projection = projection.clone();
            async move {
                coll.find_one_and_update(filter, update)
                    .return_document(ret)
                    .upsert(options.upsert)
                    .optional(projection, |op, p| op.projection(p))
                    .await
            }
        })
        .await
    }

    async fn replace_one(
        &self,
        ns: &Namespace,
        filter: Document,
        replacement: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        let coll = self.collection(ns);
        let ns_name = ns.to_string();
        self.run(Command::ReplaceOne, &ns_name, || {
            let coll = coll.clone();
            let filter = filter.clone();
            let replacement = replacement.clone();
            async move { coll.replace_one(filter, replacement).await }
        })
        .await
        .map(outcome)
    }

    async fn delete_one(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        let coll = self.collection(ns);
        let ns_name = ns.to_string();
        self.run(Command::DeleteOne, &ns_name, || {
            let coll = coll.clone();
            let filter = filter.clone();
            async move { coll.delete_one(filter).await.map(|r| r.deleted_count) }
        })
        .await
    }

    async fn delete_many(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        let coll = self.collection(ns);
        let ns_name = ns.to_string();
        self.run(Command::DeleteMany, &ns_name, || async move {
            coll.delete_many(filter).await.map(|r| r.deleted_count)
        })
        .await
    }

    async fn update_many(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        let coll = self.collection(ns);
        let ns_name = ns.to_string();
        self.run(Command::UpdateMany, &ns_name, || async move {
            coll.update_many(filter, update).await
        })
        .await
        .map(outcome)
    }

    async fn find_one(
        &self,
        ns: &Namespace,
        filter: Document,
    ) -> Result<Option<Document>, StoreError> {
        let coll = self.collection(ns);
        let ns_name = ns.to_string();
        self.run(Command::FindOne, &ns_name, || {
            let coll = coll.clone();
            let filter = filter.clone();
            async move { coll.find_one(filter).await }
        })
        .await
    }

    /// `find` with `limit: 1`, the projection `{_id: 1}` and the read
    /// concern `linearizable`, on the primary, whatever the store's read
    /// concern: the answer carries the `_id` alone, and sees every write
    /// that reached the primary before the read, once a majority holds it.
    ///
    /// A `majority` read is not enough here. Its snapshot lags the primary's
    /// latest writes: an apply that landed before its deadline but is not
    /// yet held by a majority (a secondary that lags, or is down) would be
    /// missed, recovery would roll the transaction back, and the apply's
    /// acknowledgement, coming later, would tell the coordinator it
    /// committed. A `local` read would see an apply that a failover can
    /// still take back. A `linearizable` read does neither: it returns what
    /// the primary holds once a majority holds it too. It waits for that at
    /// most 10 s (`maxTimeMS`; then it fails, and recovery asks again on a
    /// later pass).
    ///
    /// A standalone server (not a replica set) refuses the level
    /// (`NotAReplicaSet`, code 123); it keeps one copy of the data, so there
    /// the store reads again at `local`, which sees every write it took. It
    /// asks at `linearizable` first every time (two round trips on a
    /// standalone server): a refusal says what the server it reached was
    /// then, not what a node that later serves a replica set is.
    async fn exists(&self, ns: &Namespace, filter: Document) -> Result<bool, StoreError> {
        let coll = self.collection(ns);
        let ns_name = ns.to_string();
        let read = |concern: ReadConcern| {
            self.run(Command::FindOne, &ns_name, || {
                let coll = coll.clone();
                let filter = filter.clone();
                async move {
                    coll.find_one(filter)
                        .projection(doc! { "_id": 1 })
                        .read_concern(concern)
                        .max_time(DECISIVE_READ_MAX_TIME)
                        .await
                        .map(|found| found.is_some())
                }
            })
        };
        match read(ReadConcern::linearizable()).await {
            Err(e) if e.code == Some(NOT_A_REPLICA_SET) => read(ReadConcern::local()).await,
            other => other,
        }
    }

    async fn find(
        &self,
        ns: &Namespace,
        filter: Document,
        options: FindOptions,
    ) -> Result<Vec<Document>, StoreError> {
        let coll = self.collection(ns);
        let ns_name = ns.to_string();
        self.run(Command::Find, &ns_name, || {
            let coll = coll.clone();
            let filter = filter.clone();
            let options = options.clone();
            async move {
                let mut action = coll.find(filter);
                if let Some(sort) = options.sort {
                    action = action.sort(sort);
                }
                if let Some(limit) = options.limit {
                    action = action.limit(limit);
                }
                action.await?.try_collect::<Vec<Document>>().await
            }
        })
        .await
    }

    async fn ensure_index(&self, ns: &Namespace, index: IndexSpec) -> Result<(), StoreError> {
        let coll = self.collection(ns);
        let ns_name = ns.to_string();
        let mut options = IndexOptions::default();
        options.name = Some(index.name.clone());
        options.expire_after = index.expire_after_secs.map(Duration::from_secs);
        options.partial_filter_expression = index.partial_filter.clone();
        let model = IndexModel::builder()
            .keys(index.keys.clone())
            .options(options)
            .build();
        self.run(Command::CreateIndexes, &ns_name, || {
            let coll = coll.clone();
            let model = model.clone();
            async move { coll.create_index(model).await.map(|_| ()) }
        })
        .await
    }

    async fn drop_index(&self, ns: &Namespace, name: &str) -> Result<(), StoreError> {
        // `NamespaceNotFound` (26) and `IndexNotFound` (27): nothing to drop.
        const ABSENT: [i32; 2] = [26, 27];
        let coll = self.collection(ns);
        let ns_name = ns.to_string();
        self.run(Command::DropIndexes, &ns_name, || {
            let coll = coll.clone();
            let name = name.to_owned();
            async move {
                match coll.drop_index(name).await {
                    Err(e)
                        if matches!(&*e.kind,
                            mongodb::error::ErrorKind::Command(c) if ABSENT.contains(&c.code)) =>
                    {
                        Ok(())
                    }
                    other => other,
                }
            }
        })
        .await
    }
}

#[async_trait]
impl tandem::NativeTransactions for MongoStore {
    async fn run_native(
        &self,
        changes: &[DocumentChange],
        retry: tandem::RetryPolicy,
    ) -> Result<(), tandem::NativeFailure> {
        let inner = &self.inner;
        crate::native::run(
            &inner.client,
            &inner.counters,
            retry,
            &inner.secrets,
            changes,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client told to read from secondaries still gets the store's reads
    /// on the primary (no server needed: nothing is sent).
    #[tokio::test]
    async fn reads_go_to_the_primary_whatever_the_client_prefers() {
        let options = ClientOptions::parse(
            "mongodb://127.0.0.1:9/?readPreference=secondaryPreferred&serverSelectionTimeoutMS=1",
        )
        .await
        .unwrap();
        assert!(options.selection_criteria.is_some(), "the URI's preference");
        let client = Client::with_options(options).unwrap();
        let store = MongoStore::builder().build(client);
        let coll = store.collection(&Namespace::new("db", "c"));
        assert!(
            matches!(
                coll.selection_criteria(),
                Some(mongodb::options::SelectionCriteria::ReadPreference(
                    mongodb::options::ReadPreference::Primary
                ))
            ),
            "{:?}",
            coll.selection_criteria()
        );
    }

    /// A server older than MongoDB 4.4 is refused by its `hello` reply, with
    /// a kind that says nothing was written; 4.4 and later (and a reply that
    /// does not say) pass.
    #[test]
    fn servers_older_than_4_4_are_refused_by_their_hello() {
        for (reply, refused) in [
            (doc! { "maxWireVersion": 8 }, true),
            (doc! { "maxWireVersion": 8_i64 }, true),
            (doc! { "maxWireVersion": 9 }, false),
            (doc! { "maxWireVersion": 27 }, false),
            (doc! { "ok": 1.0 }, false),
        ] {
            let checked = check_version(&reply);
            assert_eq!(checked.is_err(), refused, "{reply}: {checked:?}");
            if let Err(e) = checked {
                assert_eq!(e.kind, StoreErrorKind::Unsupported);
                assert!(!e.kind.outcome_unknown(), "nothing was written");
                assert!(e.message.contains("MongoDB 4.4"), "{e}");
            }
        }
    }
}
