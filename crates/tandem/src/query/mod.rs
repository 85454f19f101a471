//! MongoDB query filters evaluated in process, over [`bson::Document`]s.
//!
//! [`matches()`] decides whether a document matches a MongoDB filter, with the
//! same answer MongoDB would give for the subset the protocol uses. It backs the
//! embedded [`MemoryStore`](crate::MemoryStore), and is also handy for
//! diagnosing why a guarded update matched nothing: fetch the document, then
//! test the filter (or each of its clauses) against it, and [`lookup`] the
//! fields it guards.
//!
//! # Supported
//!
//! * Plain equality `{a: v}`, also on dotted paths such as `{"a.b": v}` and
//!   `{"list.0": v}`. A numeric path segment indexes an array (the element
//!   it names last is compared whole: `{"a.0": 5}` does not match
//!   `{a: [[5]]}`), and also names that field of each document element
//!   (`{"m.0": "x"}` matches `{m: [{"0": "x"}]}`); any other segment met at
//!   an array of documents descends into every element, and the clause
//!   matches if any element does. When the value found is an array,
//!   equality holds if the array equals `v` or contains `v`.
//!   `{a: null}` matches documents where `a` is null or missing.
//! * Field operators `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`, `$in`, `$nin`,
//!   `$exists`, `$type` (a type's name such as `"double"` or `"string"`, the
//!   alias `"number"`, or a list of them; not the numeric codes) and `$not`
//!   (of an operator document). Several operators in one operator document
//!   are ANDed.
//!   `$ne` and `$nin` are the negations of `$eq` and `$in`: on an array field
//!   `{$ne: v}` holds iff no element equals `v` and the array itself is not `v`;
//!   it also holds when the field is missing.
//! * Top-level `$and`, `$or` and `$nor`, whose members are filters.
//! * Top-level `$expr` (also inside `$and`, `$or` and `$nor` members) with a
//!   subset of the aggregation expressions, enough for deadline fencing such
//!   as `{$expr: {$lt: [{$toLong: "$$NOW"}, 1735689600000]}}`:
//!   - the comparisons `$lt`, `$lte`, `$gt`, `$gte`, `$eq` and `$ne`, each of
//!     exactly two operands. Unlike the field operators above they compare
//!     across type brackets, by MongoDB's order of brackets (so a number is
//!     below any string, and a missing field is below null);
//!   - `$and` and `$or` of expressions, each value counting as true unless it
//!     is false, null, missing or a numeric zero;
//!   - `$toLong` of a number (a double is truncated), a date (its
//!     milliseconds since the epoch), a boolean or a base-10 string; null or
//!     missing gives null. Anything else, or a double that is not finite or
//!     out of range, fails the operation (code 241, `ConversionFailure`), as
//!     on MongoDB;
//!   - `$add` of numbers, and of one date with numbers (milliseconds): null
//!     if an operand is null or missing; with a decimal, integers and
//!     decimals add in decimal as MongoDB adds them (see below); a decimal
//!     with a double or a date is refused;
//!   - `$subtract` of two numbers, two dates, or a date and a number of
//!     milliseconds; with a decimal, as `$add`;
//!   - `$cond` of three operands (`[if, then, else]`), `$isArray` and
//!     `$isNumber` (true for an int, a long, a double or a decimal) of one, and
//!     `$arrayElemAt` of an array and an integral index (from the end if
//!     negative; missing past either end; null for a null or missing
//!     operand; anything else fails, codes 28689 and 28690, as on MongoDB);
//!   - field paths `"$a.b"`, with MongoDB's aggregation semantics (a path
//!     through an array of documents yields the array of the values found,
//!     and a numeric segment names a field, not an element);
//!   - `$let: {vars: {x: expr}, in: expr}`, and its variables inside `in`,
//!     with or without a path (`"$$x"`, `"$$x.a"`);
//!   - `$bsonSize` of a document: its size in bytes as BSON (null for null
//!     or missing; anything else fails, code 31393, as on MongoDB);
//!   - the variable `"$$NOW"`, a date. [`matches()`] reads the system clock
//!     for it, [`matches_at`] takes it from the caller, and the
//!     [`MemoryStore`](crate::MemoryStore) reads its own clock once per call;
//!   - the variable `"$$ROOT"`, the document itself (with or without a path);
//!   - literals: any value other than a string starting with `$`, a document
//!     or an array; and any value at all as `{$literal: v}`.
//!
//! Values compare as MongoDB compares them: within a *type bracket* only
//! ([`compare`]). Int32, Int64 and Double are one bracket and compare
//! numerically across types, so `Int32(1)`, `Int64(1)` and `Double(1.0)` are
//! equal; strings compare with strings (bytewise, i.e. the simple collation),
//! dates with dates, booleans with booleans, ObjectIds with ObjectIds. A range
//! comparison across brackets is false: `{balance: {$gte: 100}}` does not
//! match `{balance: "1000"}`, except against MinKey and MaxKey, which bound
//! every value (`{v: {$lt: MaxKey}}` matches any `v`). NaN equals NaN but
//! lies in no range: `$lt` and `$gt` are false when either side is NaN,
//! `$lte` and `$gte` true only for NaN against NaN (in `$expr` and in sorting,
//! NaN is below every other number). A Decimal128 compares exactly with
//! the other numbers.
//!
//! Decimal128 arithmetic (`$inc`, and `$add` and `$subtract` in `$expr`) is
//! MongoDB's: IEEE 754-2008 decimal128, rounded half to even to 34 digits;
//! an exact result keeps the smaller exponent (`1.50 + 1` is `2.50`); an
//! Int32 or Int64 operand is the decimal of that integer, and the result a
//! decimal. A double mixed with a decimal is refused
//! ([`StoreErrorKind::BadRequest`]): MongoDB first converts the double to a
//! decimal of 15 significant digits, which this store does not do. Embedded documents and arrays compare as whole
//! values (field names and order matter, numbers compare numerically).
//!
//! # Not supported
//!
//! `$regex` and regular-expression values, `$elemMatch`, `$all`,
//! `$size`, `$mod`, `$where`, `$text`, geospatial and
//! bitwise operators, collations, and arithmetic mixing a Decimal128 with a
//! double. Inside `$expr`: every other
//! expression operator (`$multiply`, `$map`, `$getField`, ...), every other
//! variable (`$$ROOT`, `$$CLUSTER_TIME`, ...), and document and array
//! expressions; `$expr` is not allowed in a `$pull` condition either (as in
//! MongoDB). They are rejected with [`StoreErrorKind::BadRequest`] rather
//! than silently misread.

