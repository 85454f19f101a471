//! A request whose answer is lost while the request itself is still on its way.
//!
//! Between the coordinator and the server sits a TCP proxy that can hold one
//! request: it closes the client's connection at once (the client sees a
//! network error, an unknown outcome) and delivers the request to the server
//! later. That is what a slow network or a failover does to a request in
//! flight, and it is the case the protocol's apply deadline and the
//! coordinator's doubt exist for.
//!
//! An apply that is repeated after such an error may succeed while its first
//! copy is still on its way. If the marker were then removed at once, the
//! first copy would find no marker and apply the change a second time. A store
//! that repeated the request on its own (as `MongoStore` once did) hid the
//! first copy from the coordinator, which then cleared at once: the debit
//! below landed twice.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::doc;
use tandem::config::RecoveryConfig;
use tandem::store::{Namespace, Store};
use tandem::{CommitPoint, Coordinator, DocumentChange, Transaction, TxState};
use tandem_mongodb::MongoStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// A one-shot rule: the first request whose bytes contain `needle` is held.
struct Hold {
    needle: Vec<u8>,
    delay: Duration,
}

/// A loopback TCP proxy to one server that can hold one request.
struct HoldingProxy {
    port: u16,
    rule: Arc<Mutex<Option<Hold>>>,
    /// Requests held so far.
    held: Arc<AtomicUsize>,
    /// Held requests the server has answered (the answer is thrown away).
    delivered: Arc<AtomicUsize>,
    delivered_signal: Arc<Notify>,
}

impl HoldingProxy {
    async fn start(upstream: String) -> HoldingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = HoldingProxy {
            port,
            rule: Arc::default(),
            held: Arc::default(),
            delivered: Arc::default(),
            delivered_signal: Arc::default(),
        };
        let (rule, held, delivered, signal) = (
            proxy.rule.clone(),
            proxy.held.clone(),
            proxy.delivered.clone(),
            proxy.delivered_signal.clone(),
        );
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(connection(
                    client,
                    server,
                    rule.clone(),
                    held.clone(),
                    delivered.clone(),
                    signal.clone(),
                ));
            }
        });
        proxy
    }

    fn hold_next(&self, needle: Vec<u8>, delay: Duration) {
        *self.rule.lock().unwrap() = Some(Hold { needle, delay });
    }

    /// Waits until every held request has been answered by the server.
    async fn all_delivered(&self) {
        loop {
            let notified = self.delivered_signal.notified();
            if self.delivered.load(Ordering::SeqCst) >= self.held.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }
}

/// One MongoDB wire message: its 4-byte little-endian length, then the rest.
async fn read_message(from: &mut (impl AsyncReadExt + Unpin)) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    from.read_exact(&mut len).await.ok()?;
    let n = usize::try_from(i32::from_le_bytes(len)).ok()?;
    let mut message = len.to_vec();
    message.resize(n.max(4), 0);
    from.read_exact(&mut message[4..]).await.ok()?;
    Some(message)
}

async fn connection(
    client: TcpStream,
    server: TcpStream,
    rule: Arc<Mutex<Option<Hold>>>,
    held: Arc<AtomicUsize>,
    delivered: Arc<AtomicUsize>,
    signal: Arc<Notify>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // Answers flow back until the proxy stops them; the task then gives the
    // server's side back, so a held request can still be answered.
    let answers = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        let forward = async {
            loop {
                let n = server_read.read(&mut buf).await?;
                if n == 0 {
                    return Ok::<(), std::io::Error>(());
                }
                client_write.write_all(&buf[..n]).await?;
            }
        };
        tokio::select! {
            _ = forward => {}
            _ = stopped => {}
        }
        server_read
    });
    while let Some(message) = read_message(&mut client_read).await {
        let hold = {
            let mut rule = rule.lock().unwrap();
            let hit = rule.as_ref().is_some_and(|r| {
                message
                    .windows(r.needle.len())
                    .any(|w| w == r.needle.as_slice())
            });
            if hit {
                rule.take()
            } else {
                None
            }
        };
        let Some(hold) = hold else {
            if server_write.write_all(&message).await.is_err() {
                return;
            }
            continue;
        };
        // The answer is lost: the client's connection closes now...
        held.fetch_add(1, Ordering::SeqCst);
        let _ = stop.send(());
        drop(client_read);
        let server_read = answers.await;
        // ...and the request reaches the server later, on the same connection.
        tokio::time::sleep(hold.delay).await;
        if let Ok(mut server_read) = server_read {
            if server_write.write_all(&message).await.is_ok() {
                let _ = read_message(&mut server_read).await;
            }
        }
        delivered.fetch_add(1, Ordering::SeqCst);
        signal.notify_waiters();
        return;
    }
}

