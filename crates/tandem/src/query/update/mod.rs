//! MongoDB update operators applied in process to a [`bson::Document`].
//!
//! [`apply_update`] applies an update document such as
//! `{$set: {"state": "applied"}, $inc: {"balance": -30}}` the way MongoDB
//! would; [`upsert_seed`] builds the document an upsert starts from; and
//! [`validate_replacement`] checks a replacement document.
//!
//! # Supported
//!
//! * `$set`, `$unset`, `$inc`, `$push`, `$addToSet`, `$pull`, `$currentDate`
//!   and `$setOnInsert` (applied only when the update inserts).
//! * Dotted paths in every operator. Missing intermediate fields are created
//!   as sub-documents (`$unset` and `$pull` never create anything); a numeric
//!   segment indexes an array, and setting past its end pads it with nulls.
//! * `$push` and `$addToSet` take one value or `{$each: [...]}`.
//! * `$pull` removes the elements equal to a value; given an operator document
//!   (`{$in: [...]}`, `{$gte: 6}`) it removes the elements satisfying it, and
//!   given a plain document it removes the document elements that match it as
//!   a filter, as MongoDB does.
//! * `$currentDate` takes `true` (a date), `{$type: "date"}` or
//!   `{$type: "timestamp"}`.
//!
//! Errors carry MongoDB's error codes and messages where MongoDB has them:
//! a malformed update, or two operators touching the same path or a path and
//! its prefix (code 40), or a change of `_id` (code 66), is
//! [`StoreErrorKind::BadRequest`]; an operator meeting a stored value of the
//! wrong type (`$inc` on a string, code 14; `$push` on a non-array; a path
//! running through a scalar, code 28) is [`StoreErrorKind::TypeMismatch`]; an
//! Int64 `$inc` overflow is [`StoreErrorKind::Overflow`].
//!
//! # Not supported
//!
//! `$min`, `$max`, `$mul`, `$rename`, `$pop`, `$pullAll`, `$bit`, positional
//! paths (`$`, `$[]`, `$[id]`), the `$push` modifiers `$slice`, `$sort` and
//! `$position`, pipeline updates, and arithmetic on Decimal128. New fields
//! are appended in the order the update lists them.

use bson::{Bson, DateTime, Document, Timestamp};

use super::{array_index, is_operator_doc, lookup, size, split_dot, type_name};
use crate::store::{StoreError, StoreErrorKind};

/// MongoDB's `BadValue`.
const BAD_VALUE: i32 = 2;
/// MongoDB's `FailedToParse`.
const FAILED_TO_PARSE: i32 = 9;
/// MongoDB's `TypeMismatch`.
const TYPE_MISMATCH: i32 = 14;
/// MongoDB's `PathNotViable`.
const PATH_NOT_VIABLE: i32 = 28;
/// MongoDB's `ConflictingUpdateOperators`.
const CONFLICTING_UPDATE: i32 = 40;
/// MongoDB's `EmptyFieldName`.
const EMPTY_FIELD_NAME: i32 = 56;
/// MongoDB's `ImmutableField`.
const IMMUTABLE_FIELD: i32 = 66;
/// MongoDB's `DollarPrefixedFieldName`.
const DOLLAR_PREFIXED_FIELD_NAME: i32 = 52;

/// Largest array index a path may create: anything beyond would pad the
/// array past the 16 MiB document limit anyway.
const MAX_PAD_INDEX: usize = 8 * 1024 * 1024;

/// Applies the MongoDB update document `update` to `doc`, all or nothing.
///
/// `now` is the time `$currentDate` writes. `inserting` says whether the
/// update is creating the document (an upsert that matched nothing), which
/// is when `$setOnInsert` applies.
///
/// The update is checked as a whole first (operator names, argument types,
/// conflicting paths); errors that depend on the stored data (a type
/// mismatch, an overflow, a change of `_id`) are found while applying. Either
/// way, on error `doc` is left exactly as it was.
///
/// ```
/// use bson::{doc, DateTime};
/// use tandem::query::update::apply_update;
///
/// let mut d = doc! { "_id": 1, "balance": 100 };
/// let update = doc! { "$inc": { "balance": -30 }, "$push": { "pending": "t1" } };
/// apply_update(&mut d, &update, DateTime::now(), false).unwrap();
/// assert_eq!(d, doc! { "_id": 1, "balance": 70, "pending": ["t1"] });
///
/// // A failing operator leaves the document untouched, even after others applied.
/// let bad = doc! { "$set": { "balance": 0 }, "$push": { "_id": 2 } };
/// assert!(apply_update(&mut d, &bad, DateTime::now(), false).is_err());
/// assert_eq!(d, doc! { "_id": 1, "balance": 70, "pending": ["t1"] });
/// ```
pub fn apply_update(
    doc: &mut Document,
    update: &Document,
    now: DateTime,
    inserting: bool,
) -> Result<(), StoreError> {
    let mut undo = UndoLog::default();
    let result = apply_logged(doc, update, now, inserting, &mut undo);
    if result.is_err() {
        undo.rollback(doc);
    }
    result
}

/// Applies `update` in place, recording in `undo` what it takes to restore
/// `doc`. On error the caller must roll back (`doc` may be half updated).
pub(crate) fn apply_logged<'u>(
    doc: &mut Document,
    update: &'u Document,
    now: DateTime,
    inserting: bool,
    undo: &mut UndoLog<'u>,
) -> Result<(), StoreError> {
    let touches_id = validate_update(update)?;
    let original_id = if touches_id {
        doc.get("_id").cloned()
    } else {
        None
    };
    for (op, spec) in update {
        let Bson::Document(spec) = spec else {
            continue;
        };
        if op == "$setOnInsert" && !inserting {
            continue;
        }
        for (path, value) in spec {
            apply_one(doc, op, path, Arg::Borrowed(value), now, undo)?;
        }
    }
    check_id_kept(doc, original_id)
}

/// [`apply_logged`], moving the values the update writes out of `update`
/// instead of cloning them: for a caller that drops the update afterwards
/// (it may be left partly emptied).
pub(crate) fn apply_logged_taking<'u>(
    doc: &mut Document,
    update: &'u mut Document,
    now: DateTime,
    inserting: bool,
    undo: &mut UndoLog<'u>,
) -> Result<(), StoreError> {
    let touches_id = validate_update(update)?;
    let original_id = if touches_id {
        doc.get("_id").cloned()
    } else {
        None
    };
    for (op, spec) in update.iter_mut() {
        let Bson::Document(spec) = spec else {
            continue;
        };
        if op == "$setOnInsert" && !inserting {
            continue;
        }
        for (path, value) in spec.iter_mut() {
            apply_one(doc, op, path, Arg::Taken(value), now, undo)?;
        }
    }
    check_id_kept(doc, original_id)
}

/// An operator's argument: borrowed from an update the caller keeps, or
/// to be taken from one it drops.
enum Arg<'a> {
    Borrowed(&'a Bson),
    Taken(&'a mut Bson),
}

impl Arg<'_> {
    fn get(&self) -> &Bson {
        match self {
            Arg::Borrowed(v) => v,
            Arg::Taken(v) => v,
        }
    }

    fn into_value(self) -> Bson {
        match self {
            Arg::Borrowed(v) => v.clone(),
            Arg::Taken(v) => std::mem::replace(v, Bson::Null),
        }
    }
}

/// Applies operator `op` at `path`, logging it in `undo`.
fn apply_one<'u>(
    doc: &mut Document,
    op: &str,
    path: &'u str,
    value: Arg<'_>,
    now: DateTime,
    undo: &mut UndoLog<'u>,
) -> Result<(), StoreError> {
    let kind = match op {
        "$unset" => OpKind::Unset,
        // A `$slice` may drop earlier elements: the whole array is saved.
        "$push" if slice_of(value.get()).is_some() => OpKind::Write,
        "$push" | "$addToSet" => OpKind::Append,
        "$pull" => OpKind::Pull,
        _ => OpKind::Write,
    };
    undo.save(doc, path, kind);
    match op {
        "$set" | "$setOnInsert" => set_value(doc, path, value.into_value())?,
        "$unset" => unset(doc, path),
        "$inc" => inc(doc, path, value.get())?,
        "$push" => push(doc, path, value, false)?,
        "$addToSet" => push(doc, path, value, true)?,
        "$pull" => pull(doc, path, value.get(), undo.pulled())?,
        "$currentDate" => set_value(doc, path, current_date(value.get(), now))?,
        _ => {}
    }
    undo.measure(doc);
    Ok(())
}

/// Applies `update` to a document being created by an upsert, which the
/// caller drops on error: no undo is kept, and values are moved out of
/// `update` rather than cloned. Otherwise the same as [`apply_update`] with
/// `inserting`.
pub(crate) fn apply_to_new(
    doc: &mut Document,
    update: Document,
    now: DateTime,
) -> Result<(), StoreError> {
    let touches_id = validate_update(&update)?;
    let original_id = if touches_id {
        doc.get("_id").cloned()
    } else {
        None
    };
    for (op, spec) in update {
        let Bson::Document(spec) = spec else {
            continue;
        };
        for (path, mut value) in spec {
            match op.as_str() {
                // A top-level field: the key is moved too.
                "$set" | "$setOnInsert" if !path.contains('.') => match doc.get_mut(&path) {
                    Some(slot) => *slot = value,
                    None => {
                        doc.insert(path, value);
                    }
                },
                "$set" | "$setOnInsert" => set_value(doc, &path, value)?,
                "$unset" => unset(doc, &path),
                "$inc" => inc(doc, &path, &value)?,
                "$push" => push(doc, &path, Arg::Taken(&mut value), false)?,
                "$addToSet" => push(doc, &path, Arg::Taken(&mut value), true)?,
                "$pull" => pull(doc, &path, &value, None)?,
                "$currentDate" => set_value(doc, &path, current_date(&value, now))?,
                _ => {}
            }
        }
    }
    check_id_kept(doc, original_id)
}

