//! How [`MemoryStore`](super::MemoryStore) keeps documents: collections by
//! namespace, each with its documents by `_id` and the `_id`s in order.

use std::collections::{BTreeSet, HashMap};

use bson::{Bson, Document};

use super::id::{IdBuildHasher, IdKey, IdRef, IdView};
use super::{eval_rest, id_equality, id_list};
use crate::query::{self, Ctx};
use crate::store::{Namespace, StoreError, StoreErrorKind};

/// The collections, by namespace.
pub(super) type Collections = HashMap<Namespace, Collection, IdBuildHasher>;
/// One collection: its documents by `_id`, and the `_id`s in order.
///
/// The hash map serves the look-ups by `_id` (most calls) in constant time;
/// the ordered set serves scans, which must follow `_id` order.
#[derive(Default)]
pub(super) struct Collection {
    pub(super) docs: HashMap<IdKey, Stored, IdBuildHasher>,
    order: BTreeSet<IdKey>,
}

/// A stored document and its size as BSON, kept up to date by every write
/// so that the 16 MiB limit is checked without measuring the whole document.
#[derive(Debug)]
pub(super) struct Stored {
    pub(super) doc: Document,
    pub(super) len: usize,
}

impl Collection {
    pub(super) fn get(&self, id: &Bson) -> Option<&Document> {
        self.docs.get(&IdRef(id) as &dyn IdView).map(|s| &s.doc)
    }

    pub(super) fn get_mut(&mut self, id: &Bson) -> Option<&mut Stored> {
        self.docs.get_mut(&IdRef(id) as &dyn IdView)
    }

    /// The documents in `_id` order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&IdKey, &Document)> + '_ {
        self.order
            .iter()
            .filter_map(|key| self.docs.get(key).map(|stored| (key, &stored.doc)))
    }

    /// The documents of this collection matching a validated `filter`, in
    /// `_id` order. An `$expr` error is left in `cx` (check it once done).
    pub(super) fn matching<'a>(
        &'a self,
        filter: &'a Document,
        cx: &'a Ctx<'a>,
    ) -> impl Iterator<Item = &'a Document> + 'a {
        let (direct, listed, scan) = match (id_equality(filter), id_list(filter)) {
            (Some(id), _) => (
                self.get(id).filter(|doc| eval_rest(doc, filter, cx)),
                None,
                None,
            ),
            (None, Some(ids)) => {
                // `_id: {$in: [...]}`: a look-up per value, in `_id` order.
                let mut found: Vec<(&IdKey, &Document)> = ids
                    .iter()
                    .filter_map(|id| self.docs.get_key_value(&IdRef(id) as &dyn IdView))
                    .map(|(key, stored)| (key, &stored.doc))
                    .collect();
                found.sort_by(|a, b| a.0.cmp(b.0));
                found.dedup_by(|a, b| a.0 == b.0);
                let docs = found
                    .into_iter()
                    .map(|(_, doc)| doc)
                    .filter(move |doc| eval_rest(doc, filter, cx));
                (None, Some(docs), None)
            }
            (None, None) => (None, None, Some(self.iter().map(|(_, doc)| doc))),
        };
        direct
            .into_iter()
            .chain(listed.into_iter().flatten())
            .chain(
                scan.into_iter()
                    .flatten()
                    .filter(move |doc| query::eval_skipping(doc, filter, None, cx)),
            )
    }

    /// The first document matching a validated `filter`. An `$expr` error is
    /// left in `cx` (check it before using the result).
    pub(super) fn first_match_mut(
        &mut self,
        filter: &Document,
        cx: &Ctx<'_>,
    ) -> Option<&mut Stored> {
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
    pub(super) fn insert_new(&mut self, ns: &Namespace, doc: Stored) -> Result<(), StoreError> {
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

    pub(super) fn remove(&mut self, id: &Bson) -> Option<Stored> {
        let doc = self.docs.remove(&IdRef(id) as &dyn IdView)?;
        self.order.remove(&IdRef(id) as &dyn IdView);
        Some(doc)
    }
}