mod decimal;
mod decimal_arith;
pub(crate) mod depth;
mod eval;
mod expr;
mod order;
pub(crate) mod size;
pub mod update;
mod validate;

use std::cell::Cell;

use bson::{Bson, DateTime, Document};

pub(crate) use decimal::Exact;
pub(crate) use decimal_arith::add_numbers as add_decimals;
pub(crate) use decimal_arith::debit_floor;
pub(crate) use eval::{eval, eval_operators_on, eval_skipping, TYPE_NAMES};
pub use order::compare;
pub(crate) use order::{total_cmp, values_equal};
pub(crate) use validate::{validate, validate_operators, validate_pull_filter};

use crate::clock::{Clock, SystemClock};
use crate::store::{StoreError, StoreErrorKind};

/// MongoDB's `BadValue` error code, used for malformed filters.
const BAD_VALUE: i32 = 2;
/// MongoDB's `ConversionFailure` error code, raised by a failed `$toLong`.
const CONVERSION_FAILURE: i32 = 241;

/// Whether `doc` matches the MongoDB query `filter`.
///
/// Returns [`StoreErrorKind::BadRequest`] if the filter uses an operator
/// outside the supported subset (the message names it) or gives an operator
/// a malformed argument. The whole filter is checked before any field is
/// looked at, so a malformed filter fails whatever the document holds.
///
/// (Run as the unit test `query::doc_examples::matches`: the module is internal.)
/// ```ignore
/// use bson::doc;
/// use tandem::query::matches;
///
/// let account = doc! { "_id": "alice", "balance": 70, "pending": ["t1"] };
/// assert!(matches(&account, &doc! { "balance": { "$gte": 50 }, "pending": "t1" }).unwrap());
/// assert!(!matches(&account, &doc! { "pending": { "$ne": "t1" } }).unwrap());
/// ```
///
/// `$$NOW` in an `$expr` is the system clock's time, read (once) only when
/// the filter uses it; [`matches_at`] takes the time from the caller. An
/// `$expr` that fails to evaluate (a `$toLong` of a non-numeric string, say)
/// fails the call, as it fails the operation on MongoDB.
pub fn matches(doc: &Document, filter: &Document) -> Result<bool, StoreError> {
    matches_in(doc, filter, &Ctx::clock(&SystemClock))
}