/// Refuses a change of `_id` (`original` is the `_id` before an update
/// touching it, `None` if the update does not touch it).
fn check_id_kept(doc: &Document, original: Option<Bson>) -> Result<(), StoreError> {
    if let Some(original) = original {
        match doc.get("_id") {
            Some(id) if *id == original => {}
            Some(id) => {
                return Err(immutable_id(format!(
                    "After applying the update, the (immutable) field '_id' was found to have been altered to _id: {id}"
                )))
            }
            None => {
                return Err(immutable_id(
                    "After applying the update, the (immutable) field '_id' was found to have been removed",
                ))
            }
        }
    }
    Ok(())
}

/// What an operator may do to the value at its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    /// Replace or create it (`$set`, `$inc`, `$currentDate`, `$setOnInsert`).
    Write,
    /// Remove it (`$unset`).
    Unset,
    /// Append to the array there, or create it (`$push`, `$addToSet`).
    Append,
    /// Remove elements from the array there (`$pull`).
    Pull,
}

/// How to undo the operators of an update, one entry per operator path, and
/// what they changed: whether anything, and by how much the document's BSON
/// size changed. Each entry records only what its operator touches: the
/// previous value of the field it replaces, the length of the array it
/// appends to, the elements it pulls; never a whole array it merely grows.
#[derive(Debug, Default)]
pub(crate) struct UndoLog<'u> {
    entries: Vec<Entry<'u>>,
    /// Whether an operator changed a value (as `Bson`'s `==` tells).
    changed: bool,
    /// The change in the document's BSON size so far.
    size_delta: isize,
}

#[derive(Debug)]
struct Entry<'u> {
    /// The operator's path.
    path: &'u str,
    undo: Undo<'u>,
}

#[derive(Debug)]
enum Undo<'u> {
    /// The operator could not change anything (or failed before changing anything).
    Nothing,
    /// The value at `at` (the operator's path, or the prefix of it that the
    /// operator creates) before the operator replaced, created or removed it.
    Value {
        at: &'u str,
        /// The previous value; `None` if there was none.
        old: Option<Bson>,
        /// The field's previous position in its document, kept when the
        /// operator removes it.
        index: Option<usize>,
    },
    /// The array at `at` had `len` elements; the operator may append to it.
    Appended { at: &'u str, len: usize },
    /// The array at `at` had `len` elements, of which the operator removed
    /// `removed` (with their previous indexes, ascending).
    Pulled {
        at: &'u str,
        len: usize,
        removed: Vec<(usize, Bson)>,
    },
}

impl<'u> UndoLog<'u> {
    /// Records what the operator of `kind` at `path` is about to change in `doc`.
    fn save(&mut self, doc: &Document, path: &'u str, kind: OpKind) {
        let undo = match reach(doc, path) {
            Reach::Blocked => Undo::Nothing,
            Reach::MissingField { end } => match kind {
                // Only creating operators change anything below a missing field.
                OpKind::Write | OpKind::Append => Undo::Value {
                    at: &path[..end],
                    old: None,
                    index: None,
                },
                OpKind::Unset | OpKind::Pull => Undo::Nothing,
            },
            Reach::MissingElement { array_end, len } => match kind {
                OpKind::Write | OpKind::Append => Undo::Appended {
                    at: &path[..array_end],
                    len,
                },
                OpKind::Unset | OpKind::Pull => Undo::Nothing,
            },
            Reach::Parent(container, last_start) => {
                let last = &path[last_start..];
                let current = match container {
                    Container::Doc(d) => d.get(last),
                    Container::Arr(a) => match array_index(last) {
                        // Setting a new field on an array fails.
                        None => {
                            self.push(path, Undo::Nothing);
                            return;
                        }
                        Some(i) if i >= a.len() => {
                            let undo = match kind {
                                OpKind::Write | OpKind::Append => Undo::Appended {
                                    at: &path[..last_start - 1],
                                    len: a.len(),
                                },
                                OpKind::Unset | OpKind::Pull => Undo::Nothing,
                            };
                            self.push(path, undo);
                            return;
                        }
                        Some(i) => Some(&a[i]),
                    },
                };
                match (kind, current) {
                    (OpKind::Append, Some(Bson::Array(a))) => Undo::Appended {
                        at: path,
                        len: a.len(),
                    },
                    (OpKind::Pull, Some(Bson::Array(a))) => Undo::Pulled {
                        at: path,
                        len: a.len(),
                        removed: Vec::new(),
                    },
                    // A type mismatch: the operator fails without changing anything.
                    (OpKind::Append | OpKind::Pull, Some(_)) => Undo::Nothing,
                    (OpKind::Pull | OpKind::Unset, None) => Undo::Nothing,
                    (OpKind::Unset, Some(old)) => Undo::Value {
                        at: path,
                        old: Some(old.clone()),
                        index: match container {
                            Container::Doc(d) => d.keys().position(|k| k == last),
                            Container::Arr(_) => None,
                        },
                    },
                    (OpKind::Write | OpKind::Append, current) => Undo::Value {
                        at: path,
                        old: current.cloned(),
                        index: None,
                    },
                }
            }
        };
        self.push(path, undo);
    }

    fn push(&mut self, path: &'u str, undo: Undo<'u>) {
        self.entries.push(Entry { path, undo });
    }

    /// Where the `$pull` just saved collects the elements it removes.
    fn pulled(&mut self) -> Option<&mut Vec<(usize, Bson)>> {
        match self.entries.last_mut() {
            Some(Entry {
                undo: Undo::Pulled { removed, .. },
                ..
            }) => Some(removed),
            _ => None,
        }
    }

    /// Notes what the operator just saved and applied changed in `doc`.
    fn measure(&mut self, doc: &Document) {
        let Some(entry) = self.entries.last() else {
            return;
        };
        let (changed, delta) = match &entry.undo {
            Undo::Nothing => (false, 0),
            Undo::Value { at, old, .. } => {
                let new = lookup(doc, at);
                let changed = new != old.as_ref();
                let delta = match (old, new) {
                    (Some(old), Some(new)) => {
                        size::value_len(new) as isize - size::value_len(old) as isize
                    }
                    // A new field of a document (new array elements are `Appended`).
                    (None, Some(new)) => {
                        (2 + last_segment(at).len() + size::value_len(new)) as isize
                    }
                    (Some(old), None) => {
                        -((2 + last_segment(at).len() + size::value_len(old)) as isize)
                    }
                    (None, None) => 0,
                };
                (changed, delta)
            }
            Undo::Appended { at, len } => match lookup(doc, at) {
                Some(Bson::Array(a)) if a.len() > *len => {
                    let added: usize = a[*len..]
                        .iter()
                        .enumerate()
                        .map(|(i, e)| size::array_element_len(len + i, e))
                        .sum();
                    (true, added as isize)
                }
                _ => (false, 0),
            },
            Undo::Pulled { len, removed, .. } => {
                let values: usize = removed.iter().map(|(_, e)| 2 + size::value_len(e)).sum();
                let keys = size::key_digits(*len) - size::key_digits(len - removed.len());
                (!removed.is_empty(), -((values + keys) as isize))
            }
        };
        self.changed |= changed;
        self.size_delta += delta;
    }

    /// How much the operators applied so far changed the document's BSON size.
    pub(crate) fn size_delta(&self) -> isize {
        self.size_delta
    }

    /// Whether `doc` differs from what it was when the changes were saved,
    /// as comparing each top-level field touched with `Bson`'s `==` tells (so
    /// a touched field holding a NaN counts as changed, the NaN being unequal
    /// to itself).
    pub(crate) fn changed(&self, doc: &Document) -> bool {
        self.changed
            || self.entries.iter().any(|e| {
                let key = split_dot(e.path).map_or(e.path, |(first, _)| first);
                doc.get(key).is_some_and(contains_nan)
            })
    }

    /// Restores `doc` as it was, field order included.
    pub(crate) fn rollback(self, doc: &mut Document) {
        // In reverse: each entry then sees the document as its operator left it.
        for entry in self.entries.into_iter().rev() {
            match entry.undo {
                Undo::Nothing => {}
                Undo::Value { at, old, index } => restore(doc, at, old, index),
                Undo::Appended { at, len } => {
                    if let Some(Bson::Array(a)) = lookup_mut(doc, at) {
                        a.truncate(len);
                    }
                }
                Undo::Pulled { at, removed, .. } => {
                    if removed.is_empty() {
                        continue;
                    }
                    if let Some(Bson::Array(a)) = lookup_mut(doc, at) {
                        let kept = std::mem::take(a);
                        let mut kept = kept.into_iter();
                        let mut merged = Vec::with_capacity(kept.len() + removed.len());
                        for (i, e) in removed {
                            while merged.len() < i {
                                match kept.next() {
                                    Some(k) => merged.push(k),
                                    None => break,
                                }
                            }
                            merged.push(e);
                        }
                        merged.extend(kept);
                        *a = merged;
                    }
                }
            }
        }
    }
}

/// Puts `old` back at path `at` of `doc` (removes what is there if `None`).
fn restore(doc: &mut Document, at: &str, old: Option<Bson>, index: Option<usize>) {
    let Ok(Some((parent, last))) = parent(doc, at, false) else {
        return;
    };
    match (parent, old) {
        (Parent::Doc(d), None) => {
            d.remove(last);
        }
        (Parent::Doc(d), Some(old)) => match d.get_mut(last) {
            Some(slot) => *slot = old,
            // Removed by `$unset`: back to where it was.
            None => insert_at(d, index, last, old),
        },
        (Parent::Arr(a, _), old) => {
            if let Some(slot) = array_index(last).and_then(|i| a.get_mut(i)) {
                *slot = old.unwrap_or(Bson::Null);
            }
        }
    }
}

