//! Bad input: every case runs the same function on the embedded `MemoryStore`
//! and on the MongoDB server at `MONGODB_URI` (a database of its own, dropped
//! at the end). Each case checks the typed error that names the problem, and
//! then the documents: balances as they were, no marker entry, no
//! `_tandem.lock`, no stray document, and every record terminal or absent.
//!
//! Without `MONGODB_URI` the MongoDB half prints `skipped: MONGODB_URI not set`,
//! unless `TANDEM_REQUIRE_MONGODB=1`, when it fails.

mod support;

use std::fmt;
use std::time::{Duration, Instant};

use bson::{doc, Bson};
use support::Fixture;
use tandem::{
    ChangeError, DocumentChange, Namespace, StepError, StoreErrorKind, Strategy, Transaction,
    TxError, TxId, TxState,
};
use tandem_mongodb::mongodb::options::ClientOptions;
use tandem_mongodb::mongodb::Client;
use tandem_mongodb::MongoStore;

/// Generates `mod $case { embedded, mongodb }`: one test per store, both calling `$case`.
macro_rules! on_both_stores {
    ($($(#[$meta:meta])* $case:ident),* $(,)?) => {$(
        mod $case {
            use super::support::Backend;

            $(#[$meta])*
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                Backend::Embedded.run(stringify!($case), super::$case).await;
            }

            $(#[$meta])*
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mongodb() {
                Backend::MongoDb.run(stringify!($case), super::$case).await;
            }
        }
    )*};
}

on_both_stores!(
    a_missing_document,
    a_failed_guard,
    a_string_balance_under_a_guard,
    a_string_balance_without_a_guard,
    zero_negative_and_unnegatable_amounts,
    an_overflow_of_an_exclusive_change,
    an_overflow_of_a_deferred_credit,
    a_duplicate_transaction_id,
    a_document_that_would_exceed_16_mb,
    a_17_mb_value,
    too_many_participants,
    names_from_user_input,
    an_operator_in_a_guard_value,
    an_operator_in_a_document_id,
    an_operator_in_a_pull_value,
    guards_no_store_can_check,
    a_marker_field_holding_an_application_array,
    a_store_refusal_names_its_path,
);

// ---------------------------------------------------------------------------
// Helpers

/// What the application's own `transfer` refuses before tandem sees anything.
#[derive(Clone, Debug, PartialEq, Eq)]
enum TransferError {
    /// Only a positive amount can be moved from one account to another.
    NotPositive { amount: i64 },
}

impl fmt::Display for TransferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransferError::NotPositive { amount } => {
                write!(f, "a transfer needs a positive amount, not {amount}")
            }
        }
    }
}

impl std::error::Error for TransferError {}

/// A transfer of `amount` from `from` to `to`, refused unless `amount > 0`.
fn transfer(
    accounts: &Namespace,
    from: &str,
    to: &str,
    amount: i64,
) -> Result<Transaction, TransferError> {
    if amount <= 0 {
        return Err(TransferError::NotPositive { amount });
    }
    Ok(Transaction::new()
        .change(
            DocumentChange::update(accounts.clone(), from)
                .inc("balance", -amount)
                .require_gte("balance", amount),
        )
        .change(DocumentChange::update(accounts.clone(), to).inc("balance", amount)))
}

/// The refusal inside a `TxError::Canceled`.
fn cause(result: Result<tandem::Receipt, TxError>) -> StepError {
    match result {
        Err(TxError::Canceled { cause, .. }) => cause,
        other => panic!("expected a canceled transaction, got {other:?}"),
    }
}

/// The mistake inside a `TxError::Invalid`.
fn invalid(result: Result<tandem::Receipt, TxError>) -> ChangeError {
    match result {
        Err(TxError::Invalid(e)) => e,
        other => panic!("expected an invalid transaction, got {other:?}"),
    }
}

