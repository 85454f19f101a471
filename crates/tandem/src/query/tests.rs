use super::eval::{any_equal, any_value, test_value};
use super::expr::eval_expr;
use super::order::same_str;
use super::*;
use bson::oid::ObjectId;
use bson::{doc, Binary, DateTime};
use std::cmp::Ordering;

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
    // An element named by its index is compared whole, not looked into
    // (MongoDB's matcher: an array offset at the end of a path is no
    // implicit traversal).
    assert!(!m(&d, doc! { "nested.0": 2 }));
    assert!(m(&d, doc! { "nested.0": [1, 2] }));
    assert!(!m(&d, doc! { "nested.0": { "$type": "int" } }));
    assert!(m(&d, doc! { "nested.1": [3] }));
    // A numeric segment also names the field of each document element.
    let keyed = doc! { "m": [{ "0": "x" }, { "k": 1 }] };
    assert!(m(&keyed, doc! { "m.0": "x" }));
    assert!(!m(&keyed, doc! { "m.0": { "k": 1 } }));
    assert!(m(&keyed, doc! { "m.1": { "k": 1 } }));
    assert!(!m(&keyed, doc! { "m.0.0": { "$exists": false } }));
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
    rejected(doc! { "$expr": { "$multiply": [ "$a", 1 ] } }, "$multiply");
    rejected(
        doc! { "$expr": { "$lt": [ { "$multiply": [ "$a", 1 ] }, 5 ] } },
        "$multiply",
    );
    rejected(
        doc! { "$expr": { "$lt": [ { "$toLong": "$$CLUSTER_TIME" }, 5 ] } },
        "$$CLUSTER_TIME",
    );
    rejected(doc! { "$expr": { "$eq": [ "$$CURRENT", 5 ] } }, "$$CURRENT");
    rejected(doc! { "$expr": { "$eq": [ "$$NOW.x", 5 ] } }, "$$NOW.x");
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
    rejected(
        doc! { "$or": [ { "$expr": { "$multiply": [ 1 ] } } ] },
        "$multiply",
    );
    // Rejected even when another clause already fails.
    rejected(
        doc! { "a": 2, "$expr": { "$multiply": [ 1 ] } },
        "$multiply",
    );
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

/// `$literal` is its value as it is: an array or a document is not an
/// expression, a string starting with `$` no field path; `$eq` of a field
/// and a literal array compares whole values (not "an array holding it").
#[test]
fn literal_values_compare_whole() {
    let now = Some(DateTime::from_millis(0));
    let same = doc! { "$expr": { "$eq": [ "$t", { "$literal": ["x"] } ] } };
    assert!(matches_at(&doc! { "t": ["x"] }, &same, now).unwrap());
    assert!(!matches_at(&doc! { "t": [["x"]] }, &same, now).unwrap());
    assert!(!matches_at(&doc! { "t": "x" }, &same, now).unwrap());
    let dollar = doc! { "$expr": { "$eq": [ "$s", { "$literal": "$a" } ] } };
    assert!(matches_at(&doc! { "s": "$a", "a": 1 }, &dollar, now).unwrap());
    assert!(!matches_at(&doc! { "s": 1, "a": 1 }, &dollar, now).unwrap());
}