/// The last segment of a dotted path.
fn last_segment(path: &str) -> &str {
    path.rfind('.').map_or(path, |i| &path[i + 1..])
}

/// Whether `v` is or holds a Double NaN.
fn contains_nan(v: &Bson) -> bool {
    match v {
        Bson::Double(f) => f.is_nan(),
        Bson::Document(d) => d.values().any(contains_nan),
        Bson::Array(a) => a.iter().any(contains_nan),
        Bson::JavaScriptCodeWithScope(c) => c.scope.values().any(contains_nan),
        _ => false,
    }
}

/// The value at `path` of `doc`, as [`lookup`] finds it, mutably.
fn lookup_mut<'a>(doc: &'a mut Document, path: &str) -> Option<&'a mut Bson> {
    match parent(doc, path, false) {
        Ok(Some((Parent::Doc(d), last))) => d.get_mut(last),
        Ok(Some((Parent::Arr(a, _), last))) => a.get_mut(array_index(last)?),
        _ => None,
    }
}

/// A document or an array met on a path.
#[derive(Clone, Copy)]
enum Container<'d> {
    Doc(&'d Document),
    Arr(&'d [Bson]),
}

/// How far a path reaches into a document.
enum Reach<'d> {
    /// Every segment but the last exists: the container of the last, and
    /// where the last segment starts in the path.
    Parent(Container<'d>, usize),
    /// The segment ending at byte `end` of the path is missing from a document.
    MissingField { end: usize },
    /// A segment indexes past the end of the array (of `len` elements) whose
    /// path ends at byte `array_end`.
    MissingElement { array_end: usize, len: usize },
    /// The path runs through a scalar, or through an array by a non-numeric
    /// segment.
    Blocked,
}

/// Walks `path` in `doc` as [`parent`] does, without creating anything.
fn reach<'d>(doc: &'d Document, path: &str) -> Reach<'d> {
    let mut container = Container::Doc(doc);
    let mut start = 0;
    loop {
        let end = match path[start..].find('.') {
            None => return Reach::Parent(container, start),
            Some(i) => start + i,
        };
        let seg = &path[start..end];
        let child = match container {
            Container::Doc(d) => match d.get(seg) {
                Some(child) => child,
                None => return Reach::MissingField { end },
            },
            Container::Arr(a) => match array_index(seg) {
                None => return Reach::Blocked,
                Some(i) if i >= a.len() => {
                    return Reach::MissingElement {
                        array_end: start - 1,
                        len: a.len(),
                    }
                }
                Some(i) => &a[i],
            },
        };
        container = match child {
            Bson::Document(d) => Container::Doc(d),
            Bson::Array(a) => Container::Arr(a),
            _ => return Reach::Blocked,
        };
        start = end + 1;
    }
}

/// Inserts a field at position `index` (at the end if `None` or past it).
fn insert_at(doc: &mut Document, index: Option<usize>, key: &str, value: Bson) {
    let index = index.unwrap_or(usize::MAX);
    if index >= doc.len() {
        doc.insert(key, value);
        return;
    }
    let mut rebuilt = Document::new();
    let mut field = Some((key, value));
    for (k, v) in std::mem::take(doc) {
        if rebuilt.len() == index {
            if let Some((key, value)) = field.take() {
                rebuilt.insert(key, value);
            }
        }
        rebuilt.insert(k, v);
    }
    *doc = rebuilt;
}

/// The document an upsert starts from when its filter matched nothing.
///
/// It holds the filter's equality conditions: plain `{field: value}` pairs
/// (including `_id`) and `{field: {$eq: value}}`, with dotted paths expanded
/// into sub-documents; the members of `$and` (and of a `$or` with a single
/// member) are walked. Other operators (`$ne`, `$exists`, `$gt`, ...)
/// contribute nothing. Equalities that collide (`{"a": 1, "a.b": 2}`, which
/// MongoDB refuses to upsert) are resolved best effort: an equality that
/// cannot be added to the seed so far is skipped.
///
/// ```
/// use bson::doc;
/// use tandem::query::update::upsert_seed;
///
/// let filter = doc! { "_id": "t1", "meta.owner": "alice", "state": { "$ne": "done" } };
/// assert_eq!(upsert_seed(&filter), doc! { "_id": "t1", "meta": { "owner": "alice" } });
/// ```
pub fn upsert_seed(filter: &Document) -> Document {
    let mut seed = Document::new();
    seed_from(&mut seed, filter);
    seed
}

fn seed_from(seed: &mut Document, filter: &Document) {
    for (key, value) in filter {
        match key.as_str() {
            "$and" => {
                for member in value.as_array().into_iter().flatten() {
                    if let Bson::Document(member) = member {
                        seed_from(seed, member);
                    }
                }
            }
            "$or" => {
                if let Some([Bson::Document(member)]) = value.as_array().map(Vec::as_slice) {
                    seed_from(seed, member);
                }
            }
            k if k.starts_with('$') => {}
            path => {
                let equal_to = match value {
                    Bson::Document(ops) if is_operator_doc(ops) => ops.get("$eq"),
                    Bson::RegularExpression(_) => None,
                    v => Some(v),
                };
                if let Some(v) = equal_to {
                    if valid_path(path).is_ok() {
                        // Best effort: a conflicting equality is skipped.
                        let _ = set_value(seed, path, v.clone());
                    }
                }
            }
        }
    }
}

/// Checks a replacement document (for `replaceOne`): it must not contain
/// update operators, i.e. no top-level key may start with `$`.
///
/// ```
/// use bson::doc;
/// use tandem::query::update::validate_replacement;
///
/// assert!(validate_replacement(&doc! { "state": "done" }).is_ok());
/// assert!(validate_replacement(&doc! { "$set": { "state": "done" } }).is_err());
/// ```
pub fn validate_replacement(doc: &Document) -> Result<(), StoreError> {
    match doc.keys().find(|k| k.starts_with('$')) {
        None => Ok(()),
        Some(key) => Err(StoreError::new(
            StoreErrorKind::BadRequest,
            format!(
                "The dollar ($) prefixed field '{key}' in '{key}' is not allowed in a replacement document"
            ),
        )
        .with_code(DOLLAR_PREFIXED_FIELD_NAME)),
    }
}

// ---------------------------------------------------------------------------
// Validation of the update as a whole.

/// Checks an update document without applying it: the checks
/// [`apply_update`] makes before touching the document.
pub(crate) fn check_update(update: &Document) -> Result<(), StoreError> {
    validate_update(update).map(|_| ())
}

fn bad_request(code: i32, message: impl Into<String>) -> StoreError {
    StoreError::new(StoreErrorKind::BadRequest, message).with_code(code)
}

fn immutable_id(message: impl Into<String>) -> StoreError {
    bad_request(IMMUTABLE_FIELD, message)
}

fn type_mismatch(code: i32, message: impl Into<String>) -> StoreError {
    StoreError::new(StoreErrorKind::TypeMismatch, message).with_code(code)
}

/// Checks operators, their arguments and their paths; returns whether any
/// path touches `_id`.
fn validate_update(update: &Document) -> Result<bool, StoreError> {
    if update.is_empty() {
        return Err(bad_request(
            FAILED_TO_PARSE,
            "Update document requires atomic operators",
        ));
    }
    for (op, spec) in update {
        if !op.starts_with('$') {
            return Err(bad_request(
                FAILED_TO_PARSE,
                format!("Update document requires atomic operators, found field '{op}'"),
            ));
        }
        if !matches!(
            op.as_str(),
            "$set"
                | "$unset"
                | "$inc"
                | "$push"
                | "$addToSet"
                | "$pull"
                | "$currentDate"
                | "$setOnInsert"
        ) {
            return Err(bad_request(
                FAILED_TO_PARSE,
                format!("Unknown modifier: {op}. Expected a valid update modifier"),
            ));
        }
        let Bson::Document(spec) = spec else {
            return Err(bad_request(
                FAILED_TO_PARSE,
                format!(
                    "Modifiers operate on fields but we found type {} instead. For example: {{$mod: {{<field>: ...}}}} not {{{op}: {spec}}}",
                    type_name(spec)
                ),
            ));
        };
        for (path, value) in spec {
            valid_path(path)?;
            validate_argument(op, path, value)?;
        }
    }
    // Every pair of paths, across operators. Updates are small: the paths
    // live on the stack unless there are many.
    let mut inline = [""; 8];
    let mut count = 0;
    let mut spilled: Vec<&str> = Vec::new();
    for path in update
        .values()
        .filter_map(Bson::as_document)
        .flat_map(Document::keys)
    {
        if count < inline.len() {
            inline[count] = path;
            count += 1;
        } else {
            if spilled.is_empty() {
                spilled.extend_from_slice(&inline);
            }
            spilled.push(path);
        }
    }
    let paths: &[&str] = if spilled.is_empty() {
        &inline[..count]
    } else {
        &spilled
    };
    let mut touches_id = false;
    for (i, a) in paths.iter().enumerate() {
        touches_id |= *a == "_id" || a.starts_with("_id.");
        for b in &paths[i + 1..] {
            let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
            if long.starts_with(short)
                && (long.len() == short.len() || long.as_bytes()[short.len()] == b'.')
            {
                return Err(bad_request(
                    CONFLICTING_UPDATE,
                    format!("Updating the path '{long}' would create a conflict at '{short}'"),
                ));
            }
        }
    }
    Ok(touches_id)
}

