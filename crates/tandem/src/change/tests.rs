use super::*;

fn ns() -> Namespace {
    Namespace::new("bank", "accounts")
}

#[test]
fn paths_with_operators_are_rejected() {
    for bad in ["", "$set", "a.$where", "a..b", ".a", "a\0b"] {
        let err = DocumentChange::update(ns(), "A")
            .set(bad, 1)
            .validate()
            .unwrap_err();
        assert!(
            matches!(err, ChangeError::InvalidPath { .. }),
            "{bad:?}: {err}"
        );
    }
}

/// `tags.01` is `tags.1` to MongoDB's updates and a field "01" to its
/// queries, so no guard or before-image could follow a change to it: it is
/// refused before anything is written, in changes and in guards alike.
#[test]
fn numbers_with_leading_zeros_are_rejected_as_segments() {
    for bad in ["tags.01", "a.00.b", "codes.007"] {
        let set = DocumentChange::update(ns(), "A").set(bad, 1).validate();
        let guard = DocumentChange::update(ns(), "A")
            .set("n", 1)
            .require_eq(bad, 1)
            .validate();
        for err in [set, guard] {
            assert!(
                matches!(&err, Err(ChangeError::InvalidPath { reason, .. }) if reason.contains("leading zero")),
                "{bad:?}: {err:?}"
            );
        }
    }
    let insert = DocumentChange::insert(ns(), "C", bson::doc! { "007": "bond" }).validate();
    assert!(insert.is_ok(), "{insert:?}");
    // A top-level field is a field whatever its name (the document root is
    // never an array), so `007` is one.
    for good in ["tags.0", "tags.10", "a.0b", "x0", "007", "007.a"] {
        let ok = DocumentChange::update(ns(), "A").set(good, 1).validate();
        assert!(ok.is_ok(), "{good:?}: {ok:?}");
    }
}

#[test]
fn namespaces_with_operators_are_rejected() {
    for (db, coll) in [("", "c"), ("a.b", "c"), ("d", "$cmd"), ("d", "")] {
        let err = DocumentChange::update(Namespace::new(db, coll), "A")
            .inc("n", 1)
            .validate()
            .unwrap_err();
        assert!(
            matches!(err, ChangeError::InvalidNamespace { .. }),
            "{db}.{coll}"
        );
    }
}

#[test]
fn reserved_and_overlapping_fields_are_rejected() {
    let err = DocumentChange::update(ns(), "A")
        .set("pendingTransactions", 1)
        .validate();
    assert!(matches!(err, Err(ChangeError::ReservedField { .. })));
    let err = DocumentChange::update(ns(), "A")
        .set("_tandem.lock", 1)
        .validate();
    assert!(matches!(err, Err(ChangeError::ReservedField { .. })));
    let err = DocumentChange::update(ns(), "A")
        .set("a", 1)
        .inc("a.b", 1)
        .validate();
    assert!(matches!(err, Err(ChangeError::OverlappingPaths { .. })));
    assert!(DocumentChange::update(ns(), "A")
        .set("ab", 1)
        .inc("a.b", 1)
        .validate()
        .is_ok());
}

#[test]
fn ids_that_would_act_as_operators_are_rejected() {
    for id in [Bson::Null, bson::bson!({ "$gt": "" }), bson::bson!([1, 2])] {
        let err = DocumentChange::update(ns(), id.clone())
            .inc("n", 1)
            .validate();
        assert!(
            matches!(err, Err(ChangeError::InvalidPath { .. })),
            "{id:?}"
        );
    }
    assert!(DocumentChange::update(ns(), bson::bson!({ "a": 1 }))
        .inc("n", 1)
        .validate()
        .is_ok());
}

#[test]
fn values_with_operator_keys_are_rejected() {
    let hostile = bson::doc! { "$ne": "x" };
    for change in [
        DocumentChange::update(ns(), "A").pull("tags", hostile.clone()),
        DocumentChange::update(ns(), "A").push("tags", vec![hostile.clone()]),
        DocumentChange::update(ns(), "A").set("owner", bson::doc! { "name": hostile.clone() }),
        DocumentChange::insert(ns(), "A", bson::doc! { "owner": hostile.clone() }),
    ] {
        assert!(
            matches!(change.validate(), Err(ChangeError::OperatorInValue { ref key, .. }) if key == "$ne"),
            "{change:?}"
        );
    }
}

