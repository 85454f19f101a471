//! [`DocumentChange`] as a [`Participant`]: the guarded single-document steps.
//!
//! Every participant document carries, next to its own fields:
//!
//! * the marker array (default `pendingTransactions`): the ids of the
//!   transactions whose change is applied but not yet committed or undone;
//! * `_tandem.lock`: the id of the transaction holding the document exclusively;
//! * `_tandem.tombstones`: ids of transactions that are finished with this
//!   document. A tombstone fences off a late apply by a stalled worker, which
//!   the marker alone cannot do once it has been pulled. Tombstones are removed
//!   when the transaction record is garbage-collected;
//! * `_tandem.deleting`: set while a delete waits for its commit;
//! * `_tandem.ghost`: marks the placeholder left where an insert was undone.

use std::sync::Arc;

use async_trait::async_trait;
use bson::{doc, Bson, Document};

use crate::change::{DocumentChange, DocumentOp, FieldOp, GuardOp, META_FIELD};
use crate::error::{ChangeError, StepError};
use crate::participant::{Participant, StepContext, StepUpdate};
use crate::query;
use crate::store::{Store, StoreError, StoreErrorKind};
use crate::TxId;

/// The participant kind of document changes.
pub(crate) const KIND: &str = "document";

const LOCK: &str = "_tandem.lock";
const TOMBSTONES: &str = "_tandem.tombstones";
const DELETING: &str = "_tandem.deleting";
const GHOST: &str = "_tandem.ghost";

/// A before-image: the value of each exclusively changed field, or its absence.
fn image_to_doc(fields: Vec<(String, Option<Bson>)>) -> Document {
    let list: Vec<Bson> = fields
        .into_iter()
        .map(|(path, value)| match value {
            Some(v) => Bson::Document(doc! { "path": path, "value": v }),
            None => Bson::Document(doc! { "path": path }),
        })
        .collect();
    doc! { "fields": list }
}

fn image_from_doc(doc: &Document) -> Vec<(String, Option<Bson>)> {
    doc.get_array("fields")
        .map(|list| {
            list.iter()
                .filter_map(|b| b.as_document())
                .filter_map(|d| {
                    let path = d.get_str("path").ok()?.to_owned();
                    Some((path, d.get("value").cloned()))
                })
                .collect()
        })
        .unwrap_or_default()
}

