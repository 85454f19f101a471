use super::*;
use proptest::prelude::*;

fn value() -> impl Strategy<Value = Bson> {
    prop_oneof![
        (-3..3i32).prop_map(Bson::Int32),
        Just(Bson::Int64(i64::MAX)),
        Just(Bson::Double(0.5)),
        "[a-c]".prop_map(Bson::String),
        proptest::collection::vec((0..3i32).prop_map(Bson::Int32), 0..3).prop_map(Bson::Array),
        (0..3i32).prop_map(|x| Bson::Document(doc! { "x": x })),
    ]
}

fn document() -> impl Strategy<Value = Document> {
    proptest::collection::vec((prop_oneof!["a", "b", "c", "l"], value()), 0..5).prop_map(|fields| {
        let mut d = doc! { "_id": 1 };
        for (k, v) in fields {
            d.insert(k, v);
        }
        d
    })
}

fn update() -> impl Strategy<Value = Document> {
    let op = prop_oneof![
        Just("$set"),
        Just("$unset"),
        Just("$inc"),
        Just("$push"),
        Just("$addToSet"),
        Just("$pull"),
        Just("$currentDate"),
    ];
    let path = prop_oneof![
        Just("a"),
        Just("b"),
        Just("c"),
        Just("l"),
        Just("a.x"),
        Just("b.x"),
        Just("l.0"),
        Just("l.3"),
        Just("_id"),
        Just("n.m"),
    ];
    proptest::collection::vec((op, path, value()), 1..5).prop_map(|ops| {
        let mut u = Document::new();
        for (op, path, value) in ops {
            let value = match op {
                "$inc" => Bson::Int32(1),
                "$currentDate" => Bson::Boolean(true),
                _ => value,
            };
            if !u.contains_key(op) {
                u.insert(op, Document::new());
            }
            if let Some(Bson::Document(spec)) = u.get_mut(op) {
                spec.insert(path, value);
            }
        }
        u
    })
}

fn keys(d: &Document) -> Vec<String> {
    d.keys().cloned().collect()
}

proptest! {
    #[test]
    fn updates_are_all_or_nothing(original in document(), u in update()) {
        let mut d = original.clone();
        match apply_update(&mut d, &u, now(), false) {
            Err(_) => {
                prop_assert_eq!(&d, &original);
                prop_assert_eq!(keys(&d), keys(&original));
            }
            Ok(()) => {
                let mut logged = original.clone();
                let mut undo = UndoLog::default();
                apply_logged(&mut logged, &u, now(), false, &mut undo).unwrap();
                prop_assert_eq!(&logged, &d);
                prop_assert_eq!(undo.changed(&logged), logged != original);
                prop_assert_eq!(
                    size::document_len(&original) as isize + undo.size_delta(),
                    size::document_len(&logged) as isize
                );
                undo.rollback(&mut logged);
                prop_assert_eq!(&logged, &original);
                prop_assert_eq!(keys(&logged), keys(&original));
            }
        }
    }
}

/// Values for deeper documents: nested documents, arrays of
/// documents, arrays longer than ten elements, NaN.
fn deep_value() -> impl Strategy<Value = Bson> {
    let leaf = prop_oneof![
        (-3..3i32).prop_map(Bson::Int32),
        Just(Bson::Int64(7)),
        Just(Bson::Double(f64::NAN)),
        Just(Bson::Double(-0.0)),
        Just(Bson::Null),
        "[a-c]{0,3}".prop_map(Bson::String),
    ];
    leaf.prop_recursive(3, 40, 12, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..13).prop_map(Bson::Array),
            proptest::collection::vec((prop_oneof!["x", "y", "k"], inner), 0..4).prop_map(
                |fields| {
                    let mut d = Document::new();
                    for (k, v) in fields {
                        d.insert(k, v);
                    }
                    Bson::Document(d)
                }
            ),
        ]
    })
}

fn deep_document() -> impl Strategy<Value = Document> {
    proptest::collection::vec((prop_oneof!["a", "b", "l", "d"], deep_value()), 0..5).prop_map(
        |fields| {
            let mut d = doc! { "_id": 1 };
            for (k, v) in fields {
                d.insert(k, v);
            }
            d
        },
    )
}

