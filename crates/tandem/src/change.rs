//! The change algebra: what a transaction does to one document, and its guards.
//!
//! A [`DocumentChange`] names one document (store, namespace, `_id`) and either
//! updates it with [`FieldOp`]s, inserts it, or deletes it, under [`Guard`]s.
//! Compensation is derived, never written by hand:
//!
//! | change            | compensation                                          |
//! |-------------------|-------------------------------------------------------|
//! | `inc(f, n)`       | `inc(f, -n)`                                          |
//! | `set(f, v)`       | restore `f` from the before-image (or unset it)       |
//! | `unset(f)`        | restore `f` from the before-image                     |
//! | `push` / `pull`   | restore the array from the before-image               |
//! | insert            | remove the document (leaving a fenced placeholder)    |
//! | delete            | keep the document (it is only removed at commit)      |
//!
//! Increments commute, so concurrent transactions may increment one document
//! at once (when their guards are lower bounds such as `balance >= 100`).
//! Negative increments are reserved when applied; positive ones take effect
//! only at commit, so a guard never counts money that may still be taken back.
//! Every other change holds the document exclusively until its transaction
//! ends; another transaction touching it gets
//! [`StepError::Conflict`](crate::StepError::Conflict).
//!
//! Field paths and namespace names are checked, so names that come from user
//! input cannot inject query operators.

use std::fmt;

use bson::{Bson, Document};
use serde::{Deserialize, Serialize};

use crate::error::ChangeError;
use crate::store::Namespace;

/// The default name of the marker array on participant documents.
pub const DEFAULT_MARKER: &str = "pendingTransactions";

/// The sub-document tandem keeps on participant documents (lock, pending delete, placeholder).
pub const META_FIELD: &str = "_tandem";

/// Checks one dotted field path: non-empty segments, none starting with `$`,
/// no number with a leading zero (`01`) after the first segment, no NUL.
pub fn check_path(path: &str) -> Result<(), ChangeError> {
    let bad = |reason| {
        Err(ChangeError::InvalidPath {
            path: path.to_owned(),
            reason,
        })
    };
    if path.is_empty() {
        return bad("empty");
    }
    if path.contains('\0') {
        return bad("contains NUL");
    }
    for (at, seg) in path.split('.').enumerate() {
        if seg.is_empty() {
            return bad("empty segment");
        }
        if seg.starts_with('$') {
            return bad("segment starts with '$'");
        }
        if at > 0
            && seg.len() > 1
            && seg.starts_with('0')
            && seg.bytes().all(|b| b.is_ascii_digit())
        {
            // MongoDB's updates read `tags.01` as `tags.1`, its queries as a
            // field named "01": no guard or before-image could follow it.
            // (The first segment names a field of the document, never an
            // array's element: `007` is a field.)
            return bad("a number with a leading zero as a segment (MongoDB's updates read it as an array index, its queries as a field name)");
        }
    }
    Ok(())
}

/// Checks a namespace as MongoDB would: names non-empty, no NUL, no `$`; a
/// database name without `.`, `/`, `\`, `"` or a space and shorter than 64
/// bytes; a collection name not starting with `.` or `system.`; the whole
/// namespace (`db.collection`) at most 255 bytes. The embedded store keeps
/// to the same rules, so that a name MongoDB would refuse is refused on
/// both, before anything is written.
pub fn check_namespace(ns: &Namespace) -> Result<(), ChangeError> {
    let bad = |name: &str, reason| {
        Err(ChangeError::InvalidNamespace {
            name: name.to_owned(),
            reason,
        })
    };
    for (name, is_db) in [(&ns.db, true), (&ns.collection, false)] {
        if name.is_empty() {
            return bad(name, "empty");
        }
        if name.contains('\0') {
            return bad(name, "contains NUL");
        }
        if name.contains('$') {
            return bad(name, "contains '$'");
        }
        if is_db && name.contains(['.', '/', '\\', '"', ' ']) {
            return bad(
                name,
                "database names cannot contain '.', '/', '\\', '\"' or ' '",
            );
        }
        if is_db && name.len() >= 64 {
            return bad(name, "database names are shorter than 64 bytes");
        }
        if !is_db && name.starts_with('.') {
            return bad(name, "collection names cannot start with '.'");
        }
        if !is_db && name.starts_with("system.") {
            return bad(
                name,
                "collection names starting with 'system.' are reserved by MongoDB",
            );
        }
    }
    // `db.collection`, as MongoDB counts it.
    if ns.db.len() + 1 + ns.collection.len() > 255 {
        return bad(
            &ns.collection,
            "the namespace (database, '.', collection) is longer than 255 bytes",
        );
    }
    Ok(())
}

