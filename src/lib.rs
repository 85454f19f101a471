//! Support for tandem's examples: pick the store from the environment.
//!
//! Every example runs on the embedded store by default, and on a MongoDB
//! server when `MONGODB_URI` is set, in the database named by `TANDEM_DB`
//! (default `tandem_demo`).

use std::sync::Arc;

use bson::{doc, Document};
use tandem::{MemoryStore, Namespace, Store, StoreError};
use tandem_mongodb::MongoStore;

/// The store an example runs on, and where.
pub struct Demo {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The database the example's collections and records live in.
    pub db: String,
    /// A line saying which store this is (never with credentials).
    pub description: String,
}

/// The database examples use: `TANDEM_DB`, or `tandem_demo`.
pub fn demo_db() -> String {
    std::env::var("TANDEM_DB")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "tandem_demo".to_owned())
}

/// The embedded store, or the MongoDB server at `MONGODB_URI` when it is set.
pub async fn demo_store() -> Result<Demo, StoreError> {
    let db = demo_db();
    match std::env::var("MONGODB_URI") {
        Ok(uri) if !uri.is_empty() => {
            let store = MongoStore::connect(&uri).await?;
            store.ping().await?;
            Ok(Demo {
                store: Arc::new(store),
                description: format!("MongoDB store (MONGODB_URI), database {db}"),
                db,
            })
        }
        _ => Ok(Demo {
            store: Arc::new(MemoryStore::new()),
            description: format!("embedded store, database {db}"),
            db,
        }),
    }
}

/// Puts `docs` into `ns` exactly as given, replacing earlier copies (so a demo can run twice).
pub async fn reset(store: &dyn Store, ns: &Namespace, docs: &[Document]) -> Result<(), StoreError> {
    for d in docs {
        if let Some(id) = d.get("_id") {
            store.delete_one(ns, doc! { "_id": id.clone() }).await?;
        }
        store.insert_one(ns, d.clone()).await?;
    }
    Ok(())
}
