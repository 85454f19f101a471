//! Typed reads (and plain inserts) of `#[participant]` documents, through a
//! coordinator: its default store, and its database where the type names none.
//!
//! They skip the placeholders that inserts reserve, and say whether a
//! document has a transaction in flight (see the guide's Isolation chapter).

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

fn id_bson<I: Serialize + ?Sized>(id: &I) -> Result<Bson, StoreError> {
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
        let ns = self.namespace_of::<D>();
        let mut filter = doc! { "_id": id_bson(id)? };
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
    /// a lock, or a pending count (`false` when it does not exist). Reads
    /// that must not see half of a transaction wait until this is `false`.
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
        let marked = doc
            .get_array(D::MARKER)
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
        let ghost = meta.and_then(|m| m.get_bool("ghost").ok()).unwrap_or(false);
        Ok(marked || locked || pending > 0 || ghost)
    }

    /// Inserts `doc` into the default store as a plain insert, outside any
    /// transaction (e.g. to set up accounts); fails with
    /// [`StoreErrorKind::DuplicateKey`] if its `_id` is taken.
    pub async fn insert<D>(&self, doc: &D) -> Result<(), StoreError>
    where
        D: ParticipantDocument + Serialize,
    {
        let ns = self.namespace_of::<D>();
        let document = bson::to_document(doc).map_err(|e| {
            StoreError::new(
                StoreErrorKind::BadRequest,
                format!("{} cannot be stored: {e}", std::any::type_name::<D>()),
            )
        })?;
        self.stores()
            .default_store()
            .insert_one(&ns, document)
            .await
    }
}