/// How deep a value may reach in its document, counting the levels of its
/// field's path (`a.b` is two) and each document or array it nests:
/// MongoDB's manual supports at most 100 levels (a server refuses a
/// document past 180 by default, past fewer where its `maxBSONDepth` is
/// set lower), and a transaction record keeps a change's
/// values seven levels below its own top (participants, entry, spec, op,
/// ops, op), so 90 leaves room for both.
pub const MAX_VALUE_DEPTH: usize = 90;

/// How many documents and arrays `value` nests (a scalar: 0).
pub(crate) fn nesting(value: &Bson) -> usize {
    // Iterative, so that a value nested far too deep does not exhaust the stack.
    let mut deepest = 0;
    let mut stack = vec![(value, 0_usize)];
    while let Some((v, depth)) = stack.pop() {
        match v {
            Bson::Document(d) => {
                deepest = deepest.max(depth + 1);
                stack.extend(d.values().map(|inner| (inner, depth + 1)));
            }
            Bson::Array(items) => {
                deepest = deepest.max(depth + 1);
                stack.extend(items.iter().map(|inner| (inner, depth + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Refuses `value` at `path` (`extra` levels more, for an array element) if it
/// reaches deeper than [`MAX_VALUE_DEPTH`].
fn check_depth(path: &str, value: &Bson, extra: usize) -> Result<(), ChangeError> {
    let depth = path.split('.').count() + extra + nesting(value);
    if depth > MAX_VALUE_DEPTH {
        return Err(ChangeError::TooDeep {
            path: path.to_owned(),
            depth,
            limit: MAX_VALUE_DEPTH,
        });
    }
    Ok(())
}

/// One change of one field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum FieldOp {
    /// Sets the field to a value.
    Set {
        /// The dotted path.
        path: String,
        /// The new value.
        value: Bson,
    },
    /// Removes the field.
    Unset {
        /// The dotted path.
        path: String,
    },
    /// Adds a number (Int32, Int64 or Double) to the field.
    Inc {
        /// The dotted path.
        path: String,
        /// The amount.
        by: Bson,
    },
    /// Appends a value to an array field.
    Push {
        /// The dotted path.
        path: String,
        /// The value.
        value: Bson,
    },
    /// Removes every element equal to a value from an array field.
    Pull {
        /// The dotted path.
        path: String,
        /// The value.
        value: Bson,
    },
}

impl FieldOp {
    /// The field this changes.
    pub fn path(&self) -> &str {
        match self {
            FieldOp::Set { path, .. }
            | FieldOp::Unset { path }
            | FieldOp::Inc { path, .. }
            | FieldOp::Push { path, .. }
            | FieldOp::Pull { path, .. } => path,
        }
    }

    /// Whether concurrent transactions may apply this to one document (increments only).
    pub fn commutes(&self) -> bool {
        matches!(self, FieldOp::Inc { .. })
    }
}

/// A comparison a guard makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum GuardOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `>`
    Gt,
    /// `>=`
    Gte,
    /// `<`
    Lt,
    /// `<=`
    Lte,
    /// The field exists.
    Exists,
    /// The field does not exist.
    Missing,
}

impl GuardOp {
    fn symbol(self) -> &'static str {
        match self {
            GuardOp::Eq => "==",
            GuardOp::Ne => "!=",
            GuardOp::Gt => ">",
            GuardOp::Gte => ">=",
            GuardOp::Lt => "<",
            GuardOp::Lte => "<=",
            GuardOp::Exists => "exists",
            GuardOp::Missing => "is missing",
        }
    }
}

/// A precondition on one field, checked atomically with the change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Guard {
    /// The dotted path.
    pub path: String,
    /// The comparison.
    pub op: GuardOp,
    /// The value compared with (ignored by `Exists` / `Missing`).
    #[serde(default)]
    pub value: Bson,
}

impl Guard {
    /// The guard as a query filter.
    pub fn to_filter(&self) -> Document {
        let mut d = Document::new();
        d.insert(self.path.clone(), self.condition());
        d
    }

    /// The condition on the guarded field: the value at its path in [`to_filter`](Self::to_filter).
    pub(crate) fn condition(&self) -> Document {
        match self.op {
            GuardOp::Eq => bson::doc! { "$eq": self.value.clone() },
            GuardOp::Ne => bson::doc! { "$ne": self.value.clone() },
            GuardOp::Gt => bson::doc! { "$gt": self.value.clone() },
            GuardOp::Gte => bson::doc! { "$gte": self.value.clone() },
            GuardOp::Lt => bson::doc! { "$lt": self.value.clone() },
            GuardOp::Lte => bson::doc! { "$lte": self.value.clone() },
            GuardOp::Exists => bson::doc! { "$exists": true },
            GuardOp::Missing => bson::doc! { "$exists": false },
        }
    }
}

impl fmt::Display for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.op {
            GuardOp::Exists | GuardOp::Missing => write!(f, "{} {}", self.path, self.op.symbol()),
            op => write!(f, "{} {} {}", self.path, op.symbol(), self.value),
        }
    }
}

/// What a [`DocumentChange`] does to its document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum DocumentOp {
    /// Changes fields of an existing document.
    Update {
        /// The field changes.
        ops: Vec<FieldOp>,
    },
    /// Inserts a new document (its `_id` is the change's id).
    Insert {
        /// The document, without `_id`.
        doc: Document,
    },
    /// Deletes the document when the transaction commits.
    Delete,
}

