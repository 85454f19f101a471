//! The 16 MiB document limit, and the stored sizes that enforce it.

use super::*;

#[tokio::test]
async fn documents_over_16_mib_are_refused() {
    let s = store_with(vec![doc! { "_id": 1, "small": "x" }]).await;
    let before = s.documents(&ns());
    let half = "x".repeat(9 * 1024 * 1024);
    // One field fits; the second would exceed the limit.
    s.update_one(
        &ns(),
        doc! { "_id": 1 },
        doc! { "$set": { "a": half.clone() } },
        crate::store::UpdateOptions::default(),
    )
    .await
    .unwrap();
    let fitting = s.documents(&ns());
    let e = s
        .update_one(
            &ns(),
            doc! { "_id": 1 },
            doc! { "$set": { "b": half.clone() } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::DocumentTooLarge);
    assert_eq!(e.code, Some(10334));
    assert_eq!(s.documents(&ns()), fitting);
    let e = s
        .find_one_and_update(
            &ns(),
            doc! { "_id": 1 },
            doc! { "$push": { "l": half.clone() } },
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::DocumentTooLarge);
    assert_eq!(s.documents(&ns()), fitting);
    let e = s
        .replace_one(
            &ns(),
            doc! { "_id": 1 },
            doc! { "a": half.clone(), "b": half.clone() },
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::DocumentTooLarge);
    assert_eq!(s.documents(&ns()), fitting);
    let e = s
        .insert_one(
            &ns(),
            doc! { "_id": 2, "a": half.clone(), "b": half.clone() },
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::DocumentTooLarge);
    let e = s
        .update_one(
            &ns(),
            doc! { "_id": 3 },
            doc! { "$set": { "a": half.clone(), "b": half } },
            crate::store::UpdateOptions::upsert(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::DocumentTooLarge);
    assert_eq!(s.documents(&ns()).len(), 1);
    assert_ne!(fitting, before);
}

#[test]
fn document_len_matches_serialization() {
    let samples = vec![
        doc! {},
        doc! { "a": 1, "b": 2_i64, "c": 1.5, "d": "text", "e": true, "f": Bson::Null },
        doc! { "n": { "x": [1, "two", { "three": 3 }, [4]] }, "long": (0..120).collect::<Vec<i32>>() },
        doc! {
            "oid": ObjectId::new(), "date": DateTime::now(),
            "ts": bson::Timestamp { time: 1, increment: 2 },
            "bin": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2, 3] },
            "old": bson::Binary { subtype: bson::spec::BinarySubtype::BinaryOld, bytes: vec![1, 2] },
            "re": Bson::RegularExpression(bson::Regex { pattern: "a+".into(), options: "i".into() }),
            "js": Bson::JavaScriptCode("f()".into()),
            "jss": Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code: "g()".into(), scope: doc! { "v": 1 } }),
            "sym": Bson::Symbol("s".into()), "min": Bson::MinKey, "max": Bson::MaxKey, "u": Bson::Undefined,
            "dec": Bson::Decimal128(bson::Decimal128::from_bytes([0; 16])),
            "ünï": "çødé",
        },
    ];
    for d in samples {
        assert_eq!(document_len(&d), bson::to_vec(&d).unwrap().len(), "{d}");
    }
}

#[tokio::test]
async fn stored_sizes_follow_updates() {
    let s = store_with(vec![doc! { "_id": "a", "n": 1, "l": ["t0"] }]).await;
    let sizes_match = |s: &MemoryStore| {
        let data = s.lock();
        for stored in data.get(&ns()).unwrap().docs.values() {
            assert_eq!(
                stored.len,
                bson::to_vec(&stored.doc).unwrap().len(),
                "{}",
                stored.doc
            );
        }
    };
    for u in [
        doc! { "$push": { "l": { "$each": (1..12).map(|i| format!("t{i}")).collect::<Vec<_>>() } } },
        // An Int32 becoming a Decimal128: 12 bytes more.
        doc! { "$inc": { "n": Bson::Decimal128("0.25".parse().unwrap()) } },
        doc! { "$pull": { "l": { "$in": ["t0", "t5"] } }, "$set": { "m.x": [1, 2] } },
        doc! { "$addToSet": { "_tandem.tombstones": "tx1" }, "$inc": { "n": 2_i64 } },
        doc! { "$unset": { "m": "", "n": "" }, "$currentDate": { "at": true } },
        doc! { "$set": { "l.20": { "k": "v" } }, "$pull": { "_tandem.tombstones": "tx1" } },
    ] {
        s.update_one(
            &ns(),
            doc! { "_id": "a" },
            u.clone(),
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
        sizes_match(&s);
        // A refused update leaves the size as it was.
        let e = s
            .update_one(
                &ns(),
                doc! { "_id": "a" },
                doc! { "$set": { "z": 1 }, "$inc": { "l": 1 } },
                crate::store::UpdateOptions::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::TypeMismatch, "{u}");
        sizes_match(&s);
    }
    s.update_one(
        &ns(),
        doc! { "_id": "b" },
        doc! { "$setOnInsert": { "p": [1, 2] } },
        crate::store::UpdateOptions::upsert(),
    )
    .await
    .unwrap();
    s.replace_one(&ns(), doc! { "_id": "a" }, doc! { "r": "x" })
        .await
        .unwrap();
    sizes_match(&s);
}