impl DocumentChange {
    fn store<'a>(&self, ctx: &StepContext<'a>) -> Result<&'a std::sync::Arc<dyn Store>, StepError> {
        ctx.stores
            .get(self.store.as_deref())
            .ok_or_else(|| StepError::Store {
                participant: self.label(),
                source: StoreError::new(
                    StoreErrorKind::BadRequest,
                    format!("unknown store {:?}", self.store.as_deref().unwrap_or("")),
                ),
            })
    }

    fn store_err(&self, e: StoreError) -> StepError {
        let participant = self.label();
        match e.kind {
            StoreErrorKind::TypeMismatch => StepError::TypeMismatch {
                participant,
                path: self.first_path().to_owned(),
                message: e.message,
            },
            StoreErrorKind::DocumentTooLarge => StepError::TooLarge { participant },
            StoreErrorKind::Overflow => StepError::Overflow {
                participant,
                message: e.message,
            },
            _ => StepError::Store {
                participant,
                source: e,
            },
        }
    }

    fn first_path(&self) -> &str {
        match &self.op {
            DocumentOp::Update { ops } => ops.first().map(|o| o.path()).unwrap_or(""),
            _ => "",
        }
    }

    /// The paths whose before-image compensation needs.
    fn imaged_paths(&self) -> Vec<&str> {
        match &self.op {
            DocumentOp::Update { ops } => ops
                .iter()
                .filter(|op| !op.commutes())
                .map(|op| op.path())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The before-image, when every imaged path is pinned by an equality guard.
    fn image_from_guards(&self) -> Option<Vec<(String, Option<Bson>)>> {
        self.imaged_paths()
            .into_iter()
            .map(|path| {
                self.guards
                    .iter()
                    .find(|g| g.path == path)
                    .and_then(|g| match g.op {
                        GuardOp::Eq => Some((path.to_owned(), Some(g.value.clone()))),
                        GuardOp::Missing => Some((path.to_owned(), None)),
                        _ => None,
                    })
            })
            .collect()
    }

    /// The conditions every apply carries: not yet applied, not fenced, not a ghost, not held.
    fn apply_filter(&self, ctx: &StepContext<'_>) -> Document {
        let tx = ctx.tx.as_str();
        let mut filter = self.guarded_filter(ctx.before);
        filter.insert(self.marker.clone(), doc! { "$ne": tx });
        filter.insert(TOMBSTONES, doc! { "$ne": tx });
        // A credit deferred to the commit must not overflow there, where it cannot be refused.
        let ceilings: Vec<(String, Bson)> = self
            .deferred_credits()
            .filter_map(|(path, by)| {
                // `$not: {$gt}` rather than `$or` of `$lte` and `$exists`: it also admits a
                // missing field, and keeps the filter a plain `_id` look-up for the server.
                credit_ceiling(by).map(|max| {
                    (
                        path.to_owned(),
                        Bson::Document(doc! { "$not": { "$gt": max } }),
                    )
                })
            })
            .collect();
        merge_conditions(&mut filter, ceilings);
        filter
    }

    /// The increments that take effect only at commit, with their amounts.
    fn deferred_credits(&self) -> impl Iterator<Item = (&str, &Bson)> {
        let ops: &[FieldOp] = match &self.op {
            DocumentOp::Update { ops } => ops,
            _ => &[],
        };
        ops.iter()
            .filter(|op| !self.applies_early(op))
            .filter_map(|op| match op {
                FieldOp::Inc { path, by } => Some((path.as_str(), by)),
                _ => None,
            })
    }

    /// The document, not held by another transaction, not a ghost, with the guards
    /// (and the before-image, if any) holding.
    fn guarded_filter(&self, before: Option<&Document>) -> Document {
        let mut filter = doc! {
            "_id": self.id.clone(),
            LOCK: Bson::Null,
            GHOST: { "$exists": false },
        };
        if self.is_exclusive() {
            // Nobody else may have a change pending on a document we change exclusively.
            filter.insert(format!("{}.0", self.marker), doc! { "$exists": false });
        }
        let mut conds: Vec<(String, Bson)> = self
            .guards
            .iter()
            .map(|g| (g.path.clone(), Bson::Document(g.condition())))
            .collect();
        if let Some(before) = before {
            // The document must still be as it was read, or the image would be stale.
            for (path, value) in image_from_doc(before) {
                let cond = match value {
                    Some(v) => doc! { "$eq": v },
                    None => doc! { "$exists": false },
                };
                conds.push((path, Bson::Document(cond)));
            }
        }
        merge_conditions(&mut filter, conds);
        filter
    }

    /// The document as this transaction's apply left it: its marker is there.
    fn applied_filter(&self, ctx: &StepContext<'_>) -> Document {
        doc! { "_id": self.id.clone(), self.marker.clone(): ctx.tx.as_str() }
    }

    /// The apply of a delete: hold the document and mark it for deletion at commit.
    fn delete_update(&self, ctx: &StepContext<'_>) -> Document {
        let tx = ctx.tx.as_str();
        doc! {
            "$set": { LOCK: tx, DELETING: true },
            "$push": { self.marker.clone(): tx },
        }
    }

    /// The commit of an applied change (not a delete): the marker becomes a
    /// tombstone, the hold is released, and deferred credits land, exactly once.
    fn clear_update(&self, ctx: &StepContext<'_>) -> Document {
        let tx = ctx.tx.as_str();
        let mut update = doc! {
            "$pull": { self.marker.clone(): tx },
            "$unset": { LOCK: "" },
            "$addToSet": { TOMBSTONES: tx },
        };
        let late: Document = self
            .deferred_credits()
            .map(|(path, by)| (path.to_owned(), by.clone()))
            .collect();
        if !late.is_empty() {
            update.insert("$inc", late);
        }
        update
    }

    fn apply_update(&self, ctx: &StepContext<'_>, ops: &[FieldOp]) -> Document {
        let mut set = Document::new();
        let mut unset = Document::new();
        let mut inc = Document::new();
        let mut push = Document::new();
        let mut pull = Document::new();
        for op in ops {
            match op {
                FieldOp::Set { path, value } => {
                    set.insert(path.clone(), value.clone());
                }
                FieldOp::Unset { path } => {
                    unset.insert(path.clone(), "");
                }
                FieldOp::Inc { path, by } => {
                    // A deferred credit adds zero now: the store still checks the field's type,
                    // so a credit can never fail later, at commit.
                    let now = if self.applies_early(op) {
                        by.clone()
                    } else {
                        zero_like(by)
                    };
                    inc.insert(path.clone(), now);
                }
                FieldOp::Push { path, value } => {
                    push.insert(path.clone(), value.clone());
                }
                FieldOp::Pull { path, value } => {
                    pull.insert(path.clone(), value.clone());
                }
            }
        }
        push.insert(self.marker.clone(), ctx.tx.as_str());
        if self.is_exclusive() {
            set.insert(LOCK, ctx.tx.as_str());
        }
        let mut update = Document::new();
        for (op, body) in [
            ("$set", set),
            ("$unset", unset),
            ("$inc", inc),
            ("$push", push),
            ("$pull", pull),
        ] {
            if !body.is_empty() {
                update.insert(op, body);
            }
        }
        update
    }

    /// Applies `update` under the apply filter; explains a miss.
    async fn guarded_apply(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
        update: Document,
    ) -> Result<(), StepError> {
        let outcome = store
            .update_one(&self.namespace, self.apply_filter(ctx), update, false)
            .await
            .map_err(|e| self.store_err(e))?;
        if outcome.matched == 1 {
            Ok(())
        } else {
            self.diagnose(store, ctx).await
        }
    }

    /// Works out why a guarded apply matched nothing.
    async fn diagnose(&self, store: &dyn Store, ctx: &StepContext<'_>) -> Result<(), StepError> {
        let current = store
            .find_one(&self.namespace, doc! { "_id": self.id.clone() })
            .await
            .map_err(|e| self.store_err(e))?;
        self.explain(current.as_ref(), Some(ctx.tx))
    }

    /// Explains why this change's guarded command matched nothing, given the
    /// document as it is now (`None`: missing). With `tx`, a marker of `tx` means
    /// the change was applied already (`Ok`), and a tombstone means it is fenced.
    ///
    /// Stores use it to report the same typed errors for every strategy.
    pub fn explain(&self, current: Option<&Document>, tx: Option<&TxId>) -> Result<(), StepError> {
        let participant = self.label();
        let Some(current) = current else {
            return Err(StepError::NotFound { participant });
        };
        if let Some(tx) = tx {
            let tx = Bson::String(tx.as_str().to_owned());
            let has =
                |path: &str| query::matches(current, &doc! { path: tx.clone() }).unwrap_or(false);
            if has(&self.marker) {
                return Ok(()); // applied already, by us or by another worker of this transaction
            }
            if has(TOMBSTONES) {
                return Err(StepError::Fenced { participant });
            }
        }
        if query::lookup(current, GHOST).is_some() {
            return Err(StepError::NotFound { participant });
        }
        if let Some(holder) = query::lookup(current, LOCK).filter(|b| **b != Bson::Null) {
            return Err(StepError::Conflict {
                participant,
                holder: holder_text(holder),
            });
        }
        if self.is_exclusive() {
            if let Some(Bson::Array(pending)) = query::lookup(current, &self.marker) {
                if let Some(first) = pending.first() {
                    return Err(StepError::Conflict {
                        participant,
                        holder: holder_text(first),
                    });
                }
            }
        }
        for guard in &self.guards {
            if query::matches(current, &guard.to_filter()).unwrap_or(false) {
                continue;
            }
            let found = query::lookup(current, &guard.path);
            if let (Some(found), false) = (
                found,
                matches!(guard.op, GuardOp::Exists | GuardOp::Missing),
            ) {
                if query::compare(found, &guard.value).is_none() && guard.value != Bson::Null {
                    return Err(StepError::TypeMismatch {
                        participant,
                        path: guard.path.clone(),
                        message: format!(
                            "stored {} {found}, guard compares with {} {}",
                            type_name(found),
                            type_name(&guard.value),
                            guard.value
                        ),
                    });
                }
            }
            let found = found
                .map(|b| b.to_string())
                .unwrap_or_else(|| "nothing".into());
            return Err(StepError::GuardFailed {
                participant,
                guard: format!("{guard} (found {found})"),
            });
        }
        if let DocumentOp::Update { ops } = &self.op {
            for op in ops {
                if let FieldOp::Inc { path, .. } = op {
                    if let Some(v) = query::lookup(current, path) {
                        if !matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_)) {
                            return Err(StepError::TypeMismatch {
                                participant,
                                path: path.clone(),
                                message: format!(
                                    "Cannot apply $inc to a value of non-numeric type {} ({v})",
                                    type_name(v)
                                ),
                            });
                        }
                    }
                }
            }
        }
        for (path, by) in self.deferred_credits() {
            if let (Some(max), Some(found)) = (credit_ceiling(by), query::lookup(current, path)) {
                if query::compare(found, &max) == Some(std::cmp::Ordering::Greater) {
                    return Err(StepError::Overflow {
                        participant,
                        message: format!(
                            "adding {by} to {path} = {found} would overflow a 64-bit integer"
                        ),
                    });
                }
            }
        }
        // The before-image no longer holds: somebody wrote the document since it was read.
        Err(StepError::Conflict {
            participant,
            holder: "(concurrent write)".into(),
        })
    }

    /// Puts the tombstone on first, so no apply can land after this point.
    async fn fence(&self, store: &dyn Store, ctx: &StepContext<'_>) -> Result<(), StepError> {
        let insert = matches!(self.op, DocumentOp::Insert { .. });
        let mut update = doc! { "$addToSet": { TOMBSTONES: ctx.tx.as_str() } };
        if insert {
            // The document may never have been inserted: leave a fenced placeholder.
            update.insert("$setOnInsert", doc! { GHOST: true });
        }
        store
            .update_one(
                &self.namespace,
                doc! { "_id": self.id.clone() },
                update,
                insert,
            )
            .await
            .map(|_| ())
            .map_err(|e| self.store_err(e))
    }
}

