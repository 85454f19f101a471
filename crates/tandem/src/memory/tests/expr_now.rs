//! `$$NOW` in filters: the store's clock fences steps by deadline.

use super::*;

/// A store on a manual clock holding `docs`, and the clock's time in ms.
async fn clocked_store_with(docs: Vec<Document>) -> (MemoryStore, Arc<ManualClock>, i64) {
    let clock = Arc::new(ManualClock::default());
    let s = MemoryStore::with_clock(clock.clone());
    for d in docs {
        s.insert_one(&ns(), d).await.unwrap();
    }
    let t0 = clock.now().timestamp_millis();
    (s, clock, t0)
}

/// Applies only before `deadline` (ms since the epoch).
fn before(deadline: i64) -> Document {
    doc! { "$lt": [ { "$toLong": "$$NOW" }, deadline ] }
}

/// Applies only at or after `time` (ms since the epoch).
fn from(time: i64) -> Document {
    doc! { "$gte": [ { "$toLong": "$$NOW" }, time ] }
}

#[tokio::test]
async fn expr_now_fences_update_one_before_a_deadline() {
    let (s, clock, t0) = clocked_store_with(vec![doc! { "_id": "A", "n": 0 }]).await;
    let deadline = t0 + 1000;
    let fenced = doc! { "_id": "A", "$expr": before(deadline) };
    let inc = doc! { "$inc": { "n": 1 } };
    let o = s
        .update_one(
            &ns(),
            fenced.clone(),
            inc.clone(),
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!((o.matched, o.modified), (1, 1));
    clock.advance(Duration::from_millis(999));
    let o = s
        .update_one(
            &ns(),
            fenced.clone(),
            inc.clone(),
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(o.matched, 1);
    // At the deadline the step no longer applies.
    clock.advance(Duration::from_millis(1));
    let o = s
        .update_one(
            &ns(),
            fenced.clone(),
            inc.clone(),
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(o, UpdateOutcome::default());
    let returned = s
        .find_one_and_update(
            &ns(),
            fenced.clone(),
            inc.clone(),
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
        )
        .await
        .unwrap();
    assert_eq!(returned, None);
    assert_eq!(
        s.update_each(&ns(), vec![(fenced.clone(), inc.clone())])
            .await
            .unwrap(),
        0
    );
    assert_eq!(s.documents(&ns()), vec![doc! { "_id": "A", "n": 2 }]);
    // A filter without `_id` (a scan) is fenced the same way.
    let scan = doc! { "n": 2, "$expr": before(deadline + 10) };
    let o = s
        .update_one(
            &ns(),
            scan.clone(),
            inc.clone(),
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(o.matched, 1);
    clock.advance(Duration::from_millis(10));
    let o = s
        .update_one(
            &ns(),
            doc! { "n": 3, "$expr": before(deadline + 10) },
            inc,
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(o.matched, 0);
    assert_eq!(s.documents(&ns()), vec![doc! { "_id": "A", "n": 3 }]);
}

#[tokio::test]
async fn expr_now_fences_delete_find_count_and_replace() {
    let (s, clock, t0) = clocked_store_with(vec![
        doc! { "_id": "A", "k": 1 },
        doc! { "_id": "B", "k": 1 },
    ])
    .await;
    let deadline = t0 + 50;
    let all = doc! { "$expr": before(deadline) };
    let found = s
        .find(&ns(), all.clone(), FindOptions::default())
        .await
        .unwrap();
    assert_eq!(found.len(), 2);
    let sorted = FindOptions {
        sort: Some(doc! { "_id": -1 }),
        limit: None,
    };
    assert_eq!(
        s.find(&ns(), all.clone(), sorted.clone())
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(s
        .find_one(&ns(), doc! { "_id": "A", "$expr": before(deadline) })
        .await
        .unwrap()
        .is_some());
    assert_eq!(Store::count(&s, &ns(), all.clone()).await.unwrap(), 2);
    let o = s
        .replace_one(
            &ns(),
            doc! { "_id": "B", "$expr": before(deadline) },
            doc! { "k": 2 },
        )
        .await
        .unwrap();
    assert_eq!(o.modified, 1);
    clock.advance(Duration::from_millis(50));
    assert!(s
        .find(&ns(), all.clone(), FindOptions::default())
        .await
        .unwrap()
        .is_empty());
    assert!(s.find(&ns(), all.clone(), sorted).await.unwrap().is_empty());
    assert!(s
        .find_one(&ns(), doc! { "_id": "A", "$expr": before(deadline) })
        .await
        .unwrap()
        .is_none());
    assert_eq!(Store::count(&s, &ns(), all.clone()).await.unwrap(), 0);
    let o = s
        .replace_one(
            &ns(),
            doc! { "_id": "B", "$expr": before(deadline) },
            doc! { "k": 3 },
        )
        .await
        .unwrap();
    assert_eq!(o.matched, 0);
    assert_eq!(
        s.delete_one(&ns(), doc! { "_id": "A", "$expr": before(deadline) })
            .await
            .unwrap(),
        0
    );
    assert_eq!(s.delete_one(&ns(), all).await.unwrap(), 0);
    assert_eq!(
        s.documents(&ns()),
        vec![doc! { "_id": "A", "k": 1 }, doc! { "_id": "B", "k": 2 }]
    );
    // Before a later deadline the delete applies.
    assert_eq!(
        s.delete_one(&ns(), doc! { "_id": "A", "$expr": before(deadline + 1) })
            .await
            .unwrap(),
        1
    );
    assert_eq!(s.documents(&ns()), vec![doc! { "_id": "B", "k": 2 }]);
}

#[tokio::test]
async fn expr_now_opens_a_step_at_a_time() {
    let (s, clock, t0) =
        clocked_store_with(vec![doc! { "_id": "A", "pendingTransactions": ["T"] }]).await;
    let at = t0 + 5000;
    let filter = doc! { "_id": "A", "pendingTransactions": "T", "$expr": from(at) };
    let pull = doc! { "$pull": { "pendingTransactions": "T" } };
    assert!(s.find_one(&ns(), filter.clone()).await.unwrap().is_none());
    assert_eq!(
        s.update_one(
            &ns(),
            filter.clone(),
            pull.clone(),
            crate::store::UpdateOptions::default()
        )
        .await
        .unwrap()
        .matched,
        0
    );
    assert_eq!(s.delete_one(&ns(), filter.clone()).await.unwrap(), 0);
    clock.advance(Duration::from_millis(4999));
    assert_eq!(
        s.update_one(
            &ns(),
            filter.clone(),
            pull.clone(),
            crate::store::UpdateOptions::default()
        )
        .await
        .unwrap()
        .matched,
        0
    );
    clock.advance(Duration::from_millis(1));
    assert!(s.find_one(&ns(), filter.clone()).await.unwrap().is_some());
    assert_eq!(
        s.update_one(
            &ns(),
            filter.clone(),
            pull,
            crate::store::UpdateOptions::default()
        )
        .await
        .unwrap()
        .modified,
        1
    );
    assert_eq!(
        s.documents(&ns()),
        vec![doc! { "_id": "A", "pendingTransactions": [] }]
    );
    // The guard on the marker still counts.
    assert_eq!(s.delete_one(&ns(), filter).await.unwrap(), 0);
}

#[tokio::test]
async fn expr_compares_now_with_a_field() {
    let t0 = ManualClock::default().now().timestamp_millis();
    let (s, clock, _) = clocked_store_with(vec![
        doc! { "_id": "A", "until": t0 + 100, "expires": DateTime::from_millis(t0 + 100) },
    ])
    .await;
    let by_millis = doc! { "$expr": { "$lt": [ { "$toLong": "$$NOW" }, "$until" ] } };
    let by_date = doc! { "$expr": { "$lt": [ "$$NOW", "$expires" ] } };
    for f in [&by_millis, &by_date] {
        assert!(s.find_one(&ns(), f.clone()).await.unwrap().is_some(), "{f}");
    }
    clock.advance(Duration::from_millis(100));
    for f in [&by_millis, &by_date] {
        assert!(s.find_one(&ns(), f.clone()).await.unwrap().is_none(), "{f}");
        let o = s
            .update_one(
                &ns(),
                f.clone(),
                doc! { "$set": { "x": 1 } },
                crate::store::UpdateOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(o.matched, 0);
    }
}

#[tokio::test]
async fn unsupported_expr_is_a_bad_request_and_changes_nothing() {
    let (s, _clock, t0) = clocked_store_with(vec![doc! { "_id": "A", "n": 1, "s": "x" }]).await;
    let inc = doc! { "$inc": { "n": 1 } };
    for (filter, name) in [
        (
            doc! { "_id": "A", "$expr": { "$lt": [ { "$multiply": [ { "$toLong": "$$NOW" }, 1 ] }, t0 + 10 ] } },
            "$multiply",
        ),
        (
            doc! { "_id": "A", "$expr": { "$lt": [ { "$toLong": "$$CLUSTER_TIME" }, t0 + 10 ] } },
            "$$CLUSTER_TIME",
        ),
    ] {
        let e = s
            .update_one(
                &ns(),
                filter.clone(),
                inc.clone(),
                crate::store::UpdateOptions::upsert(),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest, "{filter}");
        assert!(e.message.contains(name), "{}", e.message);
        let e = s.delete_one(&ns(), filter.clone()).await.unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        let e = s
            .find(&ns(), filter.clone(), FindOptions::default())
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
        let e = s
            .find_one_and_update(
                &ns(),
                filter.clone(),
                inc.clone(),
                crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After)
                    .with_upsert(true),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, StoreErrorKind::BadRequest);
    }
    // `$expr` has no place in a `$pull` condition.
    let e = s
        .update_one(
            &ns(),
            doc! { "_id": "A" },
            doc! { "$pull": { "l": { "$expr": true } } },
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, StoreErrorKind::BadRequest);
    // A conversion that fails while evaluating fails the call, as on MongoDB.
    let e = s
        .update_one(
            &ns(),
            doc! { "$expr": { "$lt": [ { "$toLong": "$s" }, 5 ] } },
            inc.clone(),
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!((e.kind, e.code), (StoreErrorKind::Other, Some(241)), "{e}");
    let e = s
        .delete_one(&ns(), doc! { "_id": "A", "$expr": { "$toLong": "$s" } })
        .await
        .unwrap_err();
    assert_eq!(e.code, Some(241));
    assert_eq!(
        s.documents(&ns()),
        vec![doc! { "_id": "A", "n": 1, "s": "x" }]
    );
    // ... but only when it is evaluated.
    let o = s
        .update_one(
            &ns(),
            doc! { "_id": "B", "$expr": { "$toLong": "$s" } },
            inc,
            crate::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(o, UpdateOutcome::default());
}

#[tokio::test]
async fn upsert_with_expr_that_matches_nothing_inserts() {
    let (s, _clock, t0) = clocked_store_with(vec![]).await;
    // The deadline has passed: nothing matches, so the upsert inserts.
    let o = s
        .update_one(
            &ns(),
            doc! { "_id": "A", "state": "new", "$expr": before(t0) },
            doc! { "$set": { "n": 1 } },
            crate::store::UpdateOptions::upsert(),
        )
        .await
        .unwrap();
    assert_eq!((o.matched, o.upserted), (0, true));
    assert_eq!(
        s.documents(&ns()),
        vec![doc! { "_id": "A", "state": "new", "n": 1 }]
    );
    let returned = s
        .find_one_and_update(
            &ns(),
            doc! { "_id": "B", "$and": [ { "$expr": from(t0 + 1) } ] },
            doc! { "$setOnInsert": { "n": 0 } },
            crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After)
                .with_upsert(true),
        )
        .await
        .unwrap();
    assert_eq!(returned, Some(doc! { "_id": "B", "n": 0 }));
    // A matching `$expr` updates instead.
    let o = s
        .update_one(
            &ns(),
            doc! { "_id": "A", "$expr": before(t0 + 1) },
            doc! { "$set": { "n": 2 } },
            crate::store::UpdateOptions::upsert(),
        )
        .await
        .unwrap();
    assert_eq!((o.matched, o.upserted), (1, false));
    assert_eq!(s.documents(&ns()).len(), 2);
}