fn valid_path(path: &str) -> Result<(), StoreError> {
    if path.is_empty() {
        return Err(bad_request(
            EMPTY_FIELD_NAME,
            "An empty update path is not valid.",
        ));
    }
    let bytes = path.as_bytes();
    let mut segment_start = true;
    for &b in bytes {
        match b {
            b'.' if segment_start => {
                return Err(bad_request(
                    EMPTY_FIELD_NAME,
                    format!("The update path '{path}' contains an empty field name, which is not allowed."),
                ))
            }
            b'$' if segment_start => {
                return Err(bad_request(
                    BAD_VALUE,
                    format!("The update path '{path}' uses a positional or '$'-prefixed field, which is not supported"),
                ))
            }
            _ => {}
        }
        segment_start = b == b'.';
    }
    if segment_start {
        return Err(bad_request(
            EMPTY_FIELD_NAME,
            format!("The update path '{path}' contains an empty field name, which is not allowed."),
        ));
    }
    Ok(())
}

fn validate_argument(op: &str, path: &str, value: &Bson) -> Result<(), StoreError> {
    match op {
        "$inc" => match value {
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) => Ok(()),
            Bson::Decimal128(_) => Err(bad_request(
                BAD_VALUE,
                format!("Cannot increment '{path}' by a Decimal128: not supported"),
            )),
            _ => Err(bad_request(
                TYPE_MISMATCH,
                format!("Cannot increment with non-numeric argument: {{{path}: {value}}}"),
            )),
        },
        "$push" | "$addToSet" => match value {
            Bson::Document(d) if is_operator_doc(d) => {
                for (modifier, arg) in d {
                    match (modifier.as_str(), arg) {
                        ("$each", Bson::Array(_)) => {}
                        ("$slice", Bson::Int32(_) | Bson::Int64(_)) if op == "$push" => {}
                        ("$each", _) => {
                            return Err(bad_request(
                                BAD_VALUE,
                                format!(
                                    "The argument to $each in {op} must be an array but it was of type: {}",
                                    type_name(arg)
                                ),
                            ))
                        }
                        _ => {
                            return Err(bad_request(
                                BAD_VALUE,
                                format!("{op} modifier {modifier} on '{path}' is not supported"),
                            ))
                        }
                    }
                }
                if d.contains_key("$each") {
                    Ok(())
                } else {
                    Err(bad_request(BAD_VALUE, format!("{op} on '{path}' is missing $each")))
                }
            }
            _ => Ok(()),
        },
        "$pull" => match value {
            Bson::Document(d) if is_operator_doc(d) => super::validate_operators(d),
            Bson::Document(d) => super::validate_pull_filter(d),
            Bson::RegularExpression(_) => Err(bad_request(
                BAD_VALUE,
                format!("$pull with a regular expression on '{path}' is not supported"),
            )),
            _ => Ok(()),
        },
        "$currentDate" => match value {
            Bson::Boolean(_) => Ok(()),
            Bson::Document(d)
                if d.len() == 1
                    && matches!(d.get("$type"), Some(Bson::String(t)) if t == "date" || t == "timestamp") =>
            {
                Ok(())
            }
            _ => Err(bad_request(
                BAD_VALUE,
                format!(
                    "{} is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({{$type: 'timestamp/date'}}).",
                    type_name(value)
                ),
            )),
        },
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// Paths.

/// Where the last segment of a path lives.
enum Parent<'a, 'p> {
    Doc(&'a mut Document),
    /// An array, and the name of the field holding it.
    Arr(&'a mut Vec<Bson>, &'p str),
}

/// Walks `path` down to the container of its last segment, returning it and
/// that segment. With `create`, missing intermediate fields become empty
/// sub-documents (and arrays are padded with nulls); without, a missing
/// intermediate yields `None`. A path through a scalar is an error when
/// creating, `None` otherwise.
fn parent<'a, 'p>(
    doc: &'a mut Document,
    path: &'p str,
    create: bool,
) -> Result<Option<(Parent<'a, 'p>, &'p str)>, StoreError> {
    match split_dot(path) {
        None => Ok(Some((Parent::Doc(doc), path))),
        Some((seg, rest)) => {
            if !doc.contains_key(seg) {
                if !create {
                    return Ok(None);
                }
                doc.insert(seg, Document::new());
            }
            match doc.get_mut(seg) {
                Some(child) => parent_in(child, seg, rest, create),
                None => Ok(None),
            }
        }
    }
}

fn parent_in<'a, 'p>(
    value: &'a mut Bson,
    name: &'p str,
    path: &'p str,
    create: bool,
) -> Result<Option<(Parent<'a, 'p>, &'p str)>, StoreError> {
    match value {
        Bson::Document(d) => parent(d, path, create),
        Bson::Array(a) => {
            let Some((seg, rest)) = split_dot(path) else {
                return Ok(Some((Parent::Arr(a, name), path)));
            };
            let Some(i) = array_index(seg) else {
                return if create {
                    Err(cannot_create(seg, name, &Bson::Array(a.clone())))
                } else {
                    Ok(None)
                };
            };
            if i >= a.len() {
                if !create {
                    return Ok(None);
                }
                pad(a, i)?;
                a[i] = Bson::Document(Document::new());
            }
            parent_in(&mut a[i], seg, rest, create)
        }
        other => {
            if create {
                let seg = split_dot(path).map_or(path, |(seg, _)| seg);
                Err(cannot_create(seg, name, other))
            } else {
                Ok(None)
            }
        }
    }
}

fn cannot_create(field: &str, name: &str, element: &Bson) -> StoreError {
    type_mismatch(
        PATH_NOT_VIABLE,
        format!("Cannot create field '{field}' in element {{{name}: {element}}}"),
    )
}

/// Grows `a` with nulls so that index `i` exists.
fn pad(a: &mut Vec<Bson>, i: usize) -> Result<(), StoreError> {
    if i > MAX_PAD_INDEX {
        return Err(StoreError::new(
            StoreErrorKind::DocumentTooLarge,
            format!("array index {i} would make the document exceed the 16 MiB limit"),
        )
        .with_code(10334));
    }
    if i >= a.len() {
        a.resize(i + 1, Bson::Null);
    }
    Ok(())
}

fn leaf_mut<'a>(parent: &'a mut Parent<'_, '_>, last: &str) -> Option<&'a mut Bson> {
    match parent {
        Parent::Doc(d) => d.get_mut(last),
        Parent::Arr(a, _) => a.get_mut(array_index(last)?),
    }
}

fn put_leaf(parent: Parent<'_, '_>, last: &str, value: Bson) -> Result<(), StoreError> {
    match parent {
        Parent::Doc(d) => {
            // Replacing in place spares allocating the key again.
            match d.get_mut(last) {
                Some(slot) => *slot = value,
                None => {
                    d.insert(last, value);
                }
            }
            Ok(())
        }
        Parent::Arr(a, name) => match array_index(last) {
            Some(i) => {
                pad(a, i)?;
                a[i] = value;
                Ok(())
            }
            None => Err(cannot_create(last, name, &Bson::Array(a.clone()))),
        },
    }
}

fn set_value(doc: &mut Document, path: &str, value: Bson) -> Result<(), StoreError> {
    if let Some((parent, last)) = parent(doc, path, true)? {
        put_leaf(parent, last, value)?;
    }
    Ok(())
}

fn unset(doc: &mut Document, path: &str) {
    if let Ok(Some((parent, last))) = parent(doc, path, false) {
        match parent {
            Parent::Doc(d) => {
                d.remove(last);
            }
            Parent::Arr(a, _) => {
                // MongoDB leaves a null in place of an unset array element.
                if let Some(e) = array_index(last).and_then(|i| a.get_mut(i)) {
                    *e = Bson::Null;
                }
            }
        }
    }
}

fn id_of(doc: &Document) -> String {
    match doc.get("_id") {
        Some(id) => format!("{{_id: {id}}}"),
        None => "{}".to_owned(),
    }
}

/// Why an `$inc` failed, before the message (which names the document) is built.
enum IncFailure {
    Overflow(Bson),
    Decimal,
    NonNumeric(&'static str),
}

fn inc(doc: &mut Document, path: &str, by: &Bson) -> Result<(), StoreError> {
    let failure = {
        let Some((mut parent, last)) = parent(doc, path, true)? else {
            return Ok(());
        };
        match leaf_mut(&mut parent, last) {
            Some(current) => match add(current, by) {
                Ok(sum) => {
                    *current = sum;
                    return Ok(());
                }
                Err(failure) => failure,
            },
            None => return put_leaf(parent, last, by.clone()),
        }
    };
    let id = id_of(doc);
    Err(match failure {
        IncFailure::Overflow(current) => StoreError::new(
            StoreErrorKind::Overflow,
            format!(
                "Failed to apply $inc operations to current value ({current}) for document {id}: the field '{path}' would overflow a 64-bit integer"
            ),
        )
        .with_code(BAD_VALUE),
        IncFailure::Decimal => bad_request(
            BAD_VALUE,
            format!("Cannot apply $inc to the Decimal128 field '{path}' in document {id}: not supported"),
        ),
        IncFailure::NonNumeric(ty) => type_mismatch(
            TYPE_MISMATCH,
            format!(
                "Cannot apply $inc to a value of non-numeric type. {id} has the field '{path}' of non-numeric type {ty}"
            ),
        ),
    })
}

/// `current + by` with MongoDB's promotions: Int32 overflowing becomes
/// Int64, integers mixed with a Double become a Double.
fn add(current: &Bson, by: &Bson) -> Result<Bson, IncFailure> {
    Ok(match (current, by) {
        (Bson::Int32(a), Bson::Int32(b)) => match a.checked_add(*b) {
            Some(sum) => Bson::Int32(sum),
            None => Bson::Int64(i64::from(*a) + i64::from(*b)),
        },
        (Bson::Int32(_) | Bson::Int64(_), Bson::Int32(_) | Bson::Int64(_)) => Bson::Int64(
            as_i64(current)
                .checked_add(as_i64(by))
                .ok_or_else(|| IncFailure::Overflow(current.clone()))?,
        ),
        (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_), _) => {
            Bson::Double(as_f64(current) + as_f64(by))
        }
        (Bson::Decimal128(_), _) => return Err(IncFailure::Decimal),
        _ => return Err(IncFailure::NonNumeric(type_name(current))),
    })
}