/// A change of one document: the unit a transaction is made of.
///
/// Build one with [`DocumentChange::update`], [`DocumentChange::insert`] or
/// [`DocumentChange::delete`], then chain field changes and guards. Mistakes
/// (bad paths, values that cannot be stored) are collected and reported by
/// [`DocumentChange::validate`] when the transaction runs, before anything is written.
///
/// Its serde form is the spec a transaction record keeps. A change read
/// back from one is applied, committed and undone as the version that wrote
/// it did (a spec without `countsDebits`, `missingHeldAlone`,
/// `floatDebitsHeldAlone`, `reservesRoom`, `numberedDebitsHeldAlone` or
/// `countsMarks` is an earlier version's), so build changes with the methods, not by deserializing.
///
/// ```
/// use tandem::{DocumentChange, Namespace};
///
/// let debit = DocumentChange::update(Namespace::new("bank", "accounts"), "A")
///     .inc("balance", -100_i64)
///     .require_gte("balance", 100_i64);
/// assert!(debit.validate().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentChange {
    /// The named store the document lives in; `None` for the coordinator's default store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// Database and collection.
    pub namespace: Namespace,
    /// The document's `_id`.
    pub id: Bson,
    /// The marker array's field name.
    pub marker: String,
    /// What to do.
    pub op: DocumentOp,
    /// Preconditions.
    #[serde(default)]
    pub guards: Vec<Guard>,
    /// Whether this change's debits count in their field's pending sum
    /// (`_tandem.credit.<path>`) while applied: true for every change built
    /// now, false for one read back from a record an earlier version wrote,
    /// whose apply did not count them, so that its clear or undo does not
    /// take off what was never added.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) counts_debits: bool,
    /// Whether a guard that a field is missing holds the document alone
    /// ([`is_exclusive`](Self::is_exclusive)): true for every change built
    /// now, false for one read back from a record an earlier version wrote,
    /// whose apply shared the document (its credits deferred to the clear),
    /// so that its clear or undo finishes it as it was applied.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) missing_held_alone: bool,
    /// Whether a debit of a floating-point amount holds the document alone
    /// ([`is_exclusive`](Self::is_exclusive)), so that a cancel restores the
    /// field from its before-image: adding a double back is inexact
    /// (`(a - x) + x` need not be `a`). True for every change built now,
    /// false for one read back from a record an earlier version wrote, whose
    /// apply shared the document, so that its clear or undo finishes it as
    /// it was applied.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) float_debits_held_alone: bool,
    /// Whether the apply reserves, in the document's `_tandem.room`, the
    /// bytes its clear or undo may add, and they take the reservation off:
    /// true for every change built now, false for one read back from a
    /// record an earlier version wrote, whose apply reserved nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) reserves_room: bool,
    /// Whether a debit of a field whose path has a numeric segment (an
    /// array's element, `items.3.qty`, or a key of digits, `bal.840`) holds
    /// the document alone ([`is_exclusive`](Self::is_exclusive)), so that a
    /// cancel restores it from its before-image: shared, its undo adds the
    /// amount back, which no pending sum reserves room for on such a path
    /// (a credit to the limit landing meanwhile would leave the undo no
    /// room). True for every change built now, false for one read back
    /// from a record an earlier version wrote, whose apply shared the
    /// document.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) numbered_debits_held_alone: bool,
    /// Whether the apply counts its marker in the count of its own marker
    /// field (`_tandem.marks.<field>`) and in the total of those counts
    /// (`_tandem.marked`), and its clear or undo takes it off: true for
    /// every change built now, false for one read back from a record an
    /// earlier version wrote, whose apply counted it in `_tandem.pending`
    /// alone. A shared apply requires its marker field to hold no more
    /// entries than the changes counted there (and those no version
    /// counted): an array of the application's under that name is refused
    /// whatever is pending under other marker fields.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) counts_marks: bool,
    /// Mistakes found while building, reported by `validate`.
    #[serde(skip)]
    errors: Vec<ChangeError>,
    /// The `#[participant]` struct a typed change was declared from.
    #[serde(skip)]
    pub(crate) origin: Origin,
}

