//! [`DocumentChange`] as a [`Participant`]: the guarded single-document steps.
//!
//! Every participant document carries, next to its own fields:
//!
//! * the marker array (default `pendingTransactions`): the ids of the
//!   transactions whose change is applied but not yet committed or undone;
//! * `_tandem.lock`: the id of the transaction holding the document exclusively;
//! * `_tandem.deleting`: set while a delete waits for its commit;
//! * `_tandem.pending`: how many transactions have a change applied to the
//!   document, whatever marker field they use (an exclusive change requires
//!   zero, so two marker names on one collection cannot hide a pending change);
//! * `_tandem.marks.<field>` and `_tandem.marked`: how many of them have their
//!   marker in each marker field other than the default one, and the total
//!   of those counts (a shared apply requires its marker field to hold no
//!   more entries than the changes pending under it: its count, or, for
//!   the default field, `_tandem.pending` less `_tandem.marked`; so that an
//!   array of the application's under the marker's name is not taken for
//!   tandem's while changes are pending under another);
//! * `_tandem.ghost`: marks a placeholder: an `_id` reserved by an insert that
//!   has not filled it (yet), with `_tandem.reservedAt`, the store's time of
//!   the reservation, and `_tandem.leaseMillis`, how long after it the
//!   placeholder stays a reservation. Placeholders are invisible to every
//!   other change and are filled, or removed, by inserts. A fill lands only
//!   while the store's clock reads earlier than `reservedAt + leaseMillis`;
//!   past that, the placeholder is no reservation any more (readers say so,
//!   and may remove it), and an insert still running reserves the `_id`
//!   again before filling it (removing a placeholder is always safe: a fill
//!   that finds none reserves the `_id` again). `_tandem.reservers` holds
//!   the markers of the inserts that reserved it: an insert's undo takes
//!   its own off and removes the placeholder only if no other is left, so
//!   it never takes a reservation away from another transaction.
//!
//! Nothing else, and nothing once the marker is gone: late steps of stalled
//! workers are fenced by time, not by history (see
//! [`StepContext`](crate::StepContext)). Every apply carries its deadline in
//! its filter, `{$expr: {$lt: [{$toLong: "$$NOW"}, deadline]}}`, so it lands
//! only while the store's clock reads earlier; a step that removes a marker
//! while an earlier apply may still be in flight carries the opposite
//! condition, `$gte` the time past that apply's deadline.
//!
//! An insert is two steps, because an insert cannot carry a condition: while
//! preparing, an upsert reserves the `_id` with a placeholder (harmless if it
//! lands late: a placeholder changes nothing anyone sees), and the apply fills
//! the placeholder with one guarded update, fenced by the apply's deadline
//! and by the placeholder's own validity.

use std::sync::Arc;

use async_trait::async_trait;
use bson::{doc, Bson, Document};

use crate::change::{DocumentChange, DocumentOp, FieldOp, GuardOp, META_FIELD};
use crate::error::{ChangeError, StepError};
use crate::participant::{Participant, StepContext, StepUpdate};
use crate::query;
use crate::store::{Namespace, Store, StoreError, StoreErrorKind};
use crate::TxId;
pub use native::NativeCommand;

mod native;
mod room;
mod spec;
mod statements;

/// The participant kind of document changes.
pub(crate) const KIND: &str = "document";

const LOCK: &str = "_tandem.lock";
const DELETING: &str = "_tandem.deleting";
const GHOST: &str = "_tandem.ghost";
/// When a placeholder was reserved, by its store's clock.
pub(crate) const RESERVED_AT: &str = "_tandem.reservedAt";
/// How long a placeholder stays a reservation after `reservedAt`, in
/// milliseconds (the longest lease of the coordinators that reserved it).
pub(crate) const LEASE_MILLIS: &str = "_tandem.leaseMillis";
/// The markers of the inserts that reserved a placeholder: an insert's undo
/// takes its own off, and removes the placeholder only with the last one.
const RESERVERS: &str = "_tandem.reservers";
/// The sums of the credits pending on each field, by path under it.
const CREDITS: &str = "_tandem.credit";
/// How many transactions have a change applied to the document, under any
/// marker field: raised by every apply, lowered by every clear and undo.
const PENDING: &str = "_tandem.pending";
/// The bytes the changes applied to the document have reserved for their
/// clears and undos (see `room.rs`).
const ROOM: &str = "_tandem.room";
/// How many changes have their marker in each marker field other than the
/// default one, by the field's name under it: raised by the apply, lowered
/// by the clear or undo of every change that counts it
/// (`DocumentChange::counts_own_marks`), in the same statement as
/// `_tandem.pending`.
const MARKS: &str = "_tandem.marks";
/// The total of the counts under `_tandem.marks`: `_tandem.pending` less
/// this is how many changes are pending under the default marker field
/// (with those an earlier version applied under another, which it did not
/// count).
const MARKED: &str = "_tandem.marked";

