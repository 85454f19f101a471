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
//!   `{"list.0": v}`. A numeric path segment indexes an array; any other
//!   segment met at an array of documents descends into every element, and
//!   the clause matches if any element does. When the value found is an
//!   array, equality holds if the array equals `v` or contains `v`.
//!   `{a: null}` matches documents where `a` is null or missing.
//! * Field operators `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`, `$in`, `$nin`,
//!   `$exists` and `$not` (of an operator document). Several operators in one
//!   operator document are ANDed.
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
//!   - field paths `"$a.b"`, with MongoDB's aggregation semantics (a path
//!     through an array of documents yields the array of the values found);
//!   - the variable `"$$NOW"`, a date. [`matches()`] reads the system clock
//!     for it, [`matches_at`] takes it from the caller, and the
//!     [`MemoryStore`](crate::MemoryStore) reads its own clock once per call;
//!   - literals: any value other than a string starting with `$`, a document
//!     or an array.
//!
//! Values compare as MongoDB compares them: within a *type bracket* only
//! ([`compare`]). Int32, Int64 and Double are one bracket and compare
//! numerically across types, so `Int32(1)`, `Int64(1)` and `Double(1.0)` are
//! equal; strings compare with strings (bytewise, i.e. the simple collation),
//! dates with dates, booleans with booleans, ObjectIds with ObjectIds. A range
//! comparison across brackets is false: `{balance: {$gte: 100}}` does not
//! match `{balance: "1000"}`. Embedded documents and arrays compare as whole
//! values (field names and order matter, numbers compare numerically).
//!
//! # Not supported
//!
//! `$regex` and regular-expression values, `$elemMatch`, `$all`,
//! `$size`, `$type`, `$mod`, `$where`, `$text`, geospatial and
//! bitwise operators, collations, and arithmetic on Decimal128 (a Decimal128
//! only equals a bitwise-identical Decimal128). Inside `$expr`: every other
//! expression operator (`$add`, `$cond`, `$literal`, ...), every other
//! variable (`$$ROOT`, `$$CLUSTER_TIME`, ...), and document and array
//! expressions; `$expr` is not allowed in a `$pull` condition either (as in
//! MongoDB). They are rejected with [`StoreErrorKind::BadRequest`] rather
//! than silently misread.

pub(crate) mod size;
pub mod update;

use std::borrow::Cow;
use std::cell::Cell;
use std::cmp::Ordering;

use bson::{Bson, DateTime, Document};

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
/// ```
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
/// ```
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
pub fn matches_at(
    doc: &Document,
    filter: &Document,
    now: Option<DateTime>,
) -> Result<bool, StoreError> {
    matches_in(doc, filter, &Ctx::at(now))
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
/// ```
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

/// Compares two values as MongoDB does, or `None` when they are in different
/// type brackets and so are not comparable.
///
/// The brackets, in MongoDB's order, are: MinKey; undefined; null; numbers
/// (Int32, Int64, Double, compared numerically across types, NaN below every
/// other number); strings and symbols (bytewise); documents; arrays; binary
/// data; ObjectIds; booleans; dates; timestamps; regular expressions;
/// DBPointers; JavaScript; JavaScript with scope; MaxKey. Documents and arrays
/// compare element by element. A Decimal128 is only comparable with an
/// identical Decimal128 (they are equal); arithmetic on Decimal128 is not
/// supported.
///
/// ```
/// use std::cmp::Ordering;
/// use bson::Bson;
/// use tandem::query::compare;
///
/// assert_eq!(compare(&Bson::Int32(1), &Bson::Double(1.0)), Some(Ordering::Equal));
/// assert_eq!(compare(&Bson::Int64(2), &Bson::Double(1.5)), Some(Ordering::Greater));
/// assert_eq!(compare(&Bson::String("1000".into()), &Bson::Int32(100)), None);
/// ```
pub fn compare(a: &Bson, b: &Bson) -> Option<Ordering> {
    if rank(a) != rank(b) {
        return None;
    }
    match (a, b) {
        (Bson::Decimal128(x), Bson::Decimal128(y)) if x.bytes() == y.bytes() => {
            Some(Ordering::Equal)
        }
        (Bson::Decimal128(_), _) | (_, Bson::Decimal128(_)) => None,
        _ => Some(total_cmp(a, b)),
    }
}

/// Whether two values are equal under [`compare`].
pub(crate) fn values_equal(a: &Bson, b: &Bson) -> bool {
    // The common cases first: marker and tombstone arrays hold strings.
    match (a, b) {
        (Bson::String(x), Bson::String(y)) => same_str(x, y),
        (Bson::Int32(x), Bson::Int32(y)) => x == y,
        (Bson::Int64(x), Bson::Int64(y)) => x == y,
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x == y,
        _ => compare(a, b) == Some(Ordering::Equal),
    }
}

/// Whether two strings are equal. Ids that differ tend to differ at the
/// end (the counter of an ObjectId in hex, a sequence number), so strings of
/// the same length are told apart by their last eight bytes first.
#[inline]
fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let last8 = |s: &[u8]| {
        let mut word = [0; 8];
        word.copy_from_slice(&s[s.len() - 8..]);
        u64::from_ne_bytes(word)
    };
    if a.len() >= 8 && last8(a) != last8(b) {
        return false;
    }
    a == b
}