/// The `#[participant]` struct a change was declared from, if any. Not part
/// of the change's identity: two changes that do the same are equal whether
/// they were built typed or by hand.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Origin(pub(crate) Option<&'static str>);

impl PartialEq for Origin {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Whether `op` is an integer debit of a field whose path has a numeric
/// segment (`items.3.qty`, `bal.840`), which no pending sum counts.
fn numbered_debit(op: &FieldOp) -> bool {
    match op {
        FieldOp::Inc { path, by } => {
            let debit = match by {
                Bson::Int32(i) => *i < 0,
                Bson::Int64(i) => *i < 0,
                _ => false,
            };
            // The segments the pending sums leave out (`counted`).
            debit && crate::query::has_index_segment(path)
        }
        _ => false,
    }
}

impl DocumentChange {
    fn with_op(namespace: Namespace, id: impl Into<Bson>, op: DocumentOp) -> Self {
        DocumentChange {
            store: None,
            namespace,
            id: id.into(),
            marker: DEFAULT_MARKER.to_owned(),
            op,
            guards: Vec::new(),
            counts_debits: true,
            missing_held_alone: true,
            float_debits_held_alone: true,
            reserves_room: true,
            numbered_debits_held_alone: true,
            counts_marks: true,
            errors: Vec::new(),
            origin: Origin(None),
        }
    }

