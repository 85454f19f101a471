//! Typed reads (and plain writes) of `#[participant]` documents, through a
//! coordinator: its default store, and its database where the type names none.
//!
//! They skip the placeholders that inserts reserve, and say whether a
//! document has a transaction in flight (see the guide's Isolation chapter).
//! `#[participant]` generates the same operations on the type itself
//! (`Order::get(&coordinator, id)`, `Order::find`, `Order::in_flight`,
//! `Order::insert_now`, `Order::put`); they call the methods here.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::change::META_FIELD;
use crate::coordinator::Coordinator;
use crate::store::{FindOptions, Namespace, StoreError, StoreErrorKind};
use crate::typed::ParticipantDocument;

/// The filter that leaves out insert placeholders (`_tandem.ghost: true`).
fn not_a_placeholder() -> Document {
    doc! { format!("{META_FIELD}.ghost"): { "$ne": true } }
}

fn read_as<D: DeserializeOwned>(ns: &Namespace, doc: Document) -> Result<D, StoreError> {
    let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
    bson::from_document(doc).map_err(|e| {
        StoreError::new(
            StoreErrorKind::TypeMismatch,
            format!(
                "{ns}/{id} cannot be read as {}: {e}",
                std::any::type_name::<D>()
            ),
        )
    })
}

/// The filter that matches document `id` only while it is settled: no
/// marker in `marker`, no lock, no pending count, no deletion under way, not
/// a placeholder.
fn settled(id: Bson, marker: &str) -> Document {
    doc! {
        "_id": id,
        format!("{marker}.0"): { "$exists": false },
        format!("{META_FIELD}.lock"): Bson::Null,
        format!("{META_FIELD}.deleting"): { "$exists": false },
        format!("{META_FIELD}.ghost"): { "$ne": true },
        format!("{META_FIELD}.pending"): { "$in": [0_i32, Bson::Null] },
    }
}

/// `id` as BSON, or a [`StoreErrorKind::BadRequest`] saying why not.
pub fn id_bson<I: Serialize + ?Sized>(id: &I) -> Result<Bson, StoreError> {
    bson::to_bson(id).map_err(|e| {
        StoreError::new(
            StoreErrorKind::BadRequest,
            format!("the id cannot be serialized: {e}"),
        )
    })
}

impl Coordinator {
    /// Where documents of `D` live: its namespace, in this coordinator's
    /// database when `D` names none.
    pub fn namespace_of<D: ParticipantDocument>(&self) -> Namespace {
        let mut ns = D::namespace();
        if ns.db.is_empty() {
            ns.db = self.config().database.clone();
        }
        ns
    }

    /// The document `id` of `D`, from the default store; `None` when there
    /// is none, or only the placeholder an insert reserved.
    pub async fn get<D, I>(&self, id: &I) -> Result<Option<D>, StoreError>
    where
        D: ParticipantDocument + DeserializeOwned,
        I: Serialize + ?Sized,
    {
        self.get_by_bson(id_bson(id)?).await
    }

    async fn get_by_bson<D>(&self, id: Bson) -> Result<Option<D>, StoreError>
    where
        D: ParticipantDocument + DeserializeOwned,
    {
        let ns = self.namespace_of::<D>();
        let mut filter = doc! { "_id": id };
        filter.extend(not_a_placeholder());
        let store = self.stores().default_store();
        match store.find_one(&ns, filter).await? {
            Some(doc) => read_as(&ns, doc).map(Some),
            None => Ok(None),
        }
    }

    /// The documents of `D` matching `filter` (a MongoDB filter), from the
    /// default store, placeholders left out, at most `limit` (`None`: all).
    pub async fn find<D>(&self, filter: Document, limit: Option<i64>) -> Result<Vec<D>, StoreError>
    where
        D: ParticipantDocument + DeserializeOwned,
    {
        let ns = self.namespace_of::<D>();
        let filter = doc! { "$and": [filter, not_a_placeholder()] };
        let store = self.stores().default_store();
        let docs = store
            .find(
                &ns,
                filter,
                FindOptions {
                    sort: Some(doc! { "_id": 1 }),
                    limit,
                },
            )
            .await?;
        docs.into_iter().map(|d| read_as(&ns, d)).collect()
    }

    /// Whether document `id` of `D` has a transaction in flight: a marker,
    /// a lock, or a pending count (`false` when it does not exist); or
    /// whether it is the placeholder of an insert that is still a
    /// reservation. A placeholder is one until its store's clock reads its
    /// `reservedAt` plus the lease it carries (the reserving coordinator's);
    /// past that no insert fills it without reserving the `_id` again, so
    /// `false` is right. (One written by a version that did not record the
    /// lease counts as one for this coordinator's lease plus clock margin.)
    ///
    /// The answer is about the moment of the read: a transaction may start
    /// on the document right after it. To read a document only while it is
    /// settled, read it once with [`get_settled`](Coordinator::get_settled),
    /// not this and then [`get`](Coordinator::get).
    pub async fn in_flight<D, I>(&self, id: &I) -> Result<bool, StoreError>
    where
        D: ParticipantDocument,
        I: Serialize + ?Sized,
    {
        let ns = self.namespace_of::<D>();
        let store = self.stores().default_store();
        let Some(doc) = store.find_one(&ns, doc! { "_id": id_bson(id)? }).await? else {
            return Ok(false);
        };
        if changed_in_flight(&doc, D::MARKER) {
            return Ok(true);
        }
        if !is_placeholder(&doc) {
            return Ok(false);
        }
        // A placeholder is in flight until no insert would fill it any more
        // without reserving it again.
        let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
        Ok(!self.left_behind(store.as_ref(), &ns, id).await?)
    }

