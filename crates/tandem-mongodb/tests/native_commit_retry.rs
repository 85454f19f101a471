//! A native commit the driver sends again on its own.
//!
//! The driver repeats a `commitTransaction` that failed with a retryable
//! error (here: its answer lost) once, unseen by the store, whatever
//! `retryWrites` says (the transactions specification asks it to). When
//! that second copy is answered `TransientTransactionError`, the answer says
//! nothing of the first copy, which may have committed: the transaction must
//! not be run again. Each case runs with `retryWrites` true and false.
//!
//! Between the store and the server sits a small proxy that lets the first
//! `commitTransaction` reach the server and throws its answer away (closing
//! the client's connection), so the first commit lands and its answer is
//! lost. A `failCommand` failpoint skips that first commit and answers the
//! driver's second one with `NoSuchTransaction` (251) labelled
//! `TransientTransactionError`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use tandem::store::{Namespace, Store};
use tandem::{Coordinator, DocumentChange, RetryPolicy, Strategy, Transaction, TxError};
use tandem_mongodb::MongoStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const OP_MSG: i32 = 2013;

/// Held by each case while it uses the server's `failCommand` failpoint.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The `host:port` of a single-host URI, or `None` for a list of hosts.
fn single_host(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("mongodb://")?;
    let hosts = rest.split(['/', '?']).next()?;
    let hosts = hosts.rsplit('@').next()?;
    (!hosts.contains(',')).then(|| hosts.to_owned())
}

async fn read_message(from: &mut (impl AsyncReadExt + Unpin)) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    from.read_exact(&mut len).await.ok()?;
    let n = usize::try_from(i32::from_le_bytes(len)).ok()?;
    if !(16..=64 * 1024 * 1024).contains(&n) {
        return None;
    }
    let mut message = len.to_vec();
    message.resize(n, 0);
    from.read_exact(&mut message[4..]).await.ok()?;
    Some(message)
}

fn header(message: &[u8], at: usize) -> i32 {
    i32::from_le_bytes([
        message[at],
        message[at + 1],
        message[at + 2],
        message[at + 3],
    ])
}

/// Whether `message` is an `OP_MSG` whose command is `commitTransaction`.
fn is_commit(message: &[u8]) -> bool {
    const NAME: &[u8] = b"commitTransaction";
    if message.len() < 27 || header(message, 12) != OP_MSG || message[20] != 0 {
        return false;
    }
    let key = &message[26..];
    key.len() > NAME.len() && key.starts_with(NAME) && key[NAME.len()] == 0
}

/// Forwards every connection to `upstream`; the answer of the first
/// `commitTransaction` seen while `armed` is thrown away and the client's
/// connection closed (the request itself reached the server).
struct CommitAnswerLoser {
    port: u16,
    armed: Arc<AtomicBool>,
    lost: Arc<AtomicI32>,
}

impl CommitAnswerLoser {
    async fn start(upstream: String) -> CommitAnswerLoser {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let lost = Arc::new(AtomicI32::new(0));
        let (a, l) = (armed.clone(), lost.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (armed, lost, upstream) = (a.clone(), l.clone(), upstream.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        connection(client, server, armed, lost).await;
                    }
                });
            }
        });
        CommitAnswerLoser { port, armed, lost }
    }
}

async fn connection(
    client: TcpStream,
    server: TcpStream,
    armed: Arc<AtomicBool>,
    lost: Arc<AtomicI32>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // The request id of the commit whose answer is to be lost.
    let held = Arc::new(AtomicI32::new(i32::MIN));
    let held_in = held.clone();
    let requests = async move {
        while let Some(message) = read_message(&mut client_read).await {
            if is_commit(&message) && armed.swap(false, Ordering::SeqCst) {
                held_in.store(header(&message, 4), Ordering::SeqCst);
            }
            if server_write.write_all(&message).await.is_err() {
                return;
            }
        }
    };
    let answers = async move {
        while let Some(message) = read_message(&mut server_read).await {
            if header(&message, 8) == held.load(Ordering::SeqCst) {
                lost.fetch_add(1, Ordering::SeqCst);
                return;
            }
            if client_write.write_all(&message).await.is_err() {
                return;
            }
        }
    };
    // Either side ending ends the connection (both halves dropped).
    tokio::select! {
        _ = requests => {}
        _ = answers => {}
    }
}