/// The one record's `last_error`.
async fn last_error(fx: &Fixture) -> String {
    let records = fx.tx_records().await;
    assert_eq!(records.len(), 1, "{records:?}");
    records[0].last_error.clone().unwrap_or_default()
}

// ---------------------------------------------------------------------------
// The cases

/// A document that does not exist: `NotFound`, the other side undone, nothing created.
async fn a_missing_document(fx: Fixture) {
    let initial = fx.accounts_with(&[("A", 1000)]).await;
    let tx = transfer(&fx.accounts(), "A", "nobody", 100).unwrap();
    let err = fx.coordinator().run(tx).await;
    match cause(err) {
        StepError::NotFound { participant } => assert_eq!(participant, fx.label("nobody")),
        other => panic!("{other:?}"),
    }
    assert!(last_error(&fx).await.contains("document not found"));
    // Only A in the collection: no placeholder or upserted "nobody".
    fx.assert_unchanged(&initial, &[TxState::Canceled]).await;
}

/// A guard that fails: `GuardFailed`, naming the guard and the value found.
async fn a_failed_guard(fx: Fixture) {
    let initial = fx.accounts_with(&[("A", 50), ("B", 50)]).await;
    let tx = transfer(&fx.accounts(), "A", "B", 100).unwrap();
    let err = fx.coordinator().run(tx).await;
    let cause = cause(err);
    assert_eq!(
        cause.to_string(),
        format!("{}: guard failed: balance >= 100 (found 50)", fx.label("A"))
    );
    match cause {
        StepError::GuardFailed { participant, guard } => {
            assert_eq!(participant, fx.label("A"));
            assert_eq!(guard, "balance >= 100 (found 50)");
        }
        other => panic!("{other:?}"),
    }
    fx.assert_unchanged(&initial, &[TxState::Canceled]).await;
}

/// A balance stored as the string "1000", debited under a guard: `TypeMismatch`.
async fn a_string_balance_under_a_guard(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx
        .seed(
            &accounts,
            vec![
                doc! { "_id": "A", "balance": "1000" },
                doc! { "_id": "B", "balance": 0_i64 },
            ],
        )
        .await;
    let tx = transfer(&accounts, "A", "B", 10).unwrap();
    let err = fx.coordinator().run(tx).await;
    match cause(err) {
        StepError::TypeMismatch {
            participant,
            path,
            message,
        } => {
            assert_eq!(participant, fx.label("A"));
            assert_eq!(path, "balance");
            assert_eq!(
                message,
                "stored string \"1000\", guard compares with long 10"
            );
        }
        other => panic!("{other:?}"),
    }
    fx.assert_unchanged(&initial, &[TxState::Canceled]).await;
}