    /// The `#[participant]` struct this change was declared from (its
    /// [`std::any::type_name`]), for a typed change.
    pub fn origin(&self) -> Option<&'static str> {
        self.origin.0
    }

    /// A change of fields of the existing document `id`.
    pub fn update(namespace: Namespace, id: impl Into<Bson>) -> Self {
        Self::with_op(namespace, id, DocumentOp::Update { ops: Vec::new() })
    }

    /// The insertion of `doc` under `id`. Any `_id` inside `doc` is replaced by `id`.
    pub fn insert(namespace: Namespace, id: impl Into<Bson>, mut doc: Document) -> Self {
        doc.remove("_id");
        Self::with_op(namespace, id, DocumentOp::Insert { doc })
    }

    /// The insertion of a serializable value; its `_id` field is the document id.
    pub fn insert_serialized<T: Serialize>(namespace: Namespace, value: &T) -> Self {
        match bson::to_document(value) {
            Ok(mut doc) => {
                let id = doc.remove("_id").unwrap_or(Bson::Null);
                let mut change = Self::insert(namespace, id.clone(), doc);
                if id == Bson::Null {
                    change.errors.push(ChangeError::InvalidPath {
                        path: "_id".into(),
                        reason: "the document to insert has no _id",
                    });
                }
                change
            }
            Err(e) => {
                let mut change = Self::insert(namespace, Bson::Null, Document::new());
                change.errors.push(ChangeError::Unserializable {
                    path: "(document)".into(),
                    message: e.to_string(),
                });
                change
            }
        }
    }

    /// The deletion of document `id` (it disappears when the transaction commits).
    pub fn delete(namespace: Namespace, id: impl Into<Bson>) -> Self {
        Self::with_op(namespace, id, DocumentOp::Delete)
    }

    /// Uses a named store of the coordinator instead of its default store.
    pub fn in_store(mut self, store: impl Into<String>) -> Self {
        self.store = Some(store.into());
        self
    }

    /// Uses another marker field name than `pendingTransactions`.
    pub fn marker(mut self, field: impl Into<String>) -> Self {
        self.marker = field.into();
        self
    }

    fn push_op(mut self, op: FieldOp) -> Self {
        match &mut self.op {
            DocumentOp::Update { ops } => ops.push(op),
            _ => self.errors.push(ChangeError::InvalidPath {
                path: op.path().to_owned(),
                reason: "field changes apply to updates, not to inserts or deletes",
            }),
        }
        self
    }

    fn value_of<T: Serialize>(&mut self, path: &str, value: T) -> Bson {
        match bson::to_bson(&value) {
            Ok(v) => v,
            Err(e) => {
                self.errors.push(ChangeError::Unserializable {
                    path: path.to_owned(),
                    message: e.to_string(),
                });
                Bson::Null
            }
        }
    }

    /// Sets `path` to `value`.
    pub fn set<T: Serialize>(mut self, path: impl Into<String>, value: T) -> Self {
        let path = path.into();
        let value = self.value_of(&path, value);
        self.push_op(FieldOp::Set { path, value })
    }

    /// Removes `path`.
    ///
    /// A cancel puts the field back as it was: a field of a sub-document by
    /// restoring the sub-document whole, field order included; a top-level
    /// field last among the document's fields (the document's field order
    /// is not restored).
    pub fn unset(self, path: impl Into<String>) -> Self {
        self.push_op(FieldOp::Unset { path: path.into() })
    }

    /// Adds `by` (an `i32`, `i64`, `f64` or `bson::Decimal128`) to `path`.
    ///
    /// A `Decimal128`, MongoDB's type for money, adds exactly (to 34
    /// significant digits); its debit of a document others share needs a
    /// decimal field, and its credit a field that is not a double (an undo
    /// of a debit pending there could not be exact otherwise).
    pub fn inc<T: Serialize>(mut self, path: impl Into<String>, by: T) -> Self {
        let path = path.into();
        let by = self.value_of(&path, by);
        self.push_op(FieldOp::Inc { path, by })
    }

