//! MongoDB update operators applied in process to a [`bson::Document`].
//!
//! [`apply_update`] applies an update document such as
//! `{$set: {"state": "applied"}, $inc: {"balance": -30}}` the way MongoDB
//! would; [`upsert_seed`] builds the document an upsert starts from; and
//! [`validate_replacement`] checks a replacement document.
//!
//! # Supported
//!
//! * `$set`, `$unset`, `$inc`, `$max`, `$push`, `$addToSet`, `$pull`,
//!   `$currentDate` and `$setOnInsert` (applied only when the update inserts).
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
//! `$min`, `$mul`, `$rename`, `$pop`, `$pullAll`, `$bit`, positional
//! paths (`$`, `$[]`, `$[id]`), the `$push` modifiers `$slice`, `$sort` and
//! `$position`, pipeline updates, and `$inc` mixing a Decimal128 with a
//! double (MongoDB first converts the double to a decimal of 15 significant
//! digits). `$inc` of or by a Decimal128 with integers adds in decimal, as
//! MongoDB does (an integer field becomes a decimal).
//!
//! Paths are applied in MongoDB's order, whatever the order the update lists
//! them in: segment by segment, names compared as strings (as numbers when
//! both are all digits). New fields are appended in that order, so
//! `{$set: {b: 1, a: 1}}` on `{_id: 1}` gives `{_id: 1, a: 1, b: 1}`.
//!
//! [`StoreErrorKind::BadRequest`]: crate::store::StoreErrorKind::BadRequest
//! [`StoreErrorKind::TypeMismatch`]: crate::store::StoreErrorKind::TypeMismatch
//! [`StoreErrorKind::Overflow`]: crate::store::StoreErrorKind::Overflow

use bson::{Bson, DateTime, Document};

use super::depth::{check_path, check_push, check_set};
use super::is_operator_doc;
use crate::store::StoreError;
use ops::{current_date, each_len, inc, max, pull, push, slice_of};
use path::{listed_in_path_order, path_order, set_value, unset};
use undo::OpKind;
pub(crate) use undo::UndoLog;
pub use validate::validate_replacement;
use validate::{bad_request, immutable_id, valid_path, validate_update};
pub(crate) use validate::{check_update, check_update_touching_id};

mod ops;
mod path;
mod undo;
mod validate;

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
/// MongoDB's `NotSingleValueField`.
const NOT_SINGLE_VALUE_FIELD: i32 = 54;
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
/// (Run as the unit test `query::doc_examples::apply_update`: the module is internal.)
/// ```ignore
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
    let mut undo = UndoLog::with_capacity(path_count(update));
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
    apply_validated(doc, update, touches_id, now, inserting, undo)
}

/// [`apply_logged`] of an update already checked by
/// [`check_update_touching_id`], which answered `touches_id`: for a caller
/// applying one update to several documents, which checks it once.
pub(crate) fn apply_validated<'u>(
    doc: &mut Document,
    update: &'u Document,
    touches_id: bool,
    now: DateTime,
    inserting: bool,
    undo: &mut UndoLog<'u>,
) -> Result<(), StoreError> {
    let original_id = if touches_id {
        doc.get("_id").cloned()
    } else {
        None
    };
    if listed_in_path_order(update) {
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
    } else {
        let mut entries = entries(update, inserting);
        entries.sort_by(|a, b| path_order(a.1, b.1));
        for (op, path, value) in entries {
            apply_one(doc, op, path, Arg::Borrowed(value), now, undo)?;
        }
    }
    check_id_kept(doc, original_id)
}

/// How many paths the operator documents of `update` name: what its
/// entries and its undo log are sized for, so that they are allocated once.
pub(crate) fn path_count(update: &Document) -> usize {
    update
        .values()
        .filter_map(Bson::as_document)
        .map(Document::len)
        .sum()
}

/// The `(operator, path, argument)` entries of `update` that apply (those
/// of `$setOnInsert` only when `inserting`), in the order it lists them.
fn entries(update: &Document, inserting: bool) -> Vec<(&str, &str, &Bson)> {
    let mut entries = Vec::with_capacity(path_count(update));
    for (op, spec) in update {
        let Bson::Document(spec) = spec else {
            continue;
        };
        if op == "$setOnInsert" && !inserting {
            continue;
        }
        for (path, value) in spec {
            entries.push((op.as_str(), path.as_str(), value));
        }
    }
    entries
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
    apply_validated_taking(doc, update, touches_id, now, inserting, undo)
}

