//! A store that notes the `_id`s of the records its writes name, before it
//! sends them: what the garbage collector asked to remove or to reduce to
//! a stub, whether or not the answer came back.
//!
//! The checker compares it, record by record, with what it finds: a record
//! gone or made a stub that garbage collection never asked for was removed
//! by something else. A count of what garbage collection reported would not
//! do: a request that lands but whose answer is lost (the server killed
//! meanwhile), or a collection cut short by its time limit, does what it
//! was asked and reports nothing, and the count then falls short.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bson::{Bson, Document};
use tandem::store::{
    FindOneAndUpdateOptions, FindOptions, IndexSpec, UpdateOptions, UpdateOutcome,
};
use tandem::{Namespace, NativeTransactions, Store, StoreError};

/// The ids a [`Noting`] store's writes named.
pub type Sent = Arc<Mutex<BTreeSet<String>>>;

/// `inner`, noting the `_id`s that each write to `ns` names in its filter
/// (`{_id: x}` or `{_id: {$in: [...]}}`, at the top level or in an `$and`).
#[derive(Clone, Debug)]
pub struct Noting<S> {
    inner: S,
    ns: Namespace,
    sent: Sent,
}

impl<S: Store> Noting<S> {
    /// Notes into `sent` the ids of the writes to `ns`.
    pub fn new(inner: S, ns: Namespace, sent: Sent) -> Self {
        Noting { inner, ns, sent }
    }

    fn note(&self, ns: &Namespace, filter: &Document) {
        if *ns != self.ns {
            return;
        }
        let mut ids = Vec::new();
        named_ids(filter, &mut ids);
        if !ids.is_empty() {
            self.sent
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(ids);
        }
    }
}

/// The string `_id`s `filter` names.
fn named_ids(filter: &Document, into: &mut Vec<String>) {
    match filter.get("_id") {
        Some(Bson::String(id)) => into.push(id.clone()),
        Some(Bson::Document(op)) => {
            if let Ok(list) = op.get_array("$in") {
                into.extend(list.iter().filter_map(|b| b.as_str().map(str::to_owned)));
            }
            if let Ok(id) = op.get_str("$eq") {
                into.push(id.to_owned());
            }
        }
        _ => {}
    }
    if let Ok(all) = filter.get_array("$and") {
        for part in all {
            if let Bson::Document(part) = part {
                named_ids(part, into);
            }
        }
    }
}

#[async_trait]
impl<S: Store> Store for Noting<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn now(&self) -> Result<bson::DateTime, StoreError> {
        self.inner.now().await
    }
    async fn clock_estimate(&self) -> Result<bson::DateTime, StoreError> {
        self.inner.clock_estimate().await
    }
    async fn shutdown(&self) {
        self.inner.shutdown().await
    }
    async fn insert_one(&self, ns: &Namespace, doc: Document) -> Result<(), StoreError> {
        self.inner.insert_one(ns, doc).await
    }
    async fn update_one(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: UpdateOptions,
    ) -> Result<UpdateOutcome, StoreError> {
        self.note(ns, &filter);
        self.inner.update_one(ns, filter, update, options).await
    }
    async fn update_each(
        &self,
        ns: &Namespace,
        statements: Vec<(Document, Document)>,
    ) -> Result<u64, StoreError> {
        for (filter, _) in &statements {
            self.note(ns, filter);
        }
        self.inner.update_each(ns, statements).await
    }
    async fn find_one_and_update(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
        options: FindOneAndUpdateOptions,
    ) -> Result<Option<Document>, StoreError> {
        self.note(ns, &filter);
        self.inner
            .find_one_and_update(ns, filter, update, options)
            .await
    }
    async fn replace_one(
        &self,
        ns: &Namespace,
        filter: Document,
        replacement: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        self.note(ns, &filter);
        self.inner.replace_one(ns, filter, replacement).await
    }
    async fn delete_one(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.note(ns, &filter);
        self.inner.delete_one(ns, filter).await
    }
    async fn delete_many(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.note(ns, &filter);
        self.inner.delete_many(ns, filter).await
    }
    async fn update_many(
        &self,
        ns: &Namespace,
        filter: Document,
        update: Document,
    ) -> Result<UpdateOutcome, StoreError> {
        self.note(ns, &filter);
        self.inner.update_many(ns, filter, update).await
    }
    async fn find_one(
        &self,
        ns: &Namespace,
        filter: Document,
    ) -> Result<Option<Document>, StoreError> {
        self.inner.find_one(ns, filter).await
    }
    async fn find(
        &self,
        ns: &Namespace,
        filter: Document,
        options: FindOptions,
    ) -> Result<Vec<Document>, StoreError> {
        self.inner.find(ns, filter, options).await
    }
    async fn exists(&self, ns: &Namespace, filter: Document) -> Result<bool, StoreError> {
        self.inner.exists(ns, filter).await
    }
    async fn count(&self, ns: &Namespace, filter: Document) -> Result<u64, StoreError> {
        self.inner.count(ns, filter).await
    }
    fn native(&self) -> Option<&dyn NativeTransactions> {
        self.inner.native()
    }
    async fn ensure_index(&self, ns: &Namespace, index: IndexSpec) -> Result<(), StoreError> {
        self.inner.ensure_index(ns, index).await
    }
    async fn drop_index(&self, ns: &Namespace, name: &str) -> Result<(), StoreError> {
        self.inner.drop_index(ns, name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use tandem::MemoryStore;

    #[tokio::test]
    async fn the_ids_a_write_names_are_noted_before_it_is_sent() {
        let records = Namespace::new("b", "transactions");
        let other = Namespace::new("b", "accounts");
        let sent = Sent::default();
        let store = Noting::new(MemoryStore::new(), records.clone(), sent.clone());
        // Nothing there: the writes match nothing, and are noted all the same.
        store
            .delete_many(
                &records,
                doc! { "state": "done", "_id": { "$in": ["t1", "t2"] } },
            )
            .await
            .unwrap();
        store
            .update_each(
                &records,
                vec![(
                    doc! { "_id": "t3" },
                    doc! { "$set": { "participants": [] } },
                )],
            )
            .await
            .unwrap();
        store
            .delete_many(&records, doc! { "$and": [{ "x": 1 }, { "_id": "t4" }] })
            .await
            .unwrap();
        // Another collection, and a write naming no id, are not noted.
        store
            .delete_many(&other, doc! { "_id": "a1" })
            .await
            .unwrap();
        store
            .delete_many(&records, doc! { "stubUntil": { "$lte": 5 } })
            .await
            .unwrap();
        let noted: Vec<String> = sent.lock().unwrap().iter().cloned().collect();
        assert_eq!(noted, ["t1", "t2", "t3", "t4"]);
    }
}