/// A total order over all BSON values: by type bracket, then as [`compare`]
/// orders them. Used for sorting and for ordering `_id`s.
///
/// Values that [`compare`] calls equal are equal here too (so `Int32(1)` and
/// `Double(1.0)` are the same `_id`); Decimal128s, which [`compare`] cannot
/// order, sort after the other numbers, bytewise among themselves.
pub(crate) fn total_cmp(a: &Bson, b: &Bson) -> Ordering {
    // The common `_id` types first: these comparisons order map keys.
    match (a, b) {
        (Bson::ObjectId(x), Bson::ObjectId(y)) => return x.bytes().cmp(&y.bytes()),
        (Bson::String(x), Bson::String(y)) => return x.as_bytes().cmp(y.as_bytes()),
        (Bson::Int32(x), Bson::Int32(y)) => return x.cmp(y),
        (Bson::Int64(x), Bson::Int64(y)) => return x.cmp(y),
        _ => {}
    }
    let (ra, rb) = (rank(a), rank(b));
    if ra != rb {
        return ra.cmp(&rb);
    }
    match (a, b) {
        (Bson::Decimal128(x), Bson::Decimal128(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Decimal128(_), _) => Ordering::Greater,
        (_, Bson::Decimal128(_)) => Ordering::Less,
        (Bson::Document(x), Bson::Document(y)) => cmp_documents(x, y),
        (Bson::Array(x), Bson::Array(y)) => {
            for (u, v) in x.iter().zip(y) {
                let o = total_cmp(u, v);
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        (Bson::Binary(x), Bson::Binary(y)) => x
            .bytes
            .len()
            .cmp(&y.bytes.len())
            .then_with(|| u8::from(x.subtype).cmp(&u8::from(y.subtype)))
            .then_with(|| x.bytes.cmp(&y.bytes)),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => {
            (x.time, x.increment).cmp(&(y.time, y.increment))
        }
        (Bson::RegularExpression(x), Bson::RegularExpression(y)) => x
            .pattern
            .cmp(&y.pattern)
            .then_with(|| x.options.cmp(&y.options)),
        (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.cmp(y),
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => x
            .code
            .cmp(&y.code)
            .then_with(|| cmp_documents(&x.scope, &y.scope)),
        (Bson::DbPointer(x), Bson::DbPointer(y)) => format!("{x:?}").cmp(&format!("{y:?}")),
        _ => {
            if let (Some(x), Some(y)) = (number(a), number(b)) {
                cmp_numbers(x, y)
            } else if let (Some(x), Some(y)) = (string(a), string(b)) {
                x.as_bytes().cmp(y.as_bytes())
            } else {
                // MinKey, MaxKey, null, undefined: one value per bracket.
                Ordering::Equal
            }
        }
    }
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

// ---------------------------------------------------------------------------
// Validation: everything that can be wrong with a filter regardless of data.

/// Checks that `filter` only uses the supported operators, with well-formed
/// arguments. [`matches()`] calls it; [`eval`] assumes it passed.
pub(crate) fn validate(filter: &Document) -> Result<(), StoreError> {
    validate_filter(filter, true)
}

/// [`validate`] for the filter of a `$pull` condition, where MongoDB does not
/// allow `$expr`.
pub(crate) fn validate_pull_filter(filter: &Document) -> Result<(), StoreError> {
    validate_filter(filter, false)
}

fn validate_filter(filter: &Document, allow_expr: bool) -> Result<(), StoreError> {
    for (key, value) in filter {
        if let Some(op) = key.strip_prefix('$') {
            match op {
                "expr" if allow_expr => validate_expr(value)?,
                "expr" => return Err(bad_request("$expr is not allowed in this context")),
                "and" | "or" | "nor" => {
                    let members = match value {
                        Bson::Array(members) if !members.is_empty() => members,
                        _ => return Err(bad_request(format!("{key} must be a nonempty array"))),
                    };
                    for member in members {
                        match member {
                            Bson::Document(member) => validate_filter(member, allow_expr)?,
                            _ => {
                                return Err(bad_request(format!(
                                    "{key} entries need to be full objects"
                                )))
                            }
                        }
                    }
                }
                _ => return Err(bad_request(format!("unknown top level operator: {key}"))),
            }
        } else {
            validate_condition(key, value)?;
        }
    }
    Ok(())
}

/// Validates the condition on one field: an operator document or a value.
fn validate_condition(path: &str, cond: &Bson) -> Result<(), StoreError> {
    if path.is_empty() || path.starts_with('.') || path.ends_with('.') || path.contains("..") {
        return Err(bad_request(format!(
            "invalid field path in filter: '{path}'"
        )));
    }
    match cond {
        Bson::Document(ops) if is_operator_doc(ops) => validate_operators(ops),
        Bson::RegularExpression(_) => Err(unsupported_regex(path)),
        _ => Ok(()),
    }
}

/// Validates an operator document such as `{$gt: 1, $lt: 5}`.
pub(crate) fn validate_operators(ops: &Document) -> Result<(), StoreError> {
    for (op, arg) in ops {
        match op.as_str() {
            "$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte" | "$exists" => {}
            "$not" => match arg {
                Bson::Document(inner) if is_operator_doc(inner) => validate_operators(inner)?,
                Bson::RegularExpression(_) => return Err(unsupported_regex(op)),
                _ => return Err(bad_request("$not needs an operator document")),
            },
            "$in" | "$nin" => match arg {
                Bson::Array(values) => {
                    if values
                        .iter()
                        .any(|v| matches!(v, Bson::RegularExpression(_)))
                    {
                        return Err(unsupported_regex(op));
                    }
                }
                _ => return Err(bad_request(format!("{op} needs an array"))),
            },
            _ => return Err(bad_request(format!("unknown operator: {op}"))),
        }
    }
    Ok(())
}

/// Validates the expression of an `$expr` (see the module documentation for
/// the supported subset).
fn validate_expr(expr: &Bson) -> Result<(), StoreError> {
    match expr {
        Bson::String(s) if s.starts_with("$$") => {
            if s == NOW {
                Ok(())
            } else {
                Err(bad_request(format!(
                    "unsupported variable in $expr: {s} (only $$NOW is supported)"
                )))
            }
        }
        Bson::String(s) if s.starts_with('$') => {
            let path = &s[1..];
            if path.is_empty()
                || path
                    .split('.')
                    .any(|seg| seg.is_empty() || seg.starts_with('$'))
            {
                return Err(bad_request(format!("invalid field path in $expr: '{s}'")));
            }
            Ok(())
        }
        Bson::Document(d) => {
            let Some((op, args)) = d.iter().next().filter(|(op, _)| op.starts_with('$')) else {
                return Err(bad_request(format!(
                    "object expressions are not supported in $expr: {d}"
                )));
            };
            if d.len() > 1 {
                return Err(bad_request(format!(
                    "an expression specification must contain exactly one field, \
                     the name of the expression. Found {} fields in {d}",
                    d.len()
                )));
            }
            let args = expr_args(args);
            let arity = |n: usize| {
                if args.len() == n {
                    Ok(())
                } else {
                    Err(bad_request(format!(
                        "Expression {op} takes exactly {n} arguments. {} were passed in.",
                        args.len()
                    )))
                }
            };
            match op.as_str() {
                "$lt" | "$lte" | "$gt" | "$gte" | "$eq" | "$ne" | "$subtract" | "$ifNull" => {
                    arity(2)?
                }
                "$toLong" => arity(1)?,
                "$and" | "$or" => {}
                _ => {
                    return Err(bad_request(format!(
                        "unsupported expression operator in $expr: {op}"
                    )))
                }
            }
            args.iter().try_for_each(validate_expr)
        }
        Bson::Array(_) => Err(bad_request(format!(
            "array expressions are not supported in $expr: {expr}"
        ))),
        _ => Ok(()),
    }
}

/// The operands of an expression operator: the elements of an array, or
/// the one value given without one (`{$toLong: "$$NOW"}`).
fn expr_args(args: &Bson) -> &[Bson] {
    match args {
        Bson::Array(a) => a,
        one => std::slice::from_ref(one),
    }
}

fn unsupported_regex(at: &str) -> StoreError {
    bad_request(format!(
        "unknown operator: $regex (regular expressions in '{at}' are not supported)"
    ))
}

// ---------------------------------------------------------------------------
// Evaluation of a validated filter.

/// Whether `doc` matches `filter`, which [`validate`] accepted, with no
/// `$$NOW` (for `$pull` conditions, where `$expr` is not allowed).
pub(crate) fn eval(doc: &Document, filter: &Document) -> bool {
    eval_skipping(doc, filter, None, &Ctx::at(None))
}

/// Whether `doc` matches `filter`, which [`validate`] accepted, ignoring the
/// top-level clause on field `skip` (which the caller has already checked,
/// e.g. an `_id` equality answered by a look-up). An `$expr` takes `$$NOW`
/// from `cx`, and leaves there the error it may raise (it is then false).
pub(crate) fn eval_skipping(
    doc: &Document,
    filter: &Document,
    skip: Option<&str>,
    cx: &Ctx<'_>,
) -> bool {
    filter.iter().all(|(key, value)| match key.as_str() {
        k if Some(k) == skip => true,
        "$and" => members(value).all(|m| eval_skipping(doc, m, None, cx)),
        "$or" => members(value).any(|m| eval_skipping(doc, m, None, cx)),
        "$nor" => !members(value).any(|m| eval_skipping(doc, m, None, cx)),
        "$expr" => eval_expr_filter(doc, value, cx),
        path => eval_condition(doc, path, value),
    })
}

fn members(value: &Bson) -> impl Iterator<Item = &Document> {
    let members: &[Bson] = match value {
        Bson::Array(a) => a,
        _ => &[],
    };
    members.iter().filter_map(Bson::as_document)
}

/// Whether the field at `path` satisfies `cond` (an operator document or a value).
fn eval_condition(doc: &Document, path: &str, cond: &Bson) -> bool {
    match cond {
        Bson::Document(ops) if is_operator_doc(ops) => ops
            .iter()
            .all(|(op, arg)| eval_operator(doc, path, op, arg)),
        _ => any_equal(doc, path, cond),
    }
}

/// Whether a value at `path` equals `arg`, or is an array holding it.
fn any_equal(doc: &Document, path: &str, arg: &Bson) -> bool {
    match arg {
        // The common case (ids, states, the marker and tombstone arrays),
        // without the general comparison: only strings and symbols of the
        // same bytes equal a string, and an array or a missing value never does.
        Bson::String(s) => {
            let same = |x: &Bson| matches!(x, Bson::String(x) | Bson::Symbol(x) if same_str(x, s));
            any_value(doc, path, &mut |v| match v {
                None => false,
                Some(Bson::Array(elements)) => elements.iter().any(same),
                Some(x) => same(x),
            })
        }
        _ => any_value(doc, path, &mut |v| {
            test_value(v, &mut |x| values_equal(x, arg))
        }),
    }
}

fn eval_operator(doc: &Document, path: &str, op: &str, arg: &Bson) -> bool {
    let test = |t: &mut dyn FnMut(&Bson) -> bool| any_value(doc, path, &mut |v| test_value(v, t));
    match op {
        "$eq" => any_equal(doc, path, arg),
        "$ne" => !any_equal(doc, path, arg),
        "$gt" => test(&mut |x| compare(x, arg) == Some(Ordering::Greater)),
        "$gte" => {
            test(&mut |x| matches!(compare(x, arg), Some(Ordering::Greater | Ordering::Equal)))
        }
        "$lt" => test(&mut |x| compare(x, arg) == Some(Ordering::Less)),
        "$lte" => test(&mut |x| matches!(compare(x, arg), Some(Ordering::Less | Ordering::Equal))),
        "$in" => test(&mut |x| in_list(x, arg)),
        "$nin" => !test(&mut |x| in_list(x, arg)),
        "$exists" => any_value(doc, path, &mut |v| v.is_some()) == truthy(arg),
        "$not" => match arg {
            Bson::Document(inner) => !inner
                .iter()
                .all(|(op, arg)| eval_operator(doc, path, op, arg)),
            _ => false,
        },
        _ => false,
    }
}

/// Evaluates an operator document (already validated) against one value,
/// as `$pull` does with a condition such as `{$gte: 6}`.
pub(crate) fn eval_operators_on(value: &Bson, ops: &Document) -> bool {
    let wrapper = {
        let mut d = Document::new();
        d.insert("v", value.clone());
        d
    };
    ops.iter()
        .all(|(op, arg)| eval_operator(&wrapper, "v", op, arg))
}

fn in_list(x: &Bson, list: &Bson) -> bool {
    match list {
        Bson::Array(values) => values.iter().any(|v| values_equal(x, v)),
        _ => false,
    }
}

fn truthy(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Int32(i) => *i != 0,
        Bson::Int64(i) => *i != 0,
        Bson::Double(f) => *f != 0.0,
        Bson::Null | Bson::Undefined => false,
        _ => true,
    }
}

/// Applies a value test to one value found at a path: a missing value tests
/// as null; an array passes if it passes as a whole or any element passes.
fn test_value(v: Option<&Bson>, t: &mut dyn FnMut(&Bson) -> bool) -> bool {
    match v {
        None => t(&Bson::Null),
        Some(whole @ Bson::Array(elements)) => t(whole) || elements.iter().any(t),
        Some(x) => t(x),
    }
}

/// Calls `f` on each value `path` reaches in `doc` (`None` for a dead end),
/// descending into arrays of documents as MongoDB does; true if any call is.
fn any_value(doc: &Document, path: &str, f: &mut dyn FnMut(Option<&Bson>) -> bool) -> bool {
    match split_dot(path) {
        None => f(doc.get(path)),
        Some((seg, rest)) => match doc.get(seg) {
            None => f(None),
            Some(v) => any_value_in(v, rest, f),
        },
    }
}

fn any_value_in(v: &Bson, path: &str, f: &mut dyn FnMut(Option<&Bson>) -> bool) -> bool {
    match v {
        Bson::Document(d) => any_value(d, path, f),
        Bson::Array(elements) => {
            let (seg, rest) = match split_dot(path) {
                None => (path, None),
                Some((seg, rest)) => (seg, Some(rest)),
            };
            if let Some(i) = array_index(seg) {
                return match (elements.get(i), rest) {
                    (None, _) => f(None),
                    (Some(e), None) => f(Some(e)),
                    (Some(e), Some(rest)) => any_value_in(e, rest, f),
                };
            }
            if elements.is_empty() {
                return f(None);
            }
            elements.iter().any(|e| match e {
                Bson::Document(d) => any_value(d, path, f),
                _ => f(None),
            })
        }
        _ => f(None),
    }
}

// ---------------------------------------------------------------------------
// `$expr`: the supported aggregation expressions, on a validated expression.

/// The only variable `$expr` supports.
const NOW: &str = "$$NOW";

/// What a missing value compares as: MongoDB ranks missing with undefined,
/// below null.
static MISSING: Bson = Bson::Undefined;

/// The value of an expression: borrowed from the document or the filter when
/// it can be, `None` for a missing field.
type Value<'a> = Option<Cow<'a, Bson>>;

/// Whether `{$expr: expr}` holds for `doc`: the value of `expr`, coerced to a
/// boolean as MongoDB does. An error is left in `cx`, and the clause is false.
fn eval_expr_filter(doc: &Document, expr: &Bson, cx: &Ctx<'_>) -> bool {
    match eval_expr(doc, expr, cx) {
        Ok(v) => expr_truthy(v.as_deref()),
        Err(e) => {
            cx.fail(e);
            false
        }
    }
}

/// An aggregation expression's boolean value: false for false, null,
/// undefined, missing and numeric zeros (but not NaN), true for anything else.
fn expr_truthy(v: Option<&Bson>) -> bool {
    v.is_some_and(truthy)
}

fn eval_expr<'a>(doc: &'a Document, expr: &'a Bson, cx: &Ctx<'_>) -> Result<Value<'a>, StoreError> {
    match expr {
        Bson::String(s) if s.starts_with("$$") => {
            if s != NOW {
                return Err(bad_request(format!("unsupported variable in $expr: {s}")));
            }
            Ok(Some(Cow::Owned(Bson::DateTime(cx.now()?))))
        }
        Bson::String(s) if s.starts_with('$') => Ok(field_path(doc, &s[1..])),
        Bson::Document(d) => match d.iter().next() {
            Some((op, args)) => eval_expr_operator(doc, op, expr_args(args), cx),
            None => Ok(Some(Cow::Borrowed(expr))),
        },
        _ => Ok(Some(Cow::Borrowed(expr))),
    }
}

fn eval_expr_operator<'a>(
    doc: &'a Document,
    op: &str,
    args: &'a [Bson],
    cx: &Ctx<'_>,
) -> Result<Value<'a>, StoreError> {
    let boolean = |b: bool| Ok(Some(Cow::Owned(Bson::Boolean(b))));
    match op {
        "$and" => {
            for arg in args {
                if !expr_truthy(eval_expr(doc, arg, cx)?.as_deref()) {
                    return boolean(false);
                }
            }
            boolean(true)
        }
        "$or" => {
            for arg in args {
                if expr_truthy(eval_expr(doc, arg, cx)?.as_deref()) {
                    return boolean(true);
                }
            }
            boolean(false)
        }
        "$toLong" => {
            let [arg] = args else {
                return Err(bad_request("Expression $toLong takes exactly 1 arguments."));
            };
            let v = eval_expr(doc, arg, cx)?;
            Ok(Some(Cow::Owned(to_long(v.as_deref())?)))
        }
        "$ifNull" => {
            let [value, otherwise] = args else {
                return Err(bad_request("Expression $ifNull takes exactly 2 arguments."));
            };
            match eval_expr(doc, value, cx)? {
                Some(v) if !matches!(v.as_ref(), Bson::Null | Bson::Undefined) => Ok(Some(v)),
                _ => eval_expr(doc, otherwise, cx),
            }
        }
        "$subtract" => {
            let [left, right] = args else {
                return Err(bad_request(
                    "Expression $subtract takes exactly 2 arguments.",
                ));
            };
            let left = eval_expr(doc, left, cx)?;
            let right = eval_expr(doc, right, cx)?;
            Ok(Some(Cow::Owned(subtract(
                left.as_deref(),
                right.as_deref(),
            )?)))
        }
        _ => {
            let [left, right] = args else {
                return Err(bad_request(format!(
                    "Expression {op} takes exactly 2 arguments."
                )));
            };
            let left = eval_expr(doc, left, cx)?;
            let right = eval_expr(doc, right, cx)?;
            let o = total_cmp(
                left.as_deref().unwrap_or(&MISSING),
                right.as_deref().unwrap_or(&MISSING),
            );
            boolean(match op {
                "$lt" => o.is_lt(),
                "$lte" => o.is_le(),
                "$gt" => o.is_gt(),
                "$gte" => o.is_ge(),
                "$eq" => o.is_eq(),
                "$ne" => o.is_ne(),
                _ => {
                    return Err(bad_request(format!(
                        "unsupported expression operator in $expr: {op}"
                    )))
                }
            })
        }
    }
}

