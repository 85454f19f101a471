use super::*;
use crate::query::{size, split_dot};
use crate::store::StoreErrorKind;
use bson::{doc, Timestamp};

mod properties;

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

/// `$inc` with a decimal adds in decimal, as MongoDB does: an integer
/// field becomes a decimal, the exponent is the smaller one (`1.50 + 1` is
/// `2.50`), compared here by the bytes. A double and a decimal are refused.
#[test]
fn inc_decimals() {
    let dec = |t: &str| Bson::Decimal128(t.parse().unwrap());
    let bytes = |v: Option<&Bson>| match v {
        Some(Bson::Decimal128(d)) => d.bytes(),
        other => panic!("not a decimal: {other:?}"),
    };
    let d = upd(
        doc! { "a": dec("1.50"), "b": 7, "c": 2_i64, "d": dec("100.10"), "e": dec("0.1") },
        doc! { "$inc": {
            "a": 1, "b": dec("0.25"), "c": dec("-2.0"), "d": dec("-20.25"), "e": dec("0.2"),
            "new": dec("1.0"),
        } },
    );
    for (field, want) in [
        ("a", "2.50"),
        ("b", "7.25"),
        ("c", "0.0"),
        ("d", "79.85"),
        ("e", "0.3"),
        ("new", "1.0"),
    ] {
        assert_eq!(bytes(d.get(field)), bytes(Some(&dec(want))), "{field}");
    }
    // Rounded to 34 digits, half to even.
    let d = upd(
        doc! { "a": dec("1000000000000000000000000000000001") },
        doc! { "$inc": { "a": dec("0.5") } },
    );
    assert_eq!(
        bytes(d.get("a")),
        bytes(Some(&dec("1000000000000000000000000000000002")))
    );
    for (field, by) in [(Bson::Double(1.5), dec("1")), (dec("1"), Bson::Double(1.5))] {
        let e = fail(doc! { "_id": 1, "a": field }, doc! { "$inc": { "a": by } });
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        assert!(e.message.contains("double and a decimal"), "{}", e.message);
    }
    let e = fail(doc! { "a": "x" }, doc! { "$inc": { "a": dec("1") } });
    assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
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
    // A non-numeric argument: code 14 too, as MongoDB answers it (the store
    // contract's `inc_of_a_string_is_a_type_mismatch` found it was BadRequest).
    let e = fail(doc! { "n": 1 }, doc! { "$inc": { "n": "1" } });
    assert_eq!(e.kind, StoreErrorKind::TypeMismatch);
    assert_eq!(e.code, Some(14));
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
            crate::store::UpdateOptions::default(),
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

fn keys(d: &Document) -> Vec<&str> {
    d.keys().map(String::as_str).collect()
}

/// Found by the differential test against a server: new fields were
/// appended in the order the update listed them; MongoDB appends them in
/// path order, across operators.
#[test]
fn new_fields_are_appended_in_path_order() {
    let d = upd(
        doc! { "_id": 1, "m": 0 },
        doc! { "$set": { "z": 1, "c": 1 }, "$inc": { "b": 1, "m": 1 }, "$push": { "a": 1 } },
    );
    assert_eq!(keys(&d), vec!["_id", "m", "a", "b", "c", "z"]);
    // Nested, and array-index-like names as numbers.
    let d = upd(
        doc! { "_id": 1, "s": { "y": 0 } },
        doc! { "$set": { "s.x": 1, "s.10": 1, "s.2": 1, "s.b": 1 } },
    );
    assert_eq!(
        keys(d.get_document("s").unwrap()),
        vec!["y", "2", "10", "b", "x"]
    );
    // Already in order: the same result.
    let d = upd(
        doc! { "_id": 1 },
        doc! { "$set": { "a": 1 }, "$inc": { "b": 1 } },
    );
    assert_eq!(keys(&d), vec!["_id", "a", "b"]);
    // A document being created (an upsert) too.
    let mut created = doc! { "_id": 1 };
    apply_to_new(
        &mut created,
        doc! { "$setOnInsert": { "y": 1 }, "$set": { "x": 1 }, "$inc": { "a": 1 } },
        now(),
    )
    .unwrap();
    assert_eq!(keys(&created), vec!["_id", "a", "x", "y"]);
    // Taking the values out of the update: the same order.
    let mut d = doc! { "_id": 1 };
    let mut u = doc! { "$set": { "z": "v" }, "$inc": { "a": 1 } };
    let mut undo = UndoLog::default();
    apply_logged_taking(&mut d, &mut u, now(), false, &mut undo).unwrap();
    assert_eq!(keys(&d), vec!["_id", "a", "z"]);
}

/// Found by the differential test: an upsert seeds a single-value `$in` as
/// an equality, adds the equalities in path order, and (checked) refuses a
/// path matched twice or with an extension of it, as MongoDB does.
#[test]
fn upsert_seeds_as_mongodb_builds_them() {
    assert_eq!(
        upsert_seed(&doc! { "_id": 1, "a": { "$in": [0] }, "b": { "$in": [1, 2] } }),
        doc! { "_id": 1, "a": 0 }
    );
    let seed = upsert_seed(&doc! { "_id": 1, "b": 0, "arr": 0, "a.y": 1, "a.x": 1 });
    assert_eq!(keys(&seed), vec!["_id", "a", "arr", "b"]);
    assert_eq!(keys(seed.get_document("a").unwrap()), vec!["x", "y"]);
    for filter in [
        doc! { "$and": [ { "b": 0 }, { "b": 0 } ] },
        doc! { "a": 1, "a.b": 2 },
        doc! { "sub.x": 0, "sub": { "x": 0 } },
    ] {
        let e = checked_upsert_seed(&filter).unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest, "{filter}");
        assert_eq!(e.code, Some(54), "{filter}");
        assert!(
            e.message.contains("cannot infer query fields to set"),
            "{e}"
        );
    }
    assert_eq!(
        checked_upsert_seed(&doc! { "a.b": 1, "a.c": 2, "ab": 3 }).unwrap(),
        doc! { "a": { "b": 1, "c": 2 }, "ab": 3 }
    );
}

/// `$max` sets a missing field, raises a smaller one, and leaves a value
/// as large or larger; on a new document it sets the field.
#[test]
fn max_raises_only() {
    assert_eq!(
        upd(doc! {}, doc! { "$max": { "m.lease": 30_i64 } }),
        doc! { "m": { "lease": 30_i64 } }
    );
    assert_eq!(
        upd(doc! { "n": 10_i64 }, doc! { "$max": { "n": 30_i64 } }),
        doc! { "n": 30_i64 }
    );
    assert_eq!(
        upd(doc! { "n": 60_i64 }, doc! { "$max": { "n": 30_i64 } }),
        doc! { "n": 60_i64 }
    );
    let mut kept = doc! { "n": 60_i64 };
    let update = doc! { "$max": { "n": 30_i64 } };
    let mut log = UndoLog::default();
    apply_logged(&mut kept, &update, now(), false, &mut log).unwrap();
    assert!(!log.changed(&kept));
    let mut d = upsert_seed(&doc! { "_id": "p" });
    apply_to_new(&mut d, doc! { "$max": { "lease": 5_i64 } }, now()).unwrap();
    assert_eq!(d, doc! { "_id": "p", "lease": 5_i64 });
}