/// The bytes of a BSON string element `update: <collection>`: how an `update`
/// command names its collection.
fn update_command_on(collection: &str) -> Vec<u8> {
    let mut needle = vec![0x02];
    needle.extend_from_slice(b"update\0");
    let len = i32::try_from(collection.len() + 1).unwrap();
    needle.extend_from_slice(&len.to_le_bytes());
    needle.extend_from_slice(collection.as_bytes());
    needle.push(0);
    needle
}

/// The `host:port` of a single-host URI, or `None` for a list of hosts.
fn single_host(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("mongodb://")?;
    let hosts = rest.split(['/', '?']).next()?;
    let hosts = hosts.rsplit('@').next()?;
    (!hosts.contains(',')).then(|| hosts.to_owned())
}

#[tokio::test]
async fn an_apply_whose_answer_was_lost_lands_at_most_once() {
    let Some(uri) = common::mongodb_uri() else {
        return;
    };
    let Some(host) = single_host(&uri) else {
        println!("skipped: the proxy needs a single-host MONGODB_URI");
        return;
    };
    let proxy = HoldingProxy::start(host).await;
    let db = common::unique_name("lost");
    let collection = format!("held_{}", std::process::id());
    let accounts = Namespace::new(&db, &collection);
    // Records go straight to the server; the account goes through the proxy.
    let records = MongoStore::builder()
        .server_selection_timeout(Duration::from_secs(10))
        .connect(&uri)
        .await
        .expect("connect");
    let via_proxy = MongoStore::builder()
        .server_selection_timeout(Duration::from_secs(10))
        .connect(&format!(
            "mongodb://127.0.0.1:{}/?directConnection=true&retryWrites=false&heartbeatFrequencyMS=500",
            proxy.port
        ))
        .await
        .expect("connect through the proxy");
    records
        .insert_one(&accounts, doc! { "_id": "A", "balance": 10_i64 })
        .await
        .unwrap();
    let lease = Duration::from_secs(3);
    let coordinator = Coordinator::builder(records.clone())
        .store("held", via_proxy)
        .database(&db)
        .lease(lease)
        .clock_margin(Duration::from_millis(200))
        .commit_point(CommitPoint::Done)
        .build();

    let started = records.now().await.unwrap();
    // The first `update` on the account (the apply) is held for a second.
    proxy.hold_next(update_command_on(&collection), Duration::from_secs(1));
    let receipt = coordinator
        .run(
            Transaction::new().change(
                DocumentChange::update(accounts.clone(), "A")
                    .in_store("held")
                    .inc("balance", -1_i64)
                    .require_gte("balance", 1_i64),
            ),
        )
        .await
        .expect("the debit commits");
    // The apply was repeated after its answer was lost, so its first copy may
    // still land until the deadline: the marker stays until then, and the
    // coordinator leaves the clearing to recovery.
    assert_eq!(receipt.state, TxState::Applied);
    assert_eq!(proxy.held.load(Ordering::SeqCst), 1, "the apply was held");

    // Once the held copy has reached the server, it has done all it can.
    proxy.all_delivered().await;
    let balance = |account: &bson::Document| account.get_i64("balance").unwrap();
    let account = records
        .find_one(&accounts, doc! { "_id": "A" })
        .await
        .unwrap()
        .expect("the account");
    assert_eq!(balance(&account), 9, "debited exactly once: {account}");

    // Past the deadline (by the server's clock), recovery finishes the debit.
    let deadline = started.timestamp_millis() + 2 * i64::try_from(lease.as_millis()).unwrap();
    while records.now().await.unwrap().timestamp_millis() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = coordinator
        .recovery(RecoveryConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.committed, 1, "{report:?}");
    let account = records
        .find_one(&accounts, doc! { "_id": "A" })
        .await
        .unwrap()
        .expect("the account");
    assert_eq!(balance(&account), 9, "debited exactly once: {account}");
    assert_eq!(
        account.get_array("pendingTransactions").unwrap().len(),
        0,
        "no marker left: {account}"
    );
    records.client().database(&db).drop().await.unwrap();
    coordinator.shutdown().await;
}