/// The holder named by a conflict that no transaction explains.
const CONCURRENT_WRITE: &str = "(concurrent write)";

/// `{$toLong: "$$NOW"}`: the store's clock in milliseconds. (Compared with
/// milliseconds rather than a date: some servers compare `$$NOW` with a date
/// inside `$expr` wrongly; see the guide's Stores chapter.)
fn store_clock() -> Document {
    doc! { "$toLong": "$$NOW" }
}

/// The filter condition "the store's clock reads earlier than `deadline`".
fn before(deadline: bson::DateTime) -> Document {
    doc! { "$lt": [store_clock(), deadline.timestamp_millis()] }
}

/// The filter condition "the store's clock reads `time` or later".
fn from(time: bson::DateTime) -> Document {
    doc! { "$gte": [store_clock(), time.timestamp_millis()] }
}

/// The end of a placeholder's validity, by its own fields: `reservedAt`
/// plus `leaseMillis`, in milliseconds; null when either is missing.
fn reservation_end() -> Document {
    doc! { "$add": [ { "$toLong": (["$", RESERVED_AT].concat()) }, (["$", LEASE_MILLIS].concat()) ] }
}

/// The filter condition "the placeholder is still a reservation": the
/// store's clock reads earlier than `reservedAt + leaseMillis`. False for a
/// placeholder missing either field.
fn reservation_valid() -> Document {
    doc! { "$lt": [store_clock(), reservation_end()] }
}