/// The value of the aggregation field path `path` (without its `$`): as
/// [`lookup`] finds it, except at an array, whose document elements each
/// give the value of the rest of the path (if any), collected into an array.
/// Numeric segments are field names, as in MongoDB's expressions.
fn field_path<'a>(doc: &'a Document, path: &str) -> Value<'a> {
    let Some((seg, rest)) = split_dot(path) else {
        return doc.get(path).map(Cow::Borrowed);
    };
    match doc.get(seg)? {
        Bson::Document(d) => field_path(d, rest),
        Bson::Array(elements) => Some(Cow::Owned(Bson::Array(
            elements
                .iter()
                .filter_map(|e| match e {
                    Bson::Document(d) => field_path(d, rest).map(Cow::into_owned),
                    _ => None,
                })
                .collect(),
        ))),
        _ => None,
    }
}

/// `$subtract` of two numbers: null if either is null or missing; a 32-bit
/// result when both are 32-bit and it fits, else 64-bit, else (or with a
/// double) a double, as MongoDB computes it.
fn subtract(left: Option<&Bson>, right: Option<&Bson>) -> Result<Bson, StoreError> {
    let (Some(left), Some(right)) = (left, right) else {
        return Ok(Bson::Null);
    };
    Ok(match (left, right) {
        (Bson::Null | Bson::Undefined, _) | (_, Bson::Null | Bson::Undefined) => Bson::Null,
        (Bson::Int32(a), Bson::Int32(b)) => match a.checked_sub(*b) {
            Some(n) => Bson::Int32(n),
            None => Bson::Int64(i64::from(*a) - i64::from(*b)),
        },
        (Bson::Int32(_) | Bson::Int64(_), Bson::Int32(_) | Bson::Int64(_)) => {
            let long = |v: &Bson| match v {
                Bson::Int32(n) => i64::from(*n),
                Bson::Int64(n) => *n,
                _ => 0,
            };
            match long(left).checked_sub(long(right)) {
                Some(n) => Bson::Int64(n),
                None => Bson::Double(long(left) as f64 - long(right) as f64),
            }
        }
        (
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_),
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_),
        ) => Bson::Double(number_f64(left) - number_f64(right)),
        (Bson::DateTime(a), Bson::DateTime(b)) => {
            Bson::Int64(a.timestamp_millis().saturating_sub(b.timestamp_millis()))
        }
        _ => {
            return Err(bad_request(format!(
                "can't $subtract {} from {}",
                type_name(right),
                type_name(left)
            ))
            .with_code(16556))
        }
    })
}

