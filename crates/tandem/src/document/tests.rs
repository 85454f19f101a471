use super::*;
use crate::Namespace;

#[test]
fn plain_specs_are_what_serde_writes() {
    let ns = Namespace::new("bank", "accounts");
    let mut changes = vec![
        DocumentChange::update(ns.clone(), "A")
            .inc("balance", -100_i64)
            .require_gte("balance", 100_i64),
        DocumentChange::update(ns.clone(), 7_i32)
            .set("s", doc! { "a": [1, "x", null, 2.5] })
            .unset("u")
            .inc("n", 1.5)
            .push("list", "v")
            .pull("list", 3_i64),
        DocumentChange::insert(
            ns.clone(),
            "o1",
            doc! { "state": "UnPaid", "n": { "m": true } },
        ),
        DocumentChange::delete(ns.clone(), 9_i64),
    ];
    let mut stored = DocumentChange::update(ns.clone(), "B").set("x", 1);
    stored.store = Some("other".into());
    stored.marker = "pending".into();
    changes.push(stored);
    let mut guarded = DocumentChange::delete(ns, "G");
    for op in [
        GuardOp::Eq,
        GuardOp::Ne,
        GuardOp::Gt,
        GuardOp::Gte,
        GuardOp::Lt,
        GuardOp::Lte,
        GuardOp::Exists,
        GuardOp::Missing,
    ] {
        guarded.guards.push(crate::change::Guard {
            path: "g".into(),
            op,
            value: Bson::Int32(1),
        });
    }
    changes.push(guarded);
    for change in changes {
        let fast = change.plain_spec().expect("plain");
        assert_eq!(fast, bson::to_document(&change).unwrap(), "{change:?}");
        // The same bytes, key order included.
        assert_eq!(
            bson::to_vec(&fast).unwrap(),
            bson::to_vec(&bson::to_document(&change).unwrap()).unwrap()
        );
    }
}

/// Numbers MongoDB holds equal get one key, whatever their type: an
/// integral double up to (not only near) 2^63, and a `Decimal128`, exactly
/// where it is an integer.
#[test]
fn equal_numeric_ids_share_one_key() {
    use bson::Decimal128;
    let decimal = |s: &str| Bson::Decimal128(s.parse::<Decimal128>().unwrap());
    let same = [
        (
            Bson::Int64(9_220_000_000_000_000_000),
            Bson::Double(9.22e18),
        ),
        (Bson::Int32(7), decimal("7")),
        (Bson::Int64(7), decimal("7.00")),
        (Bson::Int64(1500), decimal("1.5E+3")),
        (Bson::Int64(i64::MAX), decimal("9223372036854775807")),
        (
            Bson::Int64(i64::MIN),
            Bson::Double(-9_223_372_036_854_775_808.0),
        ),
        (Bson::Double(0.5), decimal("0.50")),
        (Bson::Int64(0), decimal("-0")),
        (Bson::Double(f64::INFINITY), decimal("Infinity")),
        (Bson::Double(f64::NEG_INFINITY), decimal("-Infinity")),
        (decimal("1E+400"), decimal("10E+399")),
        (Bson::Double(f64::NAN), decimal("NaN")),
        (Bson::String("S".into()), Bson::Symbol("S".into())),
    ];
    // Compared as the key is: serialized (a NaN is not equal to itself).
    let key = |id: &Bson| bson::to_vec(&doc! { "id": canonical_id(id) }).unwrap();
    for (a, b) in same {
        assert_eq!(key(&a), key(&b), "{a:?} and {b:?}");
    }
    let apart = [
        (
            Bson::Int64(i64::MAX),
            Bson::Double(9_223_372_036_854_775_808.0),
        ),
        (
            Bson::Int64((1 << 53) + 1),
            Bson::Double(9_007_199_254_740_992.0),
        ),
        (Bson::Int64(7), decimal("7.5")),
        (Bson::Int64(7), Bson::String("7".into())),
    ];
    for (a, b) in apart {
        assert_ne!(key(&a), key(&b), "{a:?} and {b:?}");
    }
}

#[test]
fn decimal_integers_are_read_exactly() {
    for (text, value) in [
        ("0", Some(0)),
        ("-12", Some(-12)),
        ("+12", Some(12)),
        ("7.000", Some(7)),
        ("1.5E+3", Some(1500)),
        ("15E-1", None),
        ("150E-1", Some(15)),
        ("9223372036854775807", Some(i64::MAX)),
        ("-9223372036854775808", Some(i64::MIN)),
        ("9223372036854775808", None),
        ("1E+19", None),
        ("0.1", None),
        ("NaN", None),
        ("Infinity", None),
        ("", None),
        ("1.2.3", None),
    ] {
        assert_eq!(decimal_integer(text), value, "{text}");
    }
}

/// A string `_id`'s key, written out directly, is the BSON `bson::to_vec`
/// writes for the document it stands for.
#[test]
fn a_string_key_is_the_bson_of_its_document() {
    for (db, collection, id) in [
        ("bank", "accounts", Bson::String("acct-00001".into())),
        ("", "", Bson::String(String::new())),
        ("d\u{e9}j\u{e0}", "a.b", Bson::Symbol("s\0x".into())),
    ] {
        let spec = bson::doc! {
            "namespace": { "db": db, "collection": collection },
            "id": id.clone(),
        };
        let text = match &id {
            Bson::String(s) | Bson::Symbol(s) => s.clone(),
            _ => unreachable!(),
        };
        let written = bson::to_vec(&bson::doc! { "db": db, "collection": collection, "id": text })
            .expect("a document of strings is written");
        assert_eq!(super::document_key(super::KIND, &spec), Some(written));
    }
}