/// The same string balance, credited without a guard: the store's `$inc`
/// refuses it, still as `TypeMismatch`, and B's debit is undone.
async fn a_string_balance_without_a_guard(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx
        .seed(
            &accounts,
            vec![
                doc! { "_id": "A", "balance": "1000" },
                doc! { "_id": "B", "balance": 100_i64 },
            ],
        )
        .await;
    let tx = Transaction::new()
        .change(DocumentChange::update(accounts.clone(), "B").inc("balance", -5_i64))
        .change(DocumentChange::update(accounts.clone(), "A").inc("balance", 5_i64));
    let err = fx.coordinator().run(tx).await;
    match cause(err) {
        StepError::TypeMismatch {
            participant,
            path,
            message,
        } => {
            assert_eq!(participant, fx.label("A"));
            assert_eq!(path, "balance");
            assert!(
                message.to_ascii_lowercase().contains("non-numeric"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    fx.assert_unchanged(&initial, &[TxState::Canceled]).await;
}

/// Zero, negative and unnegatable amounts: refused before anything is written.
async fn zero_negative_and_unnegatable_amounts(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx.accounts_with(&[("A", 1000), ("B", 1000)]).await;
    let coordinator = fx.coordinator();

    // The application's own check: only a positive amount is a transfer.
    for amount in [0, -5, i64::MIN] {
        let err = transfer(&accounts, "A", "B", amount)
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err, TransferError::NotPositive { amount });
        assert_eq!(
            err.to_string(),
            format!("a transfer needs a positive amount, not {amount}")
        );
    }

    // The core's checks of the increment itself, for both strategies.
    let cases: Vec<(Bson, &str)> = vec![
        (Bson::Int64(0), "zero"),
        (Bson::Int32(0), "zero"),
        (Bson::Double(0.0), "zero"),
        (Bson::Double(f64::NAN), "not a finite number"),
        (Bson::Double(f64::INFINITY), "not a finite number"),
        (Bson::Int64(i64::MIN), "cannot be negated for compensation"),
        (Bson::Int32(i32::MIN), "cannot be negated for compensation"),
        (
            Bson::String("10".into()),
            "not an i32, i64, f64 or Decimal128",
        ),
    ];
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        for (by, reason) in &cases {
            let tx = Transaction::new()
                .strategy(strategy)
                .change(DocumentChange::update(accounts.clone(), "A").inc("balance", by.clone()))
                .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 1_i64));
            let err = invalid(coordinator.run(tx).await);
            assert_eq!(
                err,
                ChangeError::InvalidAmount {
                    path: "balance".into(),
                    reason,
                },
                "{by:?} with {strategy:?}"
            );
        }
    }
    let err = invalid(
        coordinator
            .run(
                Transaction::new()
                    .change(DocumentChange::update(accounts, "A").inc("balance", i64::MIN)),
            )
            .await,
    );
    assert_eq!(
        err.to_string(),
        "invalid increment of \"balance\": cannot be negated for compensation"
    );
    fx.assert_unchanged(&initial, &[]).await;
}

