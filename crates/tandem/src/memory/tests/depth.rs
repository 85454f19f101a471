//! The nesting limit of stored documents: 180 levels of non-empty
//! documents and arrays, the document itself included, as MongoDB counts
//! them (code 15). Measuring a document recursed through every level, so
//! a document nested tens of thousands of levels deep overflowed the stack.

use super::*;
use crate::store::{FindOneAndUpdateOptions, UpdateOptions};

/// A value nesting `levels` documents around a number.
fn nested(levels: usize) -> Bson {
    let mut v = Bson::Int32(1);
    for _ in 0..levels {
        v = Bson::Document(doc! { "x": v });
    }
    v
}

/// A dotted path of `segments` segments.
fn path(segments: usize) -> String {
    vec!["p"; segments].join(".")
}

fn overflow(e: &StoreError) {
    assert_eq!(e.kind, StoreErrorKind::Overflow, "{e}");
    assert_eq!(e.code, Some(15), "{e}");
}

#[tokio::test]
async fn inserts_nesting_past_180_levels_are_refused() {
    let s = MemoryStore::new();
    // The document and 179 levels below it: 180.
    s.insert_one(&ns(), doc! { "_id": 1, "a": nested(179) })
        .await
        .unwrap();
    let e = s
        .insert_one(&ns(), doc! { "_id": 2, "a": nested(180) })
        .await
        .unwrap_err();
    overflow(&e);
    assert!(e.message.contains("180 levels"), "{e}");
    // Empty documents and arrays do not count.
    let mut empty_below = Bson::Document(doc! {});
    for _ in 0..179 {
        empty_below = Bson::Array(vec![empty_below]);
    }
    s.insert_one(&ns(), doc! { "_id": 3, "a": empty_below })
        .await
        .unwrap();
    let e = s
        .replace_one(&ns(), doc! { "_id": 1 }, doc! { "a": nested(180) })
        .await
        .unwrap_err();
    overflow(&e);
    let ids: Vec<Bson> = s
        .documents(&ns())
        .iter()
        .map(|d| d.get("_id").unwrap().clone())
        .collect();
    assert_eq!(ids, vec![Bson::Int32(1), Bson::Int32(3)]);
    assert_eq!(
        s.documents(&ns())[0],
        doc! { "_id": 1, "a": nested(179) },
        "the refused replacement changed nothing"
    );
}

#[tokio::test]
async fn a_document_nested_far_too_deep_is_refused_without_exhausting_the_stack() {
    let s = MemoryStore::new();
    let e = s
        .insert_one(&ns(), doc! { "_id": 1, "a": nested(100_000) })
        .await
        .unwrap_err();
    overflow(&e);
    assert!(s.documents(&ns()).is_empty());
}

#[tokio::test]
async fn updates_nesting_past_180_levels_are_refused_and_change_nothing() {
    let s = store_with(vec![doc! { "_id": 1, "n": 0 }]).await;
    let before = s.documents(&ns());
    let refused = [
        // Two levels of path (the document, `a`), then 179 below `b`.
        doc! { "$set": { "a.b": nested(179) }, "$inc": { "n": 1 } },
        doc! { "$setOnInsert": { "x": 1 }, "$max": { "m": nested(180) } },
        // The array is a level: its elements may nest 178 below it.
        doc! { "$push": { "l": nested(179) } },
        doc! { "$addToSet": { "l": { "$each": [1, nested(179)] } } },
        // A path alone: 181 levels.
        doc! { "$inc": { path(181): 1 } },
        doc! { "$currentDate": { path(181): true } },
    ];
    for update in refused {
        let e = s
            .update_one(
                &ns(),
                doc! { "_id": 1 },
                update.clone(),
                UpdateOptions::default(),
            )
            .await
            .unwrap_err();
        overflow(&e);
        assert_eq!(s.documents(&ns()), before, "{update}");
        let e = s
            .find_one_and_update(
                &ns(),
                doc! { "_id": 1 },
                update.clone(),
                FindOneAndUpdateOptions::returning(ReturnDocument::After),
            )
            .await
            .unwrap_err();
        overflow(&e);
        assert_eq!(s.documents(&ns()), before, "{update}");
        // An upsert's new document too.
        let e = s
            .update_one(
                &ns(),
                doc! { "_id": 2 },
                update.clone(),
                UpdateOptions::upsert(),
            )
            .await
            .unwrap_err();
        overflow(&e);
        assert_eq!(s.documents(&ns()), before, "{update}");
    }
    let at_the_limit = [
        doc! { "$set": { "a.b": nested(178) } },
        doc! { "$max": { "m": nested(179) } },
        doc! { "$push": { "l": nested(178) } },
        doc! { "$addToSet": { "k": { "$each": [nested(178)] } } },
        doc! { "$push": { "e": { "$each": [] } } },
        doc! { "$inc": { path(180): 1 } },
        // Taking away writes nothing.
        doc! { "$unset": { path(300): "" } },
        doc! { "$pull": { path(300): nested(300) } },
    ];
    for update in at_the_limit {
        s.update_one(
            &ns(),
            doc! { "_id": 1 },
            update.clone(),
            UpdateOptions::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{update}: {e}"));
    }
    let d = s.documents(&ns()).remove(0);
    assert_eq!(d.get_document("a").unwrap(), &doc! { "b": nested(178) });
    assert_eq!(d.get("m"), Some(&nested(179)));
}