/// `$let` binds variables for `in` (read with a path, `$$v.a`, too);
/// `$cond` picks a branch; `$isArray` and `$arrayElemAt` (from the end when
/// negative, missing past either end, null for null, an error for a
/// non-array) reach array elements, which a field path's numeric segment
/// does not.
#[test]
fn let_cond_and_array_elements() {
    let now = Some(DateTime::from_millis(0));
    let d = doc! { "items": [{ "tags": ["a"] }, { "tags": ["b"] }], "s": "x", "nul": Bson::Null };
    let holds = |expr: Document| matches_at(&d, &doc! { "$expr": expr }, now).unwrap();
    let element = |i: i32| {
        doc! { "$let": {
            "vars": { "v": "$items" },
            "in": { "$cond": [{ "$isArray": "$$v" }, { "$arrayElemAt": ["$$v", i] }, "$$v.0"] },
        } }
    };
    let tags = |i: i32| doc! { "$let": { "vars": { "v": element(i) }, "in": "$$v.tags" } };
    assert!(holds(doc! { "$eq": [tags(0), { "$literal": ["a"] }] }));
    assert!(holds(doc! { "$eq": [tags(-1), { "$literal": ["b"] }] }));
    assert!(!holds(
        doc! { "$eq": ["$items.0.tags", { "$literal": ["a"] }] }
    ));
    // Past the end: missing, which only missing equals.
    assert!(holds(
        doc! { "$eq": [{ "$arrayElemAt": ["$items", 2] }, "$none"] }
    ));
    assert!(!holds(
        doc! { "$eq": [{ "$arrayElemAt": ["$items", 2] }, Bson::Null] }
    ));
    assert!(holds(
        doc! { "$eq": [{ "$arrayElemAt": ["$nul", 0] }, Bson::Null] }
    ));
    assert!(holds(doc! { "$eq": [{ "$cond": [false, 1, 2] }, 2] }));
    assert!(!holds(doc! { "$isArray": "$s" }));
    let e = matches_at(
        &d,
        &doc! { "$expr": { "$eq": [{ "$arrayElemAt": ["$s", 0] }, 1] } },
        now,
    )
    .unwrap_err();
    assert_eq!(e.code, Some(28689), "{e:?}");
    // Unbound variables, bad names and bad arities are refused up front.
    for bad in [
        doc! { "$eq": ["$$v", 1] },
        doc! { "$let": { "vars": { "V": 1 }, "in": "$$V" } },
        doc! { "$let": { "vars": { "v": "$$v" }, "in": 1 } },
        doc! { "$cond": [true, 1] },
        doc! { "$arrayElemAt": ["$items"] },
    ] {
        let e = matches_at(&d, &doc! { "$expr": bad.clone() }, now).unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest, "{bad}: {e:?}");
    }
}

fn decimal(s: &str) -> Bson {
    Bson::Decimal128(s.parse().unwrap())
}

/// A decimal zero is false, as every numeric zero is (`$exists` takes its
/// argument's truth, `$and` and `$cond` their operands'); it was true.
#[test]
fn a_decimal_zero_is_false() {
    for zero in ["0", "-0", "0.000", "0E+10"] {
        let d = doc! { "a": decimal(zero) };
        assert!(!m(&d, doc! { "$expr": "$a" }), "{zero}");
        assert!(!m(&d, doc! { "$expr": { "$and": ["$a"] } }), "{zero}");
        assert!(
            !m(&d, doc! { "$expr": { "$cond": ["$a", true, false] } }),
            "{zero}"
        );
        assert!(!m(&d, doc! { "a": { "$exists": decimal(zero) } }), "{zero}");
        assert!(m(&d, doc! { "b": { "$exists": decimal(zero) } }), "{zero}");
    }
    for truth in ["1", "-0.001", "NaN", "Infinity"] {
        let d = doc! { "a": decimal(truth) };
        assert!(m(&d, doc! { "$expr": "$a" }), "{truth}");
        assert!(
            m(&d, doc! { "a": { "$exists": decimal(truth) } }),
            "{truth}"
        );
    }
}

/// `$toLong` of a decimal truncates toward zero; out of range, NaN and the
/// infinities fail as conversions (it refused every decimal).
#[test]
fn to_long_truncates_a_decimal() {
    let long_of = |v: &str, want: i64| {
        let d = doc! { "p": decimal(v) };
        assert!(
            m(&d, doc! { "$expr": { "$eq": [{ "$toLong": "$p" }, want] } }),
            "{v} -> {want}"
        );
    };
    long_of("5.7", 5);
    long_of("-5.7", -5);
    long_of("0.9", 0);
    long_of("1E+3", 1000);
    long_of("9223372036854775807.9", i64::MAX);
    long_of("-9223372036854775808", i64::MIN);
    for bad in [
        "9223372036854775808",
        "-9223372036854775809.5",
        "NaN",
        "-Infinity",
    ] {
        let e = err(
            &doc! { "p": decimal(bad) },
            doc! { "$expr": { "$toLong": "$p" } },
        );
        assert_eq!(e.code, Some(CONVERSION_FAILURE), "{bad}: {e}");
    }
}

