//! Connecting, the server clock, and errors of bad or unreachable deployments.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bson::doc;
use common::{mongodb_uri, TestDb};
use tandem::store::{Namespace, Store, StoreErrorKind};
use tandem_mongodb::MongoStore;

const PASSWORD: &str = "hunter2-Secret";

#[tokio::test]
async fn now_is_the_server_clock() {
    let Some(t) = TestDb::new("now").await else {
        return;
    };
    let machine_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let server = t.store.now().await.unwrap();
    // The server runs on this machine: its clock agrees within a generous bound.
    let skew = (server.timestamp_millis() - machine_ms).abs();
    assert!(skew < 60_000, "server clock {server} is {skew} ms off");
    let later = t.store.now().await.unwrap();
    assert!(later >= server);
    assert_eq!(t.store.metrics().hello, 2);
    t.drop().await;
}

#[tokio::test]
async fn new_wraps_an_existing_client() {
    let Some(uri) = mongodb_uri() else {
        return;
    };
    let client = mongodb::Client::with_uri_str(&uri).await.unwrap();
    let store = MongoStore::new(client);
    let db = common::unique_name("new");
    let ns = Namespace::new(db.clone(), "docs");
    store.insert_one(&ns, doc! { "_id": 1 }).await.unwrap();
    assert_eq!(
        store.find_one(&ns, doc! {}).await.unwrap(),
        Some(doc! { "_id": 1 })
    );
    assert!(store.options().write_concern.is_some());
    store.client().database(&db).drop().await.unwrap();
}

#[tokio::test]
async fn bad_uri_is_a_bad_request_without_the_password() {
    // No server is needed: these fail while parsing.
    for uri in [
        format!("mongodb://alice:{PASSWORD}@127.0.0.1:notaport/"),
        format!("mongodb://alice:{PASSWORD}@127.0.0.1:27017/?journal=maybe"),
        format!("mongodb://alice:{PASSWORD}@127.0.0.1:27017/?unknownTimeoutMS=abc&w=-7"),
        format!("mongodb://alice:{PASSWORD}@127.0.0.1:27017/?authMechanism=NOPE"),
        format!("notmongodb://alice:{PASSWORD}@127.0.0.1:27017/"),
        format!("mongodb://alice:{PASSWORD}@"),
    ] {
        let err = MongoStore::connect(&uri).await.unwrap_err();
        assert_eq!(err.kind, StoreErrorKind::BadRequest, "{uri}: {err}");
        println!("bad URI -> {err}");
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(PASSWORD), "password leaked: {shown}");
        assert!(!shown.contains("hunter2"), "password leaked: {shown}");
    }
}

/// A loopback port where nothing listens.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    port
}

#[tokio::test]
async fn unreachable_server_is_unavailable() {
    let port = closed_port();
    let uri = format!("mongodb://alice:{PASSWORD}@127.0.0.1:{port}/?directConnection=true");
    let started = std::time::Instant::now();
    let err = MongoStore::builder()
        .server_selection_timeout(Duration::from_millis(300))
        .connect(&uri)
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Unavailable, "{err}");
    println!("unreachable -> {err}");
    assert!(!format!("{err} {err:?}").contains(PASSWORD), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20));

    // A store made without a check fails the same way on its first command,
    // without retrying.
    let mut options =
        mongodb::options::ClientOptions::parse(format!("mongodb://127.0.0.1:{port}/"))
            .await
            .unwrap();
    options.server_selection_timeout = Some(Duration::from_millis(300));
    let store = MongoStore::builder().build(mongodb::Client::with_options(options).unwrap());
    let err = store
        .find_one(&Namespace::new("x", "y"), doc! {})
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Unavailable, "{err}");
    let err = store.now().await.unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Unavailable, "{err}");
    assert_eq!(store.metrics().total, 2, "each command sent once");
}

#[tokio::test]
async fn wrong_credentials_are_unauthorized_or_ignored() {
    // SecantusDB without --auth accepts any client; a server with auth
    // refuses the handshake. Either way the password never shows.
    let Some(uri) = mongodb_uri() else {
        return;
    };
    let Some(rest) = uri.strip_prefix("mongodb://") else {
        return;
    };
    if rest.contains('@') {
        return; // The URI carries its own credentials.
    }
    let with_creds = format!("mongodb://nobody:{PASSWORD}@{rest}");
    match MongoStore::builder()
        .server_selection_timeout(Duration::from_secs(5))
        .connect(&with_creds)
        .await
    {
        Ok(store) => {
            store.now().await.unwrap();
        }
        Err(err) => {
            assert_eq!(err.kind, StoreErrorKind::Unauthorized, "{err}");
            assert!(!format!("{err} {err:?}").contains(PASSWORD), "{err}");
        }
    }
}