fn as_i64(v: &Bson) -> i64 {
    match v {
        Bson::Int32(i) => i64::from(*i),
        Bson::Int64(i) => *i,
        _ => 0,
    }
}

fn as_f64(v: &Bson) -> f64 {
    match v {
        Bson::Int32(i) => f64::from(*i),
        Bson::Int64(i) => *i as f64,
        Bson::Double(f) => *f,
        _ => 0.0,
    }
}

/// The `$slice` of a `$push` with modifiers, if any.
fn slice_of(value: &Bson) -> Option<i64> {
    match value {
        Bson::Document(d) if is_operator_doc(d) => match d.get("$slice") {
            Some(Bson::Int32(n)) => Some(i64::from(*n)),
            Some(Bson::Int64(n)) => Some(*n),
            _ => None,
        },
        _ => None,
    }
}

/// Keeps the first `n` elements of `array` (`n >= 0`), or the last `-n`.
fn slice(array: &mut Vec<Bson>, n: i64) {
    let keep = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
    if array.len() <= keep {
        return;
    }
    if n >= 0 {
        array.truncate(keep);
    } else {
        array.drain(..array.len() - keep);
    }
}

fn push(doc: &mut Document, path: &str, value: Arg<'_>, as_set: bool) -> Result<(), StoreError> {
    let limit = if as_set { None } else { slice_of(value.get()) };
    let items = match value {
        Arg::Borrowed(value) => Items::Borrowed(match value {
            Bson::Document(d) if is_operator_doc(d) => match d.get("$each") {
                Some(Bson::Array(each)) => each,
                _ => &[],
            },
            v => std::slice::from_ref(v),
        }),
        Arg::Taken(value) => Items::Taken(match value {
            Bson::Document(d) if is_operator_doc(d) => match d.get_mut("$each") {
                Some(Bson::Array(each)) => each,
                _ => &mut [],
            },
            v => std::slice::from_mut(v),
        }),
    };
    let found = {
        let Some((mut parent, last)) = parent(doc, path, true)? else {
            return Ok(());
        };
        match leaf_mut(&mut parent, last) {
            Some(Bson::Array(array)) => {
                append(array, items, as_set);
                if let Some(n) = limit {
                    slice(array, n);
                }
                return Ok(());
            }
            Some(other) => type_name(other),
            None => {
                let mut array = Vec::with_capacity(items.len());
                append(&mut array, items, as_set);
                if let Some(n) = limit {
                    slice(&mut array, n);
                }
                return put_leaf(parent, last, Bson::Array(array));
            }
        }
    };
    let op = if as_set { "$addToSet" } else { "$push" };
    Err(type_mismatch(
        BAD_VALUE,
        format!(
            "Cannot apply {op} to a non-array field. The field '{path}' must be an array but is of type {found} in document {}",
            id_of(doc)
        ),
    ))
}

/// The values a `$push` or `$addToSet` appends.
enum Items<'a> {
    Borrowed(&'a [Bson]),
    /// To be moved out (leaving nulls).
    Taken(&'a mut [Bson]),
}

impl Items<'_> {
    fn len(&self) -> usize {
        match self {
            Items::Borrowed(items) => items.len(),
            Items::Taken(items) => items.len(),
        }
    }
}

fn append(array: &mut Vec<Bson>, items: Items<'_>, as_set: bool) {
    let new = |array: &Vec<Bson>, item: &Bson| {
        !as_set || !array.iter().any(|e| super::values_equal(e, item))
    };
    match items {
        Items::Borrowed(items) => {
            for item in items {
                if new(array, item) {
                    array.push(item.clone());
                }
            }
        }
        Items::Taken(items) => {
            for item in items {
                if new(array, item) {
                    array.push(std::mem::replace(item, Bson::Null));
                }
            }
        }
    }
}

/// Removes the elements of the array at `path` that `cond` selects; when
/// `removed` is given, moves them there with their previous indexes.
fn pull(
    doc: &mut Document,
    path: &str,
    cond: &Bson,
    removed: Option<&mut Vec<(usize, Bson)>>,
) -> Result<(), StoreError> {
    let found = {
        let Some((mut parent, last)) = parent(doc, path, false)? else {
            return Ok(());
        };
        match leaf_mut(&mut parent, last) {
            None => return Ok(()),
            Some(Bson::Array(array)) => {
                match removed {
                    Some(removed) => take_matching(array, cond, removed),
                    None => array.retain(|e| !pull_matches(e, cond)),
                }
                return Ok(());
            }
            Some(other) => type_name(other),
        }
    };
    Err(type_mismatch(
        BAD_VALUE,
        format!(
            "Cannot apply $pull to a non-array value: the field '{path}' is of type {found} in document {}",
            id_of(doc)
        ),
    ))
}

/// Moves the elements of `array` that `cond` selects to `removed`, with
/// their indexes, keeping the order of the others.
fn take_matching(array: &mut Vec<Bson>, cond: &Bson, removed: &mut Vec<(usize, Bson)>) {
    let mut kept = 0;
    for i in 0..array.len() {
        if pull_matches(&array[i], cond) {
            removed.push((i, std::mem::replace(&mut array[i], Bson::Null)));
        } else {
            array.swap(kept, i);
            kept += 1;
        }
    }
    array.truncate(kept);
}

/// Whether `$pull`'s condition selects `element`.
fn pull_matches(element: &Bson, cond: &Bson) -> bool {
    match cond {
        Bson::Document(ops) if is_operator_doc(ops) => super::eval_operators_on(element, ops),
        Bson::Document(filter) => match element {
            Bson::Document(e) => super::eval(e, filter),
            _ => false,
        },
        value => super::values_equal(element, value),
    }
}

