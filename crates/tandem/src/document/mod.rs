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
//! * `_tandem.ghost`: marks a placeholder: an `_id` reserved by an insert that
//!   has not filled it (yet). Placeholders are invisible to every other change
//!   and are filled, or removed, by inserts.
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
//! the placeholder with one guarded, deadline-fenced update.

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
const DELETING: &str = "_tandem.deleting";
const GHOST: &str = "_tandem.ghost";
/// The sums of the credits pending on each field, by path under it.
const CREDITS: &str = "_tandem.credit";
/// How many transactions have a change applied to the document, under any
/// marker field: raised by every apply, lowered by every clear and undo.
const PENDING: &str = "_tandem.pending";

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

    /// The conditions every apply carries: not yet applied, not past its
    /// deadline, not a ghost, not held.
    fn apply_filter(&self, ctx: &StepContext<'_>) -> Document {
        let tx = ctx.marker.as_str();
        let mut filter = self.guarded_filter(ctx.before);
        filter.insert(self.marker.clone(), doc! { "$ne": tx });
        // A credit deferred to the commit must not overflow there, where it
        // cannot be refused, together with every other credit pending on the field.
        let (plain, mut exprs) = self.credit_room(self.deferred_credits());
        merge_conditions(&mut filter, plain);
        if let Some(deadline) = ctx.deadline {
            exprs.insert(0, before(deadline));
        }
        insert_expr(&mut filter, exprs);
        filter
    }

    /// The conditions under which the positive integer credits `credits` fit
    /// with every credit already pending on their fields: the pending sum
    /// (`_tandem.credit.<path>`, `S`) leaves room for this one (`S <= MAX - by`,
    /// a plain condition), and the field with all of them fits
    /// (`f <= MAX - by - S`, an `$expr`, which cannot overflow given the first). A path with a
    /// numeric segment (an array element) is checked against this credit alone.
    fn credit_room<'a>(
        &self,
        credits: impl Iterator<Item = (&'a str, &'a Bson)>,
    ) -> (Vec<(String, Bson)>, Vec<Document>) {
        let mut plain = Vec::new();
        let mut exprs = Vec::new();
        for (path, by) in credits {
            let Some(max) = credit_ceiling(by) else {
                continue;
            };
            if !counted(path, by) {
                // `$not: {$gt}` rather than `$or` of `$lte` and `$exists`: it also admits a
                // missing field, and keeps the filter a plain `_id` look-up for the server.
                plain.push((
                    path.to_owned(),
                    Bson::Document(doc! { "$not": { "$gt": max } }),
                ));
                continue;
            }
            let pending = credit_path(path);
            plain.push((
                pending.clone(),
                Bson::Document(doc! { "$not": { "$gt": max.clone() } }),
            ));
            exprs.push(doc! { "$lte": [
                format!("${path}"),
                { "$subtract": [max, { "$ifNull": [format!("${pending}"), 0_i64] }] },
            ] });
            // With the comparison above (which every type but numbers, null
            // and missing fails), the field is numeric or missing: the credit
            // cannot fail at commit.
            exprs.push(doc! { "$ne": [format!("${path}"), Bson::Null] });
        }
        (plain, exprs)
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
            // Nobody else may have a change pending on a document we change
            // exclusively, under this marker field or any other.
            filter.insert(format!("{}.0", self.marker), doc! { "$exists": false });
            filter.insert(PENDING, doc! { "$not": { "$gt": 0 } });
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

    /// The document as this transaction's apply left it: its marker is there;
    /// and, when the step must wait for earlier applies to miss their
    /// deadline, the store's clock reads `not_before` or later.
    fn applied_filter(&self, ctx: &StepContext<'_>) -> Document {
        let mut filter = doc! { "_id": self.id.clone(), self.marker.clone(): ctx.marker.as_str() };
        if let Some(time) = ctx.not_before {
            filter.insert("$expr", from(time));
        }
        filter
    }

    /// The filter of the apply of an insert: the `_id`'s placeholder, not
    /// held, before the deadline.
    fn fill_filter(&self, ctx: &StepContext<'_>) -> Document {
        let mut filter = doc! {
            "_id": self.id.clone(),
            GHOST: { "$exists": true },
            LOCK: Bson::Null,
            self.marker.clone(): { "$ne": ctx.marker.as_str() },
        };
        if let Some(deadline) = ctx.deadline {
            filter.insert("$expr", before(deadline));
        }
        filter
    }

    /// The apply of an insert: the placeholder becomes the document, held
    /// by the transaction and marked.
    fn fill_update(&self, ctx: &StepContext<'_>, fields: &Document) -> Document {
        let tx = ctx.marker.as_str();
        let mut set = fields.clone();
        set.insert(self.marker.clone(), vec![tx]);
        set.insert(META_FIELD, doc! { "lock": tx, "pending": 1 });
        doc! { "$set": set }
    }

    /// Reserves the `_id` of an insert with a placeholder, unless a document
    /// (or a placeholder) has it already. Harmless at any time.
    async fn reserve(&self, store: &dyn Store) -> Result<(), StepError> {
        store
            .update_one(
                &self.namespace,
                doc! { "_id": self.id.clone() },
                doc! { "$setOnInsert": { META_FIELD: { "ghost": true } } },
                true,
            )
            .await
            .map(|_| ())
            .map_err(|e| self.store_err(e))
    }

    /// Why the fill of an insert matched nothing.
    async fn diagnose_fill(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
    ) -> Result<Option<()>, StepError> {
        let current = store
            .find_one(&self.namespace, doc! { "_id": self.id.clone() })
            .await
            .map_err(|e| self.store_err(e))?;
        let participant = self.label();
        let Some(current) = current else {
            return Ok(None); // no placeholder: reserve it again
        };
        let tx = Bson::String(ctx.marker.as_str().to_owned());
        if query::matches(&current, &doc! { self.marker.as_str(): tx }).unwrap_or(false) {
            return Ok(Some(())); // filled already, by this transaction
        }
        if query::lookup(&current, GHOST).is_none() {
            return Err(StepError::AlreadyExists { participant });
        }
        if let Some(holder) = query::lookup(&current, LOCK).filter(|b| **b != Bson::Null) {
            return Err(StepError::Conflict {
                participant,
                holder: holder_text(holder),
            });
        }
        self.expired_or(
            store,
            ctx,
            StepError::Conflict {
                participant: self.label(),
                holder: CONCURRENT_WRITE.into(),
            },
        )
        .await
        .map(|()| Some(()))
    }

    /// `Err(Expired)` if the apply's deadline has passed by the store's clock,
    /// else `Err(otherwise)`.
    async fn expired_or(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
        otherwise: StepError,
    ) -> Result<(), StepError> {
        if let Some(deadline) = ctx.deadline {
            let now = store.now().await.map_err(|e| self.store_err(e))?;
            if now >= deadline {
                return Err(StepError::Expired {
                    participant: self.label(),
                });
            }
        }
        Err(otherwise)
    }

    /// Runs a step that removes this transaction's marker (`update`, or a
    /// delete of the document for `None`), honouring `not_before`.
    async fn remove_marker(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
        update: Option<Document>,
    ) -> Result<(), StepError> {
        self.remove_marker_if(store, ctx, update, Vec::new())
            .await
            .map(|_| ())
    }

    /// [`remove_marker`](Self::remove_marker), only while the document also
    /// satisfies `expect`. `Ok(false)`: the marker is there but `expect` no
    /// longer holds (nothing was changed).
    async fn remove_marker_if(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
        update: Option<Document>,
        expect: Vec<(String, Bson)>,
    ) -> Result<bool, StepError> {
        let checked = !expect.is_empty();
        if let Some(until) = ctx.not_before {
            let now = store.now().await.map_err(|e| self.store_err(e))?;
            if now < until {
                return Err(StepError::NotYet {
                    participant: self.label(),
                    until,
                });
            }
        }
        let mut filter = self.applied_filter(ctx);
        merge_conditions(&mut filter, expect.clone());
        let matched = match update {
            Some(update) => store
                .update_one(&self.namespace, filter, update, false)
                .await
                .map(|o| o.matched),
            None => store.delete_one(&self.namespace, filter).await,
        }
        .map_err(|e| self.store_err(e))?;
        if matched == 0 && (checked || ctx.not_before.is_some()) {
            // Nothing to do, unless the document or the store's clock
            // disagreed with a condition.
            let still = store
                .find_one(
                    &self.namespace,
                    doc! { "_id": self.id.clone(), self.marker.clone(): ctx.marker.as_str() },
                )
                .await
                .map_err(|e| self.store_err(e))?;
            if let Some(still) = still {
                let expected = Document::from_iter(expect);
                if checked && !query::matches(&still, &expected).unwrap_or(false) {
                    return Ok(false);
                }
                return Err(match ctx.not_before {
                    Some(until) => StepError::NotYet {
                        participant: self.label(),
                        until,
                    },
                    None => StepError::Conflict {
                        participant: self.label(),
                        holder: CONCURRENT_WRITE.into(),
                    },
                });
            }
        }
        Ok(true)
    }

    /// The undo of an update some of whose fields were changed outside tandem
    /// since the apply: everything but those fields is undone (the other
    /// fields restored, early increments taken back, pending credits and the
    /// count released, the marker and the hold removed), and the fields are
    /// left as found, reported as [`StepError::Overwritten`].
    async fn undo_around(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
        expect: Vec<(String, Bson)>,
    ) -> Result<(), StepError> {
        let current = store
            .find_one(
                &self.namespace,
                doc! { "_id": self.id.clone(), self.marker.clone(): ctx.marker.as_str() },
            )
            .await
            .map_err(|e| self.store_err(e))?;
        let Some(current) = current else {
            return Ok(()); // undone meanwhile, by another worker
        };
        let changed: Vec<String> = expect
            .into_iter()
            .filter(|(path, cond)| {
                let one = doc! { path.as_str(): cond.clone() };
                !query::matches(&current, &one).unwrap_or(false)
            })
            .map(|(path, _)| path)
            .collect();
        let tx = ctx.marker.as_str();
        let mut set = Document::new();
        let mut unset = doc! { LOCK: "" };
        let inc = self.undo_increments();
        if let Some(before) = ctx.before {
            for (path, value) in image_from_doc(before) {
                if changed.contains(&path) {
                    continue;
                }
                match value {
                    Some(v) => set.insert(path, v),
                    None => unset.insert(path, ""),
                };
            }
        }
        let mut update =
            doc! { "$pull": { self.marker.clone(): tx }, "$unset": unset, "$inc": inc };
        if !set.is_empty() {
            update.insert("$set", set);
        }
        // Guarded by the fields as found: a further outside write makes this
        // step fail, and a repeat looks again.
        let found: Vec<(String, Bson)> = changed
            .iter()
            .map(|path| {
                let cond = match query::lookup(&current, path) {
                    Some(v) => doc! { "$eq": v.clone() },
                    None => doc! { "$exists": false },
                };
                (path.clone(), Bson::Document(cond))
            })
            .collect();
        if !self
            .remove_marker_if(store, ctx, Some(update), found)
            .await?
        {
            return Err(StepError::Conflict {
                participant: self.label(),
                holder: CONCURRENT_WRITE.into(),
            });
        }
        let fields = changed
            .iter()
            .map(|path| {
                let found = query::lookup(&current, path)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "nothing".into());
                format!("{path} (found {found})")
            })
            .collect::<Vec<_>>()
            .join(", ");
        Err(StepError::Overwritten {
            participant: self.label(),
            fields,
        })
    }

    /// The `$inc` of an undo: early increments taken back, this transaction's
    /// pending credits taken off their sums, and the pending count lowered.
    fn undo_increments(&self) -> Document {
        let mut inc = Document::new();
        if let DocumentOp::Update { ops } = &self.op {
            for op in ops {
                if let FieldOp::Inc { path, by } = op {
                    if self.applies_early(op) {
                        inc.insert(path.clone(), negate(by));
                    } else if counted(path, by) {
                        inc.insert(credit_path(path), negate(by));
                    }
                }
            }
        }
        inc.insert(PENDING, -1);
        inc
    }

    /// What an undo expects of the fields it restores from the before-image:
    /// each still as this transaction's apply left it (set to its value, or
    /// unset). Array changes (`push`, `pull`) are not checked.
    fn undo_expects(&self) -> Vec<(String, Bson)> {
        let DocumentOp::Update { ops } = &self.op else {
            return Vec::new();
        };
        ops.iter()
            .filter_map(|op| match op {
                FieldOp::Set { path, value } => {
                    Some((path.clone(), Bson::Document(doc! { "$eq": value.clone() })))
                }
                FieldOp::Unset { path } => {
                    Some((path.clone(), Bson::Document(doc! { "$exists": false })))
                }
                _ => None,
            })
            .collect()
    }

    /// The apply of a delete: hold the document and mark it for deletion at commit.
    fn delete_update(&self, ctx: &StepContext<'_>) -> Document {
        let tx = ctx.marker.as_str();
        doc! {
            "$set": { LOCK: tx, DELETING: true },
            "$push": { self.marker.clone(): tx },
            "$inc": { PENDING: 1 },
        }
    }

    /// The commit of an applied change (not a delete): the marker goes, the
    /// hold is released, and deferred credits land, exactly once.
    fn clear_update(&self, ctx: &StepContext<'_>) -> Document {
        let tx = ctx.marker.as_str();
        let mut update = doc! {
            "$pull": { self.marker.clone(): tx },
            "$unset": { LOCK: "" },
        };
        let mut late = Document::new();
        for (path, by) in self.deferred_credits() {
            late.insert(path, by.clone());
            if counted(path, by) {
                late.insert(credit_path(path), negate(by));
            }
        }
        late.insert(PENDING, -1);
        update.insert("$inc", late);
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
                    if self.applies_early(op) {
                        inc.insert(path.clone(), by.clone());
                    } else if counted(path, by) {
                        // Counted as pending on the field until it lands or is
                        // undone; the filter checks the field's type
                        // (`credit_room`), so the field itself is not touched.
                        inc.insert(credit_path(path), by.clone());
                    } else {
                        // Adds zero now: the store still checks the field's
                        // type, so a credit can never fail later, at commit.
                        inc.insert(path.clone(), zero_like(by));
                    }
                }
                FieldOp::Push { path, value } => {
                    push.insert(path.clone(), value.clone());
                }
                FieldOp::Pull { path, value } => {
                    pull.insert(path.clone(), value.clone());
                }
            }
        }
        push.insert(self.marker.clone(), ctx.marker.as_str());
        inc.insert(PENDING, 1);
        if self.is_exclusive() {
            set.insert(LOCK, ctx.marker.as_str());
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
        match self.explain(current.as_ref(), Some(ctx.marker)) {
            // Nothing in the document explains it: the deadline may have passed.
            Err(StepError::Conflict {
                participant,
                holder,
            }) if holder == CONCURRENT_WRITE => {
                let e = StepError::Conflict {
                    participant,
                    holder,
                };
                self.expired_or(store, ctx, e).await
            }
            other => other,
        }
    }

    /// Explains why this change's guarded command matched nothing, given the
    /// document as it is now (`None`: missing). With `tx`, a marker of `tx` means
    /// the change was applied already (`Ok`).
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
            let others = query::lookup(current, PENDING)
                .and_then(|n| match n {
                    Bson::Int32(n) => Some(i64::from(*n)),
                    Bson::Int64(n) => Some(*n),
                    _ => None,
                })
                .unwrap_or(0);
            if others > 0 {
                return Err(StepError::Conflict {
                    participant,
                    holder: format!("({others} pending under another marker field)"),
                });
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
            let Some(Bson::Int64(max)) = credit_ceiling(by) else {
                continue;
            };
            let pending = match query::lookup(current, &credit_path(path)) {
                Some(Bson::Int64(n)) => *n,
                Some(Bson::Int32(n)) => i64::from(*n),
                _ => 0,
            };
            let found = query::lookup(current, path);
            let room = max.checked_sub(pending);
            let over = match (found, room) {
                (_, None) => true,
                (Some(found), Some(room)) => {
                    query::compare(found, &Bson::Int64(room)) == Some(std::cmp::Ordering::Greater)
                }
                (None, Some(_)) => false,
            };
            if over {
                let found = found
                    .map(|f| f.to_string())
                    .unwrap_or_else(|| "nothing".into());
                return Err(StepError::Overflow {
                    participant,
                    message: format!(
                        "adding {by} to {path} = {found}, with {pending} more pending, would overflow a 64-bit integer"
                    ),
                });
            }
        }
        // The before-image no longer holds: somebody wrote the document since it was read.
        Err(StepError::Conflict {
            participant,
            holder: CONCURRENT_WRITE.into(),
        })
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
                // An increment must leave room for the credits two-phase
                // transactions have pending on the field, which land later.
                let mut filter = self.guarded_filter(None);
                let incs = ops.iter().filter_map(|op| match op {
                    FieldOp::Inc { path, by } => Some((path.as_str(), by)),
                    _ => None,
                });
                let (plain, exprs) = self.credit_room(incs);
                merge_conditions(&mut filter, plain);
                insert_expr(&mut filter, exprs);
                NativeCommand::Update { filter, update }
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
            Bson::String(id) => {
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
            self.reserve(self.store(&ctx)?.as_ref()).await?;
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
        let image = paths
            .into_iter()
            .map(|p| (p.to_owned(), query::lookup(&current, p).cloned()))
            .collect();
        Ok(Some(image_to_doc(image)))
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
                            false,
                        )
                        .await
                        .map_err(|e| self.store_err(e))?;
                    if outcome.matched == 1 {
                        return Ok(());
                    }
                    match self.diagnose_fill(store.as_ref(), &ctx).await? {
                        Some(()) => return Ok(()),
                        None => {
                            // No placeholder: reserve it again, unless too late
                            // to fill it (a late worker leaves nothing behind).
                            if let Some(deadline) = ctx.deadline {
                                let now = store.now().await.map_err(|e| self.store_err(e))?;
                                if now >= deadline {
                                    return Err(StepError::Expired {
                                        participant: self.label(),
                                    });
                                }
                            }
                            self.reserve(store.as_ref()).await?
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
            DocumentOp::Update { ops } => (self.apply_filter(ctx), self.apply_update(ctx, ops)),
            DocumentOp::Delete => (self.apply_filter(ctx), self.delete_update(ctx)),
        };
        Some(StepUpdate {
            store: Arc::clone(self.store(ctx).ok()?),
            namespace: self.namespace.clone(),
            filter,
            update,
        })
    }

    fn clear_statement(&self, ctx: &StepContext<'_>) -> Option<StepUpdate> {
        if matches!(self.op, DocumentOp::Delete) || ctx.not_before.is_some() {
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
                "$inc": { PENDING: -1 },
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
                let inc = self.undo_increments();
                let mut update = doc! { "$pull": { self.marker.clone(): tx }, "$unset": unset };
                if !set.is_empty() {
                    update.insert("$set", set);
                }
                update.insert("$inc", inc);
                Some(update)
            }
        };
        let expect = self.undo_expects();
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
            // A placeholder this insert never filled goes too; whoever fills
            // it meanwhile reserves it again.
            store
                .delete_one(
                    &self.namespace,
                    doc! {
                        "_id": self.id.clone(),
                        GHOST: { "$exists": true },
                        LOCK: Bson::Null,
                        format!("{}.0", self.marker): { "$exists": false },
                    },
                )
                .await
                .map_err(|e| self.store_err(e))?;
        }
        Ok(())
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
    credit_ceiling(by).is_some() && !path.split('.').any(|seg| query::array_index(seg).is_some())
}

/// Where the sum of the credits pending on `path` is kept.
fn credit_path(path: &str) -> String {
    format!("{CREDITS}.{path}")
}

/// Adds `exprs` to `filter` as its `$expr`: one condition as it is, several
/// under `$and`.
fn insert_expr(filter: &mut Document, mut exprs: Vec<Document>) {
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

/// `id` with every number in one form per value: an integral number that fits
/// a 64-bit integer as `Int64`, any other as `Double` (so that ids MongoDB
/// holds equal are spelled alike).
fn canonical_id(id: &Bson) -> Bson {
    match id {
        Bson::Int32(i) => Bson::Int64(i64::from(*i)),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.2e18 => Bson::Int64(*d as i64),
        Bson::Array(items) => Bson::Array(items.iter().map(canonical_id).collect()),
        Bson::Document(d) => Bson::Document(
            d.iter()
                .map(|(k, v)| (k.clone(), canonical_id(v)))
                .collect(),
        ),
        other => other.clone(),
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