#[test]
fn bad_amounts_are_rejected() {
    for by in [
        Bson::Int64(0),
        Bson::Int32(0),
        Bson::Double(f64::NAN),
        Bson::Int64(i64::MIN),
    ] {
        let err = DocumentChange::update(ns(), "A")
            .inc("n", by.clone())
            .validate();
        assert!(
            matches!(err, Err(ChangeError::InvalidAmount { .. })),
            "{by:?}"
        );
    }
    let err = DocumentChange::update(ns(), "A").inc("n", "ten").validate();
    assert!(matches!(err, Err(ChangeError::InvalidAmount { .. })));
}

/// A `Decimal128` amount is taken unless it is zero (whatever its sign and
/// exponent) or not finite; its sign says debit or credit.
#[test]
fn decimal_amounts_are_checked_and_signed() {
    let dec = |text: &str| Bson::Decimal128(text.parse().unwrap());
    for (text, reason) in [
        ("0", "zero"),
        ("-0.00", "zero"),
        ("0E+10", "zero"),
        ("NaN", "not a finite number"),
        ("-Infinity", "not a finite number"),
    ] {
        let err = DocumentChange::update(ns(), "A")
            .inc("n", dec(text))
            .validate();
        assert!(
            matches!(&err, Err(ChangeError::InvalidAmount { reason: r, .. }) if *r == reason),
            "{text}: {err:?}"
        );
    }
    for (text, early) in [
        ("-20.25", true),
        ("0.01", false),
        ("-1E-30", true),
        ("1E+30", false),
    ] {
        let change = DocumentChange::update(ns(), "A").inc("n", dec(text));
        assert!(change.validate().is_ok(), "{text}");
        let DocumentOp::Update { ops } = &change.op else {
            unreachable!()
        };
        assert_eq!(change.applies_early(&ops[0]), early, "{text}");
    }
}

#[test]
fn exclusivity_follows_the_operators() {
    assert!(!DocumentChange::update(ns(), "A").inc("n", 1).is_exclusive());
    assert!(DocumentChange::update(ns(), "A")
        .inc("n", 1)
        .set("s", 1)
        .is_exclusive());
    assert!(DocumentChange::delete(ns(), "A").is_exclusive());
    assert!(!DocumentChange::update(ns(), "A")
        .inc("n", -1)
        .require_gte("n", 1)
        .is_exclusive());
    assert!(DocumentChange::update(ns(), "A")
        .inc("n", -1)
        .require_lte("n", 9)
        .is_exclusive());
    // Presence stays true as credits land; absence does not.
    assert!(!DocumentChange::update(ns(), "A")
        .inc("n", 1)
        .require_exists("n")
        .is_exclusive());
    assert!(DocumentChange::update(ns(), "A")
        .inc("n", 1)
        .require_missing("n")
        .is_exclusive());
}

#[test]
fn credits_wait_for_the_commit_on_shared_documents() {
    let shared = DocumentChange::update(ns(), "A").inc("a", 5).inc("b", -5);
    let DocumentOp::Update { ops } = &shared.op else {
        unreachable!()
    };
    assert!(!shared.applies_early(&ops[0]));
    assert!(shared.applies_early(&ops[1]));
    let exclusive = DocumentChange::update(ns(), "A").inc("a", 5).set("s", 1);
    let DocumentOp::Update { ops } = &exclusive.op else {
        unreachable!()
    };
    assert!(exclusive.applies_early(&ops[0]));
}

#[test]
fn guards_render_as_filters_and_text() {
    let g = Guard {
        path: "balance".into(),
        op: GuardOp::Gte,
        value: Bson::Int64(100),
    };
    assert_eq!(g.to_filter(), bson::doc! { "balance": { "$gte": 100_i64 } });
    assert_eq!(g.to_string(), "balance >= 100");
}

#[test]
fn a_change_round_trips_through_bson() {
    let change = DocumentChange::update(ns(), "A")
        .inc("balance", -5_i64)
        .set("state", "Paid")
        .require_eq("state", "UnPaid");
    let doc = bson::to_document(&change).unwrap();
    let back: DocumentChange = bson::from_document(doc).unwrap();
    assert_eq!(back, change);
}