fn number_f64(v: &Bson) -> f64 {
    match v {
        Bson::Int32(n) => f64::from(*n),
        Bson::Int64(n) => *n as f64,
        Bson::Double(d) => *d,
        _ => f64::NAN,
    }
}

/// `$toLong`: the value converted to an Int64, or null for null or missing.
fn to_long(v: Option<&Bson>) -> Result<Bson, StoreError> {
    // 2^63, exactly representable as f64.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    let failed = |message: String| {
        let kind = if message.contains("overflow") {
            StoreErrorKind::Overflow
        } else {
            StoreErrorKind::Other
        };
        Err(StoreError::new(kind, message).with_code(CONVERSION_FAILURE))
    };
    let n = match v {
        None | Some(Bson::Null | Bson::Undefined) => return Ok(Bson::Null),
        Some(Bson::Int32(i)) => i64::from(*i),
        Some(Bson::Int64(i)) => *i,
        Some(Bson::Boolean(b)) => i64::from(*b),
        Some(Bson::DateTime(d)) => d.timestamp_millis(),
        Some(Bson::Double(f)) if f.is_nan() => {
            return failed(
                "Attempt to convert NaN value to integer type in $convert with no onError value"
                    .into(),
            )
        }
        Some(Bson::Double(f)) if f.is_infinite() => return failed(
            "Attempt to convert infinity value to integer type in $convert with no onError value"
                .into(),
        ),
        Some(Bson::Double(f)) => {
            let t = f.trunc();
            if !(-TWO_63..TWO_63).contains(&t) {
                return failed(format!(
                    "Conversion would overflow target type in $convert with no onError value: {f}"
                ));
            }
            // In range, so the conversion is exact.
            t as i64
        }
        Some(Bson::String(s)) => match s.parse::<i64>() {
            Ok(n) => n,
            Err(_) => {
                return failed(format!(
                    "Failed to parse number '{s}' in $convert with no onError value"
                ))
            }
        },
        Some(other) => {
            return failed(format!(
                "Unsupported conversion from {} to long in $convert with no onError value",
                type_name(other)
            ))
        }
    };
    Ok(Bson::Int64(n))
}

fn cmp_documents(x: &Document, y: &Document) -> Ordering {
    for ((kx, vx), (ky, vy)) in x.iter().zip(y) {
        let o = rank(vx)
            .cmp(&rank(vy))
            .then_with(|| kx.as_bytes().cmp(ky.as_bytes()))
            .then_with(|| total_cmp(vx, vy));
        if o != Ordering::Equal {
            return o;
        }
    }
    x.len().cmp(&y.len())
}

/// The type bracket of a value, in MongoDB's canonical order.
fn rank(v: &Bson) -> u8 {
    match v {
        Bson::MinKey => 0,
        Bson::Undefined => 1,
        Bson::Null => 2,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => 3,
        Bson::String(_) | Bson::Symbol(_) => 4,
        Bson::Document(_) => 5,
        Bson::Array(_) => 6,
        Bson::Binary(_) => 7,
        Bson::ObjectId(_) => 8,
        Bson::Boolean(_) => 9,
        Bson::DateTime(_) => 10,
        Bson::Timestamp(_) => 11,
        Bson::RegularExpression(_) => 12,
        Bson::DbPointer(_) => 13,
        Bson::JavaScriptCode(_) => 14,
        Bson::JavaScriptCodeWithScope(_) => 15,
        Bson::MaxKey => 16,
    }
}

#[derive(Clone, Copy, Debug)]
enum Num {
    Int(i64),
    Float(f64),
}

fn number(v: &Bson) -> Option<Num> {
    match v {
        Bson::Int32(i) => Some(Num::Int(i64::from(*i))),
        Bson::Int64(i) => Some(Num::Int(*i)),
        Bson::Double(f) => Some(Num::Float(*f)),
        _ => None,
    }
}

fn string(v: &Bson) -> Option<&str> {
    match v {
        Bson::String(s) | Bson::Symbol(s) => Some(s),
        _ => None,
    }
}

fn cmp_numbers(a: Num, b: Num) -> Ordering {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x.cmp(&y),
        (Num::Float(x), Num::Float(y)) => cmp_floats(x, y),
        (Num::Int(x), Num::Float(y)) => cmp_int_float(x, y),
        (Num::Float(x), Num::Int(y)) => cmp_int_float(y, x).reverse(),
    }
}

/// Floats with NaN equal to itself and below every other number.
fn cmp_floats(x: f64, y: f64) -> Ordering {
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
    }
}

