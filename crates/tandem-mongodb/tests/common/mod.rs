//! Helpers shared by the integration tests: the server URI and per-test databases.
#![allow(dead_code)]

use std::time::Duration;

use tandem::store::Namespace;
use tandem_mongodb::MongoStore;

pub use tandem::testing::server::{mongodb_uri, unique_name};

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

/// One current-thread runtime per test binary, for tests that drive async
/// code from a synchronous proptest runner.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

/// The environment variable `name` parsed, or `default` if unset or unparsable.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `uri` with the connection-string `options` (`key=value&...`) added.
pub fn with_options(uri: &str, options: &str) -> String {
    let sep = if uri.contains('?') {
        "&"
    } else if uri.ends_with('/') {
        "?"
    } else {
        "/?"
    };
    format!("{uri}{sep}{options}")
}

/// The `host:port` of a single-host URI, or `None` for a list of hosts
/// (a proxy in front of the server needs one host).
pub fn single_host(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("mongodb://")?;
    let hosts = rest.split(['/', '?']).next()?;
    let hosts = hosts.rsplit('@').next()?;
    (!hosts.contains(',')).then(|| hosts.to_owned())
}

/// Arms the server's `failCommand` fail point `times` times with `data`
/// (which names the commands and, usually, the `appName` it applies to).
pub async fn fail_command(admin: &mongodb::Client, times: i32, data: bson::Document) {
    admin
        .database("admin")
        .run_command(bson::doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": times },
            "data": data,
        })
        .await
        .expect("configureFailPoint");
}

/// Turns the server's `failCommand` fail point off.
pub async fn fail_command_off(admin: &mongodb::Client) {
    admin
        .database("admin")
        .run_command(bson::doc! { "configureFailPoint": "failCommand", "mode": "off" })
        .await
        .expect("turn the fail point off");
}

/// Waits until the server's clock reads `millis` (milliseconds since the
/// epoch) or later, asking it every 100 ms: deadlines are judged by the
/// server's clock, not by this process's.
pub async fn wait_for_server_time(store: &MongoStore, millis: i64) {
    use tandem::store::Store;
    while store.now().await.unwrap().timestamp_millis() < millis {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
