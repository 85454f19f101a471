//! The statements of each step of a [`DocumentChange`]: the guarded filters
//! and updates that prepare, apply, commit and undo it.

use crate::error::{clip, MESSAGE_LIMIT, QUOTE_LIMIT};
use bson::{doc, Bson, Document};

use crate::change::{overlaps, DEFAULT_MARKER};

use super::room::Room;
use super::*;

impl DocumentChange {
    pub(super) fn store<'a>(
        &self,
        ctx: &StepContext<'a>,
    ) -> Result<&'a std::sync::Arc<dyn Store>, StepError> {
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

    pub(super) fn store_err(&self, mut e: StoreError) -> StepError {
        let participant = self.label();
        let path = (e.kind == StoreErrorKind::TypeMismatch).then(|| self.refused_path(&e.message));
        // A store's message may quote a stored value whole ("Cannot create
        // field 'x' in element {notes: ...}").
        e.message = clip(e.message, MESSAGE_LIMIT);
        match e.kind {
            // A two-phase apply's `$push` of its marker fails where the
            // marker field holds no array (a field of the application's
            // under that name): both stores name the field in quotes.
            StoreErrorKind::TypeMismatch if e.message.contains(&format!("'{}'", self.marker)) => {
                StepError::TypeMismatch {
                    participant,
                    path: self.marker.clone(),
                    message: format!(
                        "the marker field {} holds no array: tandem keeps its array of pending \
                         transactions there; choose another marker name ({})",
                        self.marker, e.message
                    ),
                }
            }
            StoreErrorKind::TypeMismatch => StepError::TypeMismatch {
                participant,
                path: path.unwrap_or_default(),
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

    /// The path of this change's operation that a store's refusal names,
    /// from the store's `message` (`""` when it cannot be told): the path
    /// the message quotes whole (`the field 'balance' of non-numeric
    /// type`, `The field 'tags' must be an array`); for a field that cannot
    /// be created below another's value (`Cannot create field 'x' in
    /// element {meta: 5}`), the path through the two; for a `$pull` of a
    /// field that holds no array (which the server's message does not
    /// name), the change's only `pull`; else the change's only operation.
    ///
    /// Stores use it to name the path of a refusal by the store itself
    /// ([`StepError::TypeMismatch`]) as the two-phase strategy names it.
    pub fn refused_path(&self, message: &str) -> String {
        let DocumentOp::Update { ops } = &self.op else {
            return String::new();
        };
        let paths = || ops.iter().map(FieldOp::path);
        let only = |mut found: Vec<&str>| {
            found.dedup();
            match found.as_slice() {
                [one] => Some(one.to_string()),
                _ => None,
            }
        };
        // Quoted whole: the longest, should one path be a prefix of another.
        if let Some(path) = paths()
            .filter(|p| message.contains(&format!("'{p}'")))
            .max_by_key(|p| p.len())
        {
            return path.to_owned();
        }
        if let Some((_, rest)) = message.split_once("Cannot create field '") {
            if let Some((field, rest)) = rest.split_once('\'') {
                let element = rest
                    .split_once("in element {")
                    .and_then(|(_, e)| e.split_once(':'))
                    .map(|(name, _)| name.trim().trim_matches('"'));
                let segments = |p: &str| p.split('.').map(str::to_owned).collect::<Vec<_>>();
                let through: Vec<&str> = paths()
                    .filter(|p| {
                        segments(p)
                            .windows(2)
                            .any(|w| w[1] == field && element.is_none_or(|e| w[0] == e))
                    })
                    .collect();
                if let Some(path) = only(through) {
                    return path;
                }
            }
        }
        if message.contains("$pull") {
            let pulls = ops
                .iter()
                .filter(|op| matches!(op, FieldOp::Pull { .. }))
                .map(FieldOp::path)
                .collect();
            if let Some(path) = only(pulls) {
                return path;
            }
        }
        only(paths().collect()).unwrap_or_default()
    }

    /// Whether compensation restores `op`'s field from the before-image:
    /// every change but an increment; and an increment too where the change
    /// holds the document alone. (Adding an increment back does not always
    /// restore the field: an `$inc` creates a missing field, widens a 32-bit
    /// integer past its range or under a 64-bit amount, and makes an integer
    /// a double under a double amount. On a document others share, debits
    /// are kept to those that leave the type as it is: [`types_kept`](Self::types_kept).)
    fn imaged(&self, op: &FieldOp) -> bool {
        !op.commutes() || self.is_exclusive()
    }

    /// The paths whose before-image compensation needs.
    pub(super) fn imaged_paths(&self) -> Vec<&str> {
        match &self.op {
            DocumentOp::Update { ops } => ops
                .iter()
                .filter(|op| self.imaged(op))
                .map(|op| op.path())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The before-image read from `current` (the document as prepared): for
    /// each path a `set`, `unset`, `push` or `pull` replaces, what its undo
    /// restores, and where. Where the change creates more than its field,
    /// the image is taken higher up, so that the undo takes that away too:
    /// the first missing field on the way to the path (a `set` of
    /// `shipping.carrier` without `shipping` creates `shipping`, which an
    /// undo of `shipping.carrier` alone would leave behind, empty), or the
    /// whole array the path indexes past its end (a `set` of `tags.3` on one
    /// element pads `tags` with nulls) or whose element an `unset` removes
    /// (which leaves a null in its place), or the sub-document whose field
    /// an `unset` removes (a `$set` of the field alone would put it back
    /// last, and the sub-document, compared in field order, would no longer
    /// equal what it was). Not where that would overlap an increment of the
    /// change, whose undo is its own. Images covered by another are left
    /// out. A top-level field an `unset` removes is put back last among the
    /// document's fields: the document's field order is not restored.
    pub(super) fn read_image(&self, current: &Document) -> Vec<(String, Option<Bson>)> {
        let DocumentOp::Update { ops } = &self.op else {
            return Vec::new();
        };
        let incs: Vec<&str> = ops
            .iter()
            .filter(|op| !self.imaged(op))
            .map(|op| op.path())
            .collect();
        let mut image: Vec<(String, Option<Bson>)> = Vec::new();
        for op in ops.iter().filter(|op| self.imaged(op)) {
            let path = op.path();
            let unset = matches!(op, FieldOp::Unset { .. });
            let root = image_root(current, path, unset)
                .filter(|root| !incs.iter().any(|inc| overlaps(root, inc)))
                .unwrap_or(path);
            if image
                .iter()
                .any(|(p, _)| overlaps(p, root) && p.len() <= root.len())
            {
                continue; // restored with a wider image
            }
            image.retain(|(p, _)| !overlaps(p, root));
            image.push((root.to_owned(), query::lookup(current, root).cloned()));
        }
        image
    }

    /// The before-image, when a guard pins every imaged path exactly: the
    /// field, a top-level one, is missing, or, for a `set` or `unset`, it
    /// equals a value that is neither null nor an array ([`pins`]). (An
    /// equality also matches an array that contains the value, and `null` a
    /// missing field: a guard `tags == "sale"` says nothing of the rest of
    /// the array, which an undo restores. The apply then requires the field
    /// to hold that value itself: see [`exact`].) A `push` or `pull` changes
    /// an array, which no guard pins.
    pub(super) fn image_from_guards(&self) -> Option<Vec<(String, Option<Bson>)>> {
        let DocumentOp::Update { ops } = &self.op else {
            return Some(Vec::new());
        };
        ops.iter()
            .filter(|op| self.imaged(op))
            .map(|op| {
                let path = op.path();
                let whole = matches!(op, FieldOp::Set { .. } | FieldOp::Unset { .. });
                self.guards
                    .iter()
                    .find(|g| g.path == path)
                    .and_then(|g| match g.op {
                        // Only a top-level field (`pins`): below one, a
                        // query reads the path through arrays an update
                        // does not write through.
                        GuardOp::Eq if whole && pins(path, &g.value) => {
                            Some((path.to_owned(), Some(g.value.clone())))
                        }
                        // Only a top-level field: below one, the parent may
                        // be missing too, and the image must then be taken
                        // there ([`read_image`](Self::read_image)).
                        GuardOp::Missing if !path.contains('.') => Some((path.to_owned(), None)),
                        _ => None,
                    })
            })
            .collect()
    }

    /// The conditions every apply carries: not yet applied, not past its
    /// deadline, not a ghost, not held. The apply sends `update` (the
    /// change's own, built once by the caller; `None` for an insert), whose
    /// growth the room condition counts.
    pub(super) fn apply_filter(
        &self,
        ctx: &StepContext<'_>,
        update: Option<&Document>,
    ) -> Document {
        let tx = ctx.marker.as_str();
        let mut filter = self.guarded_filter(ctx.before);
        filter.insert(self.marker.clone(), doc! { "$ne": tx });
        // A credit deferred to the commit must not overflow there, where it
        // cannot be refused, together with every other credit pending on the field.
        let (plain, mut exprs) = self.credit_room(self.deferred_credits());
        merge_conditions(&mut filter, plain);
        merge_conditions(&mut filter, self.types_kept());
        merge_conditions(&mut filter, self.shapes_kept());
        merge_conditions(&mut filter, self.fields_reachable());
        if let Some(deadline) = ctx.deadline {
            exprs.insert(0, before(deadline));
        }
        if !self.is_exclusive() {
            // The marker field holds tandem's markers only: no more than
            // the transactions pending here, which every apply counts
            // together with its push (an exclusive change's filter already
            // requires it empty). An array of the application's under that
            // name would take the marker in, where the application's next
            // write of the array could take it away. (A field that holds no
            // array refuses the marker's push itself.)
            exprs.push(self.markers_counted());
        }
        if let Some(update) = update {
            let growth = self.apply_growth(update, ctx.before);
            let later = self.later_growth(ctx.before);
            exprs.extend(self.no_padding());
            exprs.push(self.room_condition(growth, later));
        }
        insert_expr(&mut filter, exprs);
        filter
    }

    /// Where the changes with their marker in this change's marker field
    /// are counted (`_tandem.marks.<field>`).
    pub(super) fn marks_path(&self) -> String {
        [MARKS, ".", &self.marker].concat()
    }

    /// Whether this change counts itself in `_tandem.marks.<field>` and
    /// `_tandem.marked`: a change under a marker field of its own name
    /// (not [`DEFAULT_MARKER`](crate::change::DEFAULT_MARKER)), made by a version that counts them. The
    /// changes under the default field are the ones no count names
    /// (`_tandem.pending` less `_tandem.marked`), which keeps the common
    /// case's statements as they were.
    pub(super) fn counts_own_marks(&self) -> bool {
        self.counts_marks && self.marker != DEFAULT_MARKER
    }

    /// `inc` (an `$inc` body that raises `_tandem.pending` by one) raising
    /// this change's marker count and their total with it, where this change
    /// counts them.
    pub(super) fn counted_on(&self, mut inc: Document) -> Document {
        if self.counts_own_marks() {
            inc.insert(self.marks_path(), 1);
            inc.insert(MARKED, 1);
        }
        inc
    }

    /// `inc` (an `$inc` body that lowers `_tandem.pending` by one) lowering
    /// this change's marker count and their total with it, where its apply
    /// raised them.
    pub(super) fn counted_off(&self, mut inc: Document) -> Document {
        if self.counts_own_marks() {
            inc.insert(self.marks_path(), -1);
            inc.insert(MARKED, -1);
        }
        inc
    }

    /// The filter condition "the marker field holds no more entries than
    /// the changes pending under it": true where the field is missing or
    /// holds no array. Those changes are, under the default marker field,
    /// the ones no count names (`_tandem.pending` less `_tandem.marked`);
    /// under a field of another name, its count (`_tandem.marks.<field>`),
    /// or, for a change an earlier version made, which counted none,
    /// `_tandem.pending`. (`_tandem.pending` alone counts the changes under
    /// every marker field: an array of the application's passed for
    /// tandem's as long as as many changes were pending under another one.)
    fn markers_counted(&self) -> Document {
        let marker = field_expr(&self.marker);
        let entries =
            doc! { "$cond": [{ "$isArray": marker.clone() }, marker, { "$literal": [] }] };
        let pending = doc! { "$ifNull": [(["$", PENDING].concat()), 0] };
        let allowed = if self.marker == DEFAULT_MARKER {
            Bson::Document(doc! { "$subtract": [
                pending,
                { "$ifNull": [(["$", MARKED].concat()), 0] },
            ] })
        } else if self.counts_own_marks() {
            Bson::Document(doc! { "$ifNull": [field_expr(&self.marks_path()), 0] })
        } else {
            Bson::Document(pending)
        };
        let beyond = doc! { "$arrayElemAt": [entries, allowed] };
        // Missing past the array's end (or null: an entry tandem never
        // writes, reported by the diagnosis where the filter missed).
        doc! { "$lte": [beyond, Bson::Null] }
    }

    /// The conflict an exclusive change meets on `current` while any
    /// transaction is pending there (its apply requires nothing pending):
    /// the holder, as the apply's diagnosis names it. `None` for a shared
    /// change, and where nothing is pending.
    pub(super) fn held(&self, current: &Document) -> Option<StepError> {
        // A marker field holding data not tandem's is the apply's to report
        // (`TypeMismatch`), as are a placeholder and a missing document.
        if !self.is_exclusive()
            || query::lookup(current, GHOST).is_some()
            || self.foreign_markers(current).is_some()
            || query::lookup(current, &self.marker).is_some_and(|v| !matches!(v, Bson::Array(_)))
        {
            return None;
        }
        let participant = self.label();
        if let Some(holder) = query::lookup(current, LOCK).filter(|b| **b != Bson::Null) {
            return Some(StepError::Conflict {
                participant,
                holder: holder_text(holder),
            });
        }
        if let Some(Bson::Array(pending)) = query::lookup(current, &self.marker) {
            if let Some(first) = pending.first() {
                return Some(StepError::Conflict {
                    participant,
                    holder: holder_text(first),
                });
            }
        }
        match query::lookup(current, PENDING) {
            Some(Bson::Int32(n)) if *n > 0 => Some(i64::from(*n)),
            Some(Bson::Int64(n)) if *n > 0 => Some(*n),
            _ => None,
        }
        .map(|others| StepError::Conflict {
            participant,
            holder: format!("({others} pending under another marker field)"),
        })
    }

    /// Why the marker field of `current` holds something that is not
    /// tandem's, if it does: an array with an entry that is no string, or
    /// with more entries than the transactions counted in that field (and
    /// those an earlier version applied uncounted), as
    /// [`markers_counted`](Self::markers_counted) requires (every apply
    /// pushes its marker and counts itself together). A field that holds
    /// no array is reported by the caller.
    fn foreign_markers(&self, current: &Document) -> Option<StepError> {
        let Some(Bson::Array(entries)) = query::lookup(current, &self.marker) else {
            return None;
        };
        let count = |path: &str| match query::lookup(current, path) {
            Some(Bson::Int32(n)) => i64::from(*n),
            Some(Bson::Int64(n)) => *n,
            _ => 0,
        };
        // As `markers_counted` counts them.
        let pending = if self.marker == DEFAULT_MARKER {
            count(PENDING).saturating_sub(count(MARKED))
        } else if self.counts_own_marks() {
            count(&self.marks_path())
        } else {
            count(PENDING)
        };
        let counted = i64::try_from(entries.len()).is_ok_and(|n| n <= pending);
        if counted && entries.iter().all(|e| matches!(e, Bson::String(_))) {
            return None;
        }
        Some(StepError::TypeMismatch {
            participant: self.label(),
            path: self.marker.clone(),
            message: format!(
                "the marker field {} holds data that is not tandem's: array {} ({} pending \
                 transactions counted); tandem keeps its array of pending transactions there; \
                 choose another marker name",
                self.marker,
                clip(Bson::Array(entries.clone()).to_string(), QUOTE_LIMIT),
                pending
            ),
        })
    }

    /// What the apply of an update or a delete adds to the document at
    /// most, and what it reserves for its clear or undo (`room.rs`; a
    /// change an earlier version recorded reserves nothing, but respects
    /// what others reserved); `None` for an insert (its placeholder is
    /// held by nobody).
    pub(super) fn apply_room(&self, ctx: &StepContext<'_>) -> Option<(i64, i64)> {
        let update = match &self.op {
            DocumentOp::Update { ops } => self.apply_update(ctx, ops),
            DocumentOp::Delete => self.delete_update(ctx),
            DocumentOp::Insert { .. } => return None,
        };
        Some((
            self.apply_growth(&update, ctx.before),
            self.later_growth(ctx.before),
        ))
    }

    /// The debits applied at once to a document others share, with their
    /// amounts. Their undo adds the amount back, which restores the field
    /// exactly only if the debit kept the field's type ([`types_kept`](Self::types_kept)).
    /// (An exclusive change's increments are restored from the before-image.)
    pub(super) fn shared_debits(&self) -> impl Iterator<Item = (&str, &Bson)> {
        let shared = !self.is_exclusive();
        self.increments_where(move |op| shared && self.applies_early(op))
    }

    /// The credits of a double amount to a document others share, with
    /// their amounts. Adding a double to an integer field makes it a double,
    /// under which the undo of an integer debit pending on the field (which
    /// adds the amount back) can round: they apply only where the field is
    /// not an integer ([`types_kept`](Self::types_kept)).
    fn shared_float_credits(&self) -> impl Iterator<Item = (&str, &Bson)> {
        let shared = !self.is_exclusive();
        self.increments_where(move |op| {
            shared
                && !self.applies_early(op)
                && matches!(
                    op,
                    FieldOp::Inc {
                        by: Bson::Double(_),
                        ..
                    }
                )
        })
    }

    /// The credits of a decimal amount to a document others share, with
    /// their amounts. Adding a decimal to a double makes it a decimal (the
    /// double read with 15 significant digits), under which the undo of a
    /// double debit pending on the field adds back a decimal of 15 digits
    /// to a value that the double subtraction rounded: they apply only
    /// where the field is not a double ([`types_kept`](Self::types_kept)).
    /// On an integer or a decimal, every undo is exact.
    fn shared_decimal_credits(&self) -> impl Iterator<Item = (&str, &Bson)> {
        let shared = !self.is_exclusive();
        self.increments_where(move |op| {
            shared
                && !self.applies_early(op)
                && matches!(
                    op,
                    FieldOp::Inc {
                        by: Bson::Decimal128(_),
                        ..
                    }
                )
        })
    }

    /// The conditions under which every [shared debit](Self::shared_debits)
    /// keeps its field's type: the field exists (an `$inc` creates a missing
    /// one, which adding the amount back would leave at zero), of a type at
    /// least as wide as the amount's (a 64-bit amount makes a 32-bit integer
    /// a 64-bit one, a double amount makes an integer a double, and adding
    /// the amount back keeps them so), and a 32-bit integer stays in its
    /// range (the store makes it 64-bit otherwise), and a decimal one finite
    /// ([`debit_floor`](query::debit_floor)). An integer debit also
    /// needs an integer (or decimal) field: on a double, subtracting and
    /// adding back can round, and the cancel would not restore the value.
    ///
    /// And the conditions under which no [shared double
    /// credit](Self::shared_float_credits) makes an integer field a double
    /// while an integer debit may be pending on it: the field is a double,
    /// a decimal, or missing (`$not` of the integer types, which also
    /// admits a field no `$inc` applies to: the store refuses that one).
    /// And likewise that no [shared decimal
    /// credit](Self::shared_decimal_credits) makes a double field a decimal.
    pub(super) fn types_kept(&self) -> Vec<(String, Bson)> {
        // A change an earlier version recorded (its float debits shared)
        // keeps that version's conditions, which admitted a double field.
        let integer_or_wider: &[&str] = if self.float_debits_held_alone {
            &["long", "decimal"]
        } else {
            &["long", "double", "decimal"]
        };
        self.shared_debits()
            .filter_map(|(path, by)| {
                let wider = |types: &[&str]| {
                    let types: Vec<Bson> = types.iter().map(|t| Bson::from(*t)).collect();
                    (path.to_owned(), Bson::Document(doc! { "$type": types }))
                };
                Some(match by {
                    Bson::Int32(i) => {
                        let floor = i32::MIN.checked_sub(*i).filter(|_| *i < 0)?;
                        (
                            "$or".to_owned(),
                            Bson::Array(vec![
                                Bson::Document(doc! { path: { "$type": integer_or_wider } }),
                                Bson::Document(doc! { path: { "$type": "int", "$gte": floor } }),
                            ]),
                        )
                    }
                    Bson::Int64(_) => wider(integer_or_wider),
                    Bson::Double(_) => wider(&["double", "decimal"]),
                    // A decimal, which the debit leaves finite: past the
                    // smallest decimal the store makes it `-Infinity`,
                    // which adding the amount back does not restore.
                    Bson::Decimal128(d) => match query::debit_floor(*d) {
                        Some(floor) => (
                            path.to_owned(),
                            Bson::Document(doc! {
                                "$type": ["decimal"],
                                "$not": { "$lt": Bson::Decimal128(floor) },
                            }),
                        ),
                        None => wider(&["decimal"]),
                    },
                    _ => wider(&["decimal"]),
                })
            })
            .chain(self.shared_float_credits().map(|(path, _)| {
                (
                    path.to_owned(),
                    Bson::Document(doc! { "$not": { "$type": ["int", "long"] } }),
                )
            }))
            .chain(self.shared_decimal_credits().map(|(path, _)| {
                (
                    path.to_owned(),
                    Bson::Document(doc! { "$not": { "$type": "double" } }),
                )
            }))
            .collect()
    }

    /// The conditions under which every increment of a change that shares
    /// its document can still land when its turn comes, whatever other
    /// increments pending on the document land first: a credit deferred to
    /// the commit must find its field where an `$inc` can write it, and no
    /// increment may change the shape that a credit pending on a related
    /// path needs.
    ///
    /// * Each parent of the field (`a` and `a.b` of `a.b.c`) is missing or
    ///   a document: under a number, a string or an array the `$inc`
    ///   cannot create the field, and a committed credit could never land.
    ///   (Not for a path through an array's element, `a.0`: such an
    ///   increment adds zero at its apply, where the store checks it.)
    /// * No credit is pending on a parent (its sum, `_tandem.credit.a`, is
    ///   a number) nor below the field (`_tandem.credit.a.b` a document):
    ///   landing first, one of the two makes the other's field a number
    ///   under which, or a document on which, it cannot land. The credits
    ///   counted in those sums keep them, and every credit checks them (a
    ///   credit of a double, and a native increment, keep none).
    ///
    /// Only credits (positive amounts) carry them: a debit requires its field
    /// to exist and hold a number ([`types_kept`](Self::types_kept)), so its
    /// parents are documents, no credit can be pending on one (its own type
    /// check would have refused it) nor below the field, and while the debit
    /// is pending the credits' conditions keep it so for its undo.
    pub(super) fn shapes_kept(&self) -> Vec<(String, Bson)> {
        if self.is_exclusive() {
            return Vec::new();
        }
        let mut conds: Vec<(String, Bson)> = Vec::new();
        let mut add = |path: String, cond: Document| {
            if !conds.iter().any(|(p, _)| *p == path) {
                conds.push((path, Bson::Document(cond)));
            }
        };
        for (path, _) in self.deferred_credits() {
            let through_array = query::has_index_segment(path);
            for parent in parents(path) {
                if !through_array {
                    // Every type but a document.
                    let kinds: Vec<Bson> = query::TYPE_NAMES
                        .iter()
                        .filter(|t| **t != "object")
                        .map(|t| Bson::from(*t))
                        .collect();
                    add(parent.to_owned(), doc! { "$not": { "$type": kinds } });
                }
                add(credit_path(parent), doc! { "$not": { "$type": "number" } });
            }
            add(credit_path(path), doc! { "$not": { "$type": "object" } });
        }
        conds
    }

    /// The conditions that every field a `set`, `unset`, `push` or `pull`
    /// names is reachable by an update: no parent of it (on a path without
    /// a numbered segment) holds an array. A query reads `items.qty`
    /// through the elements of `items: [{qty: 1}]`, an update does not: a
    /// `$set` or `$push` there fails, an `$unset` or `$pull` changes
    /// nothing, and the two-phase before-image (read as a document reads,
    /// "missing") never matched, so the apply was answered as a conflict
    /// with a concurrent write that never happened, and a native
    /// transaction committed an `unset` or `pull` that did nothing. Either
    /// strategy now refuses it with a `TypeMismatch` that names the array
    /// ([`field_out_of_reach`](Self::field_out_of_reach)).
    pub(super) fn fields_reachable(&self) -> Vec<(String, Bson)> {
        let mut conds: Vec<(String, Bson)> = Vec::new();
        for path in self.reached_paths() {
            for parent in parents(path) {
                if !conds.iter().any(|(p, _)| p == parent) {
                    conds.push((
                        parent.to_owned(),
                        Bson::Document(doc! { "$not": { "$type": "array" } }),
                    ));
                }
            }
        }
        conds
    }

    /// The paths of this change's `set`, `unset`, `push` and `pull` that
    /// have no numbered segment ([`fields_reachable`](Self::fields_reachable)).
    fn reached_paths(&self) -> Vec<&str> {
        let DocumentOp::Update { ops } = &self.op else {
            return Vec::new();
        };
        ops.iter()
            .filter(|op| !op.commutes())
            .map(FieldOp::path)
            .filter(|path| !query::has_index_segment(path))
            .collect()
    }

    /// The refusal of a `set`, `unset`, `push` or `pull` whose field lies
    /// below an array on `current`, which no update reaches
    /// ([`fields_reachable`](Self::fields_reachable)), if one does.
    pub(super) fn field_out_of_reach(&self, current: &Document) -> Option<StepError> {
        let DocumentOp::Update { ops } = &self.op else {
            return None;
        };
        let reached = self.reached_paths();
        ops.iter()
            .filter(|op| reached.contains(&op.path()))
            .find_map(|op| {
                let path = op.path();
                parents(path).find_map(|parent| match query::lookup(current, parent) {
                    Some(v @ Bson::Array(_)) => {
                        let verb = match op {
                            FieldOp::Set { .. } => "a set",
                            FieldOp::Unset { .. } => "an unset",
                            FieldOp::Push { .. } => "a push",
                            FieldOp::Pull { .. } => "a pull",
                            FieldOp::Inc { .. } => "an increment",
                        };
                        Some(StepError::TypeMismatch {
                            participant: self.label(),
                            path: path.to_owned(),
                            message: format!(
                                "{parent} holds array {}: {verb} of {path} does not reach into \
                                 its elements (name one by its index: {parent}.0{})",
                                clip(v.to_string(), QUOTE_LIMIT),
                                &path[parent.len()..]
                            ),
                        })
                    }
                    _ => None,
                })
            })
    }

    /// Why an increment of this change could not land, or would keep a
    /// credit pending on a related path from landing, on `current` (what
    /// [`shapes_kept`](Self::shapes_kept) refuses), if so.
    ///
    /// A zero sum in the way is told only when nothing else is: a credit
    /// pending on another of its paths is a conflict, which ends (and which
    /// `ConflictPolicy::Wait` waits out), and a zero
    /// [is dropped](Self::tidy_zero_sums) by the increment it refuses.
    pub(super) fn shape_not_kept(&self, current: &Document) -> Option<StepError> {
        if self.is_exclusive() {
            // Nothing is pending where an exclusive change applies, so no
            // sum is in the way; but an increment under a parent that is no
            // document cannot land, and its room condition (an array there
            // compares above every number) refuses it before the store
            // could say so: it is that, not a conflict.
            return self
                .increments()
                .find_map(|(path, _)| self.parent_not_a_document(current, path));
        }
        // A credit pending in the way first (a conflict, which ends); a
        // zero only where nothing else is.
        let mut zero = None;
        for (path, _) in self.deferred_credits() {
            if let Some(e) = self.parent_not_a_document(current, path) {
                return Some(e);
            }
            for (at, sum) in sums_in_the_way_of(current, path) {
                if !all_zero(sum) {
                    return Some(self.sum_in_the_way(sum, at, path));
                }
                zero.get_or_insert_with(|| self.sum_in_the_way(sum, at, path));
            }
        }
        zero
    }

    /// The refusal of an increment of `path` (through no numbered segment)
    /// that `current` holds a parent of as something other than a
    /// document, where no `$inc` can create its field, if it does.
    fn parent_not_a_document(&self, current: &Document, path: &str) -> Option<StepError> {
        if query::has_index_segment(path) {
            return None;
        }
        parents(path).find_map(|parent| match query::lookup(current, parent) {
            Some(v) if !matches!(v, Bson::Document(_)) => Some(StepError::TypeMismatch {
                participant: self.label(),
                path: path.to_owned(),
                message: format!(
                    "{parent} holds {} {}: an increment of {path} cannot create its field under it",
                    type_name(v),
                    clip(v.to_string(), QUOTE_LIMIT)
                ),
            }),
            _ => None,
        })
    }

    /// The refusal of an increment of `path` by the pending sum `sum` kept
    /// at `at` (a parent's, or the sums below the field): a conflict with
    /// the credit pending there (the sums do not say whose); or, where every sum is zero
    /// (what a credit that landed or was undone leaves), a `TypeMismatch`
    /// that says so, naming no holder. Either strategy drops such zero sums
    /// ([`tidy_zero_sums`](Self::tidy_zero_sums)) and tries the increment
    /// once more before it answers so.
    fn sum_in_the_way(&self, sum: &Bson, at: &str, path: &str) -> StepError {
        if all_zero(sum) {
            return StepError::TypeMismatch {
                participant: self.label(),
                path: path.to_owned(),
                message: format!(
                    "a credit of {at} (or below it) landed or was undone here, and its zero sum in `_tandem.credit` was in the way of an increment of {path} when it was last tried (a zero in the way is dropped, and the increment tried once more): run the transaction again"
                ),
            };
        }
        StepError::Conflict {
            participant: self.label(),
            holder: format!("(a credit pending at {at})"),
        }
    }

    /// The credit sums in the way of this change's credits (as
    /// [`shape_not_kept`](Self::shape_not_kept) finds them) that are zero
    /// throughout, keyed by where they are kept, each with the value read.
    /// A credit that landed or was undone leaves its sum at zero; a sum
    /// counts only positive integer amounts, so a zero one means that no
    /// credit is pending there, and dropping it changes nothing any step
    /// reads (a missing sum counts as zero).
    fn zero_sums_in_the_way(&self, current: &Document) -> Document {
        if self.is_exclusive() {
            return Document::new();
        }
        self.deferred_credits()
            .flat_map(|(path, _)| sums_in_the_way_of(current, path))
            .filter(|(_, sum)| all_zero(sum))
            .map(|(at, sum)| (credit_path(at), sum.clone()))
            .collect()
    }

    /// Drops the [zero sums in the way](Self::zero_sums_in_the_way) of this
    /// change's credits, in one update guarded by the values read (a sum a
    /// credit was counted in since is kept), so that the credits can be
    /// counted without waiting for garbage collection to find the document
    /// idle (on a busy document, it may never). Whether the increment is
    /// worth trying once more: it dropped them, or the sums it read changed
    /// before its update (another increment dropped them, or counted a
    /// credit in one), or it found none in the way and nothing else that
    /// refuses the change as a type mismatch (another increment dropped
    /// them before it read). The try says what is in the way now: a
    /// conflict with a credit pending there, or a new zero.
    pub(crate) async fn tidy_zero_sums(&self, store: &dyn Store) -> Result<bool, StepError> {
        let current = store
            .find_one(&self.namespace, doc! { "_id": self.id.clone() })
            .await
            .map_err(|e| self.store_err(e))?;
        let Some(current) = current else {
            return Ok(false);
        };
        let zeros = self.zero_sums_in_the_way(&current);
        if zeros.is_empty() {
            return Ok(!matches!(
                self.explain(Some(&current), None),
                Err(StepError::TypeMismatch { .. })
            ));
        }
        let mut filter = doc! { "_id": self.id.clone() };
        let mut unset = Document::new();
        for (at, sum) in zeros {
            unset.insert(at.clone(), "");
            filter.insert(at, sum);
        }
        // Matched or not: a miss means that a sum read changed since, and
        // the next try says how.
        store
            .update_one(
                &self.namespace,
                filter,
                doc! { "$unset": unset },
                crate::store::UpdateOptions::default(),
            )
            .await
            .map_err(|e| self.store_err(e))?;
        Ok(true)
    }

    /// Why a [shared debit](Self::shared_debits) cannot apply to `current`
    /// without changing its field's type, or a [shared double
    /// credit](Self::shared_float_credits) without making an integer a
    /// double, if it cannot.
    pub(super) fn type_not_kept(&self, current: &Document) -> Option<StepError> {
        for (path, by) in self.shared_decimal_credits() {
            if let Some(f @ Bson::Double(_)) = query::lookup(current, path) {
                return Some(StepError::TypeMismatch {
                    participant: self.label(),
                    path: path.to_owned(),
                    message: format!(
                        "stored double {f}; adding the decimal {by} makes it a decimal, under which the cancel of a double debit pending on the field could not restore it exactly: store the field as a decimal (keep money in decimals or integers)",
                    ),
                });
            }
        }
        for (path, by) in self.shared_float_credits() {
            if let Some(f @ (Bson::Int32(_) | Bson::Int64(_))) = query::lookup(current, path) {
                return Some(StepError::TypeMismatch {
                    participant: self.label(),
                    path: path.to_owned(),
                    message: format!(
                        "stored {} {f}; adding the double {by} makes it a double, under which the cancel of an integer debit pending on the field could round: store the field as a double, or give the amount as an integer",
                        type_name(f),
                    ),
                });
            }
        }
        for (path, by) in self.shared_debits() {
            let found = query::lookup(current, path);
            let why = match (found, by) {
                (None, _) => "the field is missing, and a debit's undo could not take away the field its `$inc` creates".to_owned(),
                (Some(Bson::Int32(f)), Bson::Int32(i)) => {
                    if f.checked_add(*i).is_some() {
                        continue;
                    }
                    return Some(StepError::Overflow {
                        participant: self.label(),
                        message: format!(
                            "adding {i} to {path} = {f} leaves the 32-bit range; the store would make it a 64-bit integer, which a cancel could not undo"
                        ),
                    });
                }
                (Some(f @ Bson::Double(_)), Bson::Int32(_) | Bson::Int64(_))
                    if self.float_debits_held_alone =>
                {
                    format!(
                    "stored double {f}; a cancel adds an integer debit back, which on a double can round and not restore the value: store the field as an integer (keep money in integers)"
                )
                }
                (Some(f @ Bson::Int32(_)), Bson::Int64(_))
                | (Some(f @ (Bson::Int32(_) | Bson::Int64(_))), Bson::Double(_))
                | (Some(f @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))), Bson::Decimal128(_)) => format!(
                    "stored {} {f}; adding a {} amount makes it a {}, which a cancel could not undo: store the field as that type, or give the amount as the field's",
                    type_name(f),
                    type_name(by),
                    type_name(by),
                ),
                (Some(f @ Bson::Decimal128(_)), Bson::Decimal128(d)) => {
                    let below = query::debit_floor(*d).is_some_and(|floor| {
                        query::matches(
                            current,
                            &doc! { path: { "$lt": Bson::Decimal128(floor) } },
                        )
                        .unwrap_or(false)
                    });
                    if !below {
                        continue;
                    }
                    return Some(StepError::Overflow {
                        participant: self.label(),
                        message: format!(
                            "adding {by} to {path} = {f} passes the smallest decimal; the store would make it -Infinity, which a cancel could not undo"
                        ),
                    });
                }
                _ => continue,
            };
            return Some(StepError::TypeMismatch {
                participant: self.label(),
                path: path.to_owned(),
                message: why,
            });
        }
        None
    }

    /// The conditions under which the positive integer credits `credits` fit
    /// with every credit already pending on their fields: the pending sum
    /// (`_tandem.credit.<path>`, `S`) leaves room for this one (`S <= MAX - by`,
    /// a plain condition), and the field with all of them fits
    /// (`f <= MAX - by - S`, an `$expr`, which cannot overflow given the
    /// first), unless it is a double or a decimal, which no integer
    /// overflows. A path with a numeric segment (an array element) is
    /// checked against this credit alone, whatever the field's type.
    pub(super) fn credit_room<'a>(
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
            // The pending sum as a number: where a document of sums is kept
            // instead (credits pending below the field), 0 here, and the
            // shape rule refuses the change; `$subtract` of a document
            // fails the whole statement on MongoDB (code 16556), whichever
            // condition the server tries first.
            let sum = ["$", &pending].concat();
            let field = ["$", path].concat();
            // A double or a decimal field takes any integer credit: no
            // overflow there (and tandem's increments keep it so: an
            // integer or a decimal added to a decimal, an integer or a
            // double to a double; a change that could set another type
            // holds the document alone, and none applies while this credit
            // is pending).
            // (The comparison first: it holds for most fields, and `$or`
            // stops at the first that holds.)
            exprs.push(doc! { "$or": [
                { "$lte": [
                    &field,
                    { "$subtract": [max, { "$cond": [{ "$isNumber": &sum }, &sum, 0_i64] }] },
                ] },
                { "$eq": [{ "$type": &field }, "double"] },
                { "$eq": [{ "$type": &field }, "decimal"] },
            ] });
            // With the comparison above (which every type but numbers, null
            // and missing fails), the field is numeric or missing: the credit
            // cannot fail at commit.
            exprs.push(doc! { "$ne": [(["$", path].concat()), Bson::Null] });
        }
        (plain, exprs)
    }

    /// The paths, top-level fields, whose equality guard can stand for the
    /// before-image ([`image_from_guards`](Self::image_from_guards)): such a guard
    /// requires the field itself to hold the value, not an array holding it,
    /// with every strategy.
    pub(super) fn pinned_paths(&self) -> Vec<String> {
        let DocumentOp::Update { ops } = &self.op else {
            return Vec::new();
        };
        ops.iter()
            .filter(|op| matches!(op, FieldOp::Set { .. } | FieldOp::Unset { .. }))
            .filter(|op| {
                self.guards
                    .iter()
                    .any(|g| g.path == op.path() && g.op == GuardOp::Eq && pins(&g.path, &g.value))
            })
            .map(|op| op.path().to_owned())
            .collect()
    }

    /// For a debit applied at once to a document others share: the field
    /// and the amount its undo would give back, counted with the credits
    /// pending on the field (`_tandem.credit.<path>`) until it is committed
    /// or undone, so that no credit leaves the field too little room for it.
    /// (Without it, a credit up to the limit committed while the debit was
    /// pending, and the debit's undo could not fit: a canceled transaction
    /// stuck half applied.)
    pub(super) fn give_back<'o>(&self, op: &'o FieldOp) -> Option<(&'o str, Bson)> {
        let FieldOp::Inc { path, by } = op else {
            return None;
        };
        if !self.counts_debits || self.is_exclusive() || !self.applies_early(op) {
            return None;
        }
        let back = match by {
            Bson::Int32(i) if *i < 0 => Bson::Int32(i.checked_neg()?),
            Bson::Int64(i) if *i < 0 => Bson::Int64(i.checked_neg()?),
            _ => return None,
        };
        counted(path, &back).then_some((path.as_str(), back))
    }

    /// What the debits of this change applied at once may give back, by field.
    fn give_backs(&self) -> Vec<(&str, Bson)> {
        match &self.op {
            DocumentOp::Update { ops } => ops.iter().filter_map(|op| self.give_back(op)).collect(),
            _ => Vec::new(),
        }
    }

    /// The increments of this change that `keep` keeps, with their amounts.
    pub(super) fn increments_where<'a>(
        &'a self,
        keep: impl Fn(&FieldOp) -> bool + 'a,
    ) -> impl Iterator<Item = (&'a str, &'a Bson)> + 'a {
        let ops: &[FieldOp] = match &self.op {
            DocumentOp::Update { ops } => ops,
            _ => &[],
        };
        ops.iter()
            .filter(move |op| keep(op))
            .filter_map(|op| match op {
                FieldOp::Inc { path, by } => Some((path.as_str(), by)),
                _ => None,
            })
    }

    /// Every increment of this change, with its amount.
    fn increments(&self) -> impl Iterator<Item = (&str, &Bson)> {
        self.increments_where(|_| true)
    }

    /// The increments that take effect only at commit, with their amounts.
    pub(super) fn deferred_credits(&self) -> impl Iterator<Item = (&str, &Bson)> {
        self.increments_where(|op| !self.applies_early(op))
    }

    /// The document, not held by another transaction, not a ghost, with the guards
    /// (and the before-image, if any) holding.
    pub(super) fn guarded_filter(&self, before: Option<&Document>) -> Document {
        let mut filter = doc! {
            "_id": self.id.clone(),
            LOCK: Bson::Null,
            GHOST: { "$exists": false },
        };
        if self.is_exclusive() {
            // Nobody else may have a change pending on a document we change
            // exclusively, under this marker field or any other.
            filter.insert([&self.marker, ".0"].concat(), doc! { "$exists": false });
            filter.insert(PENDING, doc! { "$not": { "$gt": 0 } });
        }
        let mut conds: Vec<(String, Bson)> = self
            .guards
            .iter()
            .map(|g| (g.path.clone(), Bson::Document(g.condition())))
            .collect();
        if before.is_none() {
            // Every strategy reads an equality guard that can stand for a
            // field's before-image alike: the field itself holds the value,
            // a string as a string (not a symbol of the same text).
            for path in self.pinned_paths() {
                conds.push((
                    [&path[..], ".0"].concat(),
                    Bson::Document(doc! { "$exists": false }),
                ));
                if let Some(g) = self
                    .guards
                    .iter()
                    .find(|g| g.path == path && g.op == GuardOp::Eq)
                {
                    conds.extend(type_conditions(&path, &g.value).unwrap_or_default());
                }
            }
        }
        let mut whole = Vec::new();
        if let Some(before) = before {
            // The document must still be as it was read, or the image would
            // be stale: the field itself, not an array that contains it.
            // (Compared by value: an equal value of the same type written
            // since, a double's zero sign or a decimal's trailing zeros, is
            // not seen, and an undo writes the value read back: a known
            // limit.)
            for (path, value) in image_from_doc(before) {
                let cond = match value {
                    // Null itself: not a missing field, not an array holding null.
                    Some(Bson::Null) => {
                        conds.push((
                            [&path[..], ".0"].concat(),
                            Bson::Document(doc! { "$exists": false }),
                        ));
                        doc! { "$eq": Bson::Null, "$exists": true }
                    }
                    Some(v) => {
                        match exact(&v) {
                            // Below an array's element (`a.0.b`), a query
                            // also reads a field `0` of any element: the
                            // element itself must equal the image, which an
                            // aggregation expression reads alone.
                            Some(only) if !through_element(&path) => {
                                conds.push(([&path[..], ".0"].concat(), Bson::Document(only)))
                            }
                            // An array, or a document with a field `0`:
                            // the field itself must equal it, which an
                            // aggregation expression compares (a query's
                            // equality also matches an array holding it).
                            _ => whole.push(
                                doc! { "$eq": [field_expr(&path), { "$literal": v.clone() }] },
                            ),
                        }
                        // An equal value of another type (`5` for `5.0`, a
                        // symbol for a string) is a write since the read:
                        // the undo would change it back.
                        conds.extend(leaf_types(&path, &v));
                        doc! { "$eq": v }
                    }
                    None => doc! { "$exists": false },
                };
                conds.push((path, Bson::Document(cond)));
            }
        }
        merge_conditions(&mut filter, conds);
        insert_expr(&mut filter, whole);
        filter
    }

    /// The document as this transaction's apply left it: its marker is there;
    /// and, when the step must wait for earlier applies to miss their
    /// deadline, the store's clock reads `not_before` or later.
    pub(super) fn applied_filter(&self, ctx: &StepContext<'_>) -> Document {
        let mut filter = doc! { "_id": self.id.clone(), self.marker.clone(): ctx.marker.as_str() };
        if let Some(time) = ctx.not_before {
            filter.insert("$expr", from(time));
        }
        filter
    }

    /// The filter of the apply of an insert: the `_id`'s placeholder, not
    /// held, before the deadline, and still a reservation (the store's clock
    /// reads earlier than its `reservedAt + leaseMillis`: past that, readers
    /// may have said that no insert is in flight on it, or removed it, and
    /// the insert must reserve the `_id` again first).
    pub(super) fn fill_filter(&self, ctx: &StepContext<'_>) -> Document {
        let mut filter = doc! {
            "_id": self.id.clone(),
            GHOST: { "$exists": true },
            LOCK: Bson::Null,
            self.marker.clone(): { "$ne": ctx.marker.as_str() },
        };
        let mut exprs = Vec::with_capacity(2);
        if let Some(deadline) = ctx.deadline {
            exprs.push(before(deadline));
        }
        exprs.push(reservation_valid());
        insert_expr(&mut filter, exprs);
        filter
    }

    /// The apply of an insert: the placeholder becomes the document, held
    /// by the transaction and marked.
    pub(super) fn fill_update(&self, ctx: &StepContext<'_>, fields: &Document) -> Document {
        let tx = ctx.marker.as_str();
        let mut set = fields.clone();
        set.insert(self.marker.clone(), vec![tx]);
        let mut meta = doc! { "lock": tx, "pending": 1 };
        if self.counts_own_marks() {
            meta.insert("marks", doc! { self.marker.as_str(): 1 });
            meta.insert("marked", 1);
        }
        set.insert(META_FIELD, meta);
        doc! { "$set": set }
    }

    /// Reserves the `_id` of an insert with a placeholder stamped with the
    /// store's time (`_tandem.reservedAt`) and the lease
    /// (`_tandem.leaseMillis`, [`StepContext::lease`]; the longer one stays
    /// where another coordinator reserved with a longer lease), unless a
    /// document has it already; a placeholder there is stamped again, which
    /// makes it a reservation again. Harmless at any time: a reservation
    /// that lands late leaves a placeholder that expires
    /// ([`Coordinator::ensure_placeholder_ttl`](crate::Coordinator::ensure_placeholder_ttl),
    /// [`Coordinator::collect_placeholders`](crate::Coordinator::collect_placeholders)).
    pub(super) async fn reserve(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
    ) -> Result<(), StepError> {
        let lease = i64::try_from(ctx.lease.as_millis()).unwrap_or(i64::MAX);
        // The filter names the placeholder, so that the stamp never lands on
        // a document; the upsert seeds `_tandem.ghost` from it. A document
        // under the `_id` makes the upsert collide: nothing to reserve (the
        // fill then reports it).
        match store
            .update_one(
                &self.namespace,
                doc! { "_id": self.id.clone(), GHOST: true },
                doc! {
                    "$currentDate": { RESERVED_AT: true },
                    "$max": { LEASE_MILLIS: lease },
                    "$addToSet": { RESERVERS: ctx.marker.as_str() },
                },
                crate::store::UpdateOptions::upsert(),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.kind == crate::StoreErrorKind::DuplicateKey => Ok(()),
            Err(e) => Err(self.store_err(e)),
        }
    }

    /// Gives back this insert's reservation of its `_id` (its undo): the
    /// placeholder goes if this insert is the only one that reserved it;
    /// where others reserved it too, this insert's marker is taken off
    /// `_tandem.reservers`, and the last one to leave removes it. A
    /// placeholder another transaction reserved stays: removing it would
    /// not break that insert (a fill that finds no placeholder reserves the
    /// `_id` again), but would give the `_id` away while it is still
    /// running (a plain insert, or `put`, could take it and cancel that
    /// transaction). A placeholder without reservers (written by a version
    /// that did not name them) stays until it expires.
    pub(super) async fn release_reservation(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
    ) -> Result<(), StepError> {
        let own = ctx.marker.as_str();
        let placeholder = |reservers: Bson| {
            doc! {
                "_id": self.id.clone(),
                GHOST: { "$exists": true },
                LOCK: Bson::Null,
                ([&self.marker, ".0"].concat()): { "$exists": false },
                RESERVERS: reservers,
            }
        };
        let deleted = store
            .delete_one(&self.namespace, placeholder(Bson::Array(vec![own.into()])))
            .await
            .map_err(|e| self.store_err(e))?;
        if deleted == 1 {
            return Ok(());
        }
        let left = store
            .update_one(
                &self.namespace,
                placeholder(own.into()),
                doc! { "$pull": { RESERVERS: own } },
                crate::store::UpdateOptions::default(),
            )
            .await
            .map_err(|e| self.store_err(e))?;
        if left.matched == 1 {
            // The others may have left meanwhile: the last one out removes it.
            store
                .delete_one(&self.namespace, placeholder(Bson::Array(Vec::new())))
                .await
                .map_err(|e| self.store_err(e))?;
        }
        Ok(())
    }

    /// Why the fill of an insert matched nothing.
    pub(super) async fn diagnose_fill(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
    ) -> Result<Option<()>, StepError> {
        let current = self.read_in_time(store, ctx).await?;
        let participant = self.label();
        let Some(current) = current else {
            return Ok(None); // no placeholder: reserve it again
        };
        let tx = Bson::String(ctx.marker.as_str().to_owned());
        if query::matches(&current, &doc! { self.marker.as_str(): tx }).unwrap_or(false) {
            // Filled already, by this transaction.
            return self.confirm_applied(store, ctx).await.map(Some);
        }
        // Held first: a document that a delete holds, or that another
        // insert filled and may still undo, may be gone soon. That is a
        // conflict, which `ConflictPolicy::Wait` waits out, not the definite
        // `AlreadyExists` (which a caller told that the delete committed
        // would have no reason to expect).
        if let Some(holder) = query::lookup(&current, LOCK).filter(|b| **b != Bson::Null) {
            return Err(StepError::Conflict {
                participant,
                holder: holder_text(holder),
            });
        }
        if query::lookup(&current, GHOST).is_none() {
            return Err(StepError::AlreadyExists { participant });
        }
        if !self.reservation_holds(store, &current).await? {
            // No reservation any more: readers may have said so; reserve it
            // again (if still in time) and fill it then.
            return Ok(None);
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

    /// Whether the placeholder `current` is still a reservation: the
    /// store's clock reads earlier than its `reservedAt + leaseMillis` (as
    /// the fill's filter requires; false when either field is missing).
    async fn reservation_holds(
        &self,
        store: &dyn Store,
        current: &Document,
    ) -> Result<bool, StepError> {
        let reserved = query::lookup(current, RESERVED_AT).and_then(|b| b.as_datetime().copied());
        let lease = query::lookup(current, LEASE_MILLIS).and_then(|b| match b {
            Bson::Int64(n) => Some(*n),
            Bson::Int32(n) => Some(i64::from(*n)),
            _ => None,
        });
        let (Some(reserved), Some(lease)) = (reserved, lease) else {
            return Ok(false);
        };
        let now = store.now().await.map_err(|e| self.store_err(e))?;
        Ok(now.timestamp_millis() < reserved.timestamp_millis().saturating_add(lease))
    }

    /// `Err(Expired)` if the apply's deadline has passed by the store's clock,
    /// else `Err(otherwise)`.
    pub(super) async fn expired_or(
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
    pub(super) async fn remove_marker(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
        update: Option<Document>,
    ) -> Result<(), StepError> {
        self.remove_marker_if(store, ctx, update, Vec::new())
            .await
            .map(|_| ())
    }

    /// `Err(NotYet)` while the store's clock reads earlier than
    /// [`StepContext::not_before`] (an apply may still land before then).
    pub(super) async fn not_before(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
    ) -> Result<(), StepError> {
        if let Some(until) = ctx.not_before {
            let now = store.now().await.map_err(|e| self.store_err(e))?;
            if now < until {
                return Err(StepError::NotYet {
                    participant: self.label(),
                    until,
                });
            }
        }
        Ok(())
    }

    /// [`remove_marker`](Self::remove_marker), only while the document also
    /// satisfies `expect`. `Ok(false)`: the marker is there but `expect` no
    /// longer holds (nothing was changed).
    pub(super) async fn remove_marker_if(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
        update: Option<Document>,
        expect: Vec<(String, Bson)>,
    ) -> Result<bool, StepError> {
        let checked = !expect.is_empty();
        self.not_before(store, ctx).await?;
        let mut filter = self.applied_filter(ctx);
        merge_conditions(&mut filter, expect.clone());
        let matched = match update {
            Some(update) => store
                .update_one(
                    &self.namespace,
                    filter,
                    update,
                    crate::store::UpdateOptions::default(),
                )
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
    pub(super) async fn undo_around(
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
        let mut inc = self.undo_increments(ctx.before);
        // An increment written over outside tandem by another increment
        // (the field still a number) is taken back by adding, as on a
        // shared document: the outside write stays, and so does its type.
        // One removed, or set to something else, is left as found and
        // reported, as a `set` is (adding would bring it back, or fail).
        let mut taken_back = Vec::new();
        if let DocumentOp::Update { ops } = &self.op {
            for op in ops {
                if let FieldOp::Inc { path, by } = op {
                    let number = matches!(
                        query::lookup(&current, path),
                        Some(
                            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
                        )
                    );
                    if changed.contains(path) && number {
                        inc.insert(path.clone(), negate(by));
                        taken_back.push(path.clone());
                    }
                }
            }
        }
        if let Some(before) = ctx.before {
            let image = image_from_doc(before);
            for (path, value) in &image {
                // An image taken above a changed field (its parent, its
                // array) would take the outside write away with it.
                if changed.iter().any(|c| overlaps(c, path)) {
                    continue;
                }
                match value {
                    Some(v) => set.insert(path.clone(), v.clone()),
                    None => unset.insert(path.clone(), ""),
                };
            }
            // A field this change wrote under such an image, and nobody
            // since (`x.b` under `x`, an image `set`s of `x.b` and `x.c`
            // both needed, `x.c` written outside), is restored alone, from
            // the image's part at its path.
            if let DocumentOp::Update { ops } = &self.op {
                for op in ops {
                    let path = op.path();
                    let skipped_root = image.iter().any(|(p, _)| {
                        p.len() < path.len()
                            && overlaps(p, path)
                            && changed.iter().any(|c| overlaps(c, p))
                    });
                    if !skipped_root || changed.iter().any(|c| overlaps(c, path)) {
                        continue;
                    }
                    match image_at(&image, path) {
                        Some(Some(v)) => set.insert(path, v),
                        Some(None) => unset.insert(path, ""),
                        None => None,
                    };
                }
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
        let changed: Vec<&String> = changed
            .iter()
            .filter(|path| !taken_back.contains(path))
            .collect();
        if changed.is_empty() {
            return Ok(());
        }
        let fields = changed
            .iter()
            .map(|path| {
                let found = query::lookup(&current, path)
                    .map(|v| clip(v.to_string(), QUOTE_LIMIT))
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

    /// The `$inc` of an undo: early increments taken back (but those the
    /// before-image `before` restores), this transaction's pending credits
    /// taken off their sums, and the pending count lowered.
    pub(super) fn undo_increments(&self, before: Option<&Document>) -> Document {
        let image = before.map(image_from_doc).unwrap_or_default();
        let restored = |path: &str| image_at(&image, path).is_some();
        let mut inc = Document::new();
        if let DocumentOp::Update { ops } = &self.op {
            for op in ops {
                if let FieldOp::Inc { path, by } = op {
                    if restored(path) {
                        continue;
                    }
                    if self.applies_early(op) {
                        inc.insert(path.clone(), negate(by));
                        if let Some((path, back)) = self.give_back(op) {
                            inc.insert(credit_path(path), negate(&back));
                        }
                    } else if counted(path, by) {
                        inc.insert(credit_path(path), negate(by));
                    }
                }
            }
        }
        inc.insert(PENDING, -1);
        let mut inc = self.counted_off(inc);
        let later = self.later_growth(before);
        if later > 0 {
            inc.insert(ROOM, -later);
        }
        inc
    }

    /// What an undo expects of the fields it restores from the before-image
    /// `before`: each still as this transaction's apply left it (set to its
    /// value, unset, or the image plus the increment). Array changes
    /// (`push`, `pull`) are not checked.
    pub(super) fn undo_expects(&self, before: Option<&Document>) -> Vec<(String, Bson)> {
        let DocumentOp::Update { ops } = &self.op else {
            return Vec::new();
        };
        let image = before.map(image_from_doc).unwrap_or_default();
        ops.iter()
            .filter_map(|op| match op {
                FieldOp::Inc { path, by } => {
                    let sum = inc_result(image_at(&image, path)?.as_ref(), by)?;
                    Some((path.clone(), Bson::Document(doc! { "$eq": sum })))
                }
                // Null itself, not a missing field: an outside `$unset`
                // since the apply is an outside write.
                FieldOp::Set {
                    path,
                    value: Bson::Null,
                } => Some((
                    path.clone(),
                    Bson::Document(doc! { "$eq": Bson::Null, "$exists": true }),
                )),
                FieldOp::Set { path, value } => {
                    Some((path.clone(), Bson::Document(doc! { "$eq": value.clone() })))
                }
                // An `unset` of an array's element leaves a null in its place.
                FieldOp::Unset { path }
                    if path
                        .rsplit('.')
                        .next()
                        .is_some_and(|last| query::array_index(last).is_some()) =>
                {
                    Some((path.clone(), Bson::Document(doc! { "$eq": Bson::Null })))
                }
                FieldOp::Unset { path } => {
                    Some((path.clone(), Bson::Document(doc! { "$exists": false })))
                }
                _ => None,
            })
            .collect()
    }

    /// The apply of a delete: hold the document and mark it for deletion at commit.
    pub(super) fn delete_update(&self, ctx: &StepContext<'_>) -> Document {
        let tx = ctx.marker.as_str();
        doc! {
            "$set": { LOCK: tx, DELETING: true },
            "$push": { self.marker.clone(): tx },
            "$inc": self.counted_on(doc! { PENDING: 1 }),
            // Nothing else is pending here (the filter says so), so every
            // credit sum is zero: drop them, as an exclusive update does. A
            // canceled delete's record credits nothing, so no collection
            // would ever look at them again.
            "$unset": { CREDITS: "" },
        }
    }

    /// The commit of an applied change (not a delete): the marker goes, the
    /// hold is released, and deferred credits land, exactly once.
    pub(super) fn clear_update(&self, ctx: &StepContext<'_>) -> Document {
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
        // A committed debit gives nothing back any more.
        for (path, back) in self.give_backs() {
            late.insert(credit_path(path), negate(&back));
        }
        late.insert(PENDING, -1);
        let mut late = self.counted_off(late);
        let later = self.later_growth(ctx.before);
        if later > 0 {
            late.insert(ROOM, -later);
        }
        update.insert("$inc", late);
        update
    }

    pub(super) fn apply_update(&self, ctx: &StepContext<'_>, ops: &[FieldOp]) -> Document {
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
                        if let Some((path, back)) = self.give_back(op) {
                            inc.insert(credit_path(path), back);
                        }
                    } else if counted(path, by) {
                        // Counted as pending on the field until it lands or is
                        // undone; the filter checks the field's type
                        // (`credit_room`), so the field itself is not touched.
                        inc.insert(credit_path(path), by.clone());
                    } else {
                        // Adds zero now: the store still checks the field's
                        // type, so a credit can never fail later, at commit.
                        inc.insert(path.clone(), type_check_zero(by));
                    }
                }
                FieldOp::Push { path, value } => {
                    push.insert(path.clone(), value.clone());
                }
                FieldOp::Pull { path, value } => {
                    pull.insert(path.clone(), pull_condition(value));
                }
            }
        }
        push.insert(self.marker.clone(), ctx.marker.as_str());
        inc.insert(PENDING, 1);
        let mut inc = self.counted_on(inc);
        let later = self.later_growth(ctx.before);
        if self.is_exclusive() {
            set.insert(LOCK, ctx.marker.as_str());
            // No change of another transaction is pending here (the filter
            // says so), so every credit sum is zero: drop them, or a document
            // credited at ever new paths (`holds.<order>`) would keep a zero
            // for each, for good. The room reserved is zero too: this
            // change's reservation is all of it.
            unset.insert(CREDITS, "");
            if later > 0 {
                set.insert(ROOM, later);
            } else if self.reserves_room {
                unset.insert(ROOM, "");
            }
        } else if later > 0 {
            inc.insert(ROOM, later);
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

    /// Applies `update` under the apply filter; explains a miss. A miss
    /// for the zero credit sums in the way of its credits (what credits
    /// that landed or were undone leave) drops them and is tried once more.
    pub(super) async fn guarded_apply(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
        update: Document,
    ) -> Result<(), StepError> {
        let mut tidied = false;
        loop {
            let outcome = store
                .update_one(
                    &self.namespace,
                    self.apply_filter(ctx, Some(&update)),
                    update.clone(),
                    crate::store::UpdateOptions::default(),
                )
                .await
                .map_err(|e| self.store_err(e))?;
            if outcome.matched == 1 {
                return Ok(());
            }
            match self.diagnose(store, ctx).await {
                Err(e @ StepError::TypeMismatch { .. }) if !tidied => {
                    tidied = true;
                    if !self.tidy_zero_sums(store).await? {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// Reads the document for a diagnosis of an apply that matched nothing,
    /// **while the apply's deadline has not passed**, by the store's clock in
    /// the same read. `Err(Expired)` once it has (or `NotFound`): a marker
    /// found then may have been pushed by a later epoch of recovery, rolling
    /// the transaction forward after it found this epoch's applies missing,
    /// and that epoch may still cancel; counting it as this apply's would let
    /// a coordinator answer committed for a transaction being canceled.
    /// `Ok(None)`: the document is missing (before the deadline).
    pub(super) async fn read_in_time(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
    ) -> Result<Option<Document>, StepError> {
        let mut filter = doc! { "_id": self.id.clone() };
        if let Some(deadline) = ctx.deadline {
            filter.insert("$expr", before(deadline));
        }
        let current = store
            .find_one(&self.namespace, filter)
            .await
            .map_err(|e| self.store_err(e))?;
        if current.is_some() || ctx.deadline.is_none() {
            return Ok(current);
        }
        let exists = store
            .exists(&self.namespace, doc! { "_id": self.id.clone() })
            .await
            .map_err(|e| self.store_err(e))?;
        if exists {
            return Err(StepError::Expired {
                participant: self.label(),
            });
        }
        // Missing; and the deadline may have passed too.
        match self
            .expired_or(
                store,
                ctx,
                StepError::NotFound {
                    participant: self.label(),
                },
            )
            .await
        {
            Err(StepError::NotFound { .. }) => Ok(None),
            other => other.map(|()| None),
        }
    }

    /// Confirms, with [`Store::exists`] (on MongoDB a `linearizable` read),
    /// that this transaction's marker is on the document before the apply's
    /// deadline. The read that found it used the store's read concern,
    /// which may be `local`: it can show a write that a failover then rolls
    /// back, and the coordinator would have answered committed for an apply
    /// that never held. Not confirmed yet: the outcome is unknown (the write
    /// may still be acknowledged), a transient store error, which the step
    /// repeats; once the deadline has passed, `Expired`.
    async fn confirm_applied(
        &self,
        store: &dyn Store,
        ctx: &StepContext<'_>,
    ) -> Result<(), StepError> {
        let mut filter = doc! { "_id": self.id.clone(), self.marker.clone(): ctx.marker.as_str() };
        if let Some(deadline) = ctx.deadline {
            filter.insert("$expr", before(deadline));
        }
        let held = store
            .exists(&self.namespace, filter)
            .await
            .map_err(|e| self.store_err(e))?;
        if held {
            return Ok(());
        }
        self.expired_or(
            store,
            ctx,
            self.store_err(crate::store::StoreError::new(
                crate::StoreErrorKind::Transient,
                "the marker read on the document is not confirmed by a read of what the store cannot lose yet",
            )),
        )
        .await
    }

    /// Works out why a guarded apply matched nothing.
    async fn diagnose(&self, store: &dyn Store, ctx: &StepContext<'_>) -> Result<(), StepError> {
        let current = self.read_in_time(store, ctx).await?;
        let explained = self.explain(current.as_ref(), Some(ctx.marker));
        if explained.is_ok() {
            // Applied already, by this transaction.
            return self.confirm_applied(store, ctx).await;
        }
        match explained {
            // The document has too little room for this apply and what it
            // reserves: for good (`TooLarge`), or while the changes pending
            // there keep what they reserved (a conflict, which ends).
            Err(StepError::Conflict { holder, .. })
                if holder == CONCURRENT_WRITE
                    && current.as_ref().zip(self.apply_room(ctx)).is_some_and(
                        |(current, (growth, later))| {
                            Self::room_for(current, growth, later) != Room::Fits
                        },
                    ) =>
            {
                let (Some(current), Some((growth, later))) =
                    (current.as_ref(), self.apply_room(ctx))
                else {
                    return Err(StepError::TooLarge {
                        participant: self.label(),
                    });
                };
                Err(self.room_refusal(current, Self::room_for(current, growth, later)))
            }
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
    ///
    /// A marker field that holds data that is not tandem's (no array, or an
    /// array of the application's: an entry that is no string, or more
    /// entries than the transactions the document counts as pending) is a
    /// [`StepError::TypeMismatch`] naming the field, where the change reads
    /// it: with `tx` (a two-phase apply), or for an exclusive change.
    ///
    /// For an insert, `current` is what holds its `_id`: a document held by
    /// a transaction (a delete's, or another insert's that may be undone) is
    /// a conflict, a settled one `AlreadyExists`.
    pub fn explain(&self, current: Option<&Document>, tx: Option<&TxId>) -> Result<(), StepError> {
        let participant = self.label();
        if matches!(self.op, DocumentOp::Insert { .. }) {
            return Err(match current {
                Some(current) if query::lookup(current, GHOST).is_none() => {
                    match query::lookup(current, LOCK).filter(|b| **b != Bson::Null) {
                        Some(holder) => StepError::Conflict {
                            participant,
                            holder: holder_text(holder),
                        },
                        None => StepError::AlreadyExists { participant },
                    }
                }
                // A placeholder, or nothing: written or removed meanwhile.
                _ => StepError::Conflict {
                    participant,
                    holder: CONCURRENT_WRITE.into(),
                },
            });
        }
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
        // The marker field is read by a two-phase apply (`tx`), and by an
        // exclusive change of either strategy (nothing may be pending).
        if tx.is_some() || self.is_exclusive() {
            if let Some(e) = self.foreign_markers(current) {
                return Err(e);
            }
        }
        if let Some(found) =
            query::lookup(current, &self.marker).filter(|v| !matches!(v, Bson::Array(_)))
        {
            return Err(StepError::TypeMismatch {
                participant,
                path: self.marker.clone(),
                message: format!(
                    "the marker field {} holds {} {}: tandem keeps its array of pending \
                     transactions there; choose another marker name",
                    self.marker,
                    type_name(found),
                    clip(found.to_string(), QUOTE_LIMIT)
                ),
            });
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
        // An equality guard that can stand for a field's before-image
        // matches the field itself only, not an array holding the value.
        let pinned = self.pinned_paths();
        for guard in &self.guards {
            let is_pinned = pinned.contains(&guard.path);
            let whole =
                !is_pinned || query::lookup(current, &format!("{}.0", guard.path)).is_none();
            if whole && query::matches(current, &guard.to_filter()).unwrap_or(false) {
                let found = query::lookup(current, &guard.path);
                if is_pinned && guard.op == GuardOp::Eq && found != Some(&guard.value) {
                    // Equal, but of other types: the guard's value is no
                    // before-image of it.
                    return Err(StepError::TypeMismatch {
                        participant,
                        path: guard.path.clone(),
                        message: format!(
                            "stored {} {}, equal to the guard's {} {} but of other types: an equality guard that stands for the before-image must match the stored value's types",
                            found.map(type_name).unwrap_or("nothing"),
                            found.map(|f| clip(f.to_string(), QUOTE_LIMIT)).unwrap_or_default(),
                            type_name(&guard.value),
                            clip(guard.value.to_string(), QUOTE_LIMIT)
                        ),
                    });
                }
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
                            "stored {} {}, guard compares with {} {}",
                            type_name(found),
                            clip(found.to_string(), QUOTE_LIMIT),
                            type_name(&guard.value),
                            clip(guard.value.to_string(), QUOTE_LIMIT)
                        ),
                    });
                }
            }
            let found = found
                .map(|b| clip(b.to_string(), QUOTE_LIMIT))
                .unwrap_or_else(|| "nothing".into());
            return Err(StepError::GuardFailed {
                participant,
                guard: format!("{} (found {found})", clip(guard.to_string(), QUOTE_LIMIT)),
            });
        }
        if let DocumentOp::Update { ops } = &self.op {
            for op in ops {
                if let FieldOp::Inc { path, .. } = op {
                    if let Some(v) = query::lookup(current, path) {
                        if !matches!(
                            v,
                            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
                        ) {
                            return Err(StepError::TypeMismatch {
                                participant,
                                path: path.clone(),
                                message: format!(
                                    "Cannot apply $inc to a value of non-numeric type {} ({})",
                                    type_name(v),
                                    clip(v.to_string(), QUOTE_LIMIT)
                                ),
                            });
                        }
                    }
                }
            }
        }
        // The deferred credits, whose room the apply's filter checks; and
        // every other increment of an integer field that it would take past
        // the limit (a native transaction's filter checks their room too,
        // an exclusive one included): an overflow, not a concurrent write.
        let deferred: Vec<&str> = self.deferred_credits().map(|(path, _)| path).collect();
        for (path, by) in self.increments() {
            let Some(Bson::Int64(max)) = credit_ceiling(by) else {
                continue;
            };
            let integer = matches!(
                query::lookup(current, path),
                Some(Bson::Int32(_) | Bson::Int64(_))
            );
            if !deferred.contains(&path) && !integer {
                continue;
            }
            let pending = match query::lookup(current, &credit_path(path)) {
                Some(Bson::Int64(n)) => *n,
                Some(Bson::Int32(n)) => i64::from(*n),
                _ => 0,
            };
            let found = query::lookup(current, path);
            let room = max.checked_sub(pending);
            let over = match (found, room) {
                // The pending sum has no room for this credit, whatever the
                // field holds (its plain condition, `S <= MAX - by`).
                (_, None) => true,
                (_, Some(room)) if room < 0 => true,
                // No integer overflows a double or a decimal: the room
                // condition passes them over (`credit_room`), for a path
                // without a numbered segment; the pending sum, an integer,
                // keeps its own.
                (Some(Bson::Double(_) | Bson::Decimal128(_)), Some(_)) if counted(path, by) => {
                    false
                }
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
        // A field below an array, which no update reaches.
        if let Some(e) = self.field_out_of_reach(current) {
            return Err(e);
        }
        // An increment that could not land, or would keep a credit pending
        // on a related path from landing.
        if let Some(e) = self.shape_not_kept(current) {
            return Err(e);
        }
        // A debit that would change its field's type.
        if let Some(e) = self.type_not_kept(current) {
            return Err(e);
        }
        // Too little room for the change and what two-phase transactions
        // have reserved here (a native transaction's filter checks it; a
        // two-phase apply adds more, and its diagnosis checks that too).
        if let Some(path) = self.pads_an_array(current) {
            return Err(StepError::TypeMismatch {
                participant,
                path,
                message: "an increment past an array's end, on a document others share, would pad the array with nulls, as many as the index says: credit an element that exists, or a field of a document".into(),
            });
        }
        if let (false, super::NativeCommand::Update { update, .. }) =
            (self.is_exclusive(), self.native_command())
        {
            let room = Self::room_for(current, super::room::update_growth(&update), 0);
            if room != Room::Fits {
                return Err(self.room_refusal(current, room));
            }
        }
        // The before-image no longer holds: somebody wrote the document since it was read.
        Err(StepError::Conflict {
            participant,
            holder: CONCURRENT_WRITE.into(),
        })
    }
}

/// Whether an equality guard on `value` at `path` pins what a field holds,
/// so that it can stand for the field's before-image: [`exact`] can make it
/// exact, and it is not a number (an equality with `5.0` also matches a
/// stored `5` of another numeric type, which the undo would then change).
/// Only on a top-level field, as a guard that the field is missing: below
/// one, a query reads the path through every array on the way (`a.b`
/// through the elements of `a: [{b: "x"}]`, `a.0.b` also through a field
/// named `0` in any element) where an update does not write, so the guard
/// may hold where the update changes nothing, and the undo would then
/// expect what it never finds: the document held for good. Below the top
/// level the image is read from the document.
fn pins(path: &str, value: &Bson) -> bool {
    !path.contains('.')
        && exact(value).is_some()
        && !holds_number(value)
        && type_conditions("", value).is_some()
}

/// Whether `value` is a number or holds one at any depth (a document
/// `{qty: 5}` equals `{qty: 5.0}`).
fn holds_number(value: &Bson) -> bool {
    match value {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => true,
        Bson::Document(d) => d.values().any(holds_number),
        Bson::Array(a) => a.iter().any(holds_number),
        _ => false,
    }
}

/// The `$type` conditions that make an equality with `value` at `path`
/// exact in the types of its leaves: an equality matches a number of
/// another numeric type, and a symbol for a string of the same text, at any
/// depth. A condition for each such leaf, on its path. `None` where a leaf
/// cannot be named by a path: a key that is empty, holds a dot or starts
/// with `$`, or a key of digits in a document inside an array (where
/// `a.0` names both the element and that field).
pub(super) fn type_conditions(path: &str, value: &Bson) -> Option<Vec<(String, Bson)>> {
    fn walk(path: &str, value: &Bson, in_array: bool, out: &mut Vec<(String, Bson)>) -> bool {
        let join = |key: &str| {
            if path.is_empty() {
                key.to_owned()
            } else {
                format!("{path}.{key}")
            }
        };
        match value {
            Bson::Int32(_)
            | Bson::Int64(_)
            | Bson::Double(_)
            | Bson::Decimal128(_)
            | Bson::String(_)
            | Bson::Symbol(_) => {
                out.push((
                    path.to_owned(),
                    Bson::Document(doc! { "$type": crate::query::type_name(value) }),
                ));
                true
            }
            Bson::Document(d) => d.iter().fold(true, |all, (key, v)| {
                let named = nameable(key, in_array) && walk(&join(key), v, false, out);
                all && named
            }),
            Bson::Array(a) => a.iter().enumerate().fold(true, |all, (i, v)| {
                walk(&join(&i.to_string()), v, true, out) && all
            }),
            _ => true,
        }
    }
    let mut out = Vec::new();
    walk(path, value, false, &mut out).then_some(out)
}

/// The largest sub-document an `unset` of one of its fields images whole
/// (to keep its field order): a larger one is imaged at the field.
const WHOLE_IMAGE_LIMIT: usize = 16 * 1024;

/// The pending sums in the way of a credit of `path` on `current`, each
/// with where it is kept: a number at one of its parents (a credit pending
/// on the parent, or the zero one left), or a document of sums at the path
/// itself (credits below it).
fn sums_in_the_way_of<'a>(
    current: &'a Document,
    path: &'a str,
) -> impl Iterator<Item = (&'a str, &'a Bson)> + 'a {
    let at_parents = parents(path).filter_map(move |parent| {
        match query::lookup(current, &credit_path(parent)) {
            Some(
                sum @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)),
            ) => Some((parent, sum)),
            _ => None,
        }
    });
    let below = match query::lookup(current, &credit_path(path)) {
        Some(sum @ Bson::Document(_)) => Some((path, sum)),
        _ => None,
    };
    at_parents.chain(below)
}

/// Whether every number in `sum` (a pending sum, or a document of them)
/// is zero.
fn all_zero(sum: &Bson) -> bool {
    match sum {
        Bson::Document(d) => d.values().all(all_zero),
        Bson::Int32(n) => *n == 0,
        Bson::Int64(n) => *n == 0,
        Bson::Double(n) => *n == 0.0,
        _ => true,
    }
}

/// The parents of `path`: `a` and `a.b` of `a.b.c`, none of `a`.
fn parents(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('.').map(move |(i, _)| &path[..i])
}

/// Where an undo of the change at `path` restores `doc` from, when higher
/// than `path` ([`DocumentChange::read_image`]): the first field missing on
/// the way (unless it is the last), or the array the path indexes past its
/// end, or, for an `unset`, the array whose element the path names or the
/// sub-document whose field it names. `None`: at `path` itself (also where
/// the update fails, through a scalar).
fn image_root<'p>(doc: &Document, path: &'p str, unset: bool) -> Option<&'p str> {
    enum Node<'d> {
        Doc(&'d Document),
        Arr(&'d [Bson]),
        Leaf,
    }
    fn node_of(v: &Bson) -> Node<'_> {
        match v {
            Bson::Document(d) => Node::Doc(d),
            Bson::Array(a) => Node::Arr(a),
            _ => Node::Leaf,
        }
    }
    let mut node = Node::Doc(doc);
    // Where the prefix walked so far ends, and, when its value is an
    // element of an array, where that array's path ends.
    let mut end = 0;
    let mut in_array: Option<usize> = None;
    // The size of the sub-document the last segment was found in.
    let mut parent_len = 0;
    for seg in path.split('.') {
        let start = if end == 0 { 0 } else { end + 1 };
        let seg_end = start + seg.len();
        let last = seg_end == path.len();
        node = match node {
            Node::Doc(d) => match d.get(seg) {
                None => return (!last).then(|| &path[..seg_end]),
                Some(v) => {
                    in_array = None;
                    if last {
                        parent_len = crate::query::size::document_len(d);
                    }
                    node_of(v)
                }
            },
            Node::Arr(a) => match query::array_index(seg) {
                Some(i) if i < a.len() => {
                    in_array = Some(end);
                    node_of(&a[i])
                }
                Some(_) => return Some(&path[..end]),
                None => return None,
            },
            Node::Leaf => return None,
        };
        end = seg_end;
    }
    match in_array {
        Some(array_end) if unset => Some(&path[..array_end]),
        // A field of a sub-document: an undo's `$set` of the field would
        // put it back last, and the sub-document, compared in field order,
        // would no longer equal what it was. Restored whole, it keeps its
        // order. (A top-level field is put back last, and so is a field of
        // a sub-document larger than `WHOLE_IMAGE_LIMIT`, whose image the
        // record and the apply's filter would carry whole: a known limit.)
        None if unset && parent_len <= WHOLE_IMAGE_LIMIT => path.rfind('.').map(|dot| &path[..dot]),
        _ => None,
    }
}

/// An aggregation expression for the value at `path` as an update reads
/// it: a numeric segment past the first is an element of an array
/// (`$arrayElemAt`) and a field of a document. (A field path such as
/// `"$items.0.tags"` would read the field `0` of each element instead, and
/// never equal the image: the apply would be refused for good.)
pub(super) fn field_expr(path: &str) -> Bson {
    // The common case, without splitting the path: no segment is an index.
    if !crate::query::has_index_segment(path) {
        return Bson::String(["$", path].concat());
    }
    let segments: Vec<&str> = path.split('.').collect();
    // An index as the document was read by (`query::lookup`).
    let index = |seg: &str| crate::query::array_index(seg).and_then(|i| i32::try_from(i).ok());
    // The first segment names a field of the document itself.
    let Some(first) = (1..segments.len()).find(|&k| index(segments[k]).is_some()) else {
        return Bson::String(format!("${path}"));
    };
    // The segments before the first index, as a field path; each one from
    // there on, through a variable bound to the value so far.
    let mut expr = Bson::String(format!("${}", segments[..first].join(".")));
    for seg in &segments[first..] {
        let inner = match index(seg) {
            Some(i) => Bson::Document(doc! { "$cond": [
                { "$isArray": "$$v" },
                { "$arrayElemAt": ["$$v", i] },
                format!("$$v.{seg}"),
            ] }),
            None => Bson::String(format!("$$v.{seg}")),
        };
        expr = Bson::Document(doc! { "$let": { "vars": { "v": expr }, "in": inner } });
    }
    expr
}

/// Whether a query path can name the field `key` of a document (one inside
/// an array if `in_array`): not empty, no dot, no leading `$` but a DBRef's
/// keys, and, inside an array, not all digits (`a.0` names the element).
fn nameable(key: &str, in_array: bool) -> bool {
    let plain = !key.is_empty()
        && !key.contains('.')
        && (!key.starts_with('$') || DBREF_KEYS.contains(&key));
    let digits = key.bytes().all(|b| b.is_ascii_digit());
    plain && !(in_array && digits)
}

/// The keys of a DBRef, which a query path may name (`owner.$id`), unlike
/// any other key starting with `$`.
const DBREF_KEYS: [&str; 3] = ["$ref", "$id", "$db"];

/// The `$type` conditions of [`type_conditions`] for every leaf of `value`
/// a path can name, the others left out: for an image read from the
/// document, where fewer conditions only leave an outside write of an equal
/// value of another type at such a leaf unseen.
/// At most [`LEAF_TYPES_KEPT`] of them: a field of many numbers would
/// otherwise make the apply's filter several times the document's size.
impl DocumentChange {
    /// The refusal of an apply without room (`room` not
    /// [`Room::Fits`]): `TooLarge` when the change does not fit whatever
    /// the others do; otherwise a conflict with the changes pending on the
    /// document, whose reservations it would need, named by the first
    /// marker there.
    fn room_refusal(&self, current: &Document, room: Room) -> StepError {
        if room == Room::TooLarge {
            return StepError::TooLarge {
                participant: self.label(),
            };
        }
        let holder = match query::lookup(current, &self.marker) {
            Some(Bson::Array(markers)) if !markers.is_empty() => holder_text(&markers[0]),
            _ => "(room reserved by the changes pending on the document)".to_owned(),
        };
        StepError::Conflict {
            participant: self.label(),
            holder,
        }
    }
}

/// Whether a query reads `path` through more than the field it names: a
/// numeric segment past the first (`a.0.b`) also names a field `0` of
/// every element of an array `a`.
pub(super) fn through_element(path: &str) -> bool {
    path.split('.')
        .skip(1)
        .any(|seg| seg.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether the apply's filter pins the before-image `value` at `path`
/// byte for byte: not through an element ([`through_element`]), and every
/// number and string in it typed by a condition ([`leaf_types`] keeps
/// [`LEAF_TYPES_KEPT`], and names no key a path cannot). Where it does not,
/// an equal value of another type (a `5` for a `5.0`) may stand there, of
/// another size.
pub(super) fn pins_bytes(path: &str, value: &Bson) -> bool {
    !through_element(path)
        && type_conditions(path, value).is_some_and(|c| c.len() <= LEAF_TYPES_KEPT)
}

fn leaf_types(path: &str, value: &Bson) -> Vec<(String, Bson)> {
    let mut out = Vec::new();
    collect_leaf_types(path, value, false, &mut out);
    out.truncate(LEAF_TYPES_KEPT);
    out
}

/// How many `$type` conditions an image read from the document adds to an
/// apply at most (the first leaves in document order).
const LEAF_TYPES_KEPT: usize = 256;

fn collect_leaf_types(path: &str, value: &Bson, in_array: bool, out: &mut Vec<(String, Bson)>) {
    let join = |key: &str| format!("{path}.{key}");
    match value {
        Bson::Document(d) => {
            for (key, v) in d {
                if nameable(key, in_array) {
                    collect_leaf_types(&join(key), v, false, out);
                }
            }
        }
        Bson::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                collect_leaf_types(&join(&i.to_string()), v, true, out);
            }
        }
        leaf => out.extend(type_conditions(path, leaf).unwrap_or_default()),
    }
}

/// For a value an equality pins a field to, the condition on the field's
/// path `.0` that makes the equality exact: `$exists: false` rules out an
/// array holding the value among others (a scalar or a document without a
/// field `0` has no `.0`, and an array that equals a scalar cannot be
/// empty). `None` where it cannot: `null` (which also matches a missing
/// field), an array, a document with a field `0`.
pub(super) fn exact(value: &Bson) -> Option<Document> {
    match value {
        Bson::Null | Bson::Undefined | Bson::Array(_) => None,
        Bson::Document(d) if d.contains_key("0") => None,
        _ => Some(doc! { "$exists": false }),
    }
}

/// What a `$pull` is given to remove the elements equal to `value`: a
/// document given as it is would be a condition on the elements, and every
/// element holding its fields would go (`{sku: "a"}` takes `{sku: "a",
/// qty: 2}` too); under `$eq` only equal ones do. Other values are compared
/// for equality as they are.
pub(super) fn pull_condition(value: &Bson) -> Bson {
    match value {
        Bson::Document(_) => Bson::Document(doc! { "$eq": value.clone() }),
        other => other.clone(),
    }
}

/// What an imaged path held before the apply, from the before-image
/// `image`: `Some(value)` (`Some(None)`: missing), or `None` where the image
/// does not cover `path`.
fn image_at(image: &[(String, Option<Bson>)], path: &str) -> Option<Option<Bson>> {
    let (root, value) = image
        .iter()
        .find(|(p, _)| overlaps(p, path) && p.len() <= path.len())?;
    if root == path {
        return Some(value.clone());
    }
    let rest = &path[root.len() + 1..];
    Some(value.as_ref().and_then(|v| {
        // Through a document or an array (`tags.0` under `tags`).
        let whole = doc! { "v": v.clone() };
        query::lookup(&whole, &format!("v.{rest}")).cloned()
    }))
}

/// What `$inc` by `by` leaves in a field that holds `base` (`None`:
/// missing), as the stores compute it; `None` where that is not worked out
/// here (a double with a decimal, or a sum that overflows and would have
/// been refused).
fn inc_result(base: Option<&Bson>, by: &Bson) -> Option<Bson> {
    Some(match (base, by) {
        (None, by) => by.clone(),
        (Some(Bson::Int32(a)), Bson::Int32(b)) => match a.checked_add(*b) {
            Some(n) => Bson::Int32(n),
            None => Bson::Int64(i64::from(*a) + i64::from(*b)),
        },
        (Some(Bson::Int32(a)), Bson::Int64(b)) => Bson::Int64(i64::from(*a).checked_add(*b)?),
        (Some(Bson::Int64(a)), Bson::Int32(b)) => Bson::Int64(a.checked_add(i64::from(*b))?),
        (Some(Bson::Int64(a)), Bson::Int64(b)) => Bson::Int64(a.checked_add(*b)?),
        (Some(Bson::Double(a)), Bson::Int32(b)) => Bson::Double(a + f64::from(*b)),
        (Some(Bson::Double(a)), Bson::Int64(b)) => Bson::Double(a + *b as f64),
        (Some(Bson::Double(a)), Bson::Double(b)) => Bson::Double(a + b),
        (Some(Bson::Int32(a)), Bson::Double(b)) => Bson::Double(f64::from(*a) + b),
        (Some(Bson::Int64(a)), Bson::Double(b)) => Bson::Double(*a as f64 + b),
        // A decimal with a decimal or an integer, in decimal.
        (Some(a), by) => Bson::Decimal128(query::add_decimals(a, by)?),
    })
}
