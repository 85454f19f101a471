//! A record written by a late copy of a create (inert) says nothing of the
//! run that sent it: a retry under its key is not told that run's outcome
//! from it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tandem::testing::FaultStore;
use tandem::{Store, TxError, TxState};

/// A payment under a key commits; a copy of the request that wrote its
/// record is held in the network. The record becomes a stub, and the stub
/// goes after the window. Then the copy lands: an inert record, which
/// recovery cancels without touching a document. A retry under the key is
/// told `Duplicate`: before, with `state: Some(Canceled)`, "the first run
/// never commits", though it committed and paid; a caller who believed it
/// would pay another way, a second time. The inert record knows nothing of
/// the first run's outcome: `state` is `None`, "not known".
#[tokio::test]
async fn a_retry_meeting_an_inert_record_is_not_told_canceled() {
    let window = Duration::from_secs(10);
    let (store, clock, _) = bank(&["A", "B"], 100).await;
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let faulty = FaultStore::new(shared.clone()).keeping_upserts();
    let first = keyed_coordinator(faulty.clone(), LEASE, window)
        .run(keyed_payment("order-12", 10))
        .await
        .expect("the first payment commits");
    assert_eq!(first.state, TxState::Done);
    let create = faulty
        .upserts()
        .into_iter()
        .find(|u| u.ns == records())
        .expect("the record was written by an upsert");

    // A stub, then gone after the window.
    let collector = window_collector(shared.clone(), window);
    clock.advance(Duration::from_millis(1_500));
    collector.collect_garbage(LEASE).await.expect("collection");
    clock.advance(Duration::from_millis(11_000));
    collector.collect_garbage(LEASE).await.expect("collection");
    assert_eq!(get(&store, &records(), "order-12").await, None);

    // The late copy lands, inert; recovery cancels it.
    let _ = faulty.deliver_again(&create).await;
    clock.advance(LEASE * 4);
    collector.run_once().await.expect("recovery pass");

    let answer = keyed_coordinator(shared.clone(), LEASE, window)
        .run(keyed_payment("order-12", 10))
        .await;
    assert_eq!(
        (balance(&store, "A").await, balance(&store, "B").await),
        (90, 110),
        "answered {answer:?}"
    );
    assert!(
        matches!(answer, Err(TxError::Duplicate { state: None, .. })),
        "the first run committed, and the retry was told {answer:?}"
    );
}