/// [`matches()`] with `$$NOW` standing at `now`, e.g. a store's clock.
///
/// With `now` `None`, `$$NOW` is unavailable: a filter whose evaluation
/// reaches it fails with [`StoreErrorKind::BadRequest`] (one that does not,
/// such as an `$and` decided before it, still succeeds).
///
/// (Run as the unit test `query::doc_examples::matches_at`: the module is internal.)
/// ```ignore
/// use bson::{doc, DateTime};
/// use tandem::query::matches_at;
///
/// let deadline = 1_735_689_600_000_i64; // 2025-01-01T00:00:00Z
/// let step = doc! { "_id": "A", "$expr": { "$lt": [ { "$toLong": "$$NOW" }, deadline ] } };
/// let account = doc! { "_id": "A" };
/// assert!(matches_at(&account, &step, Some(DateTime::from_millis(deadline - 1))).unwrap());
/// assert!(!matches_at(&account, &step, Some(DateTime::from_millis(deadline))).unwrap());
/// assert!(matches_at(&account, &step, None).is_err());
/// ```
#[cfg(test)]
pub fn matches_at(
    doc: &Document,
    filter: &Document,
    now: Option<DateTime>,
) -> Result<bool, StoreError> {
    matches_in(doc, filter, &Ctx::at(now))
}

/// The value of the aggregation expression `expr` on `doc` (validated as
/// inside `$expr`), with `$$NOW` at `now`; `None` for a missing value.
#[cfg(feature = "test-util")]
pub(crate) fn expr_value(
    doc: &Document,
    expr: &Bson,
    now: Option<DateTime>,
) -> Result<Option<Bson>, StoreError> {
    validate(&bson::doc! { "$expr": expr.clone() })?;
    let value = expr::eval_expr(doc, expr, &Ctx::at(now))?;
    Ok(value.map(std::borrow::Cow::into_owned))
}

/// Validates `filter`, then evaluates it in `cx`.
fn matches_in(doc: &Document, filter: &Document, cx: &Ctx<'_>) -> Result<bool, StoreError> {
    validate(filter)?;
    let matched = eval_skipping(doc, filter, None, cx);
    cx.check()?;
    Ok(matched)
}

/// What evaluating a filter needs besides the document and the filter: the
/// value of `$$NOW`, and a place for the error an `$expr` may raise.
///
/// Create one per store operation and pass it to every evaluation of that
/// operation, then [`check`](Ctx::check) it. Filters without `$expr` never
/// touch it: it costs a pointer argument.
pub(crate) struct Ctx<'c> {
    /// Where `$$NOW` comes from.
    now: Now<'c>,
    /// `$$NOW` once read: one value for the whole operation, as on MongoDB.
    read: Cell<Option<DateTime>>,
    /// The first error an `$expr` raised; the match it was part of is false.
    error: Cell<Option<StoreError>>,
}

/// Where `$$NOW` comes from.
#[derive(Clone, Copy)]
enum Now<'c> {
    /// A time read beforehand.
    At(DateTime),
    /// A clock, read on the first use of `$$NOW` only.
    Clock(&'c dyn Clock),
    /// Nowhere: `$$NOW` fails.
    Unavailable,
}

