//! Command counters of a [`MongoStore`](crate::MongoStore).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The command a store operation sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Command {
    /// `hello`, for [`now`](tandem::store::Store::now).
    Hello,
    /// `ping`, sent once by [`MongoStore::connect`](crate::MongoStore::connect).
    Ping,
    /// `insert` of one document.
    InsertOne,
    /// `update` of one document.
    UpdateOne,
    /// `update` with several single-document statements.
    UpdateEach,
    /// `findAndModify` with an update.
    FindOneAndUpdate,
    /// `update` of one document with a replacement.
    ReplaceOne,
    /// `delete` of one document.
    DeleteOne,
    /// `delete` of every match.
    DeleteMany,
    /// `update` of every match.
    UpdateMany,
    /// `find` with limit 1.
    FindOne,
    /// `find`; also the `aggregate` that [`count`](tandem::store::Store::count) sends.
    Find,
    /// `createIndexes`.
    CreateIndexes,
    /// `dropIndexes`.
    DropIndexes,
    /// `commitTransaction` of a native transaction (each attempt the store
    /// sends; the driver's own second attempt is not seen).
    CommitTransaction,
    /// `abortTransaction` of a native transaction that was refused or failed.
    AbortTransaction,
    /// `killSessions`, ending the session of a native commit left in doubt.
    KillSessions,
}