/// A balance near `i64::MAX`, raised past it by an exclusive change (the
/// credit applies at once): `StepError::Overflow`, B's debit undone.
async fn an_overflow_of_an_exclusive_change(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx.accounts_with(&[("A", i64::MAX - 10), ("B", 1000)]).await;
    let tx = Transaction::new()
        .change(
            DocumentChange::update(accounts.clone(), "B")
                .inc("balance", -100_i64)
                .require_gte("balance", 100_i64),
        )
        .change(
            DocumentChange::update(accounts.clone(), "A")
                .inc("balance", 100_i64)
                .set("lastCredit", 100_i64),
        );
    let err = fx.coordinator().run(tx).await;
    match cause(err) {
        StepError::Overflow {
            participant,
            message,
        } => {
            assert_eq!(participant, fx.label("A"));
            // MongoDB: "Failed to apply $inc operations to current value
            // ((NumberLong)9223372036854775797) for document {_id: \"A\"}";
            // the embedded store says the same and adds "would overflow a 64-bit integer".
            assert!(
                message.contains("Failed to apply $inc operations to current value"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    fx.assert_unchanged(&initial, &[TxState::Canceled]).await;
}

/// The same overflow through a plain transfer, where the credit is shared and
/// deferred to the commit: it must be refused as well, with nothing applied.
async fn an_overflow_of_a_deferred_credit(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx.accounts_with(&[("A", i64::MAX - 10), ("B", 1000)]).await;
    let tx = transfer(&accounts, "B", "A", 100).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(60), fx.coordinator().run(tx))
        .await
        .expect("the transaction ends");
    let records = fx.tx_records().await;
    let after: Vec<_> = fx.docs(&accounts).await;
    match cause(result) {
        StepError::Overflow { participant, .. } => assert_eq!(participant, fx.label("A")),
        other => panic!("{other:?}; records {records:?}; accounts {after:?}"),
    }
    fx.assert_unchanged(&initial, &[TxState::Canceled]).await;
}

/// The same id twice: `Duplicate`, the transfer applied once.
async fn a_duplicate_transaction_id(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx.accounts_with(&[("A", 100), ("B", 100)]).await;
    let coordinator = fx.coordinator();
    let tx = || {
        Transaction::with_id("pay-42")
            .change(DocumentChange::update(accounts.clone(), "A").inc("balance", -1_i64))
            .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 1_i64))
    };
    let receipt = coordinator.run(tx()).await.unwrap();
    assert_eq!(receipt.state, TxState::Done);
    for _ in 0..2 {
        let err = coordinator.run(tx()).await.unwrap_err();
        assert_eq!(
            err,
            TxError::Duplicate {
                id: TxId::new("pay-42").unwrap(),
                state: Some(TxState::Done),
            }
        );
        assert_eq!(err.to_string(), "transaction pay-42 exists already (done)");
    }
    let expected = vec![
        (accounts.clone(), doc! { "_id": "A", "balance": 99_i64 }),
        (accounts.clone(), doc! { "_id": "B", "balance": 101_i64 }),
    ];
    fx.assert_after(&initial, &expected, &[TxState::Done]).await;
}

const MIB: usize = 1024 * 1024;

/// A document of 9 MiB that a change would take past 16 MiB: `TooLarge`, and
/// the other participant's debit, applied first, is undone.
async fn a_document_that_would_exceed_16_mb(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx
        .seed(
            &accounts,
            vec![
                doc! { "_id": "A", "balance": 10_i64, "padding": "p".repeat(9 * MIB) },
                doc! { "_id": "B", "balance": 1000_i64 },
            ],
        )
        .await;
    let tx = Transaction::new()
        .change(
            DocumentChange::update(accounts.clone(), "B")
                .inc("balance", -100_i64)
                .require_gte("balance", 100_i64),
        )
        .change(DocumentChange::update(accounts.clone(), "A").set("blob", "x".repeat(8 * MIB)));
    let err = fx.coordinator().run(tx).await;
    match cause(err) {
        StepError::TooLarge { participant } => assert_eq!(participant, fx.label("A")),
        other => panic!("{other:?}"),
    }
    fx.assert_unchanged(&initial, &[TxState::Canceled]).await;
}

/// A 17 MiB value: it cannot even be recorded (the record keeps the change),
/// so the transaction is refused before anything is written.
async fn a_17_mb_value(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx.accounts_with(&[("A", 10), ("B", 1000)]).await;
    let tx = Transaction::new()
        .change(
            DocumentChange::update(accounts.clone(), "B")
                .inc("balance", -100_i64)
                .require_gte("balance", 100_i64),
        )
        .change(DocumentChange::update(accounts.clone(), "A").set("blob", "x".repeat(17 * MIB)));
    match fx.coordinator().run(tx).await {
        Err(TxError::Canceled {
            cause: StepError::TooLarge { participant },
            ..
        }) => assert_eq!(participant, "(transaction record)"),
        other => panic!("{other:?}"),
    }
    fx.assert_unchanged(&initial, &[]).await;
}

/// More participants than allowed: `TooManyParticipants`, nothing written.
async fn too_many_participants(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx.accounts_with(&[("A", 100)]).await;
    let many = |n: usize, strategy: Strategy| {
        (0..n).fold(Transaction::new().strategy(strategy), |tx, i| {
            tx.change(DocumentChange::update(accounts.clone(), format!("X{i}")).inc("n", 1))
        })
    };
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let err = invalid(fx.coordinator().run(many(65, strategy)).await);
        assert_eq!(
            err,
            ChangeError::TooManyParticipants {
                count: 65,
                limit: 64
            }
        );
        let small = fx.builder().max_participants(3).build();
        let err = invalid(small.run(many(4, strategy)).await);
        assert_eq!(err, ChangeError::TooManyParticipants { count: 4, limit: 3 });
        assert_eq!(
            err.to_string(),
            "4 participants exceed the limit of 3 (raise it with CoordinatorBuilder::max_participants)"
        );
    }
    fx.assert_unchanged(&initial, &[]).await;
}