/// `$subtract` with a decimal subtracts in decimal; a double and a decimal
/// are refused as this store's limit, not as a type error MongoDB would not
/// raise; a date less milliseconds is a date.
#[test]
fn subtract_decimals_and_moves_dates() {
    assert!(m(
        &doc! { "a": 95, "p": decimal("5") },
        doc! { "$expr": { "$eq": ["$a", { "$subtract": [100_i64, "$p"] }] } },
    ));
    let e = err(
        &doc! { "a": 90, "p": decimal("5") },
        doc! { "$expr": { "$lte": ["$a", { "$subtract": [100.0, "$p"] }] } },
    );
    assert_eq!(e.kind, StoreErrorKind::BadRequest);
    assert!(
        e.message
            .contains("does not $subtract a double and a decimal"),
        "{e}"
    );
    // A number less a date is MongoDB's type error.
    let e = err(
        &doc! { "p": decimal("5"), "t": bson::DateTime::from_millis(1) },
        doc! { "$expr": { "$subtract": ["$p", "$t"] } },
    );
    assert_eq!(e.code, Some(16556), "{e}");
    let at = bson::DateTime::from_millis(10_000);
    for ms in [Bson::Double(1_000.9), decimal("1000.2")] {
        assert!(
            m(
                &doc! { "t": at, "ms": ms.clone() },
                doc! { "$expr": { "$eq": [{ "$subtract": ["$t", "$ms"] }, bson::DateTime::from_millis(9_000)] } }
            ),
            "{ms}"
        );
    }
    assert!(m(
        &doc! { "t": at },
        doc! { "$expr": { "$eq": [{ "$subtract": ["$t", 1_000_i64] }, bson::DateTime::from_millis(9_000)] } }
    ));
}

/// `$add`: numbers, widening as MongoDB does; a date plus milliseconds is
/// a date; null or missing gives null, which no number compares below (a
/// placeholder's validity `reservedAt + leaseMillis` without its lease
/// never holds); a decimal adds in decimal, and is refused with a double or
/// a date as this store's limit.
#[test]
fn add_numbers_and_dates() {
    let d = doc! { "i": 2_i32, "l": 40_i64, "f": 0.5, "t": bson::DateTime::from_millis(10_000) };
    let eq = |e: Bson, want: Bson| m(&d, doc! { "$expr": { "$eq": [e, { "$literal": want }] } });
    assert!(eq(
        Bson::Document(doc! { "$add": ["$i", "$i"] }),
        Bson::Int32(4)
    ));
    assert!(eq(
        Bson::Document(doc! { "$add": ["$i", "$l"] }),
        Bson::Int64(42)
    ));
    assert!(eq(
        Bson::Document(doc! { "$add": ["$i", "$f"] }),
        Bson::Double(2.5)
    ));
    assert!(eq(
        Bson::Document(doc! { "$add": [i32::MAX, 1_i32] }),
        Bson::Int64(i64::from(i32::MAX) + 1)
    ));
    assert!(eq(
        Bson::Document(doc! { "$add": ["$t", 500_i64] }),
        Bson::DateTime(bson::DateTime::from_millis(10_500))
    ));
    assert!(eq(
        Bson::Document(doc! { "$add": [{ "$toLong": "$t" }, "$l"] }),
        Bson::Int64(10_040)
    ));
    assert!(eq(
        Bson::Document(doc! { "$add": ["$l", "$missing"] }),
        Bson::Null
    ));
    assert!(!m(
        &d,
        doc! { "$expr": { "$lt": [1_i64, { "$add": [{ "$toLong": "$t" }, "$missing"] }] } }
    ));
    assert!(eq(
        Bson::Document(doc! { "$add": ["$l", decimal("1.5")] }),
        decimal("41.5")
    ));
    for refused in [
        doc! { "$add": ["$f", decimal("1")] },
        doc! { "$add": [decimal("1"), "$t"] },
    ] {
        let e = err(&d, doc! { "$expr": refused.clone() });
        assert_eq!(e.kind, StoreErrorKind::BadRequest, "{refused}");
        assert!(e.message.contains("embedded store"), "{refused}: {e}");
    }
    assert_eq!(
        err(&d, doc! { "$expr": { "$add": ["$t", "$t"] } }).kind,
        StoreErrorKind::BadRequest
    );
}

