//! A [`tandem`] store on MongoDB, through the official `mongodb` driver.
//!
//! [`MongoStore`] implements [`tandem::store::Store`]: each method sends one
//! MongoDB command on one document (`insert`, `update`, `findAndModify`,
//! `delete`, `find`, `createIndexes`, and `hello` for the server's clock).
//! Writes are acknowledged by a majority, journaled; reads use the `majority`
//! read concern. Driver errors become [`StoreError`](tandem::store::StoreError)s
//! whose [`kind`](tandem::store::StoreErrorKind) tells the protocol what happened
//! (see [`error`]). The store sends each command once: a transient error
//! (network error, failover, write conflict) is returned as
//! [`Transient`](tandem::store::StoreErrorKind::Transient), and the
//! coordinator repeats the step as its [`RetryPolicy`](tandem::RetryPolicy)
//! allows, knowing what an unanswered step means for the protocol.
//! [`MongoStore::metrics`] counts the commands sent.
//!
//! ```no_run
//! use bson::doc;
//! use tandem::store::{Namespace, Store, UpdateOptions};
//! use tandem_mongodb::MongoStore;
//!
//! # async fn example() -> Result<(), tandem::store::StoreError> {
//! let store = MongoStore::connect("mongodb://127.0.0.1:27017/").await?;
//! let accounts = Namespace::new("bank", "accounts");
//! store.insert_one(&accounts, doc! { "_id": "alice", "balance": 100 }).await?;
//! let outcome = store
//!     .update_one(&accounts, doc! { "_id": "alice" }, doc! { "$inc": { "balance": -30 } }, UpdateOptions::default())
//!     .await?;
//! assert_eq!(outcome.modified, 1);
//! println!("server time: {}, commands sent: {}", store.now().await?, store.metrics().total);
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod env;
pub mod error;
pub mod metrics;
mod native;
pub mod options;
mod store;

pub use env::{store_from_env, URI_VARIABLE};
pub use metrics::{Command, CommandCounts};
pub use options::{MongoStoreBuilder, MongoStoreOptions};
pub use store::MongoStore;

/// The driver, re-exported so that callers can name its types (e.g. a
/// [`WriteConcern`](mongodb::options::WriteConcern)) without a separate dependency.
pub use mongodb;