/// `Coordinator::shutdown` finishes the background work (the transaction
/// answered `applied` ends `done`) and closes the client: the store refuses
/// work afterwards instead of running it on a client whose tasks the
/// runtime is about to drop.
#[tokio::test]
async fn shutdown_drains_then_closes_the_client() {
    let Some(t) = TestDb::new("shutdown").await else {
        return;
    };
    let uri = mongodb_uri().expect("a server");
    let accounts = t.ns("accounts");
    for id in ["A", "B"] {
        t.store
            .insert_one(&accounts, doc! { "_id": id, "balance": 10_i64 })
            .await
            .unwrap();
    }
    let coordinator = tandem::Coordinator::builder(t.store.clone())
        .database(&t.db)
        .commit_point(tandem::CommitPoint::Applied)
        .build();
    let receipt = coordinator
        .run(
            tandem::Transaction::new()
                .change(
                    tandem::DocumentChange::update(accounts.clone(), "A").inc("balance", -1_i64),
                )
                .change(
                    tandem::DocumentChange::update(accounts.clone(), "B").inc("balance", 1_i64),
                ),
        )
        .await
        .unwrap();
    assert_eq!(receipt.state, tandem::TxState::Applied);
    coordinator.shutdown().await;
    assert!(
        t.store.ping().await.is_err(),
        "the client is closed after shutdown"
    );
    // A fresh connection sees the background work done.
    let fresh = MongoStore::connect(&uri).await.unwrap();
    let record = fresh
        .find_one(
            &Namespace::new(t.db.clone(), "transactions"),
            doc! { "_id": receipt.id.as_str() },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.get_str("state").unwrap(), "done");
    fresh.client().database(&t.db).drop().await.unwrap();
    fresh.shutdown().await;
}

/// Typed reads through a coordinator on the server: placeholders left out,
/// transactions in flight seen.
#[tokio::test]
async fn typed_reads_on_the_server() {
    #[tandem::participant(collection = "orders")]
    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Order {
        #[serde(rename = "_id")]
        id: String,
        amount: i64,
    }
    let Some(t) = TestDb::new("reads").await else {
        return;
    };
    let coordinator = tandem::Coordinator::builder(t.store.clone())
        .database(&t.db)
        .build();
    let o1 = Order {
        id: "o-1".into(),
        amount: 30,
    };
    coordinator.insert(&o1).await.unwrap();
    t.store
        .insert_one(
            &t.ns("orders"),
            doc! { "_id": "o-ghost", "_tandem": { "ghost": true } },
        )
        .await
        .unwrap();
    assert_eq!(
        coordinator.get::<Order, _>("o-1").await.unwrap(),
        Some(o1.clone())
    );
    assert_eq!(coordinator.get::<Order, _>("o-ghost").await.unwrap(), None);
    let all: Vec<Order> = coordinator.find(doc! {}, None).await.unwrap();
    assert_eq!(all, vec![o1.clone()]);
    assert!(!coordinator.in_flight::<Order, _>("o-1").await.unwrap());
    assert!(coordinator.in_flight::<Order, _>("o-ghost").await.unwrap());

    // The functions generated on the type, and `put`.
    let o2 = Order {
        id: "o-2".into(),
        amount: 7,
    };
    Order::put(&coordinator, &o2).await.unwrap();
    assert_eq!(Order::get(&coordinator, "o-2").await.unwrap(), Some(o2));
    let o2 = Order {
        id: "o-2".into(),
        amount: 8,
    };
    Order::put(&coordinator, &o2).await.unwrap();
    assert_eq!(
        Order::find(&coordinator, doc! { "amount": { "$gt": 7 } })
            .await
            .unwrap(),
        vec![o1.clone(), o2.clone()]
    );
    t.store
        .update_one(
            &t.ns("orders"),
            doc! { "_id": "o-2" },
            doc! { "$push": { "pendingTransactions": "t-1#0123456789ab" } },
            tandem::store::UpdateOptions::default(),
        )
        .await
        .unwrap();
    assert!(Order::in_flight(&coordinator, "o-2").await.unwrap());
    for id in ["o-2", "o-ghost"] {
        let late = Order {
            id: id.into(),
            amount: 0,
        };
        let refused = Order::put(&coordinator, &late).await.unwrap_err();
        assert_eq!(refused.kind, tandem::StoreErrorKind::InFlight, "{refused}");
    }
    let raw = t
        .store
        .find_one(&t.ns("orders"), doc! { "_id": "o-2" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(raw.get_i64("amount").unwrap(), 8);
    t.drop().await;
}
