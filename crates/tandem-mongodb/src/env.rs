//! Choosing a store from the environment: [`store_from_env`].

use std::sync::Arc;

use tandem::store::{Store, StoreError};
use tandem::MemoryStore;

use crate::MongoStore;

/// The variable [`store_from_env`] reads: a MongoDB connection string.
pub const URI_VARIABLE: &str = "MONGODB_URI";

/// The MongoDB server `MONGODB_URI` names, connected and answering a ping;
/// or, when the variable is unset or empty, a new embedded [`MemoryStore`].
///
/// Lets one program (an example, a test, a tool) run on the embedded store
/// by default and on a server when asked:
///
/// ```no_run
/// # async fn example() -> Result<(), tandem::StoreError> {
/// let store = tandem_mongodb::store_from_env().await?;
/// let coordinator = tandem::Coordinator::builder_shared(store).database("shop").build();
/// # Ok(()) }
/// ```
///
/// A connection string that does not parse, or a server that does not
/// answer, is an error (it does not fall back to the embedded store).
///
/// The embedded store keeps nothing once the process ends, so a service
/// that meant to reach a server and runs without the variable would lose
/// every transaction it answered: the fall-back is logged as a warning
/// (`tracing`, target `tandem`), and a service should connect with
/// [`MongoStore::connect`] instead, which has no fall-back.
pub async fn store_from_env() -> Result<Arc<dyn Store>, StoreError> {
    match std::env::var(URI_VARIABLE) {
        Ok(uri) if !uri.is_empty() => {
            let store = MongoStore::connect(&uri).await?;
            store.ping().await?;
            Ok(Arc::new(store))
        }
        _ => {
            tracing::warn!(
                target: "tandem",
                "{URI_VARIABLE} is not set: running on a new embedded store, which keeps nothing once the process ends"
            );
            Ok(Arc::new(MemoryStore::new()))
        }
    }
}