/// Whether serde writes `value` back exactly as it is: the everyday types,
/// and documents and arrays of them. Others take the serde path.
fn plain(value: &Bson) -> bool {
    match value {
        Bson::Null
        | Bson::Boolean(_)
        | Bson::Int32(_)
        | Bson::Int64(_)
        | Bson::Double(_)
        | Bson::String(_) => true,
        Bson::Array(items) => items.iter().all(plain),
        Bson::Document(d) => plain_doc(d),
        _ => false,
    }
}

fn plain_doc(d: &Document) -> bool {
    d.values().all(plain)
}

impl DocumentChange {
    /// The spec exactly as serde writes it, built directly; `None` if a value
    /// is not [`plain`], for which serde is left to decide.
    fn plain_spec(&self) -> Option<Document> {
        if !plain(&self.id) || !self.guards.iter().all(|g| plain(&g.value)) {
            return None;
        }
        let op = match &self.op {
            DocumentOp::Update { ops } => {
                let mut list = Vec::with_capacity(ops.len());
                for op in ops {
                    let entry = match op {
                        FieldOp::Set { path, value } => {
                            doc! { "op": "set", "path": path.as_str(), "value": plain(value).then(|| value.clone())? }
                        }
                        FieldOp::Unset { path } => doc! { "op": "unset", "path": path.as_str() },
                        FieldOp::Inc { path, by } => {
                            doc! { "op": "inc", "path": path.as_str(), "by": plain(by).then(|| by.clone())? }
                        }
                        FieldOp::Push { path, value } => {
                            doc! { "op": "push", "path": path.as_str(), "value": plain(value).then(|| value.clone())? }
                        }
                        FieldOp::Pull { path, value } => {
                            doc! { "op": "pull", "path": path.as_str(), "value": plain(value).then(|| value.clone())? }
                        }
                    };
                    list.push(Bson::Document(entry));
                }
                doc! { "type": "update", "ops": list }
            }
            DocumentOp::Insert { doc } => {
                if !plain_doc(doc) {
                    return None;
                }
                doc! { "type": "insert", "doc": doc.clone() }
            }
            DocumentOp::Delete => doc! { "type": "delete" },
        };
        let guards: Vec<Bson> = self
            .guards
            .iter()
            .map(|g| {
                let op = match g.op {
                    GuardOp::Eq => "eq",
                    GuardOp::Ne => "ne",
                    GuardOp::Gt => "gt",
                    GuardOp::Gte => "gte",
                    GuardOp::Lt => "lt",
                    GuardOp::Lte => "lte",
                    GuardOp::Exists => "exists",
                    GuardOp::Missing => "missing",
                };
                Bson::Document(doc! { "path": g.path.as_str(), "op": op, "value": g.value.clone() })
            })
            .collect();
        let mut spec = Document::new();
        if let Some(store) = &self.store {
            spec.insert("store", store.as_str());
        }
        spec.insert(
            "namespace",
            doc! { "db": self.namespace.db.as_str(), "collection": self.namespace.collection.as_str() },
        );
        spec.insert("id", self.id.clone());
        spec.insert("marker", self.marker.as_str());
        spec.insert("op", op);
        spec.insert("guards", guards);
        Some(spec)
    }
}

