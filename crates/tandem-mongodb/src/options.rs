//! Options of a [`MongoStore`](crate::MongoStore): concerns and timeouts.

use std::time::Duration;

use mongodb::options::{Acknowledgment, ReadConcern, WriteConcern};

/// The settings of a [`MongoStore`](crate::MongoStore).
///
/// Build one with [`MongoStore::builder`](crate::MongoStore::builder), or
/// start from [`MongoStoreOptions::default`] and change fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MongoStoreOptions {
    /// The write concern of every write. `None` keeps the client's (from the
    /// URI or the client options). Default: `{ w: "majority", j: true }`.
    pub write_concern: Option<WriteConcern>,
    /// The read concern of `find` and `findOne`. `None` keeps the client's.
    /// Default: `majority`.
    pub read_concern: Option<ReadConcern>,
    /// How long to wait for a server to send a command to. Used when the store
    /// makes its own client ([`MongoStoreBuilder::connect`]); `None` keeps the
    /// URI's value or the driver's default (30 s).
    pub server_selection_timeout: Option<Duration>,
    /// The application name sent to the server (`appName`), shown in server
    /// logs. Used when the store makes its own client; `None` keeps the URI's.
    pub app_name: Option<String>,
}

impl MongoStoreOptions {
    /// The default write concern: majority, journaled.
    pub fn default_write_concern() -> WriteConcern {
        WriteConcern::builder()
            .w(Acknowledgment::Majority)
            .journal(true)
            .build()
    }
}

impl Default for MongoStoreOptions {
    fn default() -> Self {
        MongoStoreOptions {
            write_concern: Some(Self::default_write_concern()),
            read_concern: Some(ReadConcern::majority()),
            server_selection_timeout: None,
            app_name: None,
        }
    }
}

/// Builds a [`MongoStore`](crate::MongoStore) with non-default options.
///
/// ```no_run
/// # async fn example() -> Result<(), tandem::store::StoreError> {
/// use std::time::Duration;
/// use tandem_mongodb::MongoStore;
///
/// let store = MongoStore::builder()
///     .server_selection_timeout(Duration::from_secs(5))
///     .app_name("billing")
///     .connect("mongodb://127.0.0.1:27017/")
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct MongoStoreBuilder {
    pub(crate) options: MongoStoreOptions,
}

impl MongoStoreBuilder {
    /// A builder with the default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts from the given options.
    pub fn with_options(options: MongoStoreOptions) -> Self {
        MongoStoreBuilder { options }
    }

    /// Sets the write concern of every write; `None` keeps the client's.
    pub fn write_concern(mut self, write_concern: impl Into<Option<WriteConcern>>) -> Self {
        self.options.write_concern = write_concern.into();
        self
    }

    /// Sets the read concern of `find` and `findOne`; `None` keeps the client's.
    pub fn read_concern(mut self, read_concern: impl Into<Option<ReadConcern>>) -> Self {
        self.options.read_concern = read_concern.into();
        self
    }

    /// Sets the server selection timeout (only for [`connect`](Self::connect)).
    pub fn server_selection_timeout(mut self, timeout: Duration) -> Self {
        self.options.server_selection_timeout = Some(timeout);
        self
    }

    /// Sets the application name (only for [`connect`](Self::connect)).
    pub fn app_name(mut self, app_name: impl Into<String>) -> Self {
        self.options.app_name = Some(app_name.into());
        self
    }

    /// The options built so far.
    pub fn options(&self) -> &MongoStoreOptions {
        &self.options
    }

    /// A store on an existing client. The client's own server selection
    /// timeout, application name and retryable writes stay as they are (the
    /// store needs no retryable writes: see [`connect`](Self::connect)).
    pub fn build(self, client: mongodb::Client) -> crate::MongoStore {
        crate::MongoStore::from_parts(client, self.options, Vec::new())
    }

    /// Parses `uri`, makes a client and checks that a server answers a `ping`.
    ///
    /// The client sends no retryable writes unless the URI says
    /// `retryWrites=true`: every step of the protocol is guarded, so sending it
    /// again is harmless, and the coordinator repeats what failed transiently
    /// ([`RetryPolicy`](tandem::RetryPolicy)), knowing that an unanswered apply
    /// may still land. A server keeps a record of every retryable write for
    /// half an hour, which tandem would pay for and never use.
    ///
    /// Errors: a malformed URI or option gives
    /// [`BadRequest`](tandem::store::StoreErrorKind::BadRequest); no server
    /// reachable within the server selection timeout gives
    /// [`Unavailable`](tandem::store::StoreErrorKind::Unavailable). Messages
    /// never contain the URI's credentials.
    pub async fn connect(self, uri: &str) -> Result<crate::MongoStore, tandem::store::StoreError> {
        crate::store::connect(uri, self.options).await
    }
}