    /// Appends `value` to the array `path`.
    pub fn push<T: Serialize>(mut self, path: impl Into<String>, value: T) -> Self {
        let path = path.into();
        let value = self.value_of(&path, value);
        self.push_op(FieldOp::Push { path, value })
    }

    /// Removes every element equal to `value` from the array `path`.
    pub fn pull<T: Serialize>(mut self, path: impl Into<String>, value: T) -> Self {
        let path = path.into();
        let value = self.value_of(&path, value);
        self.push_op(FieldOp::Pull { path, value })
    }

    /// Adds a guard `path <op> value`. [`GuardOp::Exists`] and
    /// [`GuardOp::Missing`] take no value (`Bson::Null`, as
    /// [`require_exists`](Self::require_exists) and
    /// [`require_missing`](Self::require_missing) give): another value
    /// is refused when the transaction runs (`ChangeError::InvalidPath`).
    pub fn require<T: Serialize>(mut self, path: impl Into<String>, op: GuardOp, value: T) -> Self {
        let path = path.into();
        let value = self.value_of(&path, value);
        self.guards.push(Guard { path, op, value });
        self
    }

    /// Guard: `path == value`.
    pub fn require_eq<T: Serialize>(self, path: impl Into<String>, value: T) -> Self {
        self.require(path, GuardOp::Eq, value)
    }

    /// Guard: `path != value`.
    pub fn require_ne<T: Serialize>(self, path: impl Into<String>, value: T) -> Self {
        self.require(path, GuardOp::Ne, value)
    }

    /// Guard: `path > value`.
    pub fn require_gt<T: Serialize>(self, path: impl Into<String>, value: T) -> Self {
        self.require(path, GuardOp::Gt, value)
    }

    /// Guard: `path >= value`.
    pub fn require_gte<T: Serialize>(self, path: impl Into<String>, value: T) -> Self {
        self.require(path, GuardOp::Gte, value)
    }

    /// Guard: `path < value`.
    pub fn require_lt<T: Serialize>(self, path: impl Into<String>, value: T) -> Self {
        self.require(path, GuardOp::Lt, value)
    }

    /// Guard: `path <= value`.
    pub fn require_lte<T: Serialize>(self, path: impl Into<String>, value: T) -> Self {
        self.require(path, GuardOp::Lte, value)
    }

    /// Guard: `path` exists.
    pub fn require_exists(self, path: impl Into<String>) -> Self {
        self.require(path, GuardOp::Exists, Bson::Null)
    }

    /// Guard: `path` does not exist.
    pub fn require_missing(self, path: impl Into<String>) -> Self {
        self.require(path, GuardOp::Missing, Bson::Null)
    }

    /// Records a mistake found by a typed builder layered on top of this one.
    pub fn push_error(&mut self, error: ChangeError) {
        self.errors.push(error);
    }

    /// A readable label: `db.collection/id`.
    pub fn label(&self) -> String {
        let id = match &self.id {
            Bson::String(s) => s.clone(),
            other => other.to_string(),
        };
        match &self.store {
            Some(store) => format!("{store}:{}/{id}", self.namespace),
            None => format!("{}/{id}", self.namespace),
        }
    }

    /// Whether this change holds its document exclusively.
    ///
    /// Only increments under lower-bound or presence guards share a
    /// document: guards that stay true while other transactions' credits land
    /// and their reservations are undone. Any other change, or a guard that
    /// those could falsify (`==`, `!=`, `<`, `<=`, and "missing", which a
    /// credit deferred to its commit falsifies when it lands and creates the
    /// field), holds it alone.
    pub fn is_exclusive(&self) -> bool {
        let guards_shared = self.guards.iter().all(|g| match g.op {
            GuardOp::Gte | GuardOp::Gt | GuardOp::Exists => true,
            GuardOp::Missing => !self.missing_held_alone,
            _ => false,
        });
        match &self.op {
            DocumentOp::Update { ops } => {
                !guards_shared || ops.iter().any(|op| {
                    !op.commutes()
                        || (self.float_debits_held_alone
                            && matches!(op, FieldOp::Inc { by: Bson::Double(d), .. } if *d < 0.0))
                        || (self.numbered_debits_held_alone && numbered_debit(op))
                })
            }
            DocumentOp::Insert { .. } | DocumentOp::Delete => true,
        }
    }