impl<'c> Ctx<'c> {
    /// `$$NOW` is `now`, or unavailable when `None`.
    pub(crate) fn at(now: Option<DateTime>) -> Ctx<'static> {
        Ctx::new(now.map_or(Now::Unavailable, Now::At))
    }

    /// `$$NOW` is read from `clock`, once, if a filter uses it.
    pub(crate) fn clock(clock: &'c dyn Clock) -> Ctx<'c> {
        Ctx::new(Now::Clock(clock))
    }

    fn new(now: Now<'c>) -> Ctx<'c> {
        Ctx {
            now,
            read: Cell::new(None),
            error: Cell::new(None),
        }
    }

    /// The value of `$$NOW`.
    fn now(&self) -> Result<DateTime, StoreError> {
        if let Some(t) = self.read.get() {
            return Ok(t);
        }
        let t = match self.now {
            Now::At(t) => t,
            Now::Clock(clock) => clock.now(),
            Now::Unavailable => {
                return Err(bad_request(
                    "$$NOW is not available here: no clock to evaluate it with",
                ))
            }
        };
        self.read.set(Some(t));
        Ok(t)
    }

    /// Records an error an `$expr` raised (the first one is kept).
    fn fail(&self, e: StoreError) {
        let first = self.error.take();
        self.error.set(Some(first.unwrap_or(e)));
    }

    /// The first error an `$expr` raised since the last check, if any.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The single value at a dotted `path` of `doc`, if there is one.
///
/// Each segment names a field of a document; a numeric segment (`"0"`,
/// `"12"`) met at an array indexes it. Unlike [`matches()`], a non-numeric
/// segment met at an array does not descend into its elements: the result is
/// `None`, as it is for a missing field or a path running through a scalar.
///
/// (Run as the unit test `query::doc_examples::lookup`: the module is internal.)
/// ```ignore
/// use bson::{doc, Bson};
/// use tandem::query::lookup;
///
/// let d = doc! { "a": { "b": [10, { "c": true }] } };
/// assert_eq!(lookup(&d, "a.b.0"), Some(&Bson::Int32(10)));
/// assert_eq!(lookup(&d, "a.b.1.c"), Some(&Bson::Boolean(true)));
/// assert_eq!(lookup(&d, "a.x"), None);
/// ```
pub fn lookup<'a>(doc: &'a Document, path: &str) -> Option<&'a Bson> {
    let (first, mut rest) = match split_dot(path) {
        None => return doc.get(path),
        Some((first, rest)) => (first, Some(rest)),
    };
    let mut cur = doc.get(first)?;
    while let Some(path) = rest {
        let (seg, tail) = match split_dot(path) {
            None => (path, None),
            Some((seg, tail)) => (seg, Some(tail)),
        };
        cur = match cur {
            Bson::Document(d) => d.get(seg)?,
            Bson::Array(a) => a.get(array_index(seg)?)?,
            _ => return None,
        };
        rest = tail;
    }
    Some(cur)
}

/// MongoDB's name of the type of `v`, as it appears in server error messages.
pub(crate) fn type_name(v: &Bson) -> &'static str {
    match v {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Array(_) => "array",
        Bson::Document(_) => "object",
        Bson::Boolean(_) => "bool",
        Bson::Null => "null",
        Bson::RegularExpression(_) => "regex",
        Bson::JavaScriptCode(_) => "javascript",
        Bson::JavaScriptCodeWithScope(_) => "javascriptWithScope",
        Bson::Int32(_) => "int",
        Bson::Int64(_) => "long",
        Bson::Timestamp(_) => "timestamp",
        Bson::Binary(_) => "binData",
        Bson::ObjectId(_) => "objectId",
        Bson::DateTime(_) => "date",
        Bson::Symbol(_) => "symbol",
        Bson::Decimal128(_) => "decimal",
        Bson::Undefined => "undefined",
        Bson::MaxKey => "maxKey",
        Bson::MinKey => "minKey",
        Bson::DbPointer(_) => "dbPointer",
    }
}

/// The index a path segment denotes when it meets an array: ASCII digits
/// without a leading zero (except `"0"` itself).
pub(crate) fn array_index(seg: &str) -> Option<usize> {
    let bytes = seg.as_bytes();
    if bytes.is_empty()
        || !bytes.iter().all(u8::is_ascii_digit)
        || (bytes.len() > 1 && bytes[0] == b'0')
    {
        return None;
    }
    seg.parse().ok()
}

/// Whether a segment of the dotted `path` is an array index
/// ([`array_index`]). A path without a digit has none: most paths are
/// answered without being split.
pub(crate) fn has_index_segment(path: &str) -> bool {
    path.bytes().any(|b| b.is_ascii_digit())
        && path.split('.').any(|seg| array_index(seg).is_some())
}

/// Splits a dotted path at its first dot.
pub(crate) fn split_dot(path: &str) -> Option<(&str, &str)> {
    let i = path.bytes().position(|b| b == b'.')?;
    Some((&path[..i], &path[i + 1..]))
}

/// Whether `d` is an operator document such as `{$gt: 1}`: MongoDB decides
/// by its first key.
pub(crate) fn is_operator_doc(d: &Document) -> bool {
    d.keys().next().is_some_and(|k| k.starts_with('$'))
}

fn bad_request(message: impl Into<String>) -> StoreError {
    StoreError::new(StoreErrorKind::BadRequest, message).with_code(BAD_VALUE)
}

#[cfg(test)]
mod doc_examples;
#[cfg(test)]
mod tests;