/// [`apply_logged_taking`] of an update already checked, as
/// [`apply_validated`].
pub(crate) fn apply_validated_taking<'u>(
    doc: &mut Document,
    update: &'u mut Document,
    touches_id: bool,
    now: DateTime,
    inserting: bool,
    undo: &mut UndoLog<'u>,
) -> Result<(), StoreError> {
    let original_id = if touches_id {
        doc.get("_id").cloned()
    } else {
        None
    };
    let ordered = listed_in_path_order(update);
    let mut entries = if ordered {
        Vec::new()
    } else {
        Vec::with_capacity(path_count(update))
    };
    for (op, spec) in update.iter_mut() {
        let Bson::Document(spec) = spec else {
            continue;
        };
        if op == "$setOnInsert" && !inserting {
            continue;
        }
        for (path, value) in spec.iter_mut() {
            if ordered {
                apply_one(doc, op, path, Arg::Taken(value), now, undo)?;
            } else {
                entries.push((op.as_str(), path.as_str(), value));
            }
        }
    }
    entries.sort_by(|a, b| path_order(a.1, b.1));
    for (op, path, value) in entries {
        apply_one(doc, op, path, Arg::Taken(value), now, undo)?;
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
        // A `$slice` may drop earlier elements: a negative one drops the
        // first, which are saved; any other, the whole array.
        "$push" => match slice_of(value.get()) {
            Some(n) if n < 0 => OpKind::SlicedAppend {
                pushed: each_len(value.get()),
                keep: usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX),
            },
            Some(_) => OpKind::Write,
            None => OpKind::Append,
        },
        "$addToSet" => OpKind::Append,
        "$pull" => OpKind::Pull,
        _ => OpKind::Write,
    };
    undo.save(doc, path, kind);
    // (Each write is checked for the depth it reaches before it is made;
    // the caller rolls back whatever came before.)
    match op {
        "$set" | "$setOnInsert" => {
            check_set(op, path, value.get())?;
            set_value(doc, path, value.into_value())?;
        }
        "$unset" => unset(doc, path),
        "$inc" => {
            check_path(op, path)?;
            inc(doc, path, value.get())?;
        }
        "$max" => {
            check_set(op, path, value.get())?;
            max(doc, path, value.into_value())?;
        }
        "$push" | "$addToSet" => {
            check_push(op, path, value.get())?;
            push(doc, path, value, op == "$addToSet")?;
        }
        "$pull" => pull(doc, path, value.get(), undo.pulled())?,
        "$currentDate" => {
            check_path(op, path)?;
            set_value(doc, path, current_date(value.get(), now))?;
        }
        _ => {}
    }
    undo.measure(doc);
    Ok(())
}

/// Applies `update` to a document being created by an upsert, which the
/// caller drops on error: no undo is kept, and values are moved out of
/// `update` rather than cloned. Otherwise the same as [`apply_update`] with
/// `inserting`, but for the depth of what it writes, which the caller
/// checks on the whole new document as it measures it.
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
    // In MongoDB's order, which decides the order of the new fields. Each
    // entry names its operator by its place in `ops`.
    let mut ops = Vec::with_capacity(update.len());
    let mut entries = Vec::with_capacity(path_count(&update));
    for (op, spec) in update {
        let Bson::Document(spec) = spec else {
            continue;
        };
        for (path, value) in spec {
            entries.push((ops.len(), path, value));
        }
        ops.push(op);
    }
    entries.sort_by(|a, b| path_order(&a.1, &b.1));
    // (The new document's depth is checked whole, as it is measured, by
    // the caller that stores it.)
    for (op, path, mut value) in entries {
        match ops[op].as_str() {
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
            "$max" => max(doc, &path, value)?,
            "$push" => push(doc, &path, Arg::Taken(&mut value), false)?,
            "$addToSet" => push(doc, &path, Arg::Taken(&mut value), true)?,
            "$pull" => pull(doc, &path, &value, None)?,
            "$currentDate" => set_value(doc, &path, current_date(&value, now))?,
            _ => {}
        }
    }
    check_id_kept(doc, original_id)
}

