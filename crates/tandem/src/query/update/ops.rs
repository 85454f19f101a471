//! The operators that change values: `$inc`, `$max`, `$push` and
//! `$addToSet`, `$pull`, `$currentDate`.

use bson::{Bson, DateTime, Document, Timestamp};

use super::path::{leaf_mut, parent, put_leaf};
use super::validate::{bad_request, type_mismatch};
use super::{Arg, BAD_VALUE, TYPE_MISMATCH};
use crate::query::{self, decimal_arith, is_operator_doc, type_name};
use crate::store::{StoreError, StoreErrorKind};

fn id_of(doc: &Document) -> String {
    match doc.get("_id") {
        Some(id) => format!("{{_id: {id}}}"),
        None => "{}".to_owned(),
    }
}

/// Why an `$inc` failed, before the message (which names the document) is built.
enum IncFailure {
    Overflow(Bson),
    /// A double and a decimal: MongoDB converts the double to a decimal of
    /// 15 significant digits first, which this store does not do.
    DoubleAndDecimal(&'static str, &'static str),
    NonNumeric(&'static str),
}

pub(super) fn inc(doc: &mut Document, path: &str, by: &Bson) -> Result<(), StoreError> {
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
        IncFailure::DoubleAndDecimal(field, by) => bad_request(
            BAD_VALUE,
            format!(
                "Cannot apply $inc by a {by} to the field '{path}' of type {field} in document {id}: \
                 the embedded store does not add a double and a decimal"
            ),
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
/// Int64, integers mixed with a Double become a Double, integers mixed with
/// a Decimal128 become a Decimal128 (added in decimal, exactly as MongoDB
/// adds them).
fn add(current: &Bson, by: &Bson) -> Result<Bson, IncFailure> {
    if let Some(sum) = decimal_arith::add_numbers(current, by) {
        return Ok(Bson::Decimal128(sum));
    }
    Ok(match (current, by) {
        // `by` is a number: a double here.
        (Bson::Double(_), Bson::Decimal128(_)) | (Bson::Decimal128(_), _) => {
            return Err(IncFailure::DoubleAndDecimal(
                type_name(current),
                type_name(by),
            ))
        }
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
pub(super) fn slice_of(value: &Bson) -> Option<i64> {
    match value {
        Bson::Document(d) if is_operator_doc(d) => match d.get("$slice") {
            Some(Bson::Int32(n)) => Some(i64::from(*n)),
            Some(Bson::Int64(n)) => Some(*n),
            _ => None,
        },
        _ => None,
    }
}

/// The number of values a `$push` with modifiers appends (its `$each`).
pub(super) fn each_len(value: &Bson) -> usize {
    match value {
        Bson::Document(d) if is_operator_doc(d) => match d.get("$each") {
            Some(Bson::Array(each)) => each.len(),
            _ => 0,
        },
        _ => 1,
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

pub(super) fn push(
    doc: &mut Document,
    path: &str,
    value: Arg<'_>,
    as_set: bool,
) -> Result<(), StoreError> {
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
        !as_set || !array.iter().any(|e| query::values_equal(e, item))
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
pub(super) fn pull(
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
        Bson::Document(ops) if is_operator_doc(ops) => query::eval_operators_on(element, ops),
        Bson::Document(filter) => match element {
            Bson::Document(e) => query::eval(e, filter),
            _ => false,
        },
        value => query::values_equal(element, value),
    }
}

/// `$max`: sets `path` to `value` if the field is missing or `value`
/// compares greater than it (by MongoDB's order of values).
pub(super) fn max(doc: &mut Document, path: &str, value: Bson) -> Result<(), StoreError> {
    match query::lookup(doc, path) {
        Some(current) if !query::total_cmp(&value, current).is_gt() => Ok(()),
        _ => super::path::set_value(doc, path, value),
    }
}

pub(super) fn current_date(spec: &Bson, now: DateTime) -> Bson {
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