fn deep_update() -> impl Strategy<Value = Document> {
    let op = prop_oneof![
        Just("$set"),
        Just("$unset"),
        Just("$inc"),
        Just("$push"),
        Just("$addToSet"),
        Just("$pull"),
        Just("$currentDate"),
        Just("$setOnInsert"),
    ];
    let path = prop_oneof![
        "[abld]",
        "[abld]\\.[xyk0-9]",
        "[abld]\\.(1[0-2]|[0-9])\\.[xyk0-9]",
        "[abld]\\.[xyk]\\.[xyk]",
        Just("l.12".to_owned()),
        Just("n.m.o".to_owned()),
    ];
    let value = prop_oneof![
        deep_value(),
        Just(Bson::Document(doc! { "$in": [1, "a", Bson::Null] })),
        Just(Bson::Document(doc! { "$gte": 0 })),
        Just(Bson::Document(doc! { "x": 1 })),
        Just(Bson::Document(doc! { "$each": [1, 1, "b", [2]] })),
        Just(Bson::Document(doc! { "$each": [1, "b"], "$slice": -3 })),
        Just(Bson::Document(doc! { "$each": [1], "$slice": -1_i64 })),
        Just(Bson::Document(doc! { "$each": [], "$slice": -2 })),
        Just(Bson::Document(doc! { "$each": [1, 2, 3], "$slice": -2 })),
        Just(Bson::Document(doc! { "$each": [[1], 1], "$slice": -12 })),
        Just(Bson::Document(doc! { "$each": [1], "$slice": 2 })),
    ];
    proptest::collection::vec((op, path, value), 1..6).prop_map(|ops| {
        let mut u = Document::new();
        for (op, path, value) in ops {
            let value = match op {
                "$inc" => Bson::Int32(1),
                "$currentDate" => Bson::Boolean(true),
                _ => value,
            };
            if !u.contains_key(op) {
                u.insert(op, Document::new());
            }
            if let Some(Bson::Document(spec)) = u.get_mut(op) {
                spec.insert(path, value);
            }
        }
        u
    })
}

/// Whether a top-level field that `u` touches differs (with `Bson`'s
/// `==`) between `before` and `after`.
fn touched_field_differs(
    before: &Document,
    after: &Document,
    u: &Document,
    inserting: bool,
) -> bool {
    u.iter()
        .filter(|(op, _)| inserting || op.as_str() != "$setOnInsert")
        .filter_map(|(_, spec)| spec.as_document())
        .flat_map(Document::keys)
        .any(|path| {
            let key = split_dot(path).map_or(path.as_str(), |(first, _)| first);
            before.get(key) != after.get(key)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_undo_log_restores_measures_and_detects_changes(
        original in deep_document(),
        u in deep_update(),
        inserting in any::<bool>(),
    ) {
        let mut d = original.clone();
        let mut undo = UndoLog::default();
        match apply_logged(&mut d, &u, now(), inserting, &mut undo) {
            Err(_) => {}
            Ok(()) => {
                prop_assert_eq!(
                    undo.changed(&d),
                    touched_field_differs(&original, &d, &u, inserting)
                );
                let measured = size::document_len(&original) as isize + undo.size_delta();
                prop_assert_eq!(measured, bson::to_vec(&d).unwrap().len() as isize);
                // Taking the values out of the update gives the same result.
                let mut taken = original.clone();
                let mut emptied = u.clone();
                let mut undo_taking = UndoLog::default();
                apply_logged_taking(&mut taken, &mut emptied, now(), inserting, &mut undo_taking).unwrap();
                prop_assert_eq!(format!("{taken}"), format!("{d}"));
                prop_assert_eq!(keys(&taken), keys(&d));
                prop_assert_eq!(undo_taking.changed(&taken), undo.changed(&d));
                prop_assert_eq!(undo_taking.size_delta(), undo.size_delta());
                undo_taking.rollback(&mut taken);
                prop_assert_eq!(format!("{taken}"), format!("{original}"));
                // Applied to a new document, the update gives the same result.
                if inserting {
                    let mut created = original.clone();
                    apply_to_new(&mut created, u.clone(), now()).unwrap();
                    prop_assert_eq!(keys(&created), keys(&d));
                    prop_assert_eq!(format!("{created}"), format!("{d}"));
                }
            }
        }
        undo.rollback(&mut d);
        prop_assert_eq!(format!("{d}"), format!("{original}"));
        prop_assert_eq!(keys(&d), keys(&original));
    }

    #[test]
    fn updates_of_new_documents_fail_as_logged_ones_do(
        original in deep_document(),
        u in deep_update(),
    ) {
        let mut logged = original.clone();
        let mut created = original.clone();
        let mut taken = original.clone();
        let a = apply_update(&mut logged, &u, now(), true);
        let b = apply_to_new(&mut created, u.clone(), now());
        let mut emptied = u.clone();
        let mut undo = UndoLog::default();
        let c = apply_logged_taking(&mut taken, &mut emptied, now(), true, &mut undo);
        let a = a.map_err(|e| (e.kind, e.code, e.message));
        prop_assert_eq!(&a, &b.map_err(|e| (e.kind, e.code, e.message)));
        prop_assert_eq!(&a, &c.map_err(|e| (e.kind, e.code, e.message)));
        undo.rollback(&mut taken);
        prop_assert_eq!(format!("{taken}"), format!("{original}"));
    }
}

proptest! {
    /// The byte-wise path order agrees with the segment-by-segment definition
    /// (numbers by value, dots ending segments, prefixes first).
    #[test]
    fn path_order_agrees_with_its_definition(a in "[ab019.-]{0,7}", b in "[ab019.-]{0,7}") {
        prop_assert_eq!(
            path::path_order(&a, &b),
            path::path_order_by_segments(&a, &b),
            "{:?} against {:?}", a, b
        );
    }
}