    /// Whether the placeholder `id` is no longer a reservation, by the
    /// store's clock: its `reservedAt + leaseMillis` has passed (or, for
    /// one written without `leaseMillis`, it was reserved longer ago than
    /// this coordinator's lease plus the clock margin). No fill lands on it
    /// then without reserving it again, which stamps it anew.
    async fn left_behind(
        &self,
        store: &dyn crate::Store,
        ns: &Namespace,
        id: Bson,
    ) -> Result<bool, StoreError> {
        let cutoff = self.placeholder_cutoff(store).await?;
        let mut filter = doc! { "_id": id };
        filter.extend(crate::document::expired_placeholders(cutoff));
        store.exists(ns, filter).await
    }

    /// The document `id` of `D`, read once, if no transaction is in flight
    /// on it: `Ok(None)` when there is none (or only the placeholder an
    /// insert reserved), [`StoreErrorKind::InFlight`] when a transaction has
    /// a change applied to it and not yet committed or undone (a marker, a
    /// lock, a pending count), so that what is read is never half of a
    /// transaction.
    ///
    /// One document only: settled reads of several documents are each
    /// settled, not a snapshot of them together (a transaction may commit
    /// between two of them). For that, read inside one of MongoDB's own
    /// multi-document transactions.
    pub async fn get_settled<D, I>(&self, id: &I) -> Result<Option<D>, StoreError>
    where
        D: ParticipantDocument + DeserializeOwned,
        I: Serialize + ?Sized,
    {
        let ns = self.namespace_of::<D>();
        let store = self.stores().default_store();
        let id = id_bson(id)?;
        let Some(doc) = store.find_one(&ns, doc! { "_id": id.clone() }).await? else {
            return Ok(None);
        };
        if changed_in_flight(&doc, D::MARKER) {
            return Err(StoreError::new(
                StoreErrorKind::InFlight,
                format!("{ns}/{id} has a transaction in flight"),
            ));
        }
        if is_placeholder(&doc) {
            return Ok(None);
        }
        read_as(&ns, doc).map(Some)
    }

    /// Inserts `doc` into the default store as a plain insert, outside any
    /// transaction (e.g. to set up accounts); fails with
    /// [`StoreErrorKind::DuplicateKey`] if its `_id` is taken.
    pub async fn insert<D>(&self, doc: &D) -> Result<(), StoreError>
    where
        D: ParticipantDocument + Serialize,
    {
        let ns = self.namespace_of::<D>();
        let document = stored_form(doc)?;
        self.stores()
            .default_store()
            .insert_one(&ns, document)
            .await
    }

    /// Writes `doc` into the default store outside any transaction: inserts
    /// it, or replaces the document with its `_id` if that one is settled (no
    /// transaction in flight on it, see [`in_flight`](Coordinator::in_flight)).
    /// The placeholder of an insert counts as in flight while it is still a
    /// reservation; one that no longer is gets replaced (an insert still
    /// running then reserves the `_id` again, finds this document, and is
    /// refused as if the document had been there first, which it was).
    ///
    /// A document with a transaction in flight is left as it is, and the
    /// answer is [`StoreErrorKind::InFlight`]: replacing it would take away
    /// the markers its transaction counts on. A transaction this coordinator
    /// committed and is still finishing in the background does not count:
    /// `put` then waits for the finishing ([`drain`](Coordinator::drain)) and
    /// tries once more. Meant for setting up and resetting data (examples,
    /// fixtures), not as a way around transactions.
    pub async fn put<D>(&self, doc: &D) -> Result<(), StoreError>
    where
        D: ParticipantDocument + Serialize,
    {
        match self.put_once(doc).await {
            Err(e) if e.kind == StoreErrorKind::InFlight => {
                self.drain().await;
                self.put_once(doc).await
            }
            other => other,
        }
    }