/// Field, collection and database names taken from user input, with `$` or
/// `.`: refused by validation, so they never reach the store as operators.
async fn names_from_user_input(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx.accounts_with(&[("A", 100), ("B", 100)]).await;
    let coordinator = fx.coordinator();
    let run = |change: DocumentChange, strategy: Strategy| {
        let coordinator = coordinator.clone();
        let tx = Transaction::new()
            .strategy(strategy)
            .change(change)
            .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 1_i64));
        async move { invalid(coordinator.run(tx).await) }
    };
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        // Field paths: in a change, in a guard.
        for path in [
            "balance.$where",
            "$set",
            "$where",
            "balance..x",
            ".balance",
            "a\0b",
            "",
        ] {
            for change in [
                DocumentChange::update(accounts.clone(), "A").set(path, 1),
                DocumentChange::update(accounts.clone(), "A").inc(path, 1),
                DocumentChange::update(accounts.clone(), "A")
                    .inc("balance", 1)
                    .require_eq(path, 1),
            ] {
                match run(change, strategy).await {
                    ChangeError::InvalidPath { path: p, reason } => {
                        assert_eq!(p, path, "{reason}");
                    }
                    other => panic!("{path:?}: {other:?}"),
                }
            }
        }
        // Names tandem keeps for itself.
        for path in ["pendingTransactions", "_tandem.lock", "_tandem", "_id"] {
            let err = run(
                DocumentChange::update(accounts.clone(), "A").set(path, "x"),
                strategy,
            )
            .await;
            assert_eq!(err, ChangeError::ReservedField { path: path.into() });
        }
        // Collections and databases.
        for (db, collection) in [
            (fx.db.as_str(), "acc$"),
            (fx.db.as_str(), "$cmd"),
            (fx.db.as_str(), ".accounts"),
            (fx.db.as_str(), "acc\0ounts"),
            ("a.b", "accounts"),
            ("a$b", "accounts"),
            ("a/b", "accounts"),
            ("a b", "accounts"),
        ] {
            let change =
                DocumentChange::update(Namespace::new(db, collection), "A").inc("balance", 1);
            match run(change, strategy).await {
                ChangeError::InvalidNamespace { name, reason } => {
                    assert!(name == db || name == collection, "{name:?}: {reason}");
                }
                other => panic!("{db:?}.{collection:?}: {other:?}"),
            }
        }
    }
    let err = run(
        DocumentChange::update(accounts.clone(), "A").set("balance.$where", 1),
        Strategy::TwoPhase,
    )
    .await;
    assert_eq!(
        err.to_string(),
        "invalid field path \"balance.$where\": segment starts with '$'"
    );
    let err = run(
        DocumentChange::update(Namespace::new("a.b", "accounts"), "A").inc("balance", 1),
        Strategy::TwoPhase,
    )
    .await;
    assert_eq!(
        err.to_string(),
        "invalid namespace name \"a.b\": database names cannot contain '.', '/', '\\', '\"' or ' '"
    );
    fx.assert_unchanged(&initial, &[]).await;
    assert!(fx.docs(&fx.ns("acc$")).await.is_empty());
}