    /// Whether `op` takes effect at apply (`true`) or only at commit, when the marker is cleared.
    ///
    /// On a shared document, a positive increment waits for the commit, so that
    /// no guard of another transaction can rely on money that may still be
    /// taken back; a negative one is reserved at once. Undoing a reservation
    /// only raises the value, so lower-bound guards stay true.
    pub fn applies_early(&self, op: &FieldOp) -> bool {
        match op {
            FieldOp::Inc { by, .. } if !self.is_exclusive() => match by {
                Bson::Int32(i) => *i < 0,
                Bson::Int64(i) => *i < 0,
                Bson::Double(d) => *d < 0.0,
                Bson::Decimal128(_) => matches!(
                    crate::query::Exact::of(by),
                    Some(crate::query::Exact::Finite { negative: true, .. })
                ),
                _ => true,
            },
            _ => true,
        }
    }

    /// Checks the whole change, reporting the first mistake.
    pub fn validate(&self) -> Result<(), ChangeError> {
        if let Some(e) = self.errors.first() {
            return Err(e.clone());
        }
        check_namespace(&self.namespace)?;
        check_path(&self.marker)?;
        if self.marker.contains('.') || self.marker == META_FIELD || self.marker == "_id" {
            return Err(ChangeError::ReservedField {
                path: self.marker.clone(),
            });
        }
        check_id(&self.id)?;
        let reserved = |path: &str| {
            let root = path.split('.').next().unwrap_or(path);
            root == "_id" || root == META_FIELD || root == self.marker
        };
        for guard in &self.guards {
            check_path(&guard.path)?;
            // The marker array and `_tandem` are tandem's bookkeeping: what a
            // guard finds there depends on which transactions touched the
            // document before, and how (and the two-phase apply's own
            // condition on the marker took the place of a guard on it).
            // `_id` is the document's own, and may be guarded.
            let root = guard.path.split('.').next().unwrap_or(&guard.path);
            if root == META_FIELD || root == self.marker {
                return Err(ChangeError::ReservedField {
                    path: guard.path.clone(),
                });
            }
            check_depth(&guard.path, &guard.value, 0)?;
            // A presence guard tests presence alone: a value given with it
            // (`{$exists: false}` written as `GuardOp::Exists, false`) would
            // be ignored, and the guard hold where it says it does not.
            if matches!(guard.op, GuardOp::Exists | GuardOp::Missing) && guard.value != Bson::Null {
                return Err(ChangeError::InvalidPath {
                    path: guard.path.clone(),
                    reason: "an `exists` or `missing` guard takes no value (Bson::Null): \
                             a value does not turn it around; use require_exists or \
                             require_missing",
                });
            }
        }
        match &self.op {
            DocumentOp::Update { ops } => {
                if ops.is_empty() {
                    return Err(ChangeError::Empty {
                        participant: self.label(),
                    });
                }
                for (i, op) in ops.iter().enumerate() {
                    let path = op.path();
                    check_path(path)?;
                    if reserved(path) {
                        return Err(ChangeError::ReservedField {
                            path: path.to_owned(),
                        });
                    }
                    match op {
                        FieldOp::Inc { by, .. } => check_amount(path, by)?,
                        FieldOp::Set { value, .. } | FieldOp::Pull { value, .. } => {
                            check_depth(path, value, 0)?;
                            check_value(path, value)?;
                        }
                        FieldOp::Push { value, .. } => {
                            check_depth(path, value, 1)?;
                            check_value(path, value)?;
                        }
                        FieldOp::Unset { .. } => {}
                    }
                    for other in &ops[..i] {
                        if overlaps(path, other.path()) {
                            return Err(ChangeError::OverlappingPaths {
                                first: other.path().to_owned(),
                                second: path.to_owned(),
                            });
                        }
                    }
                }
            }
            DocumentOp::Insert { doc } => {
                // Nothing to check a guard against: the document does not
                // exist before its insert (neither strategy's insert reads
                // guards, so one accepted here would be ignored).
                if let Some(guard) = self.guards.first() {
                    return Err(ChangeError::InvalidPath {
                        path: guard.path.clone(),
                        reason: "guards apply to updates and deletes, not to inserts: \
                                 the document does not exist before its insert",
                    });
                }
                for key in doc.keys() {
                    check_path(key)?;
                    if key.contains('.') {
                        return Err(ChangeError::InvalidPath {
                            path: key.clone(),
                            reason: "inserted field names cannot contain '.'",
                        });
                    }
                    if reserved(key) {
                        return Err(ChangeError::ReservedField { path: key.clone() });
                    }
                    check_depth(key, &doc[key], 0)?;
                    check_value(key, &doc[key])?;
                }
            }
            DocumentOp::Delete => {}
        }
        Ok(())
    }
}