    async fn put_once<D>(&self, doc: &D) -> Result<(), StoreError>
    where
        D: ParticipantDocument + Serialize,
    {
        let ns = self.namespace_of::<D>();
        let document = stored_form(doc)?;
        let id = document.get("_id").cloned().ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::BadRequest,
                format!(
                    "{} has no `_id` field to put it under",
                    std::any::type_name::<D>()
                ),
            )
        })?;
        let store = self.stores().default_store();
        let replaced = store
            .replace_one(&ns, settled(id.clone(), D::MARKER), document.clone())
            .await?;
        if replaced.matched > 0 {
            return Ok(());
        }
        match store.insert_one(&ns, document.clone()).await {
            Err(e) if e.kind == StoreErrorKind::DuplicateKey => {
                // A placeholder that is no longer a reservation goes first
                // (judged on the store's clock, in the delete's filter: an
                // insert that reserves it again meanwhile keeps it).
                let cutoff = self.placeholder_cutoff(store.as_ref()).await?;
                let mut stale = doc! { "_id": id.clone() };
                stale.extend(crate::document::expired_placeholders(cutoff));
                if store.delete_one(&ns, stale).await? == 1 {
                    return store.insert_one(&ns, document).await;
                }
                Err(StoreError::new(
                    StoreErrorKind::InFlight,
                    format!(
                        "{ns}/{id} has a transaction in flight; `put` replaces only settled documents"
                    ),
                ))
            }
            other => other,
        }
    }
}

/// Whether a transaction has a change applied to `doc` and not yet
/// committed or undone: a marker in `marker`, a lock, or a pending count.
fn changed_in_flight(doc: &Document, marker: &str) -> bool {
    let marked = doc
        .get_array(marker)
        .map(|m| !m.is_empty())
        .unwrap_or(false);
    let meta = doc.get_document(META_FIELD).ok();
    let locked = meta
        .and_then(|m| m.get("lock"))
        .is_some_and(|l| *l != Bson::Null);
    let pending = meta
        .and_then(|m| m.get("pending"))
        .and_then(|p| match p {
            Bson::Int32(n) => Some(i64::from(*n)),
            Bson::Int64(n) => Some(*n),
            _ => None,
        })
        .unwrap_or(0);
    marked || locked || pending > 0
}

/// Whether `doc` is the placeholder an insert reserved (`_tandem.ghost`).
fn is_placeholder(doc: &Document) -> bool {
    doc.get_document(META_FIELD)
        .ok()
        .and_then(|m| m.get_bool("ghost").ok())
        .unwrap_or(false)
}

/// `doc` as stored outside a transaction: serialized, without the marker
/// field and without tandem's own sub-document. A struct may have read both
/// (through a flattened struct that flattens a map, which the attribute
/// cannot see): written back, a stale lock or pending count would hold the
/// document for a transaction long finished.
fn stored_form<D: ParticipantDocument + Serialize>(doc: &D) -> Result<Document, StoreError> {
    let mut document = bson::to_document(doc).map_err(|e| {
        StoreError::new(
            StoreErrorKind::BadRequest,
            format!("{} cannot be stored: {e}", std::any::type_name::<D>()),
        )
    })?;
    document.remove(D::MARKER);
    document.remove(META_FIELD);
    Ok(document)
}

/// A boxed future, as [`ReadDocuments`] returns.
pub type ReadFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// What typed reads of `D` go through: [`Coordinator`] and `Arc<Coordinator>`.
///
/// The functions `#[participant]` generates (`Order::get(&coordinator, id)`,
/// `Order::find(&coordinator, filter)`) take any `R: ReadDocuments<Self>`,
/// so that they work through either without `&*` or `.as_ref()`.
#[diagnostic::on_unimplemented(
    message = "`{D}` cannot be read through `{Self}`",
    note = "typed reads go through a `tandem::Coordinator` (or an `Arc` of one), and need `{D}: serde::Deserialize`"
)]
pub trait ReadDocuments<D> {
    /// The document whose `_id` is `id`, placeholders left out; see [`Coordinator::get`].
    fn read_by_id(&self, id: Bson) -> ReadFuture<'_, Option<D>>;

    /// The documents matching `filter`, placeholders left out, sorted by
    /// `_id`, at most `limit`; see [`Coordinator::find`].
    fn read_matching(&self, filter: Document, limit: Option<i64>) -> ReadFuture<'_, Vec<D>>;
}

impl<D> ReadDocuments<D> for Coordinator
where
    D: ParticipantDocument + DeserializeOwned + Send + 'static,
{
    fn read_by_id(&self, id: Bson) -> ReadFuture<'_, Option<D>> {
        Box::pin(self.get_by_bson::<D>(id))
    }

    fn read_matching(&self, filter: Document, limit: Option<i64>) -> ReadFuture<'_, Vec<D>> {
        Box::pin(self.find::<D>(filter, limit))
    }
}

impl<D> ReadDocuments<D> for Arc<Coordinator>
where
    D: ParticipantDocument + DeserializeOwned + Send + 'static,
{
    fn read_by_id(&self, id: Bson) -> ReadFuture<'_, Option<D>> {
        Box::pin(self.as_ref().get_by_bson::<D>(id))
    }

    fn read_matching(&self, filter: Document, limit: Option<i64>) -> ReadFuture<'_, Vec<D>> {
        Box::pin(self.as_ref().find::<D>(filter, limit))
    }
}