/// Refuses a change of `_id` (`original` is the `_id` before an update
/// touching it, `None` if the update does not touch it).
/// The `_id` after an update must compare equal to the one before, as
/// MongoDB compares values: a number of another type is the same `_id`
/// (`1` and `1.0`), a document with its fields in another order is not
/// (the bson crate's `==` would take it for the same, and the store would
/// then hold the document under a key its `_id` no longer has).
fn check_id_kept(doc: &Document, original: Option<Bson>) -> Result<(), StoreError> {
    if let Some(original) = original {
        match doc.get("_id") {
            Some(id) if crate::query::total_cmp(id, &original).is_eq() => {}
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

/// The document an upsert starts from when its filter matched nothing.
///
/// It holds the filter's equality conditions: plain `{field: value}` pairs
/// (including `_id`), `{field: {$eq: value}}` and `{field: {$in: [value]}}`
/// (an `$in` of one value, as MongoDB takes it), with dotted paths expanded
/// into sub-documents and added in path order (as new fields are, see the
/// module documentation); the members of `$and` (and of a `$or` with a single
/// member) are walked. Other operators (`$ne`, `$exists`, `$gt`, ...)
/// contribute nothing. Equalities that collide (`{"a": 1, "a.b": 2}`, which
/// MongoDB refuses to upsert) are resolved best effort: an equality that
/// cannot be added to the seed so far is skipped (the embedded store refuses
/// them, as MongoDB does).
///
/// (Run as the unit test `query::doc_examples::upsert_seed`: the module is internal.)
/// ```ignore
/// use bson::doc;
/// use tandem::query::update::upsert_seed;
///
/// let filter = doc! { "_id": "t1", "meta.owner": "alice", "state": { "$ne": "done" } };
/// assert_eq!(upsert_seed(&filter), doc! { "_id": "t1", "meta": { "owner": "alice" } });
/// ```
pub fn upsert_seed(filter: &Document) -> Document {
    let mut seed = Document::new();
    for (path, value) in seed_equalities(filter) {
        // Best effort: a conflicting equality is skipped.
        let _ = set_value(&mut seed, path, value.clone());
    }
    seed
}

/// [`upsert_seed`] as MongoDB builds it for an upsert that matched nothing:
/// an equality on a path that another equality names too, or names a
/// prefix of (`{$and: [{a: 1}, {a: 1}]}`, `{"a": 1, "a.b": 2}`), fails the
/// upsert with [`StoreErrorKind::BadRequest`] (code 54, NotSingleValueField).
///
/// [`StoreErrorKind::BadRequest`]: crate::store::StoreErrorKind::BadRequest
pub(crate) fn checked_upsert_seed(filter: &Document) -> Result<Document, StoreError> {
    let equalities = seed_equalities(filter);
    // In path order, a path's extensions come right after it.
    for pair in equalities.windows(2) {
        let (a, b) = (pair[0].0, pair[1].0);
        let message = if a == b {
            format!("cannot infer query fields to set, path '{a}' is matched twice")
        } else if b.strip_prefix(a).is_some_and(|rest| rest.starts_with('.')) {
            format!("cannot infer query fields to set, both paths '{b}' and '{a}' are matched")
        } else {
            continue;
        };
        return Err(bad_request(NOT_SINGLE_VALUE_FIELD, message));
    }
    Ok(upsert_seed(filter))
}

/// The equalities of `filter` an upsert seeds its document with, in path
/// order (MongoDB adds them so, whatever the order of the filter).
fn seed_equalities(filter: &Document) -> Vec<(&str, &Bson)> {
    let mut equalities = Vec::new();
    seed_from(&mut equalities, filter);
    equalities.sort_by(|a, b| path_order(a.0, b.0));
    equalities
}

/// Collects the equalities of `filter` an upsert seeds its document with.
fn seed_from<'f>(seed: &mut Vec<(&'f str, &'f Bson)>, filter: &'f Document) {
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
                    // MongoDB takes an `$in` of one value for an equality.
                    Bson::Document(ops) if is_operator_doc(ops) => {
                        ops.get("$eq").or_else(|| match ops.get("$in") {
                            Some(Bson::Array(values)) if values.len() == 1 => values.first(),
                            _ => None,
                        })
                    }
                    Bson::RegularExpression(_) => None,
                    v => Some(v),
                };
                if let Some(v) = equal_to {
                    if valid_path(path).is_ok() {
                        seed.push((path, v));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