/// An operator document passed as a guard VALUE is compared literally: a
/// guard `owner == {"$ne": "x"}` does not match an owner "alice" (as the
/// operator would), only an owner that IS that document.
async fn an_operator_in_a_guard_value(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx
        .seed(
            &accounts,
            vec![
                doc! { "_id": "A", "owner": "alice", "balance": 1000_i64 },
                doc! { "_id": "B", "owner": "bob", "balance": 1000_i64 },
                doc! { "_id": "C", "owner": { "$ne": "x" }, "balance": 0_i64 },
            ],
        )
        .await;
    let coordinator = fx.coordinator();
    let hostile = || doc! { "$ne": "x" };
    let tx = Transaction::new()
        .change(
            DocumentChange::update(accounts.clone(), "B")
                .inc("balance", -100_i64)
                .require_gte("balance", 100_i64),
        )
        .change(
            DocumentChange::update(accounts.clone(), "A")
                .set("frozen", true)
                .require_eq("owner", hostile()),
        );
    // A string never equals a document: the refusal names both types.
    match cause(coordinator.run(tx).await) {
        StepError::TypeMismatch {
            participant,
            path,
            message,
        } => {
            assert_eq!(participant, fx.label("A"));
            assert_eq!(path, "owner");
            assert_eq!(
                message,
                "stored string \"alice\", guard compares with object { \"$ne\": \"x\" }"
            );
        }
        other => panic!("{other:?}"),
    }
    // A numeric guard with an operator document as its value does not match either.
    let tx = Transaction::new().change(
        DocumentChange::update(accounts.clone(), "A")
            .inc("balance", -100_i64)
            .require_gte("balance", doc! { "$lt": 1 }),
    );
    match cause(coordinator.run(tx).await) {
        StepError::TypeMismatch { path, .. } => assert_eq!(path, "balance"),
        other => panic!("{other:?}"),
    }
    // The same guard holds for the document whose owner is literally `{"$ne": "x"}`.
    let tx = Transaction::new().change(
        DocumentChange::update(accounts.clone(), "C")
            .set("frozen", true)
            .require_eq("owner", hostile()),
    );
    assert_eq!(coordinator.run(tx).await.unwrap().state, TxState::Done);
    let mut expected = initial.clone();
    expected[2].1.insert("frozen", true);
    fx.assert_after(
        &initial,
        &expected,
        &[TxState::Canceled, TxState::Canceled, TxState::Done],
    )
    .await;
}

/// An operator document passed as a document ID (e.g. an id parsed from a
/// JSON request) must name no document: it must not act as a query selector
/// that picks some other account.
async fn an_operator_in_a_document_id(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx.accounts_with(&[("A", 1000), ("B", 1000)]).await;
    let hostile = doc! { "$gt": "" };
    let tx = Transaction::new()
        .change(
            DocumentChange::update(accounts.clone(), hostile.clone())
                .inc("balance", -100_i64)
                .require_gte("balance", 100_i64),
        )
        .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 100_i64));
    let result = fx.coordinator().run(tx).await;
    let after = fx.docs(&accounts).await;
    match result {
        Err(TxError::Canceled {
            cause: StepError::NotFound { .. },
            ..
        })
        | Err(TxError::Invalid(ChangeError::InvalidPath { .. })) => {}
        other => panic!("{other:?}; accounts now {after:?}"),
    }
    let states: &[TxState] = if fx.tx_records().await.is_empty() {
        &[]
    } else {
        &[TxState::Canceled]
    };
    fx.assert_unchanged(&initial, states).await;
}

/// An operator document passed as a `pull` VALUE is refused before anything is
/// written: the store would read it as a condition and pull what it selects.
async fn an_operator_in_a_pull_value(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx
        .seed(
            &accounts,
            vec![doc! { "_id": "A", "tags": ["a", "b", "x"], "balance": 1_i64 }],
        )
        .await;
    let tx = Transaction::new()
        .change(DocumentChange::update(accounts.clone(), "A").pull("tags", doc! { "$ne": "x" }));
    let refused = fx.coordinator().run(tx).await;
    let after = fx.get(&accounts, "A").await;
    match refused {
        Err(TxError::Invalid(ChangeError::OperatorInValue { path, key })) => {
            assert_eq!((path.as_str(), key.as_str()), ("tags", "$ne"));
        }
        other => panic!("{other:?}"),
    }
    fx.assert_unchanged(&initial, &[]).await;
    assert_eq!(
        after.unwrap().get_array("tags").unwrap(),
        &vec![Bson::from("a"), Bson::from("b"), Bson::from("x")]
    );
}