fn current_date(spec: &Bson, now: DateTime) -> Bson {
    match spec {
        Bson::Document(d) if matches!(d.get("$type"), Some(Bson::String(t)) if t == "timestamp") => {
            let millis = now.timestamp_millis();
            Bson::Timestamp(Timestamp {
                time: u32::try_from(millis.div_euclid(1000)).unwrap_or(0),
                increment: 1,
            })
        }
        _ => Bson::DateTime(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn now() -> DateTime {
        DateTime::from_millis(1_704_067_200_000)
    }

    fn upd(mut d: Document, u: Document) -> Document {
        apply_update(&mut d, &u, now(), false).unwrap();
        d
    }

    fn fail(mut d: Document, u: Document) -> StoreError {
        apply_update(&mut d, &u, now(), false).unwrap_err()
    }

    #[test]
    fn set_and_dotted_paths_create_subdocuments() {
        let d = upd(
            doc! { "_id": 1, "a": 1 },
            doc! { "$set": { "a": 2, "b": "x" } },
        );
        assert_eq!(d, doc! { "_id": 1, "a": 2, "b": "x" });
        let d = upd(doc! { "_id": 1 }, doc! { "$set": { "x.y.z": 1 } });
        assert_eq!(d, doc! { "_id": 1, "x": { "y": { "z": 1 } } });
        let d = upd(
            doc! { "_id": 1, "x": { "k": 0 } },
            doc! { "$set": { "x.y": 1 } },
        );
        assert_eq!(d, doc! { "_id": 1, "x": { "k": 0, "y": 1 } });
        // Existing fields keep their position.
        let d = upd(doc! { "a": 1, "b": 2 }, doc! { "$set": { "a": 3 } });
        assert_eq!(d.keys().collect::<Vec<_>>(), vec!["a", "b"]);
    }

    #[test]
    fn set_array_elements() {
        let d = upd(doc! { "l": [1, 2, 3] }, doc! { "$set": { "l.1": 20 } });
        assert_eq!(d, doc! { "l": [1, 20, 3] });
        let d = upd(doc! { "l": [1] }, doc! { "$set": { "l.3": 4 } });
        assert_eq!(d, doc! { "l": [1, Bson::Null, Bson::Null, 4] });
        let d = upd(
            doc! { "l": [ { "a": 1 } ] },
            doc! { "$set": { "l.0.b": 2, "l.2.c": 3 } },
        );
        assert_eq!(
            d,
            doc! { "l": [ { "a": 1, "b": 2 }, Bson::Null, { "c": 3 } ] }
        );
        // A field name cannot be created inside an array.
        let e = fail(doc! { "l": [1] }, doc! { "$set": { "l.x": 1 } });
        assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
        assert_eq!(e.code, Some(28));
        let e = fail(doc! { "l": [1] }, doc! { "$set": { "l.x.y": 1 } });
        assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
        assert!(
            e.message.contains("Cannot create field 'x'"),
            "{}",
            e.message
        );
    }

    #[test]
    fn set_through_a_scalar_fails() {
        let e = fail(doc! { "_id": 1, "a": 5 }, doc! { "$set": { "a.b": 1 } });
        assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
        assert_eq!(e.code, Some(28));
        assert!(
            e.message
                .contains("Cannot create field 'b' in element {a: 5}"),
            "{}",
            e.message
        );
    }

    #[test]
    fn unset() {
        let d = upd(
            doc! { "a": 1, "b": { "c": 1, "d": 2 }, "l": [1, 2] },
            doc! { "$unset": { "a": "", "b.c": 1, "l.0": true, "zz": "", "q.r": "" } },
        );
        assert_eq!(d, doc! { "b": { "d": 2 }, "l": [Bson::Null, 2] });
        // Nothing is created by $unset.
        let d = upd(doc! { "a": 1 }, doc! { "$unset": { "x.y": "" } });
        assert_eq!(d, doc! { "a": 1 });
    }

    #[test]
    fn inc_numbers() {
        let d = upd(
            doc! { "a": 1, "b": 1_i64, "c": 1.5 },
            doc! { "$inc": { "a": 2, "b": 2, "c": 1 } },
        );
        assert_eq!(d, doc! { "a": 3, "b": 3_i64, "c": 2.5 });
        // Missing fields start from the increment, through new sub-documents.
        let d = upd(doc! {}, doc! { "$inc": { "n": -5, "x.y": 2_i64 } });
        assert_eq!(d, doc! { "n": -5, "x": { "y": 2_i64 } });
        // Mixed types promote.
        let d = upd(
            doc! { "a": 1, "b": 1, "c": 1_i64 },
            doc! { "$inc": { "a": 1_i64, "b": 0.5, "c": 1 } },
        );
        assert_eq!(d, doc! { "a": 2_i64, "b": 1.5, "c": 2_i64 });
        let d = upd(doc! { "a": 1.5 }, doc! { "$inc": { "a": 1_i64 } });
        assert_eq!(d, doc! { "a": 2.5 });
        // In arrays.
        let d = upd(doc! { "l": [1, 2] }, doc! { "$inc": { "l.1": 10 } });
        assert_eq!(d, doc! { "l": [1, 12] });
    }

    #[test]
    fn inc_overflow() {
        let d = upd(doc! { "a": i32::MAX }, doc! { "$inc": { "a": 1 } });
        assert_eq!(d, doc! { "a": i64::from(i32::MAX) + 1 });
        let d = upd(doc! { "a": i32::MIN }, doc! { "$inc": { "a": -1 } });
        assert_eq!(d, doc! { "a": i64::from(i32::MIN) - 1 });
        let e = fail(
            doc! { "_id": 7, "a": i64::MAX },
            doc! { "$inc": { "a": 1 } },
        );
        assert_eq!(e.kind, StoreErrorKind::Overflow);
        assert!(e.message.contains("'a'"), "{}", e.message);
        let e = fail(doc! { "a": i64::MIN }, doc! { "$inc": { "a": -1_i64 } });
        assert_eq!(e.kind, StoreErrorKind::Overflow);
    }

    #[test]
    fn inc_type_mismatch() {
        let e = fail(
            doc! { "_id": 1, "balance": "1000" },
            doc! { "$inc": { "balance": 5 } },
        );
        assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
        assert_eq!(e.code, Some(14));
        assert!(
            e.message
                .contains("Cannot apply $inc to a value of non-numeric type"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("'balance'") && e.message.contains("string"),
            "{}",
            e.message
        );
        let e = fail(doc! { "n": Bson::Null }, doc! { "$inc": { "n": 1 } });
        assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
        // A non-numeric argument is a malformed update.
        let e = fail(doc! { "n": 1 }, doc! { "$inc": { "n": "1" } });
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
    }

    #[test]
    fn push_with_slice_keeps_the_last_or_first_elements() {
        let d = upd(
            doc! { "l": [1, 2, 3] },
            doc! { "$push": { "l": { "$each": [4, 5], "$slice": -3 } } },
        );
        assert_eq!(d, doc! { "l": [3, 4, 5] });
        let d = upd(
            doc! { "l": [1, 2, 3] },
            doc! { "$push": { "l": { "$each": [4], "$slice": 2_i64 } } },
        );
        assert_eq!(d, doc! { "l": [1, 2] });
        let d = upd(
            doc! {},
            doc! { "$push": { "l": { "$each": [1, 2], "$slice": -1 } } },
        );
        assert_eq!(d, doc! { "l": [2] });
        let d = upd(
            doc! { "l": [1] },
            doc! { "$push": { "l": { "$each": [2], "$slice": 0 } } },
        );
        assert_eq!(d, doc! { "l": [] });
    }

    #[tokio::test]
    async fn a_failed_update_with_slice_leaves_the_array_as_it_was() {
        use crate::store::Store;
        let store = crate::MemoryStore::new();
        let ns = crate::Namespace::new("db", "c");
        store
            .insert_one(&ns, doc! { "_id": 1, "l": [1, 2, 3], "n": "text" })
            .await
            .unwrap();
        let err = store
            .update_one(
                &ns,
                doc! { "_id": 1 },
                doc! { "$push": { "l": { "$each": [4], "$slice": -2 } }, "$inc": { "n": 1 } },
                false,
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind, StoreErrorKind::TypeMismatch);
        let d = store
            .find_one(&ns, doc! { "_id": 1 })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d, doc! { "_id": 1, "l": [1, 2, 3], "n": "text" });
    }

    #[test]
    fn push_and_add_to_set() {
        let d = upd(
            doc! { "l": [1] },
            doc! { "$push": { "l": 1, "m": "x", "n.o": 2 } },
        );
        assert_eq!(d, doc! { "l": [1, 1], "m": ["x"], "n": { "o": [2] } });
        let d = upd(
            doc! { "l": [1] },
            doc! { "$push": { "l": { "$each": [2, 3] } } },
        );
        assert_eq!(d, doc! { "l": [1, 2, 3] });
        let d = upd(doc! { "l": [1] }, doc! { "$push": { "l": [2] } });
        assert_eq!(d, doc! { "l": [1, [2]] });
        let d = upd(
            doc! { "l": [1, "a"] },
            doc! { "$addToSet": { "l": 1.0, "m": "x" } },
        );
        assert_eq!(d, doc! { "l": [1, "a"], "m": ["x"] });
        let d = upd(
            doc! { "l": [1] },
            doc! { "$addToSet": { "l": { "$each": [1, 2, 2, 3] } } },
        );
        assert_eq!(d, doc! { "l": [1, 2, 3] });
        let d = upd(doc! {}, doc! { "$addToSet": { "l": { "$each": [4, 4] } } });
        assert_eq!(d, doc! { "l": [4] });
        let d = upd(
            doc! { "l": [ { "a": 1 } ] },
            doc! { "$addToSet": { "l": { "a": 1 } } },
        );
        assert_eq!(d, doc! { "l": [ { "a": 1 } ] });

        for op in ["$push", "$addToSet"] {
            let e = fail(doc! { "_id": 1, "l": 5 }, doc! { op: { "l": 1 } });
            assert_eq!(e.kind, StoreErrorKind::TypeMismatch, "{op}");
            assert!(
                e.message.contains("'l'") && e.message.contains("int"),
                "{}",
                e.message
            );
        }
        let e = fail(
            doc! {},
            doc! { "$push": { "l": { "$each": [1], "$slice": "2" } } },
        );
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        let e = fail(
            doc! {},
            doc! { "$addToSet": { "l": { "$each": [1], "$slice": 2 } } },
        );
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        let e = fail(doc! {}, doc! { "$push": { "l": { "$each": 1 } } });
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
    }

    #[test]
    fn pull() {
        let d = upd(
            doc! { "l": ["t1", "t2", "t1"] },
            doc! { "$pull": { "l": "t1" } },
        );
        assert_eq!(d, doc! { "l": ["t2"] });
        let d = upd(doc! { "l": [1, 2.0, 3] }, doc! { "$pull": { "l": 2 } });
        assert_eq!(d, doc! { "l": [1, 3] });
        let d = upd(
            doc! { "l": [1, 2, 3, 4] },
            doc! { "$pull": { "l": { "$in": [1, 3] } } },
        );
        assert_eq!(d, doc! { "l": [2, 4] });
        let d = upd(
            doc! { "l": [1, 5, 7] },
            doc! { "$pull": { "l": { "$gte": 5 } } },
        );
        assert_eq!(d, doc! { "l": [1] });
        let d = upd(
            doc! { "l": [ { "id": "t1", "n": 1 }, { "id": "t2" }, "t1" ] },
            doc! { "$pull": { "l": { "id": "t1" } } },
        );
        assert_eq!(d, doc! { "l": [ { "id": "t2" }, "t1" ] });
        let d = upd(doc! { "l": [[1], [2]] }, doc! { "$pull": { "l": [1] } });
        assert_eq!(d, doc! { "l": [[2]] });
        // Missing fields are left alone.
        let d = upd(doc! { "a": 1 }, doc! { "$pull": { "l": 1, "x.y": 1 } });
        assert_eq!(d, doc! { "a": 1 });
        let d = upd(
            doc! { "n": { "l": [1, 2] } },
            doc! { "$pull": { "n.l": 2 } },
        );
        assert_eq!(d, doc! { "n": { "l": [1] } });
        let e = fail(doc! { "l": "t1" }, doc! { "$pull": { "l": "t1" } });
        assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
    }

    #[test]
    fn current_date_and_set_on_insert() {
        let d = upd(
            doc! {},
            doc! { "$currentDate": { "at": true, "m.t": { "$type": "date" } } },
        );
        assert_eq!(d, doc! { "at": now(), "m": { "t": now() } });
        let d = upd(
            doc! {},
            doc! { "$currentDate": { "ts": { "$type": "timestamp" } } },
        );
        assert_eq!(
            d,
            doc! { "ts": Timestamp { time: 1_704_067_200, increment: 1 } }
        );
        let e = fail(doc! {}, doc! { "$currentDate": { "at": 1 } });
        assert_eq!(e.kind, StoreErrorKind::BadRequest);

        let u = doc! { "$setOnInsert": { "created": 1, "x.y": 2 }, "$set": { "s": 1 } };
        let d = upd(doc! { "_id": 1 }, u.clone());
        assert_eq!(d, doc! { "_id": 1, "s": 1 });
        let mut d = doc! { "_id": 1 };
        apply_update(&mut d, &u, now(), true).unwrap();
        assert_eq!(d, doc! { "_id": 1, "created": 1, "x": { "y": 2 }, "s": 1 });
    }

    #[test]
    fn malformed_updates() {
        let d = doc! { "_id": 1, "a": 1 };
        for u in [
            doc! {},
            doc! { "a": 1 },
            doc! { "$set": { "a": 1 }, "b": 2 },
            doc! { "$rename": { "a": "b" } },
            doc! { "$set": 1 },
            doc! { "$set": { "": 1 } },
            doc! { "$set": { "a..b": 1 } },
            doc! { "$set": { "l.$": 1 } },
        ] {
            let e = fail(d.clone(), u.clone());
            assert_eq!(e.kind, StoreErrorKind::BadRequest, "{u}");
        }
        let mut untouched = d.clone();
        assert!(apply_update(
            &mut untouched,
            &doc! { "$set": { "x": 1 }, "$foo": { "y": 1 } },
            now(),
            false
        )
        .is_err());
        assert_eq!(untouched, d);
        let e = fail(d.clone(), doc! { "$rename": { "a": "b" } });
        assert!(e.message.contains("$rename"), "{}", e.message);
    }

    #[test]
    fn failed_updates_leave_the_document_unchanged() {
        let original = doc! { "_id": 1, "a": 1, "b": { "c": 1 }, "c": true, "l": [1], "s": "x" };
        let keys = |d: &Document| d.keys().cloned().collect::<Vec<_>>();
        for u in [
            doc! {
                "$unset": { "a": "", "c": "" },
                "$set": { "b.d": 2, "n.m": 1 },
                "$push": { "l": 2 },
                "$currentDate": { "at": true },
                "$inc": { "s": 1 },
            },
            doc! { "$unset": { "_id": "" }, "$set": { "z": 1 } },
            doc! { "$set": { "a": 5, "_id": 2 } },
            doc! { "$unset": { "l": "" }, "$set": { "b.c.x": 1 } },
            doc! { "$inc": { "a": 1 }, "$pull": { "s": 1 } },
        ] {
            let mut d = original.clone();
            assert!(apply_update(&mut d, &u, now(), false).is_err(), "{u}");
            assert_eq!(d, original, "{u}");
            assert_eq!(keys(&d), keys(&original), "{u}");
        }
    }

    #[test]
    fn undo_log_tracks_changes() {
        let original = doc! { "_id": 1, "a": 1, "l": [1, 2] };
        let changed = |u: Document| {
            let mut d = original.clone();
            let mut undo = UndoLog::default();
            apply_logged(&mut d, &u, now(), false, &mut undo).unwrap();
            let changed = undo.changed(&d);
            undo.rollback(&mut d);
            assert_eq!(d, original);
            assert_eq!(
                d.keys().collect::<Vec<_>>(),
                original.keys().collect::<Vec<_>>()
            );
            changed
        };
        assert!(!changed(doc! { "$set": { "a": 1 } }));
        assert!(!changed(doc! { "$pull": { "l": 3 } }));
        assert!(!changed(doc! { "$addToSet": { "l": 2 } }));
        assert!(!changed(doc! { "$unset": { "zz": "" } }));
        assert!(!changed(doc! { "$inc": { "a": 0 } }));
        assert!(changed(doc! { "$set": { "a": 1.0 } }));
        assert!(changed(doc! { "$pull": { "l": 1 } }));
        assert!(changed(doc! { "$unset": { "a": "" } }));
        assert!(changed(doc! { "$set": { "x.y": 1 } }));
    }

    #[test]
    fn conflicting_paths() {
        let d = doc! { "_id": 1 };
        for u in [
            doc! { "$set": { "a": 1 }, "$inc": { "a": 1 } },
            doc! { "$set": { "a": 1 }, "$unset": { "a.b": "" } },
            doc! { "$set": { "a.b": 1, "a": { "c": 1 } } },
            doc! { "$push": { "l": 1 }, "$pull": { "l": 2 } },
            doc! { "$setOnInsert": { "x.y": 1 }, "$set": { "x": 1 } },
        ] {
            let e = fail(d.clone(), u.clone());
            assert_eq!(e.kind, StoreErrorKind::BadRequest, "{u}");
            assert_eq!(e.code, Some(40), "{u}");
            assert!(e.message.contains("conflict"), "{}", e.message);
        }
        // Also among many paths.
        let mut many = Document::new();
        for i in 0..12 {
            many.insert(format!("f{i}"), i);
        }
        many.insert("f3.x", 1);
        let e = fail(d.clone(), doc! { "$set": many });
        assert_eq!(e.code, Some(40));
        assert!(e.message.contains("'f3'"), "{}", e.message);
        // Siblings sharing a prefix do not conflict.
        let ok = upd(
            d.clone(),
            doc! { "$set": { "a.b": 1, "a.bc": 2 }, "$inc": { "ab": 1 } },
        );
        assert_eq!(ok, doc! { "_id": 1, "a": { "b": 1, "bc": 2 }, "ab": 1 });
    }

    #[test]
    fn id_is_immutable() {
        let d = doc! { "_id": 1, "a": 1 };
        for u in [
            doc! { "$set": { "_id": 2 } },
            doc! { "$unset": { "_id": "" } },
            doc! { "$inc": { "_id": 1 } },
        ] {
            let e = fail(d.clone(), u.clone());
            assert_eq!(e.kind, StoreErrorKind::BadRequest, "{u}");
            assert_eq!(e.code, Some(66), "{u}");
        }
        let e = fail(doc! { "_id": { "k": 1 } }, doc! { "$set": { "_id.k": 2 } });
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        // Setting it to the same value is allowed, and so is setting it on a new document.
        assert_eq!(
            upd(d.clone(), doc! { "$set": { "_id": 1, "a": 2 } }),
            doc! { "_id": 1, "a": 2 }
        );
        assert_eq!(
            upd(doc! {}, doc! { "$set": { "_id": 5 } }),
            doc! { "_id": 5 }
        );
    }

    #[test]
    fn upsert_seeds() {
        assert_eq!(upsert_seed(&doc! {}), doc! {});
        assert_eq!(
            upsert_seed(&doc! { "_id": "t1", "state": "initial", "n": { "$eq": 5 } }),
            doc! { "_id": "t1", "state": "initial", "n": 5 }
        );
        assert_eq!(
            upsert_seed(&doc! {
                "a.b": 1,
                "a.c": { "d": 2 },
                "x": { "$ne": 1 },
                "y": { "$exists": false },
                "z": { "$gt": 1, "$eq": 3 },
                "$and": [ { "p": 1 }, { "q.r": { "$eq": "s" } }, { "t": { "$lt": 1 } } ],
                "$or": [ { "o": 1 }, { "o": 2 } ],
            }),
            doc! { "a": { "b": 1, "c": { "d": 2 } }, "z": 3, "p": 1, "q": { "r": "s" } }
        );
        assert_eq!(
            upsert_seed(&doc! { "$or": [ { "o": 1 } ] }),
            doc! { "o": 1 }
        );
        // Colliding equalities: what cannot be added is skipped.
        assert_eq!(upsert_seed(&doc! { "a": 1, "a.b": 2 }), doc! { "a": 1 });
    }

    #[test]
    fn upsert_applies_update_to_seed() {
        let mut d = upsert_seed(&doc! { "_id": "acct", "owner": "bob" });
        apply_update(
            &mut d,
            &doc! { "$inc": { "balance": 10 }, "$setOnInsert": { "created": true } },
            now(),
            true,
        )
        .unwrap();
        assert_eq!(
            d,
            doc! { "_id": "acct", "owner": "bob", "balance": 10, "created": true }
        );
        // Changing the seeded _id is refused.
        let mut d = upsert_seed(&doc! { "_id": 1 });
        let e = apply_update(&mut d, &doc! { "$set": { "_id": 2 } }, now(), true).unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
    }

    #[test]
    fn replacements() {
        assert!(validate_replacement(&doc! { "a": 1, "b": { "$x": 1 } }).is_ok());
        let e = validate_replacement(&doc! { "a": 1, "$set": { "a": 2 } }).unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        assert!(e.message.contains("$set"), "{}", e.message);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn value() -> impl Strategy<Value = Bson> {
            prop_oneof![
                (-3..3i32).prop_map(Bson::Int32),
                Just(Bson::Int64(i64::MAX)),
                Just(Bson::Double(0.5)),
                "[a-c]".prop_map(Bson::String),
                proptest::collection::vec((0..3i32).prop_map(Bson::Int32), 0..3)
                    .prop_map(Bson::Array),
                (0..3i32).prop_map(|x| Bson::Document(doc! { "x": x })),
            ]
        }

        fn document() -> impl Strategy<Value = Document> {
            proptest::collection::vec((prop_oneof!["a", "b", "c", "l"], value()), 0..5).prop_map(
                |fields| {
                    let mut d = doc! { "_id": 1 };
                    for (k, v) in fields {
                        d.insert(k, v);
                    }
                    d
                },
            )
        }

        fn update() -> impl Strategy<Value = Document> {
            let op = prop_oneof![
                Just("$set"),
                Just("$unset"),
                Just("$inc"),
                Just("$push"),
                Just("$addToSet"),
                Just("$pull"),
                Just("$currentDate"),
            ];
            let path = prop_oneof![
                Just("a"),
                Just("b"),
                Just("c"),
                Just("l"),
                Just("a.x"),
                Just("b.x"),
                Just("l.0"),
                Just("l.3"),
                Just("_id"),
                Just("n.m"),
            ];
            proptest::collection::vec((op, path, value()), 1..5).prop_map(|ops| {
                let mut u = Document::new();
                for (op, path, value) in ops {
                    let value = match op {
                        "$inc" => Bson::Int32(1),
                        "$currentDate" => Bson::Boolean(true),
                        _ => value,
                    };
                    if !u.contains_key(op) {
                        u.insert(op, Document::new());
                    }
                    if let Some(Bson::Document(spec)) = u.get_mut(op) {
                        spec.insert(path, value);
                    }
                }
                u
            })
        }

        fn keys(d: &Document) -> Vec<String> {
            d.keys().cloned().collect()
        }

        proptest! {
            #[test]
            fn updates_are_all_or_nothing(original in document(), u in update()) {
                let mut d = original.clone();
                match apply_update(&mut d, &u, now(), false) {
                    Err(_) => {
                        prop_assert_eq!(&d, &original);
                        prop_assert_eq!(keys(&d), keys(&original));
                    }
                    Ok(()) => {
                        let mut logged = original.clone();
                        let mut undo = UndoLog::default();
                        apply_logged(&mut logged, &u, now(), false, &mut undo).unwrap();
                        prop_assert_eq!(&logged, &d);
                        prop_assert_eq!(undo.changed(&logged), logged != original);
                        prop_assert_eq!(
                            size::document_len(&original) as isize + undo.size_delta(),
                            size::document_len(&logged) as isize
                        );
                        undo.rollback(&mut logged);
                        prop_assert_eq!(&logged, &original);
                        prop_assert_eq!(keys(&logged), keys(&original));
                    }
                }
            }
        }

        /// Values for deeper documents: nested documents, arrays of
        /// documents, arrays longer than ten elements, NaN.
        fn deep_value() -> impl Strategy<Value = Bson> {
            let leaf = prop_oneof![
                (-3..3i32).prop_map(Bson::Int32),
                Just(Bson::Int64(7)),
                Just(Bson::Double(f64::NAN)),
                Just(Bson::Double(-0.0)),
                Just(Bson::Null),
                "[a-c]{0,3}".prop_map(Bson::String),
            ];
            leaf.prop_recursive(3, 40, 12, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..13).prop_map(Bson::Array),
                    proptest::collection::vec((prop_oneof!["x", "y", "k"], inner), 0..4).prop_map(
                        |fields| {
                            let mut d = Document::new();
                            for (k, v) in fields {
                                d.insert(k, v);
                            }
                            Bson::Document(d)
                        }
                    ),
                ]
            })
        }

        fn deep_document() -> impl Strategy<Value = Document> {
            proptest::collection::vec((prop_oneof!["a", "b", "l", "d"], deep_value()), 0..5)
                .prop_map(|fields| {
                    let mut d = doc! { "_id": 1 };
                    for (k, v) in fields {
                        d.insert(k, v);
                    }
                    d
                })
        }

        fn deep_update() -> impl Strategy<Value = Document> {
            let op = prop_oneof![
                Just("$set"),
                Just("$unset"),
                Just("$inc"),
                Just("$push"),
                Just("$addToSet"),
                Just("$pull"),
                Just("$currentDate"),
                Just("$setOnInsert"),
            ];
            let path = prop_oneof![
                "[abld]",
                "[abld]\\.[xyk0-9]",
                "[abld]\\.(1[0-2]|[0-9])\\.[xyk0-9]",
                "[abld]\\.[xyk]\\.[xyk]",
                Just("l.12".to_owned()),
                Just("n.m.o".to_owned()),
            ];
            let value = prop_oneof![
                deep_value(),
                Just(Bson::Document(doc! { "$in": [1, "a", Bson::Null] })),
                Just(Bson::Document(doc! { "$gte": 0 })),
                Just(Bson::Document(doc! { "x": 1 })),
                Just(Bson::Document(doc! { "$each": [1, 1, "b", [2]] })),
            ];
            proptest::collection::vec((op, path, value), 1..6).prop_map(|ops| {
                let mut u = Document::new();
                for (op, path, value) in ops {
                    let value = match op {
                        "$inc" => Bson::Int32(1),
                        "$currentDate" => Bson::Boolean(true),
                        _ => value,
                    };
                    if !u.contains_key(op) {
                        u.insert(op, Document::new());
                    }
                    if let Some(Bson::Document(spec)) = u.get_mut(op) {
                        spec.insert(path, value);
                    }
                }
                u
            })
        }

        /// Whether a top-level field that `u` touches differs (with `Bson`'s
        /// `==`) between `before` and `after`.
        fn touched_field_differs(
            before: &Document,
            after: &Document,
            u: &Document,
            inserting: bool,
        ) -> bool {
            u.iter()
                .filter(|(op, _)| inserting || op.as_str() != "$setOnInsert")
                .filter_map(|(_, spec)| spec.as_document())
                .flat_map(Document::keys)
                .any(|path| {
                    let key = split_dot(path).map_or(path.as_str(), |(first, _)| first);
                    before.get(key) != after.get(key)
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn the_undo_log_restores_measures_and_detects_changes(
                original in deep_document(),
                u in deep_update(),
                inserting in any::<bool>(),
            ) {
                let mut d = original.clone();
                let mut undo = UndoLog::default();
                match apply_logged(&mut d, &u, now(), inserting, &mut undo) {
                    Err(_) => {}
                    Ok(()) => {
                        prop_assert_eq!(
                            undo.changed(&d),
                            touched_field_differs(&original, &d, &u, inserting)
                        );
                        let measured = size::document_len(&original) as isize + undo.size_delta();
                        prop_assert_eq!(measured, bson::to_vec(&d).unwrap().len() as isize);
                        // Taking the values out of the update gives the same result.
                        let mut taken = original.clone();
                        let mut emptied = u.clone();
                        let mut undo_taking = UndoLog::default();
                        apply_logged_taking(&mut taken, &mut emptied, now(), inserting, &mut undo_taking).unwrap();
                        prop_assert_eq!(format!("{taken}"), format!("{d}"));
                        prop_assert_eq!(keys(&taken), keys(&d));
                        prop_assert_eq!(undo_taking.changed(&taken), undo.changed(&d));
                        prop_assert_eq!(undo_taking.size_delta(), undo.size_delta());
                        undo_taking.rollback(&mut taken);
                        prop_assert_eq!(format!("{taken}"), format!("{original}"));
                        // Applied to a new document, the update gives the same result.
                        if inserting {
                            let mut created = original.clone();
                            apply_to_new(&mut created, u.clone(), now()).unwrap();
                            prop_assert_eq!(keys(&created), keys(&d));
                            prop_assert_eq!(format!("{created}"), format!("{d}"));
                        }
                    }
                }
                undo.rollback(&mut d);
                prop_assert_eq!(format!("{d}"), format!("{original}"));
                prop_assert_eq!(keys(&d), keys(&original));
            }

            #[test]
            fn updates_of_new_documents_fail_as_logged_ones_do(
                original in deep_document(),
                u in deep_update(),
            ) {
                let mut logged = original.clone();
                let mut created = original.clone();
                let mut taken = original.clone();
                let a = apply_update(&mut logged, &u, now(), true);
                let b = apply_to_new(&mut created, u.clone(), now());
                let mut emptied = u.clone();
                let mut undo = UndoLog::default();
                let c = apply_logged_taking(&mut taken, &mut emptied, now(), true, &mut undo);
                let a = a.map_err(|e| (e.kind, e.code, e.message));
                prop_assert_eq!(&a, &b.map_err(|e| (e.kind, e.code, e.message)));
                prop_assert_eq!(&a, &c.map_err(|e| (e.kind, e.code, e.message)));
                undo.rollback(&mut taken);
                prop_assert_eq!(format!("{taken}"), format!("{original}"));
            }
        }
    }

    #[test]
    fn a_touched_field_holding_nan_counts_as_changed() {
        // As when comparing the field before and after: NaN is unequal to itself.
        let original = doc! { "_id": 1, "a": { "n": f64::NAN, "m": 1 }, "b": f64::NAN };
        for (u, changed) in [
            (doc! { "$set": { "a.m": 1 } }, true),
            (doc! { "$inc": { "a.m": 0 } }, true),
            (doc! { "$set": { "c": 1 } }, true),
            (doc! { "$unset": { "c": "" } }, false),
            (doc! { "$unset": { "b.x": "" } }, true),
            (doc! { "$pull": { "z": 1 } }, false),
        ] {
            let mut d = original.clone();
            let mut undo = UndoLog::default();
            apply_logged(&mut d, &u, now(), false, &mut undo).unwrap();
            assert_eq!(undo.changed(&d), changed, "{u}");
        }
    }

    #[test]
    fn sizes_follow_pulls_across_index_widths() {
        let list: Vec<Bson> = (0..25)
            .map(|i| Bson::String(format!("t{}", i % 4)))
            .collect();
        let original = doc! { "_id": 1, "l": list, "d": { "l": [1, 2, 1] } };
        for u in [
            doc! { "$pull": { "l": "t1" } },
            doc! { "$pull": { "l": { "$in": ["t0", "t3"] } }, "$push": { "d.l": { "$each": (0..12).collect::<Vec<i32>>() } } },
            doc! { "$pull": { "d.l": 1 }, "$addToSet": { "l": "t9" } },
            doc! { "$set": { "l.30": 1, "d.l.1": "x" } },
            doc! { "$unset": { "l.3": "", "d.l": "" } },
        ] {
            let mut d = original.clone();
            let mut undo = UndoLog::default();
            apply_logged(&mut d, &u, now(), false, &mut undo).unwrap();
            assert_eq!(
                size::document_len(&original) as isize + undo.size_delta(),
                bson::to_vec(&d).unwrap().len() as isize,
                "{u}"
            );
            undo.rollback(&mut d);
            assert_eq!(d, original, "{u}");
        }
    }
}