/// The filter of the placeholders that are no longer reservations, by the
/// store's clock: those whose `reservedAt + leaseMillis` has passed, and
/// those without `leaseMillis` (reserved by a version that did not write
/// it) reserved at or before `cutoff` (the reader's lease plus clock margin
/// ago). No fill lands on one without reserving it again
/// ([`DocumentChange::fill_filter`]), which stamps it anew: removing it, or
/// saying nothing is in flight on it, is right.
pub(crate) fn expired_placeholders(cutoff: bson::DateTime) -> Document {
    doc! {
        GHOST: true,
        "$or": [
            {
                RESERVED_AT: { "$exists": true },
                LEASE_MILLIS: { "$exists": true },
                "$expr": { "$gte": [store_clock(), reservation_end()] },
            },
            {
                LEASE_MILLIS: { "$exists": false },
                RESERVED_AT: { "$lte": cutoff },
            },
        ],
    }
}

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
    /// Whether [`prepare`](Participant::prepare) goes to the store: an insert
    /// reserves its `_id`; a change that needs a before-image its guards do
    /// not give reads the document.
    pub(crate) fn prepare_reads(&self) -> bool {
        matches!(self.op, DocumentOp::Insert { .. })
            || (!self.imaged_paths().is_empty() && self.image_from_guards().is_none())
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

/// The transaction a marker or lock names (its id, without the token's tag).
fn holder_text(b: &Bson) -> String {
    match b {
        Bson::String(s) => TxId::of_marker(s).to_owned(),
        other => other.to_string(),
    }
}

fn type_name(b: &Bson) -> &'static str {
    match b {
        Bson::String(_) => "string",
        Bson::Int32(_) => "int",
        Bson::Int64(_) => "long",
        Bson::Double(_) => "double",
        Bson::Decimal128(_) => "decimal",
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

    fn reference(&self, index: usize) -> crate::ParticipantRef {
        let r = crate::ParticipantRef::new(index, DocumentChange::label(self))
            .with_document(self.namespace.clone(), self.id.clone());
        match self.origin.0 {
            Some(name) => r.with_type_name(name),
            None => r,
        }
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
        // Two ids are one document when they compare equal as MongoDB compares
        // `_id`s: numbers by value across types (7, 7_i64 and 7.0 are one
        // document), everything else by its encoding. A string's encoding is its
        // bytes, so it stands for itself; any other value is spelled by the
        // encoding of its canonical form, and the tag keeps the two apart.
        match &self.id {
            Bson::String(id) | Bson::Symbol(id) => {
                key.push('s');
                key.push_str(id);
            }
            other => {
                key.push('b');
                let bytes = bson::to_vec(&doc! { "id": canonical_id(other) }).unwrap_or_default();
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
        // Keep in step with `prepare_reads`.
        if matches!(self.op, DocumentOp::Insert { .. }) {
            self.reserve(self.store(&ctx)?.as_ref(), &ctx).await?;
            return Ok(None);
        }
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
        // An exclusive change's apply waits for nothing to be pending on the
        // document, and what is pending may still change the fields it
        // images (a credit lands at its commit, an undo puts a field back):
        // a before-image read now could be stale by then, and the apply
        // would never match. The conflict is met now instead, and waited
        // out (or settled, for the coordinator's own transaction) before
        // the image is read.
        if let Some(conflict) = self.held(&current) {
            return Err(conflict);
        }
        Ok(Some(image_to_doc(self.read_image(&current))))
    }

    async fn apply(&self, ctx: StepContext<'_>) -> Result<(), StepError> {
        let store = self.store(&ctx)?;
        match &self.op {
            DocumentOp::Insert { doc: fields } => {
                // Twice at most: a placeholder removed in between is reserved again.
                for _ in 0..2 {
                    let outcome = store
                        .update_one(
                            &self.namespace,
                            self.fill_filter(&ctx),
                            self.fill_update(&ctx, fields),
                            crate::store::UpdateOptions::default(),
                        )
                        .await
                        .map_err(|e| self.store_err(e))?;
                    if outcome.matched == 1 {
                        return Ok(());
                    }
                    match self.diagnose_fill(store.as_ref(), &ctx).await? {
                        Some(()) => return Ok(()),
                        None => {
                            // No placeholder, or one no longer valid: reserve
                            // it again, unless too late to fill it (a late
                            // worker leaves nothing behind).
                            if let Some(deadline) = ctx.deadline {
                                let now = store.now().await.map_err(|e| self.store_err(e))?;
                                if now >= deadline {
                                    return Err(StepError::Expired {
                                        participant: self.label(),
                                    });
                                }
                            }
                            self.reserve(store.as_ref(), &ctx).await?
                        }
                    }
                }
                self.expired_or(
                    store.as_ref(),
                    &ctx,
                    StepError::Conflict {
                        participant: self.label(),
                        holder: CONCURRENT_WRITE.into(),
                    },
                )
                .await
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
        let (filter, update) = match &self.op {
            DocumentOp::Insert { doc: fields } => {
                (self.fill_filter(ctx), self.fill_update(ctx, fields))
            }
            DocumentOp::Update { ops } => {
                let update = self.apply_update(ctx, ops);
                (self.apply_filter(ctx, Some(&update)), update)
            }
            DocumentOp::Delete => {
                let update = self.delete_update(ctx);
                (self.apply_filter(ctx, Some(&update)), update)
            }
        };
        Some(StepUpdate {
            store: Arc::clone(self.store(ctx).ok()?),
            namespace: self.namespace.clone(),
            filter,
            update,
        })
    }

    fn clear_statement(&self, ctx: &StepContext<'_>) -> Option<StepUpdate> {
        // The filter carries `not_before`, if any, as the solo clear's does;
        // a statement that did not match is run again solo, which says why.
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
        let tx = ctx.marker.as_str();
        let update = match &self.op {
            // The document goes, and its `_id` is free at once: an apply still
            // in flight has missed its deadline by now (`not_before`).
            DocumentOp::Insert { .. } => None,
            DocumentOp::Delete => Some(doc! {
                "$unset": { LOCK: "", DELETING: "" },
                "$pull": { self.marker.clone(): tx },
                "$inc": self.counted_off(doc! { PENDING: -1 }),
            }),
            DocumentOp::Update { .. } => {
                let mut set = Document::new();
                let mut unset = Document::new();
                if let Some(before) = ctx.before {
                    for (path, value) in image_from_doc(before) {
                        match value {
                            Some(v) => set.insert(path, v),
                            None => unset.insert(path, ""),
                        };
                    }
                }
                unset.insert(LOCK, "");
                let inc = self.undo_increments(ctx.before);
                let mut update = doc! { "$pull": { self.marker.clone(): tx }, "$unset": unset };
                if !set.is_empty() {
                    update.insert("$set", set);
                }
                update.insert("$inc", inc);
                Some(update)
            }
        };
        let expect = self.undo_expects(ctx.before);
        if !expect.is_empty() {
            if let Some(full) = update {
                if self
                    .remove_marker_if(store.as_ref(), &ctx, Some(full), expect.clone())
                    .await?
                {
                    return Ok(());
                }
                return self.undo_around(store.as_ref(), &ctx, expect).await;
            }
        }
        self.remove_marker(store.as_ref(), &ctx, update).await?;
        if matches!(self.op, DocumentOp::Insert { .. }) {
            self.release_reservation(store.as_ref(), &ctx).await?;
        }
        Ok(())
    }

    fn probes(&self) -> bool {
        true
    }

    async fn applied(&self, ctx: StepContext<'_>) -> Result<bool, StepError> {
        let store = self.store(&ctx)?;
        // Every apply (an update, a delete's mark, an insert's fill) pushes
        // the marker; only a clear or an undo removes it. The first read
        // finds it only if the store's clock already reads `not_before`: one
        // read decides both.
        let marked = |filter| async {
            store
                .exists(&self.namespace, filter)
                .await
                .map_err(|e| self.store_err(e))
        };
        let found = marked(self.applied_filter(&ctx)).await?;
        if found || ctx.not_before.is_none() {
            return Ok(found);
        }
        // Not found proves nothing: the clock may have read earlier. Once
        // it is known to read `not_before`, a read of the marker alone
        // decides (not under the fence again: a clock that stepped back
        // within the margin would hide a marker that is there).
        self.not_before(store.as_ref(), &ctx).await?;
        marked(doc! { "_id": self.id.clone(), self.marker.clone(): ctx.marker.as_str() }).await
    }

    async fn clear_marker(&self, ctx: StepContext<'_>) -> Result<(), StepError> {
        let store = self.store(&ctx)?;
        let update = match &self.op {
            DocumentOp::Delete => None,
            _ => Some(self.clear_update(&ctx)),
        };
        self.remove_marker(store.as_ref(), &ctx, update).await
    }
}

/// Whether a deferred credit of `by` to `path` is counted in the field's
/// pending sum: a positive integer credit to a field outside any array.
fn counted(path: &str, by: &Bson) -> bool {
    credit_ceiling(by).is_some() && !query::has_index_segment(path)
}

/// Where the sum of the credits pending on `path` is kept.
fn credit_path(path: &str) -> String {
    [CREDITS, ".", path].concat()
}

/// Adds `exprs` to `filter` as its `$expr`: one condition as it is, several
/// under `$and`.
fn insert_expr(filter: &mut Document, mut exprs: Vec<Document>) {
    // An `$expr` the filter has already (a before-image's) is kept, first.
    if let Some(Bson::Document(had)) = filter.remove("$expr") {
        let first: Vec<Document> = match had.get_array("$and") {
            Ok(all) if had.len() == 1 => all
                .iter()
                .filter_map(|e| e.as_document().cloned())
                .collect(),
            _ => vec![had],
        };
        exprs.splice(0..0, first);
    }
    match exprs.len() {
        0 => {}
        1 => {
            filter.insert("$expr", exprs.remove(0));
        }
        _ => {
            filter.insert("$expr", doc! { "$and": exprs });
        }
    }
}

/// The document a document change's `spec` (as its record keeps it)
/// credits or debits by an increment (its store's name, namespace and
/// `_id`): such a change keeps a sum under `_tandem.credit` while pending,
/// and leaves a zero there after. `None` for any other change.
pub(crate) fn incremented(
    kind: &str,
    spec: &Document,
) -> Option<(Option<String>, Namespace, Bson)> {
    if kind != KIND {
        return None;
    }
    let op = spec.get_document("op").ok()?;
    let incs = op.get_str("type").ok() == Some("update")
        && op.get_array("ops").ok()?.iter().any(|o| {
            o.as_document()
                .and_then(|o| o.get_str("op").ok())
                .is_some_and(|name| name == "inc")
        });
    if !incs {
        return None;
    }
    let ns = spec.get_document("namespace").ok()?;
    Some((
        spec.get_str("store").ok().map(str::to_owned),
        Namespace::new(ns.get_str("db").ok()?, ns.get_str("collection").ok()?),
        spec.get("id")?.clone(),
    ))
}

/// Drops the credit sums, the room reserved and the marker counts of the
/// documents `ids` where no change is pending: every sum and count is zero
/// then, and so is the room (each statement that moves them moves the
/// pending count with it), and a sum is kept for every path ever credited
/// (`daily.<date>`) until the document's next exclusive change.
pub(crate) fn tidy_credits(ids: &[Bson]) -> (Document, Document) {
    (
        doc! {
            "_id": { "$in": ids },
            PENDING: 0,
            "$or": [
                { CREDITS: { "$exists": true } },
                { ROOM: { "$exists": true } },
                { MARKS: { "$exists": true } },
                { MARKED: { "$exists": true } },
            ],
        },
        doc! { "$unset": { CREDITS: "", ROOM: "", MARKS: "", MARKED: "" } },
    )
}

/// The document a document change's `spec` (as its record keeps it) names,
/// whatever store name it goes through: its namespace and its `_id` in
/// canonical form. `None` for another kind of participant.
pub(crate) fn document_key(kind: &str, spec: &Document) -> Option<Vec<u8>> {
    if kind != KIND {
        return None;
    }
    let ns = spec.get_document("namespace").ok()?;
    let db = ns.get_str("db").ok()?;
    let collection = ns.get_str("collection").ok()?;
    let id = spec.get("id")?;
    // A string `_id` (the common case; a symbol's canonical form is the
    // string) is written out directly, without building the document.
    if let Bson::String(text) | Bson::Symbol(text) = id {
        if let Some(key) = strings_key([("db", db), ("collection", collection), ("id", text)]) {
            return Some(key);
        }
    }
    let key = doc! {
        "db": db,
        "collection": collection,
        "id": canonical_id(id),
    };
    bson::to_vec(&key).ok()
}

/// The BSON of a document of string fields, byte for byte as `bson::to_vec`
/// writes it (its length, then each field as type 2, its name, the length
/// of its value with the terminating zero, the value and a zero, then a
/// zero); `None` for one too large to say its length.
fn strings_key<const N: usize>(fields: [(&str, &str); N]) -> Option<Vec<u8>> {
    let len = 4
        + fields
            .iter()
            .map(|(name, value)| 1 + name.len() + 1 + 4 + value.len() + 1)
            .sum::<usize>()
        + 1;
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&i32::try_from(len).ok()?.to_le_bytes());
    for (name, value) in fields {
        out.push(0x02);
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        out.extend_from_slice(&i32::try_from(value.len() + 1).ok()?.to_le_bytes());
        out.extend_from_slice(value.as_bytes());
        out.push(0);
    }
    out.push(0);
    Some(out)
}

/// `id` with every number in one form per value: an integral number that fits
/// a 64-bit integer as `Int64`, any other as `Double` (so that ids MongoDB
/// holds equal are spelled alike). A `Decimal128` is read as its exact
/// integer where it is one that fits, else as the nearest `Double`: two ids
/// MongoDB holds equal are never spelled apart, and two it holds apart are
/// at worst taken for one (and refused as one document named twice).
fn canonical_id(id: &Bson) -> Bson {
    match id {
        Bson::Int32(i) => Bson::Int64(i64::from(*i)),
        Bson::Double(d) => canonical_double(*d),
        Bson::Decimal128(d) => {
            let text = d.to_string();
            match decimal_integer(&text) {
                Some(i) => Bson::Int64(i),
                // Beyond a double's range, the nearest double is an infinity
                // (or zero): decimals MongoDB holds apart may share a key,
                // never the other way round.
                None => match text.parse::<f64>() {
                    Ok(f) => canonical_double(f),
                    Err(_) => id.clone(),
                },
            }
        }
        // A deprecated string type that MongoDB compares as a string.
        Bson::Symbol(text) => Bson::String(text.clone()),
        Bson::Array(items) => Bson::Array(items.iter().map(canonical_id).collect()),
        Bson::Document(d) => Bson::Document(
            d.iter()
                .map(|(k, v)| (k.clone(), canonical_id(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `d` as `Int64` when it is an integer in the 64-bit range (`-2^63 <= d <
/// 2^63`: every such double is exactly one `Int64`), else as it is.
fn canonical_double(d: f64) -> Bson {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if d.fract() == 0.0 && (-TWO_63..TWO_63).contains(&d) {
        Bson::Int64(d as i64)
    } else if d.is_nan() {
        // One NaN, whatever its bits: MongoDB matches NaN with NaN.
        Bson::Double(f64::NAN)
    } else {
        Bson::Double(d)
    }
}

/// The value of a decimal numeral (`-12`, `7.00`, `1.5E+3`) when it is an
/// integer that fits an `i64`, exactly; `None` otherwise (a fraction, out of
/// range, `NaN`, `Infinity`, anything else).
fn decimal_integer(text: &str) -> Option<i64> {
    let (mantissa, exponent) = match text.split_once(['E', 'e']) {
        Some((m, e)) => (m, e.parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (negative, digits) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa.strip_prefix('+').unwrap_or(mantissa)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    // The digits as one integer, and the power of ten it is scaled by.
    let all: String = whole.chars().chain(fraction.chars()).collect();
    let all = all.trim_start_matches('0');
    let mut scale = exponent.checked_sub(i32::try_from(fraction.len()).ok()?)?;
    let mut all = all.to_owned();
    while scale < 0 {
        // Trailing zeros of the fraction cancel; any other digit is a fraction.
        if !all.ends_with('0') {
            return (all.is_empty()).then_some(0);
        }
        all.pop();
        scale += 1;
    }
    if all.is_empty() {
        return Some(0);
    }
    if all.len() + usize::try_from(scale).ok()? > 20 {
        return None;
    }
    let mut value: i128 = all.parse().ok()?;
    for _ in 0..scale {
        value = value.checked_mul(10)?;
    }
    let value = if negative { -value } else { value };
    i64::try_from(value).ok()
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

/// The zero a deferred credit of `by` adds at its apply, only so that the
/// store checks the field's type there rather than at commit: an `Int32`
/// zero, which leaves an `Int32`, `Int64` or `Double` field of its own
/// type (a `0.0` turned an integer balance into a double, which rounds
/// above 2^53, and an `Int64` zero widened an `Int32`, both kept after a
/// cancel). For a double amount, a `0.0`: such a credit applies only to a
/// double, a decimal or a missing field, and a missing one must be a
/// double from the apply on, or an integer debit could apply to it (and
/// its cancel round, once the credit lands) and a second double credit be
/// refused.
fn type_check_zero(by: &Bson) -> Bson {
    match by {
        Bson::Double(_) => Bson::Double(0.0),
        _ => Bson::Int32(0),
    }
}

fn negate(by: &Bson) -> Bson {
    match by {
        Bson::Int32(i) => Bson::Int32(-i),
        Bson::Int64(i) => Bson::Int64(-i),
        Bson::Double(d) => Bson::Double(-d),
        Bson::Decimal128(d) => Bson::Decimal128(negate_decimal(d)),
        other => other.clone(),
    }
}

/// `-d`, exactly: the sign bit flipped (the highest bit of the last byte,
/// the encoding being little-endian), the digits and exponent kept.
pub(crate) fn negate_decimal(d: &bson::Decimal128) -> bson::Decimal128 {
    let mut bytes = d.bytes();
    bytes[15] ^= 0x80;
    bson::Decimal128::from_bytes(bytes)
}

#[cfg(test)]
mod tests;
