//! A saga across two databases and two clients: an invoice in the billing
//! database and a shipment in the shipping database, reached through a second
//! store, commit or roll back together.
//!
//! ```sh
//! cargo run --example saga
//! ```

use serde::{Deserialize, Serialize};
use tandem::{
    participant, CommitPoint, Coordinator, Namespace, ParticipantDocument, Transaction, TxError,
};

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
    // The embedded store, or the MongoDB server at MONGODB_URI.
    let billing = tandem_mongodb::store_from_env().await?;
    let db = std::env::var("TANDEM_DB").unwrap_or_else(|_| "tandem_demo".to_owned());
    println!("saga demo on the {} store, database {db}", billing.name());
    // A second client: another MongoDB connection when MONGODB_URI is set,
    // another embedded store otherwise.
    let shipping = tandem_mongodb::store_from_env().await?;

    // ANCHOR: coordinator
    let coordinator = Coordinator::builder_shared(billing)
        .database(&db)
        .store("shipping", shipping.clone())
        .commit_point(CommitPoint::Done)
        .build();
    // ANCHOR_END: coordinator

    // The data as it was, written outside any transaction: the invoices
    // through the coordinator (its default store), the route on the
    // shipping store directly.
    for id in ["inv-1", "inv-2"] {
        let invoice = Invoice {
            id: id.into(),
            total: 120,
            status: "open".into(),
        };
        Invoice::put(&coordinator, &invoice).await?;
    }
    let shipments = Namespace::new(Shipment::DB.unwrap_or_default(), Shipment::COLLECTION);
    let route = bson::to_document(&Shipment {
        id: "oslo-bergen".into(),
        slots_left: 1,
    })?;
    let replaced = shipping
        .replace_one(
            &shipments,
            bson::doc! { "_id": "oslo-bergen" },
            route.clone(),
        )
        .await?;
    if replaced.matched == 0 {
        shipping.insert_one(&shipments, route).await?;
    }

    coordinator.run(book("inv-1", "oslo-bergen")).await?;
    println!("  inv-1 booked on oslo-bergen");
    match coordinator.run(book("inv-2", "oslo-bergen")).await {
        Err(TxError::Canceled { cause, .. }) => {
            println!("  inv-2 rolled back in both databases: {cause}")
        }
        other => return Err(format!("expected a rollback, got {other:?}").into()),
    }
    let status = |invoice: Option<Invoice>| invoice.map(|i| i.status);
    assert_eq!(
        status(Invoice::get(&coordinator, "inv-1").await?).as_deref(),
        Some("booked")
    );
    assert_eq!(
        status(Invoice::get(&coordinator, "inv-2").await?).as_deref(),
        Some("open")
    );
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
