//! Helpers shared by the integration tests: the server URI and per-test databases.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tandem::store::Namespace;
use tandem_mongodb::MongoStore;

/// The URI of the test server, from `MONGODB_URI`.
///
/// Without it the test is skipped (`None`), unless `TANDEM_REQUIRE_MONGODB=1`
/// says a server is required, in which case the test fails.
pub fn mongodb_uri() -> Option<String> {
    match std::env::var("MONGODB_URI") {
        Ok(uri) if !uri.trim().is_empty() => Some(uri),
        _ => {
            if std::env::var("TANDEM_REQUIRE_MONGODB").as_deref() == Ok("1") {
                panic!("MONGODB_URI is not set but TANDEM_REQUIRE_MONGODB=1 requires a server");
            }
            println!("skipped: MONGODB_URI not set");
            None
        }
    }
}

/// A database name no other test uses: `prefix` plus process id, a counter and the time.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "tmtest_{prefix}_{}_{}_{nanos:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A store connected to the test server with its own database.
pub struct TestDb {
    /// The store under test.
    pub store: MongoStore,
    /// The database this test owns.
    pub db: String,
}

impl TestDb {
    /// Connects with default options and a fresh database name; `None` when skipped.
    pub async fn new(prefix: &str) -> Option<TestDb> {
        let uri = mongodb_uri()?;
        let store = MongoStore::builder()
            .server_selection_timeout(Duration::from_secs(10))
            .connect(&uri)
            .await
            .expect("connect to the test server");
        Some(TestDb {
            store,
            db: unique_name(prefix),
        })
    }

    /// A namespace in this test's database.
    pub fn ns(&self, collection: &str) -> Namespace {
        Namespace::new(self.db.clone(), collection)
    }

    /// Drops this test's database.
    pub async fn drop(self) {
        self.store
            .client()
            .database(&self.db)
            .drop()
            .await
            .expect("drop the test database");
    }
}

/// SecantusDB's version when the server `store` talks to is SecantusDB (its
/// `buildInfo` carries a `secantusVersion` field next to the MongoDB
/// version it emulates); `None` for any other server.
pub async fn secantus_version(store: &MongoStore) -> Option<String> {
    let info = store
        .client()
        .database("admin")
        .run_command(bson::doc! { "buildInfo": 1 })
        .await
        .expect("buildInfo");
    info.get_str("secantusVersion").ok().map(str::to_owned)
}
