//! A saga across two databases and two clients: an invoice in the billing
//! database and a shipment in the shipping database, reached through a second
//! store, commit or roll back together.
//!
//! ```sh
//! cargo run --example saga
//! ```

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tandem::{
    participant, CommitPoint, Coordinator, MemoryStore, Namespace, ParticipantDocument, Store,
    Transaction, TxError,
};
use tandem_mongodb::MongoStore;
use tandem_suite::{demo_store, reset};

// ANCHOR: documents
/// Lives in the billing database of the default store.
#[participant(collection = "invoices", db = "billing")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Invoice {
    #[serde(rename = "_id")]
    id: String,
    total: i64,
    status: String,
}

/// Lives in the shipping database, reached through the store named "shipping".
#[participant(collection = "shipments", db = "shipping")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Shipment {
    #[serde(rename = "_id")]
    id: String,
    slots_left: i32,
}
// ANCHOR_END: documents

// ANCHOR: saga
fn book(invoice: &str, route: &str) -> Transaction {
    Transaction::new()
        .change(
            Invoice::change(invoice)
                .set_status("booked".to_owned())
                .require_status_eq("open".to_owned()),
        )
        .change(
            Shipment::change(route)
                .inc_slots_left(-1)
                .require_slots_left_gte(1)
                .in_store("shipping"),
        )
}
// ANCHOR_END: saga

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let demo = demo_store().await?;
    println!("saga demo on the {}", demo.description);
    // A second client: another MongoDB connection when MONGODB_URI is set, another embedded store otherwise.
    let shipping: Arc<dyn Store> = match std::env::var("MONGODB_URI") {
        Ok(uri) if !uri.is_empty() => Arc::new(MongoStore::connect(&uri).await?),
        _ => Arc::new(MemoryStore::new()),
    };
    let invoices = Namespace::new(Invoice::DB.unwrap_or_default(), Invoice::COLLECTION);
    let shipments = Namespace::new(Shipment::DB.unwrap_or_default(), Shipment::COLLECTION);
    for id in ["inv-1", "inv-2"] {
        let invoice = Invoice {
            id: id.into(),
            total: 120,
            status: "open".into(),
        };
        reset(
            demo.store.as_ref(),
            &invoices,
            &[bson::to_document(&invoice)?],
        )
        .await?;
    }
    let route = Shipment {
        id: "oslo-bergen".into(),
        slots_left: 1,
    };
    reset(shipping.as_ref(), &shipments, &[bson::to_document(&route)?]).await?;

    // ANCHOR: coordinator
    let coordinator = Coordinator::builder_shared(demo.store.clone())
        .database(&demo.db)
        .store("shipping", shipping.clone())
        .commit_point(CommitPoint::Done)
        .build();
    // ANCHOR_END: coordinator

    coordinator.run(book("inv-1", "oslo-bergen")).await?;
    println!("  inv-1 booked on oslo-bergen");
    match coordinator.run(book("inv-2", "oslo-bergen")).await {
        Err(TxError::Canceled { cause, .. }) => {
            println!("  inv-2 rolled back in both databases: {cause}")
        }
        other => return Err(format!("expected a rollback, got {other:?}").into()),
    }
    let status = |id: &'static str| {
        let store = demo.store.clone();
        let invoices = invoices.clone();
        async move {
            let doc = store
                .find_one(&invoices, bson::doc! { "_id": id })
                .await?
                .ok_or("no invoice")?;
            Ok::<String, Box<dyn std::error::Error>>(doc.get_str("status")?.to_owned())
        }
    };
    assert_eq!(status("inv-1").await?, "booked");
    assert_eq!(status("inv-2").await?, "open");
    let route = shipping
        .find_one(&shipments, bson::doc! { "_id": "oslo-bergen" })
        .await?
        .ok_or("no route")?;
    assert_eq!(route.get_i32("slots_left")?, 0);
    println!("  invoices: inv-1 booked, inv-2 open; slots left on oslo-bergen: 0");
    // Background work finished, connections closed, before `main` returns.
    coordinator.shutdown().await;
    Ok(())
}
