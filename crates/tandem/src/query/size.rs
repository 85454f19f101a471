//! The size of values serialized as BSON, computed without serializing.
//!
//! The embedded store keeps each document's size up to date from what an
//! update changed, instead of measuring the whole document again.

use bson::{Bson, Document};

/// The length of `doc` serialized as BSON.
pub(crate) fn document_len(doc: &Document) -> usize {
    // int32 length, elements, trailing NUL; each element is a type byte,
    // the NUL-terminated key, then the value.
    5 + doc
        .iter()
        .map(|(k, v)| 2 + k.len() + value_len(v))
        .sum::<usize>()
}

/// The length of the value of a BSON element holding `v` (without the
/// element's type byte and key).
pub(crate) fn value_len(v: &Bson) -> usize {
    // A BSON string: int32 length, bytes, NUL.
    let string = |s: &str| 5 + s.len();
    match v {
        Bson::Double(_) | Bson::Int64(_) | Bson::DateTime(_) | Bson::Timestamp(_) => 8,
        Bson::Int32(_) => 4,
        Bson::Boolean(_) => 1,
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => 0,
        Bson::ObjectId(_) => 12,
        Bson::Decimal128(_) => 16,
        Bson::String(s) | Bson::Symbol(s) | Bson::JavaScriptCode(s) => string(s),
        Bson::Document(d) => document_len(d),
        Bson::Array(a) => array_len(a),
        Bson::Binary(b) => {
            let old = b.subtype == bson::spec::BinarySubtype::BinaryOld;
            5 + b.bytes.len() + if old { 4 } else { 0 }
        }
        Bson::RegularExpression(r) => r.pattern.len() + 1 + r.options.len() + 1,
        Bson::JavaScriptCodeWithScope(c) => 4 + string(&c.code) + document_len(&c.scope),
        // A namespace string and an ObjectId; the namespace is not public,
        // so measure the value through its serialized form.
        Bson::DbPointer(_) => {
            let mut d = Document::new();
            d.insert("", v.clone());
            bson::to_vec(&d).map(|b| b.len() - 7).unwrap_or(0)
        }
    }
}

/// [`document_len`] of a document nesting non-empty documents and arrays
/// no more than `levels` levels deep, itself included; `None` for one
/// nesting deeper, found without recursing further than `levels` calls.
pub(crate) fn document_len_within(doc: &Document, levels: usize) -> Option<usize> {
    if doc.is_empty() {
        return Some(5);
    }
    let room = levels.checked_sub(1)?;
    let mut len = 5;
    for (k, v) in doc {
        len += 2 + k.len() + value_len_within(v, room)?;
    }
    Some(len)
}

/// [`value_len`] of a value nesting no more than `levels` levels, as
/// [`document_len_within`].
fn value_len_within(v: &Bson, levels: usize) -> Option<usize> {
    match v {
        Bson::Document(d) => document_len_within(d, levels),
        Bson::Array(a) if a.is_empty() => Some(5),
        Bson::Array(a) => {
            let room = levels.checked_sub(1)?;
            let mut len = 5 + key_digits(a.len());
            for e in a {
                len += 2 + value_len_within(e, room)?;
            }
            Some(len)
        }
        // MongoDB does not count a scope's levels; measuring it must not
        // recurse without bound all the same.
        Bson::JavaScriptCodeWithScope(c) => {
            Some(4 + 5 + c.code.len() + document_len_within(&c.scope, levels)?)
        }
        v => Some(value_len(v)),
    }
}

/// The length of an array serialized as BSON (a document keyed "0", "1", ...).
pub(crate) fn array_len(a: &[Bson]) -> usize {
    5 + key_digits(a.len()) + a.iter().map(|e| 2 + value_len(e)).sum::<usize>()
}

/// The length of the element at index `i` of an array: type byte, key, value.
pub(crate) fn array_element_len(i: usize, v: &Bson) -> usize {
    2 + decimal_digits(i) + value_len(v)
}

/// The number of decimal digits of `i`.
pub(crate) fn decimal_digits(mut i: usize) -> usize {
    let mut n = 1;
    while i >= 10 {
        i /= 10;
        n += 1;
    }
    n
}

/// The total length of the keys "0", "1", ..., of an array of `n` elements:
/// the sum of the decimal digits of `0 .. n`.
pub(crate) fn key_digits(n: usize) -> usize {
    let mut total = 0;
    let mut digits = 1;
    let mut low = 0;
    let mut high = 10;
    while low < n {
        total += (n.min(high) - low) * digits;
        digits += 1;
        low = high;
        high = high.saturating_mul(10);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_len_within_measures_within_its_levels() {
        let mut v = Bson::Int32(1);
        for levels in 1..40 {
            v = if levels % 2 == 0 {
                Bson::Document(bson::doc! { "x": v, "e": [], "f": {} })
            } else {
                Bson::Array(vec![v, Bson::String("s".into())])
            };
            let d = bson::doc! { "_id": 1, "v": v.clone() };
            // The document, and `levels` below it; empty ones do not count.
            assert_eq!(document_len_within(&d, levels + 1), Some(document_len(&d)));
            assert_eq!(document_len_within(&d, levels + 5), Some(document_len(&d)));
            assert_eq!(document_len_within(&d, levels), None, "{levels}");
        }
        assert_eq!(document_len_within(&Document::new(), 0), Some(5));
    }

    #[test]
    fn key_digits_sums_decimal_digits() {
        let mut sum = 0;
        for n in 0..2000 {
            assert_eq!(key_digits(n), sum, "{n}");
            sum += decimal_digits(n);
        }
        assert_eq!(decimal_digits(0), 1);
        assert_eq!(decimal_digits(9), 1);
        assert_eq!(decimal_digits(10), 2);
        assert_eq!(decimal_digits(1000), 4);
    }

    #[test]
    fn array_len_matches_serialization() {
        for n in [0, 1, 9, 10, 11, 99, 100, 101, 250] {
            let a: Vec<Bson> = (0..n).map(|i| Bson::String(format!("t{i}"))).collect();
            let d = bson::doc! { "a": a.clone() };
            assert_eq!(document_len(&d), bson::to_vec(&d).unwrap().len(), "{n}");
            assert_eq!(value_len(&Bson::Array(a)), document_len(&d) - 5 - 3, "{n}");
        }
    }
}
