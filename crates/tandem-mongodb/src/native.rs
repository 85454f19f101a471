//! The native strategy: document changes inside one MongoDB multi-document transaction.
//!
//! Retries follow the drivers' convenient transaction API: the whole
//! transaction is run again on `TransientTransactionError`, the commit alone on
//! `UnknownTransactionCommitResult`, with jittered backoff, within a budget
//! (the coordinator's [`RetryPolicy`], passed to
//! [`NativeTransactions::run_native`](tandem::NativeTransactions::run_native)); `MaxTimeMSExpired` is
//! never retried. Guards are checked inside the transaction, and a refusal is
//! explained with [`DocumentChange::explain`], so the errors are the ones the
//! two-phase strategy reports.

use std::time::Instant;

use bson::{doc, Document};
use mongodb::error::{
    Error as DriverError, ErrorKind, TRANSIENT_TRANSACTION_ERROR, UNKNOWN_TRANSACTION_COMMIT_RESULT,
};
use mongodb::options::{Acknowledgment, ReadConcern, TransactionOptions, WriteConcern};
use mongodb::{Client, ClientSession, Collection};
use tandem::store::{StoreError, StoreErrorKind};
use tandem::{DocumentChange, NativeCommand, NativeFailure, RetryPolicy, StepError};

use crate::error::map_driver_error;
use crate::metrics::{Command, Counters};

/// The MongoDB code of `MaxTimeMSExpired`, which is never retried.
const MAX_TIME_MS_EXPIRED: i32 = 50;

/// Why the body of a transaction stopped.
enum Stop {
    /// A participant refused: abort and report it.
    Refused(StepError),
    /// The driver failed while sending a command of the change labeled so:
    /// maybe retry the whole transaction.
    Driver(DriverError, String),
}

fn code_of(e: &DriverError) -> Option<i32> {
    match e.kind.as_ref() {
        ErrorKind::Command(c) => Some(c.code),
        ErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) => Some(w.code),
        ErrorKind::Write(mongodb::error::WriteFailure::WriteConcernError(w)) => Some(w.code),
        _ => None,
    }
}

/// Sends one driver command of a native transaction, counted in the
/// store's metrics as the store's own commands are (a failure too).
async fn counted<T>(
    counters: &Counters,
    command: Command,
    op: impl std::future::IntoFuture<Output = Result<T, DriverError>>,
) -> Result<T, DriverError> {
    counters.sent(command);
    let result = op.await;
    if result.is_err() {
        counters.failed();
    }
    result
}

fn retryable(e: &DriverError, label: &str) -> bool {
    e.contains_label(label) && code_of(e) != Some(MAX_TIME_MS_EXPIRED)
}

/// Runs `changes` in one transaction on `client`; `secrets` are redacted from messages.
///
/// A failure before the commit is sent leaves nothing applied (the
/// transaction is aborted, or dies with its session): `Aborted`. Once a
/// commit was sent, any failure is `InDoubt`, whatever the server answered
/// last: the driver may itself have resent the commit, and an answer to the
/// resent one does not say what became of the first.
pub(crate) async fn run(
    client: &Client,
    counters: &Counters,
    retry: RetryPolicy,
    secrets: &[String],
    changes: &[DocumentChange],
) -> Result<(), NativeFailure> {
    // A failure of the session itself, before any change was sent, is
    // laid at the first change's door; a change's own, at its.
    let label = changes.first().map(|c| c.label()).unwrap_or_default();
    let failed_at = |e: &DriverError, participant: &str| {
        NativeFailure::Aborted(StepError::Store {
            participant: participant.to_owned(),
            source: map_driver_error(e, secrets),
        })
    };
    let failed = |e: &DriverError| failed_at(e, &label);
    let started = Instant::now();
    let mut attempt = 0_u32;
    let mut session = client.start_session().await.map_err(|e| failed(&e))?;
    let txn_options = TransactionOptions::builder()
        .read_concern(ReadConcern::snapshot())
        // A transaction reads from the primary only (the client's read
        // preference may say otherwise).
        .selection_criteria(crate::store::primary())
        .write_concern(
            WriteConcern::builder()
                .w(Acknowledgment::Majority)
                .journal(true)
                .build(),
        )
        .build();
    'transaction: loop {
        attempt += 1;
        session
            .start_transaction()
            .with_options(txn_options.clone())
            .await
            .map_err(|e| failed(&e))?;
        match body(client, counters, &mut session, changes).await {
            Ok(()) => {}
            Err(Stop::Refused(refusal)) => {
                let _ = counted(
                    counters,
                    Command::AbortTransaction,
                    session.abort_transaction(),
                )
                .await;
                return Err(NativeFailure::Aborted(refusal));
            }
            Err(Stop::Driver(e, participant)) => {
                let _ = counted(
                    counters,
                    Command::AbortTransaction,
                    session.abort_transaction(),
                )
                .await;
                if retryable(&e, TRANSIENT_TRANSACTION_ERROR) {
                    if let Some(d) = retry.next_delay(attempt, started.elapsed()) {
                        tokio::time::sleep(d).await;
                        continue 'transaction;
                    }
                }
                return Err(failed_at(&e, &participant));
            }
        }
        // A failed commit may have landed, whatever the error says: the
        // driver sends `commitTransaction` a second time on its own after a
        // retryable error (whatever `retryWrites` says; the transactions
        // specification asks it to), and the error it returns is then the
        // second copy's, which says nothing of the first. So a failed
        // commit is never followed by running the transaction again (its
        // guards need not refuse a second debit, nor an increment anything):
        // it is sent again while its error says its result is unknown, and
        // is in doubt otherwise.
        loop {
            match counted(
                counters,
                Command::CommitTransaction,
                session.commit_transaction(),
            )
            .await
            {
                Ok(()) => return Ok(()),
                Err(e) => {
                    if retryable(&e, UNKNOWN_TRANSACTION_COMMIT_RESULT) {
                        // The delay the budget was checked with is the one slept.
                        if let Some(d) = retry.next_delay(attempt, started.elapsed()) {
                            attempt += 1;
                            tokio::time::sleep(d).await;
                            continue;
                        }
                    }
                    // The commit's outcome is unknown and will not be retried: end the
                    // session on the server so a transaction still open there is aborted
                    // now rather than holding its locks until its lifetime runs out.
                    let lsid = session.id().clone();
                    let admin = client.database("admin");
                    let _ = counted(
                        counters,
                        Command::KillSessions,
                        admin.run_command(doc! { "killSessions": [lsid] }),
                    )
                    .await;
                    return Err(NativeFailure::InDoubt(map_driver_error(&e, secrets)));
                }
            }
        }
    }
}

