//! Concurrent calls: each is atomic.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_increments_are_atomic() {
    let s = store_with(vec![doc! { "_id": "counter", "n": 0, "log": [] }]).await;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..1000 {
                if (t + i) % 2 == 0 {
                    s.update_one(
                        &ns(),
                        doc! { "_id": "counter" },
                        doc! { "$inc": { "n": 1 } },
                        crate::store::UpdateOptions::default(),
                    )
                    .await
                    .unwrap();
                } else {
                    s.find_one_and_update(
                        &ns(),
                        doc! { "_id": "counter" },
                        doc! { "$inc": { "n": 1 } },
                        crate::store::FindOneAndUpdateOptions::returning(ReturnDocument::After),
                    )
                    .await
                    .unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let d = s
        .find_one(&ns(), doc! { "_id": "counter" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.get_i32("n").unwrap(), 8000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_guarded_claims_succeed_once() {
    // Compare-and-set through a guarded update: exactly one claimant wins each round.
    let s = store_with(vec![
        doc! { "_id": "lock", "owner": Bson::Null, "round": 0 },
    ])
    .await;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut wins = 0;
            for round in 0..200 {
                let o = s
                    .update_one(
                        &ns(),
                        doc! { "_id": "lock", "round": round, "owner": Bson::Null },
                        doc! { "$set": { "owner": t } },
                        crate::store::UpdateOptions::default(),
                    )
                    .await
                    .unwrap();
                wins += o.modified;
                // Whoever holds it releases it and opens the next round.
                s.update_one(
                    &ns(),
                    doc! { "_id": "lock", "round": round, "owner": t },
                    doc! { "$set": { "owner": Bson::Null }, "$inc": { "round": 1 } },
                    crate::store::UpdateOptions::default(),
                )
                .await
                .unwrap();
                while s
                    .find_one(&ns(), doc! { "_id": "lock", "round": { "$lte": round } })
                    .await
                    .unwrap()
                    .is_some()
                {
                    tokio::task::yield_now().await;
                }
            }
            wins
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 200);
}