/// `$$ROOT` is the document (a path under it, a field of it), and
/// `$bsonSize` measures a document as BSON: null for null or missing, an
/// error (31393) for anything else.
#[test]
fn bson_size_of_the_document_and_its_fields() {
    let d = doc! { "a": 1, "sub": { "x": "text" }, "n": Bson::Null };
    let at = Some(DateTime::from_millis(0));
    let size = |v: &Document| {
        let mut bytes = Vec::new();
        v.to_writer(&mut bytes).unwrap();
        bytes.len() as i64
    };
    let holds = |f: Document| matches_at(&d, &f, at).unwrap();
    assert!(holds(
        doc! { "$expr": { "$eq": [ { "$bsonSize": "$$ROOT" }, size(&d) ] } }
    ));
    assert!(!holds(
        doc! { "$expr": { "$lt": [ { "$bsonSize": "$$ROOT" }, size(&d) ] } }
    ));
    assert!(holds(
        doc! { "$expr": { "$eq": [ { "$bsonSize": "$sub" }, size(&doc! { "x": "text" }) ] } }
    ));
    assert!(holds(
        doc! { "$expr": { "$eq": [ "$$ROOT.sub.x", "text" ] } }
    ));
    assert!(holds(
        doc! { "$expr": { "$eq": [ { "$bsonSize": "$missing" }, Bson::Null ] } }
    ));
    assert!(holds(
        doc! { "$expr": { "$eq": [ { "$bsonSize": "$n" }, Bson::Null ] } }
    ));
    let e = matches_at(
        &d,
        &doc! { "$expr": { "$eq": [ { "$bsonSize": "$a" }, 1 ] } },
        at,
    )
    .unwrap_err();
    assert_eq!(e.code, Some(31393), "{e}");
}

/// `$add` and `$subtract` with a decimal give a decimal of MongoDB's
/// exponent (`1.50 + 1` is `2.50`), compared here by its bytes; integers
/// are decimals of exponent 0; one operand is added to `0` (so `1E+2`
/// alone is `100`, as MongoDB's running total of an `Int32` 0 makes it).
#[test]
fn decimal_add_and_subtract_keep_mongodb_exponents() {
    let d = doc! { "p": decimal("1.50"), "q": decimal("0.1"), "i": 1, "l": -3_i64 };
    let value = |expr: Document| {
        let c = Ctx::at(None);
        let expr = Bson::Document(expr);
        eval_expr(&d, &expr, &c).unwrap().map(|v| v.into_owned())
    };
    let bytes = |v: Option<Bson>| match v {
        Some(Bson::Decimal128(d)) => d.bytes(),
        other => panic!("not a decimal: {other:?}"),
    };
    let want = |text: &str| text.parse::<bson::Decimal128>().unwrap().bytes();
    for (expr, result) in [
        (doc! { "$add": ["$p", "$i"] }, "2.50"),
        (doc! { "$add": ["$i", "$p"] }, "2.50"),
        (doc! { "$add": ["$q", decimal("0.2")] }, "0.3"),
        (doc! { "$add": ["$p", "$l", "$q"] }, "-1.40"),
        (doc! { "$add": [decimal("1E+2")] }, "100"),
        (doc! { "$add": ["$i", decimal("-1.0")] }, "0.0"),
        (
            doc! { "$subtract": [decimal("100.10"), decimal("20.25")] },
            "79.85",
        ),
        (doc! { "$subtract": ["$l", "$p"] }, "-4.50"),
        (doc! { "$subtract": ["$p", "$p"] }, "0.00"),
    ] {
        assert_eq!(bytes(value(expr.clone())), want(result), "{expr}");
    }
    assert_eq!(value(doc! { "$add": ["$p", "$missing"] }), Some(Bson::Null));
    assert_eq!(
        value(doc! { "$subtract": ["$p", Bson::Null] }),
        Some(Bson::Null)
    );
}