/// The changes, one command each, inside the session's transaction.
async fn body(
    client: &Client,
    counters: &Counters,
    session: &mut ClientSession,
    changes: &[DocumentChange],
) -> Result<(), Stop> {
    for change in changes {
        let driver = |e: DriverError| Stop::Driver(e, change.label());
        // A plain handle: operations inside a transaction carry no concerns of their own.
        let coll: Collection<Document> = client
            .database(&change.namespace.db)
            .collection(&change.namespace.collection);
        let matched = match change.native_command() {
            NativeCommand::Insert { doc, placeholder } => {
                // A placeholder of the `_id` is taken over.
                let taken = coll.delete_one(placeholder).session(&mut *session);
                if let Err(e) = counted(counters, Command::DeleteOne, taken).await {
                    return Err(refusal_or_driver(change, e));
                }
                let insert = coll.insert_one(doc).session(&mut *session);
                match counted(counters, Command::InsertOne, insert).await {
                    Ok(_) => true,
                    // A unique index of the collection's own refused the
                    // document: the store's refusal, as two-phase meets it
                    // at its fill (no concurrent write to wait out).
                    Err(e) if code_of(&e) == Some(11000) && on_another_index(&e) => {
                        return Err(driver(e));
                    }
                    Err(e) if code_of(&e) == Some(11000) => {
                        // The error aborted the transaction on the server:
                        // what holds the `_id` is read outside it, and
                        // explained (held by a transaction: a conflict).
                        let read = coll
                            .find_one(doc! { "_id": change.id.clone() })
                            .selection_criteria(crate::store::primary());
                        let current = counted(counters, Command::FindOne, read)
                            .await
                            .map_err(driver)?;
                        let refusal = change.explain(current.as_ref(), None).err().unwrap_or(
                            StepError::AlreadyExists {
                                participant: change.label(),
                            },
                        );
                        return Err(Stop::Refused(refusal));
                    }
                    Err(e) => return Err(refusal_or_driver(change, e)),
                }
            }
            NativeCommand::Update { filter, update } => {
                let update = coll.update_one(filter, update).session(&mut *session);
                match counted(counters, Command::UpdateOne, update).await {
                    Ok(r) => r.matched_count == 1,
                    Err(e) => return Err(refusal_or_driver(change, e)),
                }
            }
            NativeCommand::Delete { filter } => {
                let delete = coll.delete_one(filter).session(&mut *session);
                match counted(counters, Command::DeleteOne, delete).await {
                    Ok(r) => r.deleted_count == 1,
                    Err(e) => return Err(refusal_or_driver(change, e)),
                }
            }
        };
        if !matched {
            let read = coll
                .find_one(doc! { "_id": change.id.clone() })
                .session(&mut *session);
            let current = counted(counters, Command::FindOne, read)
                .await
                .map_err(driver)?;
            let refusal = change
                .explain(current.as_ref(), None)
                .err()
                .unwrap_or_else(|| StepError::Conflict {
                    participant: change.label(),
                    holder: "(concurrent write)".into(),
                });
            return Err(Stop::Refused(refusal));
        }
    }
    Ok(())
}

/// Whether a duplicate key error names a unique index other than `_id`'s
/// (`... index: email_1 dup key: ...`). An error that names none is taken
/// to be on the `_id`.
fn on_another_index(e: &DriverError) -> bool {
    let message = match e.kind.as_ref() {
        ErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) => w.message.as_str(),
        ErrorKind::Command(c) => c.message.as_str(),
        _ => return false,
    };
    message
        .split_once(" index: ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|index| index != "_id_")
}

/// A store refusal of the change itself (wrong type, too large, overflow) is a
/// participant's refusal; anything else is the driver's failure.
fn refusal_or_driver(change: &DocumentChange, e: DriverError) -> Stop {
    let participant = change.label();
    if e.contains_label(TRANSIENT_TRANSACTION_ERROR) {
        return Stop::Driver(e, participant);
    }
    let mapped: StoreError = map_driver_error(&e, &[]);
    match mapped.kind {
        StoreErrorKind::TypeMismatch => Stop::Refused(StepError::TypeMismatch {
            participant,
            path: change.refused_path(&mapped.message),
            message: mapped.message,
        }),
        StoreErrorKind::DocumentTooLarge => Stop::Refused(StepError::TooLarge { participant }),
        StoreErrorKind::Overflow => Stop::Refused(StepError::Overflow {
            participant,
            message: mapped.message,
        }),
        _ => Stop::Driver(e, participant),
    }
}