/// A document id must be a plain value: not null, not an array, not a regular
/// expression, and not a document with `$` keys, which a filter would run as an operator.
fn check_id(id: &Bson) -> Result<(), ChangeError> {
    let bad = |reason| {
        Err(ChangeError::InvalidPath {
            path: "_id".into(),
            reason,
        })
    };
    match id {
        Bson::Null | Bson::Undefined => bad("the document id is null"),
        Bson::Array(_) => bad("the document id cannot be an array"),
        Bson::RegularExpression(_) => bad("the document id cannot be a regular expression"),
        Bson::Document(d) if d.keys().any(|k| k.starts_with('$')) => {
            bad("the document id is a document with '$' keys, which would act as a query operator")
        }
        _ => Ok(()),
    }
}

/// A stored value may not hold documents with `$` keys, at any depth.
/// (Recursive: called after [`check_depth`], which bounds the depth.)
fn check_value(path: &str, value: &Bson) -> Result<(), ChangeError> {
    match value {
        Bson::Document(d) => {
            for (key, inner) in d {
                if key.starts_with('$') {
                    return Err(ChangeError::OperatorInValue {
                        path: path.to_owned(),
                        key: key.clone(),
                    });
                }
                check_value(path, inner)?;
            }
            Ok(())
        }
        Bson::Array(items) => items.iter().try_for_each(|v| check_value(path, v)),
        _ => Ok(()),
    }
}

fn check_amount(path: &str, by: &Bson) -> Result<(), ChangeError> {
    let bad = |reason| {
        Err(ChangeError::InvalidAmount {
            path: path.to_owned(),
            reason,
        })
    };
    match by {
        Bson::Int32(0) | Bson::Int64(0) => bad("zero"),
        Bson::Double(d) if *d == 0.0 => bad("zero"),
        Bson::Double(d) if !d.is_finite() => bad("not a finite number"),
        Bson::Int32(i32::MIN) | Bson::Int64(i64::MIN) => bad("cannot be negated for compensation"),
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) => Ok(()),
        Bson::Decimal128(_) => match crate::query::Exact::of(by) {
            Some(crate::query::Exact::Finite { digits, .. }) if digits.is_empty() => bad("zero"),
            Some(crate::query::Exact::Finite { .. }) => Ok(()),
            _ => bad("not a finite number"),
        },
        _ => bad("not an i32, i64, f64 or Decimal128"),
    }
}

/// Whether two dotted paths are equal or one lies inside the other.
pub(crate) fn overlaps(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    long == short || (long.starts_with(short) && long.as_bytes()[short.len()] == b'.')
}

mod read;
#[cfg(test)]
mod tests;