/// Runs `change` (built on the namespace) natively through the proxy, on a
/// store whose client has retryable writes on, starting from `n` = `start`:
/// the first commit lands and its answer is lost; the driver's second is
/// answered `TransientTransactionError`. Returns the answer and `n` after.
async fn run_with_the_commit_sent_again(
    start: i64,
    retry_writes: bool,
    change: impl FnOnce(Namespace) -> DocumentChange,
) -> Option<(Result<tandem::Receipt, TxError>, i64)> {
    // The failpoint is the server's own: one case at a time.
    let _serial = SERIAL.lock().await;
    let uri = common::mongodb_uri()?;
    let Some(host) = single_host(&uri) else {
        println!("skipped: the proxy needs a single-host MONGODB_URI");
        return None;
    };
    let proxy = CommitAnswerLoser::start(host).await;
    let app_name = common::unique_name("commit_again");
    let db = app_name.clone();
    let admin = mongodb::Client::with_uri_str(&uri).await.unwrap();
    // Polling monitors: a plain request and answer on every connection.
    let store = MongoStore::builder()
        .app_name(app_name.clone())
        .server_selection_timeout(Duration::from_secs(10))
        .connect(&format!(
            "mongodb://127.0.0.1:{}/?directConnection=true&retryWrites={retry_writes}&heartbeatFrequencyMS=500&serverMonitoringMode=poll",
            proxy.port
        ))
        .await
        .expect("connect through the proxy");
    let ns = Namespace::new(&db, "docs");
    store
        .insert_one(&ns, doc! { "_id": "counter", "n": start })
        .await
        .unwrap();
    // The first commit runs; the second (the driver's own) is answered
    // "no such transaction", transient.
    admin
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": { "skip": 1, "times": 1 },
            "data": {
                "failCommands": ["commitTransaction"],
                "errorCode": 251,
                "errorLabels": ["TransientTransactionError"],
                "appName": app_name.clone(),
            },
        })
        .await
        .unwrap();
    proxy.armed.store(true, Ordering::SeqCst);
    let coordinator = Coordinator::builder(store.clone())
        .database(&db)
        .strategy(Strategy::Native)
        .retry(RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(100),
            budget: Duration::from_secs(20),
        })
        .build();
    let answer = coordinator
        .run(Transaction::new().change(change(ns.clone())))
        .await;
    common::fail_command_off(&admin).await;
    assert_eq!(
        proxy.lost.load(Ordering::SeqCst),
        1,
        "a commit's answer was lost: {answer:?}"
    );
    let n = admin
        .database(&db)
        .collection::<bson::Document>("docs")
        .find_one(doc! { "_id": "counter" })
        .await
        .unwrap()
        .unwrap()
        .get_i64("n")
        .unwrap();
    admin.database(&db).drop().await.unwrap();
    Some((answer, n))
}

/// An increment: it lands twice, answered `Ok`.
#[tokio::test]
async fn a_native_commit_the_driver_sent_again_is_never_run_again() {
    for retry_writes in [true, false] {
        let Some((answer, n)) = run_with_the_commit_sent_again(0, retry_writes, |ns| {
            DocumentChange::update(ns, "counter").inc("n", 1_i64)
        })
        .await
        else {
            return;
        };
        assert_eq!(
            n, 1,
            "retryWrites={retry_writes}: one increment asked, answered {answer:?}"
        );
        assert!(
            matches!(answer, Ok(_) | Err(TxError::Interrupted { .. })),
            "retryWrites={retry_writes}: {answer:?}"
        );
    }
}

/// A guarded debit of the whole balance: run again, its guard refuses, and
/// the caller is told `Canceled` (nothing applied) for a debit that landed.
#[tokio::test]
async fn a_native_debit_whose_commit_landed_is_never_answered_canceled() {
    for retry_writes in [true, false] {
        let Some((answer, n)) = run_with_the_commit_sent_again(1, retry_writes, |ns| {
            DocumentChange::update(ns, "counter")
                .inc("n", -1_i64)
                .require_gte("n", 1_i64)
        })
        .await
        else {
            return;
        };
        assert_eq!(n, 0, "retryWrites={retry_writes}: the debit landed once");
        assert!(
            matches!(answer, Ok(_) | Err(TxError::Interrupted { .. })),
            "retryWrites={retry_writes}: the debit landed, answered {answer:?}"
        );
    }
}