// ---------------------------------------------------------------------------
// MongoDB only: a server that cannot be reached.

/// No server at 127.0.0.1:1: `connect` fails with `Unavailable` within its
/// server selection timeout, and a transaction on a store built without a
/// ping stops with `Interrupted` before its record was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server() {
    let uri = "mongodb://127.0.0.1:1/";
    let started = Instant::now();
    let err = MongoStore::builder()
        .server_selection_timeout(Duration::from_millis(300))
        .connect(uri)
        .await
        .unwrap_err();
    assert_eq!(err.kind, StoreErrorKind::Unavailable, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    let mut options = ClientOptions::parse(uri).await.unwrap();
    options.server_selection_timeout = Some(Duration::from_millis(300));
    let store = MongoStore::builder().build(Client::with_options(options).unwrap());
    let coordinator = tandem::Coordinator::builder(store)
        .database("tsuite_unreachable")
        .build();
    let accounts = Namespace::new("tsuite_unreachable", "accounts");
    let started = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        coordinator.run(transfer(&accounts, "A", "B", 100).unwrap()),
    )
    .await
    .expect("bounded by the server selection timeout");
    match result {
        // The first transaction reads the server's clock before it writes
        // anything: that read failing means nothing was written.
        Err(TxError::Canceled {
            cause: tandem::StepError::Store { source, .. },
            ..
        })
        // A write whose answer did not come: the outcome is unknown.
        | Err(TxError::Interrupted {
            state: None,
            source,
            ..
        }) => {
            assert_eq!(source.kind, StoreErrorKind::Unavailable, "{source}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// Guards that say nothing a store could check: a guard on an insert (its
/// document does not exist before it) and a presence guard given a value
/// (`exists: false`, as MongoDB's `$exists` reads it). Both were ignored,
/// and the transactions committed; both are refused as malformed, with
/// either strategy, before anything is written.
async fn guards_no_store_can_check(fx: Fixture) {
    let accounts = fx.accounts();
    let orders = fx.ns("orders");
    let initial = fx
        .seed(
            &accounts,
            vec![doc! { "_id": "A", "balance": 100_i64, "coupon": "used" }],
        )
        .await;
    let coordinator = fx.coordinator();
    for strategy in [Strategy::TwoPhase, Strategy::Native] {
        let guarded_insert = Transaction::new()
            .change(
                DocumentChange::update(accounts.clone(), "A")
                    .inc("balance", -30_i64)
                    .require_gte("balance", 30_i64),
            )
            .change(
                DocumentChange::insert(orders.clone(), "o-1", doc! { "state": "new" })
                    .require_eq("state", "approved"),
            )
            .strategy(strategy);
        let bonus_without_coupon = Transaction::new()
            .change(
                DocumentChange::update(accounts.clone(), "A")
                    .inc("balance", 10_i64)
                    .require("coupon", tandem::GuardOp::Exists, false),
            )
            .strategy(strategy);
        for (tx, refused) in [(guarded_insert, "state"), (bonus_without_coupon, "coupon")] {
            match coordinator.run(tx).await {
                Err(TxError::Invalid(ChangeError::InvalidPath { path, .. })) => {
                    assert_eq!(path, refused, "{strategy:?}")
                }
                other => panic!("{strategy:?} {refused}: {other:?}"),
            }
        }
    }
    assert!(
        fx.docs(&orders).await.is_empty(),
        "no order, no placeholder"
    );
    fx.assert_unchanged(&initial, &[]).await;
}

/// A marker name that is a field of the application's holding an array of
/// its own (`DocumentChange::marker("tags")` where `tags` holds strings):
/// `TypeMismatch` naming the marker field, which holds data that is not
/// tandem's, and nothing written, for an exclusive change (which named one
/// of the strings as the transaction holding the document) and for a
/// shared one (whose apply pushed its marker into the application's array).
async fn a_marker_field_holding_an_application_array(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx
        .seed(
            &accounts,
            vec![
                doc! { "_id": "A", "balance": 1000_i64 },
                doc! { "_id": "X", "balance": 10_i64, "tags": ["alice", "bob"] },
            ],
        )
        .await;
    let coordinator = fx.coordinator();
    for exclusive in [true, false] {
        let change = DocumentChange::update(accounts.clone(), "X").marker("tags");
        let change = if exclusive {
            change.set("note", "n")
        } else {
            change.inc("balance", 1_i64)
        };
        let tx = Transaction::new()
            .change(
                DocumentChange::update(accounts.clone(), "A")
                    .inc("balance", -30_i64)
                    .require_gte("balance", 30_i64),
            )
            .change(change)
            .strategy(Strategy::TwoPhase);
        match cause(coordinator.run(tx).await) {
            StepError::TypeMismatch {
                participant,
                path,
                message,
            } => {
                assert_eq!(participant, fx.label("X"), "exclusive {exclusive}");
                assert_eq!(path, "tags", "exclusive {exclusive}: {message}");
                assert!(
                    message.contains("not tandem's") && message.contains("alice"),
                    "exclusive {exclusive}: {message}"
                );
            }
            other => panic!("exclusive {exclusive}: {other:?}"),
        }
    }
    // (Not the audit: it reads the application's array under the marker
    // name as markers left behind.)
    let states: Vec<TxState> = fx.tx_records().await.iter().map(|r| r.state).collect();
    assert_eq!(states, [TxState::Canceled, TxState::Canceled]);
    for (ns, want) in &initial {
        let id = want.get_str("_id").unwrap();
        let got = fx.get(ns, id).await.expect("still there");
        support::assert_bookkeeping_clean(&got);
        assert_eq!(support::own_fields(&got), support::own_fields(want), "{id}");
    }
}

/// A refusal by the store itself names the path of the operation the
/// store's message names, with either strategy (the native strategy said
/// `path: ""`, the two-phase one the change's first path): an increment of
/// a string, a push onto a string, a field set below a number, each in a
/// change whose first operation is a `set` of another field.
async fn a_store_refusal_names_its_path(fx: Fixture) {
    let accounts = fx.accounts();
    let initial = fx
        .seed(
            &accounts,
            vec![
                doc! { "_id": "A", "balance": 100_i64 },
                doc! { "_id": "S", "balance": "10", "tags": "t", "meta": 5_i64 },
            ],
        )
        .await;
    let coordinator = fx.coordinator();
    type Op = fn(DocumentChange) -> DocumentChange;
    let cases: [(&str, Op); 3] = [
        ("balance", |c| c.inc("balance", 5_i64)),
        ("tags", |c| c.push("tags", "x")),
        ("meta.x", |c| c.set("meta.x", 1_i64)),
    ];
    let mut canceled = Vec::new();
    for strategy in [Strategy::Native, Strategy::TwoPhase] {
        for (want, op) in cases {
            let tx = Transaction::new()
                .change(DocumentChange::update(accounts.clone(), "A").inc("balance", -5_i64))
                .change(op(
                    DocumentChange::update(accounts.clone(), "S").set("note", "n")
                ))
                .strategy(strategy);
            match cause(coordinator.run(tx).await) {
                StepError::TypeMismatch {
                    participant,
                    path,
                    message,
                } => {
                    assert_eq!(participant, fx.label("S"), "{strategy:?} {want}");
                    assert_eq!(path, want, "{strategy:?}: {message}");
                }
                other => panic!("{strategy:?} {want}: {other:?}"),
            }
            if strategy == Strategy::TwoPhase {
                canceled.push(TxState::Canceled);
            }
        }
    }
    fx.assert_unchanged(&initial, &canceled).await;
}
