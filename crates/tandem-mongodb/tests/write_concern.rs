//! Every write of the store goes with the same write concern: the store's,
//! or, when the store has none (`write_concern(None)`), the client's.

mod common;

use common::with_options;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Document};
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use tandem::store::{Namespace, Store, UpdateOptions};
use tandem_mongodb::MongoStore;

/// A store that keeps the client's write concern (`w=majority`, journaled,
/// from the URI) sends a request of several statements (`update_each`: the
/// protocol's batched applies and clears) with it too. It sent them with
/// none, so the server's default applied (`w: 1` on MongoDB 4.4, or
/// whatever `setDefaultRWConcern` says): an apply acknowledged so can be
/// rolled back by a failover after the transaction committed, while the
/// same apply sent alone (`update_one`) waited for a majority.
#[tokio::test]
async fn update_each_keeps_the_clients_write_concern() {
    let Some(uri) = common::mongodb_uri() else {
        return;
    };
    let seen: Arc<Mutex<Vec<(String, Document)>>> = Arc::default();
    let mut options = ClientOptions::parse(with_options(&uri, "w=majority&journal=true"))
        .await
        .unwrap();
    options.server_selection_timeout = Some(Duration::from_secs(10));
    let sink = Arc::clone(&seen);
    options.command_event_handler = Some(EventHandler::callback(move |event| {
        if let CommandEvent::Started(started) = event {
            if started.command_name == "update" {
                sink.lock()
                    .unwrap()
                    .push((started.command_name.clone(), started.command.clone()));
            }
        }
    }));
    let client = mongodb::Client::with_options(options).unwrap();
    let store = MongoStore::builder().write_concern(None).build(client);
    let db = common::unique_name("wc");
    let ns = Namespace::new(&db, "docs");
    store
        .insert_one(&ns, doc! { "_id": 1, "n": 0_i64 })
        .await
        .unwrap();
    store
        .update_one(
            &ns,
            doc! { "_id": 1 },
            doc! { "$inc": { "n": 1_i64 } },
            UpdateOptions::default(),
        )
        .await
        .unwrap();
    store
        .update_each(
            &ns,
            vec![(doc! { "_id": 1 }, doc! { "$inc": { "n": 1_i64 } })],
        )
        .await
        .unwrap();
    store.client().database(&db).drop().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let concerns: Vec<Option<Document>> = seen
        .iter()
        .map(|(_, command)| command.get_document("writeConcern").ok().cloned())
        .collect();
    let majority = |wc: &Option<Document>| {
        wc.as_ref()
            .is_some_and(|wc| wc.get_str("w").ok() == Some("majority"))
    };
    assert!(majority(&concerns[0]), "update_one: {concerns:?}");
    assert!(majority(&concerns[1]), "update_each: {concerns:?}");
}
