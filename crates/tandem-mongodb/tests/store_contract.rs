//! The store contract (`tandem::testing::store_contract`) on a server: one
//! test per case, each in a database of its own, on the server `MONGODB_URI`
//! names (skipped without it, unless `TANDEM_REQUIRE_MONGODB=1`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{mongodb_uri, unique_name};
use tandem::testing::StoreFactory;
use tandem::Store;
use tandem_mongodb::MongoStore;

/// A fresh database for each case: [`fresh`](StoreFactory::fresh) drops the
/// case's database first.
struct MongoFactory {
    store: Arc<MongoStore>,
    db: String,
}

#[async_trait]
impl StoreFactory for MongoFactory {
    async fn fresh(&self) -> Arc<dyn Store> {
        self.store
            .client()
            .database(&self.db)
            .drop()
            .await
            .expect("drop the case's database");
        self.store.clone()
    }
}

/// A store on the test server and a database no other test uses; `None`
/// (the case is skipped) without a server.
async fn setup(case: &'static str) -> Option<(MongoFactory, String)> {
    let uri = mongodb_uri()?;
    let store = MongoStore::builder()
        .server_selection_timeout(Duration::from_secs(10))
        .app_name("store_contract")
        .connect(&uri)
        .await
        .expect("connect to the test server");
    let db = unique_name(&case.chars().take(20).collect::<String>());
    let factory = MongoFactory {
        store: Arc::new(store),
        db: db.clone(),
    };
    Some((factory, db))
}

/// Drops the case's database.
async fn teardown(factory: MongoFactory, db: String) {
    factory
        .store
        .client()
        .database(&db)
        .drop()
        .await
        .expect("drop the case's database");
}

tandem::store_contract_tests!(setup, teardown);