/// One MongoDB command that makes a [`DocumentChange`] inside a native multi-document
/// transaction: no marker, no lock, but the same guards and the same respect for
/// documents held by two-phase transactions.
#[derive(Clone, Debug, PartialEq)]
pub enum NativeCommand {
    /// `updateOne(filter, update)`; matching nothing means a refusal to explain.
    Update {
        /// The guarded filter.
        filter: Document,
        /// The update.
        update: Document,
    },
    /// `insertOne(doc)`; a duplicate key means the document exists already.
    Insert {
        /// The full document, `_id` included.
        doc: Document,
    },
    /// `deleteOne(filter)`; deleting nothing means a refusal to explain.
    Delete {
        /// The guarded filter.
        filter: Document,
    },
}

impl DocumentChange {
    /// The command that makes this change inside a native transaction.
    pub fn native_command(&self) -> NativeCommand {
        match &self.op {
            DocumentOp::Insert { doc } => {
                let mut full = doc! { "_id": self.id.clone() };
                full.extend(doc.clone());
                NativeCommand::Insert { doc: full }
            }
            DocumentOp::Delete => NativeCommand::Delete {
                filter: self.guarded_filter(None),
            },
            DocumentOp::Update { ops } => {
                let mut update = Document::new();
                for op in ops {
                    let (name, value) = match op {
                        FieldOp::Set { value, .. } => ("$set", value.clone()),
                        FieldOp::Unset { .. } => ("$unset", Bson::String(String::new())),
                        FieldOp::Inc { by, .. } => ("$inc", by.clone()),
                        FieldOp::Push { value, .. } => ("$push", value.clone()),
                        FieldOp::Pull { value, .. } => ("$pull", value.clone()),
                    };
                    if !update.contains_key(name) {
                        update.insert(name, Document::new());
                    }
                    if let Ok(body) = update.get_document_mut(name) {
                        body.insert(op.path(), value);
                    }
                }
                NativeCommand::Update {
                    filter: self.guarded_filter(None),
                    update,
                }
            }
        }
    }
}