/// Exact comparison of an integer with a float (no rounding of the integer).
fn cmp_int_float(i: i64, f: f64) -> Ordering {
    // 2^63, exactly representable as f64.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if f.is_nan() {
        return Ordering::Greater;
    }
    if f >= TWO_63 {
        return Ordering::Less;
    }
    if f < -TWO_63 {
        return Ordering::Greater;
    }
    let t = f.trunc();
    // In range, so the conversion is exact.
    let ti = t as i64;
    match i.cmp(&ti) {
        Ordering::Equal if f > t => Ordering::Less,
        Ordering::Equal if f < t => Ordering::Greater,
        o => o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::oid::ObjectId;
    use bson::{doc, Binary, DateTime};

    fn m(d: &Document, f: Document) -> bool {
        matches(d, &f).unwrap()
    }

    fn err(d: &Document, f: Document) -> StoreError {
        matches(d, &f).unwrap_err()
    }

    #[test]
    fn plain_equality_and_missing_fields() {
        let d = doc! { "a": 1, "s": "x", "n": Bson::Null };
        assert!(m(&d, doc! { "a": 1 }));
        assert!(!m(&d, doc! { "a": 2 }));
        assert!(m(&d, doc! { "a": 1, "s": "x" }));
        assert!(!m(&d, doc! { "a": 1, "s": "y" }));
        assert!(m(&d, doc! {}));
        assert!(m(&d, doc! { "n": Bson::Null }));
        assert!(m(&d, doc! { "missing": Bson::Null }));
        assert!(!m(&d, doc! { "a": Bson::Null }));
        assert!(!m(&d, doc! { "missing": 1 }));
        // A string never equals a number.
        assert!(!m(&d, doc! { "s": 1 }));
        assert!(!m(&doc! { "a": "1" }, doc! { "a": 1 }));
    }

    #[test]
    fn numbers_are_equal_across_types() {
        let d = doc! { "i": 1, "l": 1_i64, "f": 1.0 };
        for field in ["i", "l", "f"] {
            assert!(m(&d, doc! { field: 1 }), "{field} == Int32");
            assert!(m(&d, doc! { field: 1_i64 }), "{field} == Int64");
            assert!(m(&d, doc! { field: 1.0 }), "{field} == Double");
            assert!(!m(&d, doc! { field: 1.5 }));
        }
        // Precision: i64::MAX is not equal to 2^63 as a double.
        let big = doc! { "x": i64::MAX };
        assert!(!m(&big, doc! { "x": 9_223_372_036_854_775_808.0 }));
        assert!(m(
            &big,
            doc! { "x": { "$lt": 9_223_372_036_854_775_808.0 } }
        ));
        assert!(m(
            &doc! { "x": 3 },
            doc! { "x": { "$gt": 2.5, "$lt": 3.5 } }
        ));
    }

    #[test]
    fn dotted_paths() {
        let d = doc! {
            "a": { "b": { "c": 5 } },
            "list": [10, 20, 30],
            "docs": [ { "k": 1, "v": "one" }, { "k": 2, "v": "two" } ],
            "nested": [[1, 2], [3]],
        };
        assert!(m(&d, doc! { "a.b.c": 5 }));
        assert!(m(&d, doc! { "a.b": { "c": 5 } }));
        assert!(!m(&d, doc! { "a.b.c": 6 }));
        assert!(m(&d, doc! { "a.b.x": Bson::Null }));
        assert!(m(&d, doc! { "a.b.c.d": Bson::Null }));
        assert!(m(&d, doc! { "list.0": 10 }));
        assert!(m(&d, doc! { "list.2": 30 }));
        assert!(!m(&d, doc! { "list.1": 10 }));
        assert!(m(&d, doc! { "list.7": Bson::Null }));
        assert!(m(&d, doc! { "docs.k": 2 }));
        assert!(m(&d, doc! { "docs.v": "one" }));
        assert!(!m(&d, doc! { "docs.k": 3 }));
        assert!(m(&d, doc! { "docs.1.v": "two" }));
        assert!(!m(&d, doc! { "docs.0.v": "two" }));
        assert!(m(&d, doc! { "nested.0": 2 }));
        assert!(m(&d, doc! { "nested.1": [3] }));
        // An element without the field counts as missing.
        let partial = doc! { "docs": [ { "k": 1 }, { "j": 2 } ] };
        assert!(m(&partial, doc! { "docs.k": Bson::Null }));
        assert!(!m(
            &doc! { "docs": [ { "k": 1 } ] },
            doc! { "docs.k": Bson::Null }
        ));
    }

    #[test]
    fn equality_on_arrays() {
        let d = doc! { "tags": ["a", "b"], "empty": [] };
        assert!(m(&d, doc! { "tags": "a" }));
        assert!(m(&d, doc! { "tags": "b" }));
        assert!(!m(&d, doc! { "tags": "c" }));
        assert!(m(&d, doc! { "tags": ["a", "b"] }));
        assert!(!m(&d, doc! { "tags": ["b", "a"] }));
        assert!(m(&d, doc! { "empty": [] }));
        assert!(!m(&d, doc! { "empty": Bson::Null }));
        assert!(m(&doc! { "x": [[1, 2], 3] }, doc! { "x": [1, 2] }));
        assert!(m(&doc! { "x": [Bson::Null] }, doc! { "x": Bson::Null }));
    }

    #[test]
    fn documents_compare_whole() {
        let d = doc! { "a": { "x": 1, "y": 2 } };
        assert!(m(&d, doc! { "a": { "x": 1, "y": 2 } }));
        assert!(m(&d, doc! { "a": { "x": 1.0, "y": 2_i64 } }));
        assert!(!m(&d, doc! { "a": { "y": 2, "x": 1 } }));
        assert!(!m(&d, doc! { "a": { "x": 1 } }));
        assert!(m(&d, doc! { "a": { "$eq": { "x": 1, "y": 2 } } }));
        assert!(m(&d, doc! { "a": { "$in": [ 5, { "x": 1, "y": 2 } ] } }));
        assert!(m(&d, doc! { "a": { "$ne": { "x": 1 } } }));
    }

    #[test]
    fn comparison_operators() {
        let d = doc! { "n": 5, "s": "m", "t": DateTime::from_millis(1000), "b": true };
        assert!(m(&d, doc! { "n": { "$eq": 5 } }));
        assert!(m(&d, doc! { "n": { "$gt": 4 } }));
        assert!(!m(&d, doc! { "n": { "$gt": 5 } }));
        assert!(m(&d, doc! { "n": { "$gte": 5 } }));
        assert!(m(&d, doc! { "n": { "$lt": 5.5 } }));
        assert!(!m(&d, doc! { "n": { "$lt": 5 } }));
        assert!(m(&d, doc! { "n": { "$lte": 5_i64 } }));
        assert!(m(&d, doc! { "n": { "$gt": 1, "$lt": 10 } }));
        assert!(!m(&d, doc! { "n": { "$gt": 1, "$lt": 5 } }));
        assert!(m(&d, doc! { "s": { "$gt": "a", "$lte": "m" } }));
        assert!(!m(&d, doc! { "s": { "$gt": "m" } }));
        assert!(m(&d, doc! { "t": { "$lt": DateTime::from_millis(2000) } }));
        assert!(!m(&d, doc! { "t": { "$gt": DateTime::from_millis(2000) } }));
        assert!(m(&d, doc! { "b": { "$gt": false } }));
        // Missing fields only match comparisons with null.
        assert!(!m(&d, doc! { "missing": { "$lt": 100 } }));
        assert!(m(&d, doc! { "missing": { "$gte": Bson::Null } }));
        // Arrays: any element may satisfy the comparison.
        let a = doc! { "xs": [1, 10] };
        assert!(m(&a, doc! { "xs": { "$gt": 5 } }));
        assert!(m(&a, doc! { "xs": { "$lt": 5 } }));
        assert!(!m(&a, doc! { "xs": { "$gt": 10 } }));
    }

    #[test]
    fn type_bracketing() {
        let d = doc! { "balance": "1000", "id": ObjectId::from_bytes([1; 12]), "at": DateTime::from_millis(5) };
        assert!(!m(&d, doc! { "balance": { "$gte": 100 } }));
        assert!(!m(&d, doc! { "balance": { "$lt": 100 } }));
        assert!(!m(&d, doc! { "at": { "$gt": 1 } }));
        assert!(!m(&d, doc! { "at": { "$lt": 1 } }));
        assert!(m(
            &d,
            doc! { "id": { "$gt": ObjectId::from_bytes([0; 12]) } }
        ));
        assert!(!m(&d, doc! { "id": { "$gt": "a" } }));
        // $ne across brackets is true: the values are not equal.
        assert!(m(&d, doc! { "balance": { "$ne": 1000 } }));

        assert_eq!(
            compare(&Bson::Int32(2), &Bson::Int64(3)),
            Some(Ordering::Less)
        );
        assert_eq!(
            compare(&Bson::Double(f64::NAN), &Bson::Int32(-5)),
            Some(Ordering::Less)
        );
        assert_eq!(
            compare(&Bson::Double(f64::NAN), &Bson::Double(f64::NAN)),
            Some(Ordering::Equal)
        );
        assert_eq!(
            compare(&Bson::Double(f64::INFINITY), &Bson::Int64(i64::MAX)),
            Some(Ordering::Greater)
        );
        assert_eq!(
            compare(&Bson::Double(-0.5), &Bson::Int32(0)),
            Some(Ordering::Less)
        );
        assert_eq!(
            compare(&Bson::Double(-0.5), &Bson::Int32(-1)),
            Some(Ordering::Greater)
        );
        assert_eq!(compare(&Bson::Boolean(true), &Bson::Int32(1)), None);
        assert_eq!(compare(&Bson::Null, &Bson::Null), Some(Ordering::Equal));
        assert_eq!(compare(&Bson::Null, &Bson::Int32(0)), None);
        assert_eq!(
            compare(&Bson::String("b".into()), &Bson::Symbol("a".into())),
            Some(Ordering::Greater)
        );
        assert_eq!(
            compare(&bson::bson!([1, 2]), &bson::bson!([1, 3])),
            Some(Ordering::Less)
        );
        let bin = |b: &[u8]| {
            Bson::Binary(Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: b.to_vec(),
            })
        };
        assert_eq!(compare(&bin(&[9]), &bin(&[1, 1])), Some(Ordering::Less));
    }

    #[test]
    fn string_equality_agrees_with_the_general_test() {
        let docs = [
            doc! { "s": "t1", "l": ["t0", "t1"], "d": [ { "k": "t1" }, { "k": 1 } ] },
            doc! { "s": Bson::Symbol("t1".into()), "l": [["t1"]], "d": { "k": "t2" } },
            doc! { "s": 1, "l": [], "d": [ [ "t1" ] ], "n": Bson::Null },
            doc! { "l": [Bson::Null, "", 1.0], "d": [ { "j": 1 } ] },
        ];
        for d in &docs {
            for path in [
                "s", "l", "l.0", "l.1", "d", "d.k", "d.0", "d.0.k", "d.1.k", "n", "x.y",
            ] {
                for arg in ["t1", "t2", ""] {
                    let arg = Bson::String(arg.into());
                    let general = any_value(d, path, &mut |v| {
                        test_value(v, &mut |x| compare(x, &arg) == Some(Ordering::Equal))
                    });
                    assert_eq!(any_equal(d, path, &arg), general, "{d} {path} {arg}");
                }
            }
        }
    }

    #[test]
    fn same_str_is_equality() {
        let samples = [
            "",
            "a",
            "ab",
            "abcdefgh",
            "abcdefgi",
            "bbcdefgh",
            "6740a1b2c3d4e5f600000001",
            "6740a1b2c3d4e5f600000002",
            "7740a1b2c3d4e5f600000001",
            "ünïcødé",
            "ünïcødè",
        ];
        for a in samples {
            for b in samples {
                assert_eq!(same_str(a, b), a == b, "{a} {b}");
            }
        }
    }

    #[test]
    fn equality_shortcuts_agree_with_compare() {
        let values = [
            Bson::String("t1".into()),
            Bson::String("t2".into()),
            Bson::String(String::new()),
            Bson::Symbol("t1".into()),
            Bson::Int32(1),
            Bson::Int32(2),
            Bson::Int64(1),
            Bson::Int64(i64::MAX),
            Bson::Double(1.0),
            Bson::Double(f64::NAN),
            Bson::ObjectId(ObjectId::from_bytes([1; 12])),
            Bson::ObjectId(ObjectId::from_bytes([2; 12])),
            Bson::Null,
            bson::bson!(["t1"]),
        ];
        for a in &values {
            for b in &values {
                assert_eq!(
                    values_equal(a, b),
                    compare(a, b) == Some(Ordering::Equal),
                    "{a:?} {b:?}"
                );
            }
        }
    }

    #[test]
    fn total_order_is_by_bracket() {
        let mut values = vec![
            Bson::MaxKey,
            Bson::Boolean(false),
            Bson::String("a".into()),
            Bson::Int32(2),
            Bson::Null,
            Bson::Double(1.5),
            Bson::MinKey,
            Bson::ObjectId(ObjectId::from_bytes([0; 12])),
        ];
        values.sort_by(total_cmp);
        assert_eq!(
            values,
            vec![
                Bson::MinKey,
                Bson::Null,
                Bson::Double(1.5),
                Bson::Int32(2),
                Bson::String("a".into()),
                Bson::ObjectId(ObjectId::from_bytes([0; 12])),
                Bson::Boolean(false),
                Bson::MaxKey,
            ]
        );
    }

    #[test]
    fn ne_and_nin_on_arrays() {
        let d = doc! { "pending": ["t1", "t2"], "n": 3 };
        assert!(!m(&d, doc! { "pending": { "$ne": "t1" } }));
        assert!(!m(&d, doc! { "pending": { "$ne": "t2" } }));
        assert!(m(&d, doc! { "pending": { "$ne": "t3" } }));
        assert!(!m(&d, doc! { "pending": { "$ne": ["t1", "t2"] } }));
        assert!(m(&d, doc! { "pending": { "$ne": ["t2", "t1"] } }));
        assert!(m(&d, doc! { "missing": { "$ne": "t1" } }));
        assert!(!m(&d, doc! { "missing": { "$ne": Bson::Null } }));
        assert!(m(&d, doc! { "n": { "$ne": 4 } }));
        assert!(!m(&d, doc! { "n": { "$ne": 3.0 } }));
        assert!(m(
            &doc! { "pending": [] },
            doc! { "pending": { "$ne": "t1" } }
        ));

        assert!(!m(&d, doc! { "pending": { "$nin": ["t9", "t2"] } }));
        assert!(m(&d, doc! { "pending": { "$nin": ["t9", "t8"] } }));
        assert!(m(&d, doc! { "missing": { "$nin": ["t1"] } }));
        assert!(!m(&d, doc! { "missing": { "$nin": [Bson::Null] } }));
        assert!(m(&d, doc! { "n": { "$nin": [] } }));
        // Through arrays of documents too.
        let docs = doc! { "items": [ { "k": 1 }, { "k": 2 } ] };
        assert!(!m(&docs, doc! { "items.k": { "$ne": 2 } }));
        assert!(m(&docs, doc! { "items.k": { "$ne": 3 } }));
    }

    #[test]
    fn in_operator() {
        let d = doc! { "state": "pending", "tags": ["x", "y"], "n": 2_i64 };
        assert!(m(&d, doc! { "state": { "$in": ["initial", "pending"] } }));
        assert!(!m(&d, doc! { "state": { "$in": ["done"] } }));
        assert!(!m(&d, doc! { "state": { "$in": [] } }));
        assert!(m(&d, doc! { "tags": { "$in": ["y", "z"] } }));
        assert!(m(&d, doc! { "n": { "$in": [2.0] } }));
        assert!(m(&d, doc! { "missing": { "$in": [Bson::Null, 1] } }));
        assert!(!m(&d, doc! { "missing": { "$in": [1] } }));
    }

    #[test]
    fn exists_operator() {
        let d = doc! { "a": Bson::Null, "b": { "c": 1 }, "arr": [ { "k": 1 }, { "j": 1 } ] };
        assert!(m(&d, doc! { "a": { "$exists": true } }));
        assert!(!m(&d, doc! { "a": { "$exists": false } }));
        assert!(m(&d, doc! { "z": { "$exists": false } }));
        assert!(!m(&d, doc! { "z": { "$exists": true } }));
        assert!(m(&d, doc! { "b.c": { "$exists": 1 } }));
        assert!(m(&d, doc! { "b.d": { "$exists": 0 } }));
        assert!(m(&d, doc! { "arr.k": { "$exists": true } }));
        assert!(!m(&d, doc! { "arr.k": { "$exists": false } }));
        assert!(m(&d, doc! { "arr.z": { "$exists": false } }));
        assert!(m(&d, doc! { "b": { "$exists": true, "$ne": Bson::Null } }));
    }

    #[test]
    fn logical_operators() {
        let d = doc! { "a": 1, "b": 2 };
        assert!(m(&d, doc! { "$and": [ { "a": 1 }, { "b": 2 } ] }));
        assert!(!m(&d, doc! { "$and": [ { "a": 1 }, { "b": 3 } ] }));
        assert!(m(&d, doc! { "$or": [ { "a": 5 }, { "b": 2 } ] }));
        assert!(!m(&d, doc! { "$or": [ { "a": 5 }, { "b": 5 } ] }));
        assert!(m(&d, doc! { "$nor": [ { "a": 5 }, { "b": 5 } ] }));
        assert!(!m(&d, doc! { "$nor": [ { "a": 1 } ] }));
        assert!(m(
            &d,
            doc! { "a": 1, "$or": [ { "$and": [ { "b": { "$gt": 1 } }, { "b": { "$lt": 3 } } ] }, { "c": 1 } ] }
        ));
    }

    #[test]
    fn not_operator() {
        let d = doc! { "a": 5, "s": "x", "arr": [1, 9] };
        assert!(m(&d, doc! { "a": { "$not": { "$gt": 7 } } }));
        assert!(!m(&d, doc! { "a": { "$not": { "$gt": 3 } } }));
        // A missing field, and a value of another type, are not greater: `$not` matches.
        assert!(m(&d, doc! { "b": { "$not": { "$gt": 7 } } }));
        assert!(m(&d, doc! { "s": { "$not": { "$gt": 7 } } }));
        // On an array, `$not` negates "some element matches".
        assert!(!m(&d, doc! { "arr": { "$not": { "$gt": 5 } } }));
        assert!(m(&d, doc! { "arr": { "$not": { "$gt": 9 } } }));
        // It negates the whole inner document, and combines with siblings.
        assert!(m(&d, doc! { "a": { "$not": { "$gt": 3, "$lt": 5 } } }));
        assert!(m(&d, doc! { "a": { "$gte": 1, "$not": { "$gt": 5 } } }));
        assert!(!m(&d, doc! { "a": { "$gte": 6, "$not": { "$gt": 5 } } }));
        assert!(m(
            &d,
            doc! { "$or": [ { "a": { "$not": { "$eq": 5 } } }, { "s": "x" } ] }
        ));
    }

    #[test]
    fn malformed_filters_are_rejected() {
        let d = doc! { "a": 1 };
        let e = err(&d, doc! { "a": { "$foo": 1 } });
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        assert!(e.message.contains("$foo"), "{}", e.message);
        let e = err(&d, doc! { "$where": "true" });
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        assert!(e.message.contains("$where"), "{}", e.message);
        // Rejected even when an earlier clause already fails.
        assert!(matches(&d, &doc! { "a": 2, "b": { "$size": 1 } }).is_err());
        assert!(matches(&d, &doc! { "a": { "$gt": 0, "b": 1 } }).is_err());
        assert!(matches(&d, &doc! { "a": { "$in": 1 } }).is_err());
        assert!(matches(&d, &doc! { "$or": [] }).is_err());
        assert!(matches(&d, &doc! { "$and": [1] }).is_err());
        assert!(matches(&d, &doc! { "a": { "$not": 1 } }).is_err());
        assert!(matches(&d, &doc! { "a": { "$not": { "$foo": 1 } } }).is_err());
        assert!(matches(&d, &doc! { "a": Bson::RegularExpression(bson::Regex { pattern: "x".into(), options: String::new() }) }).is_err());
        assert!(matches(&d, &doc! { "a..b": 1 }).is_err());
        // A document whose first key is not an operator is a literal value.
        assert!(!m(&d, doc! { "a": { "b": 1, "$gt": 0 } }));
    }

    /// 2025-01-01T00:00:00Z in milliseconds.
    const DEADLINE: i64 = 1_735_689_600_000;

    fn at(d: &Document, f: Document, now: i64) -> bool {
        matches_at(d, &f, Some(DateTime::from_millis(now))).unwrap()
    }

    #[test]
    fn expr_fences_on_now() {
        let d = doc! { "_id": "A", "pendingTransactions": ["T"] };
        let before = doc! { "_id": "A", "$expr": { "$lt": [ { "$toLong": "$$NOW" }, DEADLINE ] } };
        assert!(at(&d, before.clone(), DEADLINE - 1));
        assert!(!at(&d, before.clone(), DEADLINE));
        assert!(!at(&d, before.clone(), DEADLINE + 1));
        let after = doc! {
            "_id": "A", "pendingTransactions": "T",
            "$expr": { "$gte": [ { "$toLong": "$$NOW" }, DEADLINE ] },
        };
        assert!(!at(&d, after.clone(), DEADLINE - 1));
        assert!(at(&d, after.clone(), DEADLINE));
        assert!(!at(&doc! { "_id": "A" }, after, DEADLINE));
        // The other clauses still count.
        assert!(!at(&doc! { "_id": "B" }, before, DEADLINE - 1));
        // Numbers of every type compare numerically with the Int64.
        for limit in [Bson::Int64(DEADLINE), Bson::Double(DEADLINE as f64)] {
            let f = doc! { "$expr": { "$lte": [ { "$toLong": "$$NOW" }, limit ] } };
            assert!(at(&d, f.clone(), DEADLINE));
            assert!(!at(&d, f, DEADLINE + 1));
        }
        // Dates compare with dates: the direct form works too.
        let f = doc! { "$expr": { "$lt": [ "$$NOW", DateTime::from_millis(DEADLINE) ] } };
        assert!(at(&d, f.clone(), DEADLINE - 1));
        assert!(!at(&d, f, DEADLINE));
        // In `$and`, `$or` and `$nor` members.
        let fence = doc! { "$expr": { "$lt": [ { "$toLong": "$$NOW" }, DEADLINE ] } };
        assert!(at(
            &d,
            doc! { "$and": [ { "_id": "A" }, fence.clone() ] },
            0
        ));
        assert!(!at(
            &d,
            doc! { "$and": [ { "_id": "A" }, fence.clone() ] },
            DEADLINE
        ));
        assert!(at(&d, doc! { "$or": [ { "_id": "X" }, fence.clone() ] }, 0));
        assert!(!at(&d, doc! { "$nor": [ fence.clone() ] }, 0));
        assert!(at(&d, doc! { "$nor": [ fence ] }, DEADLINE));
    }

    #[test]
    fn expr_now_is_read_from_the_context() {
        let d = doc! { "_id": 1 };
        let f = doc! { "$expr": { "$gt": [ { "$toLong": "$$NOW" }, 0 ] } };
        // `matches` uses the system clock.
        assert!(m(&d, f.clone()));
        let system = doc! { "$expr": { "$and": [
            { "$gt": [ "$$NOW", DateTime::from_millis(DEADLINE) ] },
            { "$lt": [ "$$NOW", DateTime::from_millis(DEADLINE * 10) ] },
        ] } };
        assert!(m(&d, system));
        // Without a time, `$$NOW` is an error, unless it is never reached.
        let e = matches_at(&d, &f, None).unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        assert!(e.message.contains("$$NOW"), "{}", e.message);
        let unreached = doc! { "$expr": { "$and": [ false, { "$gt": [ "$$NOW", 0 ] } ] } };
        assert!(!matches_at(&d, &unreached, None).unwrap());
        assert!(!matches_at(
            &doc! { "_id": 2 },
            &doc! { "_id": 1, "$expr": "$$NOW" },
            None
        )
        .unwrap());
        // One value of `$$NOW` for the whole evaluation.
        let clock = crate::clock::ManualClock::default();
        let cx = Ctx::clock(&clock);
        let same = doc! { "$expr": { "$eq": [ "$$NOW", "$$NOW" ] } };
        assert!(eval_skipping(&d, &same, None, &cx));
        let t = cx.now().unwrap();
        clock.advance(std::time::Duration::from_secs(1));
        assert_eq!(cx.now().unwrap(), t);
        assert!(cx.check().is_ok());
    }

    #[test]
    fn expr_comparisons_and_logic() {
        let d = doc! { "n": 5, "l": 7_i64, "s": "x", "z": 0, "nul": Bson::Null, "t": DateTime::from_millis(5) };
        let e = |x: Document| at(&d, doc! { "$expr": x }, 0);
        assert!(e(doc! { "$lt": [ "$n", "$l" ] }));
        assert!(e(doc! { "$lte": [ "$n", 5.0 ] }));
        assert!(!e(doc! { "$gt": [ "$n", 5 ] }));
        assert!(e(doc! { "$gte": [ "$l", "$n" ] }));
        assert!(e(doc! { "$eq": [ "$n", 5_i64 ] }));
        assert!(e(doc! { "$ne": [ "$n", "$l" ] }));
        assert!(e(doc! { "$eq": [ "$s", "x" ] }));
        // Across brackets, by the order of brackets: numbers < strings < dates.
        assert!(e(doc! { "$lt": [ "$n", "$s" ] }));
        assert!(e(doc! { "$gt": [ "$t", "$s" ] }));
        assert!(e(doc! { "$lt": [ "$n", "$t" ] }));
        assert!(!e(doc! { "$eq": [ "$n", "5" ] }));
        // Missing is below null, and not equal to it.
        assert!(!e(doc! { "$eq": [ "$missing", Bson::Null ] }));
        assert!(e(doc! { "$eq": [ "$nul", Bson::Null ] }));
        assert!(e(doc! { "$lt": [ "$missing", Bson::Null ] }));
        assert!(e(doc! { "$eq": [ "$missing", "$other" ] }));
        // `$and` / `$or` and truthiness.
        assert!(e(
            doc! { "$and": [ { "$gt": [ "$n", 1 ] }, { "$lt": [ "$n", 9 ] } ] }
        ));
        assert!(!e(
            doc! { "$and": [ { "$gt": [ "$n", 1 ] }, { "$lt": [ "$n", 2 ] } ] }
        ));
        assert!(e(doc! { "$or": [ { "$gt": [ "$n", 9 ] }, true ] }));
        assert!(!e(doc! { "$or": [ "$z", "$nul", "$missing", false ] }));
        assert!(e(doc! { "$and": [] }));
        assert!(!e(doc! { "$or": [] }));
        assert!(e(doc! { "$and": [ "$n", "$s", f64::NAN ] }));
        assert!(at(&d, doc! { "$expr": true }, 0));
        assert!(!at(&d, doc! { "$expr": 0 }, 0));
        assert!(at(&d, doc! { "$expr": "$s" }, 0));
        assert!(!at(&d, doc! { "$expr": "$missing" }, 0));
        // A single operand may be given without its array.
        assert!(e(doc! { "$and": { "$eq": [ "$n", 5 ] } }));
    }

    #[test]
    fn expr_field_paths() {
        let d = doc! {
            "a": { "b": 3, "at": DateTime::from_millis(100) },
            "list": [ { "k": 1 }, { "j": 2 }, 7, { "k": 3 } ],
            "nums": [10, 20],
            "want": { "ks": [1, 3], "none": [] },
        };
        let e = |x: Document| at(&d, doc! { "$expr": x }, 150);
        assert!(e(doc! { "$eq": [ "$a.b", 3 ] }));
        assert!(e(doc! { "$gt": [ "$$NOW", "$a.at" ] }));
        assert!(e(doc! { "$eq": [ { "$toLong": "$a.at" }, 100 ] }));
        assert!(e(doc! { "$eq": [ "$a.b.c", "$missing" ] }));
        // Through an array: the values found in its documents.
        assert!(e(doc! { "$eq": [ "$list.k", "$want.ks" ] }));
        assert!(e(doc! { "$eq": [ "$list.x", "$want.none" ] }));
        // Numeric segments are field names, not indexes.
        assert!(e(doc! { "$eq": [ "$nums.0", "$want.none" ] }));
        assert!(e(doc! { "$gt": [ "$nums", "$want" ] }));
        assert!(!e(doc! { "$eq": [ "$list.k", "$want.none" ] }));
    }

    #[test]
    fn expr_to_long() {
        let d = doc! {
            "i": 7, "l": 9_i64, "f": 2.9, "g": -2.9, "b": true, "s": "-42", "nul": Bson::Null,
            "bad": "4x", "nan": f64::NAN, "big": 1e19, "o": { "x": 1 }, "t": DateTime::from_millis(-5),
        };
        let long_of = |path: &str, want: Bson| {
            let f = doc! { "$expr": { "$eq": [ { "$toLong": path }, want.clone() ] } };
            assert!(at(&d, f, 0), "{path} -> {want}");
            // The result is an Int64 (or null).
            let c = Ctx::at(None);
            let expr = Bson::Document(doc! { "$toLong": path });
            let v = eval_expr(&d, &expr, &c).unwrap();
            assert!(
                matches!(v.as_deref(), Some(Bson::Int64(_) | Bson::Null)),
                "{v:?}"
            );
        };
        long_of("$i", Bson::Int64(7));
        long_of("$l", Bson::Int64(9));
        long_of("$f", Bson::Int64(2));
        long_of("$g", Bson::Int64(-2));
        long_of("$b", Bson::Int64(1));
        long_of("$s", Bson::Int64(-42));
        long_of("$t", Bson::Int64(-5));
        long_of("$nul", Bson::Null);
        long_of("$missing", Bson::Null);
        assert!(at(
            &d,
            doc! { "$expr": { "$eq": [ { "$toLong": [ 3.5 ] }, 3 ] } },
            0
        ));
        // Failed conversions fail the evaluation, as on MongoDB.
        for (path, kind) in [
            ("$bad", StoreErrorKind::Other),
            ("$nan", StoreErrorKind::Other),
            ("$big", StoreErrorKind::Overflow),
            ("$o", StoreErrorKind::Other),
        ] {
            let f = doc! { "$expr": { "$lt": [ { "$toLong": path }, 5 ] } };
            let e = matches_at(&d, &f, Some(DateTime::from_millis(0))).unwrap_err();
            assert_eq!(
                (e.kind, e.code),
                (kind, Some(CONVERSION_FAILURE)),
                "{path}: {e}"
            );
        }
    }

    #[test]
    fn unsupported_expressions_are_rejected() {
        let d = doc! { "a": 1 };
        let rejected = |f: Document, name: &str| {
            let e = matches_at(&d, &f, Some(DateTime::from_millis(0))).unwrap_err();
            assert_eq!(e.kind, StoreErrorKind::BadRequest, "{f}");
            assert_eq!(e.code, Some(BAD_VALUE));
            assert!(e.message.contains(name), "{f}: {}", e.message);
        };
        rejected(doc! { "$expr": { "$add": [ "$a", 1 ] } }, "$add");
        rejected(
            doc! { "$expr": { "$lt": [ { "$add": [ "$a", 1 ] }, 5 ] } },
            "$add",
        );
        rejected(
            doc! { "$expr": { "$lt": [ { "$toLong": "$$CLUSTER_TIME" }, 5 ] } },
            "$$CLUSTER_TIME",
        );
        rejected(doc! { "$expr": { "$eq": [ "$$ROOT", 5 ] } }, "$$ROOT");
        rejected(doc! { "$expr": { "$eq": [ "$$NOW.x", 5 ] } }, "$$NOW.x");
        rejected(doc! { "$expr": { "$literal": 5 } }, "$literal");
        rejected(doc! { "$expr": { "$lt": [ 1 ] } }, "$lt");
        rejected(doc! { "$expr": { "$lt": [ 1, 2, 3 ] } }, "$lt");
        rejected(doc! { "$expr": { "$toLong": [ 1, 2 ] } }, "$toLong");
        rejected(
            doc! { "$expr": { "$lt": [ 1, 2 ], "$gt": [ 1, 2 ] } },
            "exactly one field",
        );
        rejected(doc! { "$expr": { "x": 1 } }, "object expressions");
        rejected(doc! { "$expr": [ true ] }, "array expressions");
        rejected(
            doc! { "$expr": { "$eq": [ "$", 1 ] } },
            "invalid field path",
        );
        rejected(
            doc! { "$expr": { "$eq": [ "$a..b", 1 ] } },
            "invalid field path",
        );
        rejected(
            doc! { "$expr": { "$eq": [ "$a.$b", 1 ] } },
            "invalid field path",
        );
        rejected(doc! { "$or": [ { "$expr": { "$add": [ 1 ] } } ] }, "$add");
        // Rejected even when another clause already fails.
        rejected(doc! { "a": 2, "$expr": { "$add": [ 1 ] } }, "$add");
        // `$expr` is a top-level operator only, and not allowed in `$pull`.
        rejected(doc! { "a": { "$expr": true } }, "$expr");
        let e = validate_pull_filter(&doc! { "$expr": true }).unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        assert!(e.message.contains("$expr"), "{}", e.message);
        validate_pull_filter(&doc! { "k": { "$gt": 1 } }).unwrap();
    }

    #[test]
    fn lookup_paths() {
        let d = doc! { "a": { "b": [ { "c": 1 }, 2 ] }, "x": 5 };
        assert_eq!(lookup(&d, "x"), Some(&Bson::Int32(5)));
        assert_eq!(lookup(&d, "a.b.0.c"), Some(&Bson::Int32(1)));
        assert_eq!(lookup(&d, "a.b.1"), Some(&Bson::Int32(2)));
        assert_eq!(lookup(&d, "a.b.2"), None);
        assert_eq!(lookup(&d, "a.b.c"), None);
        assert_eq!(lookup(&d, "x.y"), None);
        assert_eq!(lookup(&d, "nope"), None);
        assert!(matches!(lookup(&d, "a"), Some(Bson::Document(_))));
    }

    #[test]
    fn array_index_segments() {
        assert_eq!(array_index("0"), Some(0));
        assert_eq!(array_index("12"), Some(12));
        assert_eq!(array_index("01"), None);
        assert_eq!(array_index("-1"), None);
        assert_eq!(array_index(""), None);
        assert_eq!(array_index("a"), None);
    }
}
