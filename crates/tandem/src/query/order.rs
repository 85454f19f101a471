//! How values compare: MongoDB's order across type brackets, equality, and
//! the total order used for sorting and for `_id`s.

use std::cmp::Ordering;

use bson::{Bson, Document};

/// Compares two values as MongoDB does, or `None` when they are in different
/// type brackets and so are not comparable.
///
/// The brackets, in MongoDB's order, are: MinKey; undefined; null; numbers
/// (Int32, Int64, Double, compared numerically across types, NaN below every
/// other number); strings and symbols (bytewise); documents; arrays; binary
/// data; ObjectIds; booleans; dates; timestamps; regular expressions;
/// DBPointers; JavaScript; JavaScript with scope; MaxKey. Documents and arrays
/// compare element by element. A Decimal128 compares exactly with every
/// number (`Decimal128("1.0")` equals `1`; a NaN decimal a NaN double).
///
/// (Run as the unit test `query::doc_examples::compare`: the module is internal.)
/// ```ignore
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
    Some(total_cmp(a, b))
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
pub(super) fn same_str(a: &str, b: &str) -> bool {
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
/// `Double(1.0)` are the same `_id`, and so are `3` and `Decimal128("3.0")`).
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
        (Bson::Decimal128(_), _) | (_, Bson::Decimal128(_)) => {
            super::decimal::cmp_numbers_exactly(a, b).unwrap_or(Ordering::Equal)
        }
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