impl Command {
    /// The name used in logs: the store method, e.g. `"find_one_and_update"`.
    pub fn name(self) -> &'static str {
        match self {
            Command::Hello => "hello",
            Command::Ping => "ping",
            Command::InsertOne => "insert_one",
            Command::UpdateOne => "update_one",
            Command::UpdateEach => "update_each",
            Command::FindOneAndUpdate => "find_one_and_update",
            Command::ReplaceOne => "replace_one",
            Command::DeleteOne => "delete_one",
            Command::DeleteMany => "delete_many",
            Command::UpdateMany => "update_many",
            Command::FindOne => "find_one",
            Command::Find => "find",
            Command::CreateIndexes => "ensure_index",
            Command::DropIndexes => "drop_index",
            Command::CommitTransaction => "commit_transaction",
            Command::AbortTransaction => "abort_transaction",
            Command::KillSessions => "kill_sessions",
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A snapshot of a store's command counters, from [`MongoStore::metrics`](crate::MongoStore::metrics).
///
/// Every command sent counts once, whether it succeeded or not (the store
/// never repeats a command; the coordinator's repeats are commands of their
/// own; the driver's own retries, on a client with retryable writes or
/// reads on, and its second attempt of a `commitTransaction`, are not seen
/// and not counted). A native transaction's commands count as the store's
/// own do: its `insert`s, `update`s, `delete`s and `find`s under their
/// kinds, and its `commitTransaction`, `abortTransaction` and
/// `killSessions`. Clones of a store share their counters.
///
/// A command counts when the store hands it to the driver: one the driver
/// then fails before it reaches a server (when no server can be selected,
/// for one) counts too, as a failure. Command monitoring
/// on the client (`mongodb::event::command`) sees only what reached the
/// wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommandCounts {
    /// `hello` commands (clock reads by `now`).
    pub hello: u64,
    /// `ping` commands (connection checks by `connect`).
    pub ping: u64,
    /// `insert` commands of `insert_one`.
    pub insert_one: u64,
    /// `update` commands of `update_one`.
    pub update_one: u64,
    /// `update` commands of `update_each` (one per request, whatever its statements).
    pub update_each: u64,
    /// `findAndModify` commands of `find_one_and_update`.
    pub find_one_and_update: u64,
    /// `update` commands of `replace_one`.
    pub replace_one: u64,
    /// `delete` commands of `delete_one`.
    pub delete_one: u64,
    /// `delete` commands of `delete_many`.
    pub delete_many: u64,
    /// `update` commands of `update_many`.
    pub update_many: u64,
    /// `find` commands of `find_one`.
    pub find_one: u64,
    /// `find` commands of `find` (further `getMore` batches are not counted).
    pub find: u64,
    /// `createIndexes` commands of `ensure_index`.
    pub create_indexes: u64,
    /// `dropIndexes` commands of `drop_index`.
    pub drop_indexes: u64,
    /// `commitTransaction` commands of native transactions.
    pub commit_transaction: u64,
    /// `abortTransaction` commands of native transactions.
    pub abort_transaction: u64,
    /// `killSessions` commands ending native commits left in doubt.
    pub kill_sessions: u64,
    /// All commands above.
    pub total: u64,
    /// Write statements handed to the driver: one per write command, and one per statement
    /// of an `update_each` request (the unit a server executes and logs one
    /// by one; what a protocol's cost is counted in).
    pub write_statements: u64,
    /// Commands that failed, for any reason (included in the counts above).
    pub failures: u64,
}

impl CommandCounts {
    /// The count of one kind of command.
    pub fn get(&self, command: Command) -> u64 {
        match command {
            Command::Hello => self.hello,
            Command::Ping => self.ping,
            Command::InsertOne => self.insert_one,
            Command::UpdateOne => self.update_one,
            Command::UpdateEach => self.update_each,
            Command::FindOneAndUpdate => self.find_one_and_update,
            Command::ReplaceOne => self.replace_one,
            Command::DeleteOne => self.delete_one,
            Command::DeleteMany => self.delete_many,
            Command::UpdateMany => self.update_many,
            Command::FindOne => self.find_one,
            Command::Find => self.find,
            Command::CreateIndexes => self.create_indexes,
            Command::DropIndexes => self.drop_indexes,
            Command::CommitTransaction => self.commit_transaction,
            Command::AbortTransaction => self.abort_transaction,
            Command::KillSessions => self.kill_sessions,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    hello: AtomicU64,
    ping: AtomicU64,
    insert_one: AtomicU64,
    update_one: AtomicU64,
    update_each: AtomicU64,
    find_one_and_update: AtomicU64,
    replace_one: AtomicU64,
    delete_one: AtomicU64,
    delete_many: AtomicU64,
    update_many: AtomicU64,
    find_one: AtomicU64,
    find: AtomicU64,
    create_indexes: AtomicU64,
    drop_indexes: AtomicU64,
    commit_transaction: AtomicU64,
    abort_transaction: AtomicU64,
    kill_sessions: AtomicU64,
    total: AtomicU64,
    write_statements: AtomicU64,
    failures: AtomicU64,
}

impl Counters {
    fn slot(&self, command: Command) -> &AtomicU64 {
        match command {
            Command::Hello => &self.hello,
            Command::Ping => &self.ping,
            Command::InsertOne => &self.insert_one,
            Command::UpdateOne => &self.update_one,
            Command::UpdateEach => &self.update_each,
            Command::FindOneAndUpdate => &self.find_one_and_update,
            Command::ReplaceOne => &self.replace_one,
            Command::DeleteOne => &self.delete_one,
            Command::DeleteMany => &self.delete_many,
            Command::UpdateMany => &self.update_many,
            Command::FindOne => &self.find_one,
            Command::Find => &self.find,
            Command::CreateIndexes => &self.create_indexes,
            Command::DropIndexes => &self.drop_indexes,
            Command::CommitTransaction => &self.commit_transaction,
            Command::AbortTransaction => &self.abort_transaction,
            Command::KillSessions => &self.kill_sessions,
        }
    }

    pub(crate) fn sent(&self, command: Command) {
        self.slot(command).fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
        let writes = matches!(
            command,
            Command::InsertOne
                | Command::UpdateOne
                | Command::FindOneAndUpdate
                | Command::ReplaceOne
                | Command::DeleteOne
                | Command::DeleteMany
                | Command::UpdateMany
        );
        if writes {
            self.write_statements.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts the `n` statements of an `update_each` request.
    pub(crate) fn statements(&self, n: u64) {
        self.write_statements.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> CommandCounts {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CommandCounts {
            hello: get(&self.hello),
            ping: get(&self.ping),
            insert_one: get(&self.insert_one),
            update_one: get(&self.update_one),
            update_each: get(&self.update_each),
            find_one_and_update: get(&self.find_one_and_update),
            replace_one: get(&self.replace_one),
            delete_one: get(&self.delete_one),
            delete_many: get(&self.delete_many),
            update_many: get(&self.update_many),
            find_one: get(&self.find_one),
            find: get(&self.find),
            create_indexes: get(&self.create_indexes),
            drop_indexes: get(&self.drop_indexes),
            commit_transaction: get(&self.commit_transaction),
            abort_transaction: get(&self.abort_transaction),
            kill_sessions: get(&self.kill_sessions),
            total: get(&self.total),
            write_statements: get(&self.write_statements),
            failures: get(&self.failures),
        }
    }
}