/// Adds conditions, each a field and what it must satisfy, to `filter`: at
/// its top level where the key is
/// free, or merged into the operator document already there when the two use
/// different operators, so the store still sees a plain `_id` lookup (a server
/// may scan instead when conditions sit inside `$and` or `$or`); inside `$and`
/// only where neither is possible.
fn merge_conditions(filter: &mut Document, conds: Vec<(String, Bson)>) {
    let mut rest = Vec::new();
    for (key, value) in conds {
        match (filter.get_mut(&key), value) {
            (None, value) => {
                filter.insert(key, value);
            }
            (Some(Bson::Document(have)), Bson::Document(add))
                if query::is_operator_doc(have)
                    && query::is_operator_doc(&add)
                    && add
                        .keys()
                        .all(|op| op.starts_with('$') && !have.contains_key(op)) =>
            {
                have.extend(add);
            }
            (Some(_), value) => rest.push(Bson::Document(doc! { key: value })),
        }
    }
    if rest.is_empty() {
        return;
    }
    match filter.get_array_mut("$and") {
        Ok(conds) => conds.extend(rest),
        Err(_) => {
            filter.insert("$and", rest);
        }
    }
}

fn holder_text(b: &Bson) -> String {
    match b {
        Bson::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn type_name(b: &Bson) -> &'static str {
    match b {
        Bson::String(_) => "string",
        Bson::Int32(_) => "int",
        Bson::Int64(_) => "long",
        Bson::Double(_) => "double",
        Bson::Boolean(_) => "bool",
        Bson::Array(_) => "array",
        Bson::Document(_) => "object",
        Bson::Null => "null",
        Bson::DateTime(_) => "date",
        Bson::ObjectId(_) => "objectId",
        _ => "value",
    }
}

#[async_trait]
impl Participant for DocumentChange {
    fn kind(&self) -> &str {
        KIND
    }

    fn spec(&self) -> Result<Document, ChangeError> {
        if let Some(spec) = self.plain_spec() {
            return Ok(spec);
        }
        bson::to_document(self).map_err(|e| ChangeError::Unserializable {
            path: "(change)".into(),
            message: e.to_string(),
        })
    }

    fn label(&self) -> String {
        DocumentChange::label(self)
    }

    fn resource(&self) -> String {
        use std::fmt::Write;
        let store = self.store.as_deref().unwrap_or("");
        let ns = &self.namespace;
        let mut key = String::with_capacity(store.len() + ns.db.len() + ns.collection.len() + 32);
        key.push_str(store);
        key.push('|');
        key.push_str(&ns.db);
        key.push('.');
        key.push_str(&ns.collection);
        key.push('|');
        // Two ids are one document exactly when their BSON encodings are equal.
        // A string's encoding is its bytes, so it stands for itself; any other
        // value is spelled by its encoding, and the tag keeps the two apart.
        match &self.id {
            Bson::String(id) => {
                key.push('s');
                key.push_str(id);
            }
            other => {
                key.push('b');
                let bytes = bson::to_vec(&doc! { "id": other.clone() }).unwrap_or_default();
                for b in bytes {
                    let _ = write!(key, "{b:02x}");
                }
            }
        }
        key
    }

    fn validate(&self) -> Result<(), ChangeError> {
        DocumentChange::validate(self)
    }

    async fn prepare(&self, ctx: StepContext<'_>) -> Result<Option<Document>, StepError> {
        let paths = self.imaged_paths();
        if paths.is_empty() {
            return Ok(None);
        }
        if let Some(image) = self.image_from_guards() {
            return Ok(Some(image_to_doc(image)));
        }
        let store = self.store(&ctx)?;
        let current = store
            .find_one(&self.namespace, doc! { "_id": self.id.clone() })
            .await
            .map_err(|e| self.store_err(e))?
            .ok_or_else(|| StepError::NotFound {
                participant: self.label(),
            })?;
        let image = paths
            .into_iter()
            .map(|p| (p.to_owned(), query::lookup(&current, p).cloned()))
            .collect();
        Ok(Some(image_to_doc(image)))
    }

    async fn apply(&self, ctx: StepContext<'_>) -> Result<(), StepError> {
        let store = self.store(&ctx)?;
        let tx = ctx.tx.as_str();
        match &self.op {
            DocumentOp::Insert { doc } => {
                let mut full = doc! { "_id": self.id.clone() };
                full.extend(doc.clone());
                full.insert(self.marker.clone(), vec![tx]);
                full.insert(META_FIELD, doc! { "lock": tx });
                match store.insert_one(&self.namespace, full).await {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind == StoreErrorKind::DuplicateKey => {
                        match self.diagnose(store.as_ref(), &ctx).await {
                            Ok(()) => Ok(()),
                            Err(StepError::Fenced { participant }) => {
                                Err(StepError::Fenced { participant })
                            }
                            Err(_) => Err(StepError::AlreadyExists {
                                participant: self.label(),
                            }),
                        }
                    }
                    Err(e) => Err(self.store_err(e)),
                }
            }
            DocumentOp::Update { ops } => {
                let update = self.apply_update(&ctx, ops);
                self.guarded_apply(store.as_ref(), &ctx, update).await
            }
            DocumentOp::Delete => {
                let update = self.delete_update(&ctx);
                self.guarded_apply(store.as_ref(), &ctx, update).await
            }
        }
    }

    fn apply_statement(&self, ctx: &StepContext<'_>) -> Option<StepUpdate> {
        let update = match &self.op {
            DocumentOp::Insert { .. } => return None,
            DocumentOp::Update { ops } => self.apply_update(ctx, ops),
            DocumentOp::Delete => self.delete_update(ctx),
        };
        Some(StepUpdate {
            store: Arc::clone(self.store(ctx).ok()?),
            namespace: self.namespace.clone(),
            filter: self.apply_filter(ctx),
            update,
        })
    }

    fn clear_statement(&self, ctx: &StepContext<'_>) -> Option<StepUpdate> {
        if matches!(self.op, DocumentOp::Delete) {
            return None;
        }
        Some(StepUpdate {
            store: Arc::clone(self.store(ctx).ok()?),
            namespace: self.namespace.clone(),
            filter: self.applied_filter(ctx),
            update: self.clear_update(ctx),
        })
    }

    async fn compensate(&self, ctx: StepContext<'_>) -> Result<(), StepError> {
        let store = self.store(&ctx)?;
        self.fence(store.as_ref(), &ctx).await?;
        let tx = ctx.tx.as_str();
        let applied = doc! { "_id": self.id.clone(), self.marker.clone(): tx };
        let result = match &self.op {
            DocumentOp::Insert { .. } => store
                .replace_one(
                    &self.namespace,
                    applied,
                    doc! { META_FIELD: { "ghost": true, "tombstones": [tx] } },
                )
                .await
                .map(|_| ()),
            DocumentOp::Delete => store
                .update_one(
                    &self.namespace,
                    applied,
                    doc! {
                        "$unset": { LOCK: "", DELETING: "" },
                        "$pull": { self.marker.clone(): tx },
                    },
                    false,
                )
                .await
                .map(|_| ()),
            DocumentOp::Update { ops } => {
                let mut set = Document::new();
                let mut unset = Document::new();
                let mut inc = Document::new();
                for op in ops {
                    if let FieldOp::Inc { path, by } = op {
                        if self.applies_early(op) {
                            inc.insert(path.clone(), negate(by));
                        }
                    }
                }
                if let Some(before) = ctx.before {
                    for (path, value) in image_from_doc(before) {
                        match value {
                            Some(v) => set.insert(path, v),
                            None => unset.insert(path, ""),
                        };
                    }
                }
                unset.insert(LOCK, "");
                let mut update = doc! { "$pull": { self.marker.clone(): tx }, "$unset": unset };
                if !set.is_empty() {
                    update.insert("$set", set);
                }
                if !inc.is_empty() {
                    update.insert("$inc", inc);
                }
                store
                    .update_one(&self.namespace, applied, update, false)
                    .await
                    .map(|_| ())
            }
        };
        result.map_err(|e| self.store_err(e))
    }

    async fn clear_marker(&self, ctx: StepContext<'_>) -> Result<(), StepError> {
        let store = self.store(&ctx)?;
        let tx = ctx.tx.as_str();
        let applied = doc! { "_id": self.id.clone(), self.marker.clone(): tx };
        let result = match &self.op {
            DocumentOp::Delete => store.delete_one(&self.namespace, applied).await.map(|_| ()),
            _ => store
                .update_one(&self.namespace, applied, self.clear_update(&ctx), false)
                .await
                .map(|_| ()),
        };
        result.map_err(|e| self.store_err(e))
    }

    async fn forget(&self, ctx: StepContext<'_>) -> Result<(), StepError> {
        let store = self.store(&ctx)?;
        let tx = ctx.tx.as_str();
        store
            .update_one(
                &self.namespace,
                doc! { "_id": self.id.clone(), TOMBSTONES: tx },
                doc! { "$pull": { TOMBSTONES: tx } },
                false,
            )
            .await
            .map_err(|e| self.store_err(e))?;
        // A placeholder with no tombstone left has nothing more to fence.
        store
            .delete_one(
                &self.namespace,
                doc! {
                    "_id": self.id.clone(),
                    GHOST: true,
                    format!("{TOMBSTONES}.0"): { "$exists": false },
                },
            )
            .await
            .map(|_| ())
            .map_err(|e| self.store_err(e))
    }
}

/// The largest stored value a deferred credit of `by` can be added to without
/// overflowing a 64-bit integer at commit; `None` when no limit applies.
fn credit_ceiling(by: &Bson) -> Option<Bson> {
    match by {
        Bson::Int32(i) if *i > 0 => Some(Bson::Int64(i64::MAX - i64::from(*i))),
        Bson::Int64(i) if *i > 0 => Some(Bson::Int64(i64::MAX - i)),
        _ => None,
    }
}

fn zero_like(by: &Bson) -> Bson {
    match by {
        Bson::Int32(_) => Bson::Int32(0),
        Bson::Double(_) => Bson::Double(0.0),
        _ => Bson::Int64(0),
    }
}

fn negate(by: &Bson) -> Bson {
    match by {
        Bson::Int32(i) => Bson::Int32(-i),
        Bson::Int64(i) => Bson::Int64(-i),
        Bson::Double(d) => Bson::Double(-d),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Namespace;

    #[test]
    fn plain_specs_are_what_serde_writes() {
        let ns = Namespace::new("bank", "accounts");
        let mut changes = vec![
            DocumentChange::update(ns.clone(), "A")
                .inc("balance", -100_i64)
                .require_gte("balance", 100_i64),
            DocumentChange::update(ns.clone(), 7_i32)
                .set("s", doc! { "a": [1, "x", null, 2.5] })
                .unset("u")
                .inc("n", 1.5)
                .push("list", "v")
                .pull("list", 3_i64),
            DocumentChange::insert(
                ns.clone(),
                "o1",
                doc! { "state": "UnPaid", "n": { "m": true } },
            ),
            DocumentChange::delete(ns.clone(), 9_i64),
        ];
        let mut stored = DocumentChange::update(ns.clone(), "B").set("x", 1);
        stored.store = Some("other".into());
        stored.marker = "pending".into();
        changes.push(stored);
        let mut guarded = DocumentChange::delete(ns, "G");
        for op in [
            GuardOp::Eq,
            GuardOp::Ne,
            GuardOp::Gt,
            GuardOp::Gte,
            GuardOp::Lt,
            GuardOp::Lte,
            GuardOp::Exists,
            GuardOp::Missing,
        ] {
            guarded.guards.push(crate::change::Guard {
                path: "g".into(),
                op,
                value: Bson::Int32(1),
            });
        }
        changes.push(guarded);
        for change in changes {
            let fast = change.plain_spec().expect("plain");
            assert_eq!(fast, bson::to_document(&change).unwrap(), "{change:?}");
            // The same bytes, key order included.
            assert_eq!(
                bson::to_vec(&fast).unwrap(),
                bson::to_vec(&bson::to_document(&change).unwrap()).unwrap()
            );
        }
    }
}
