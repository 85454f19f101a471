//! A loopback TCP proxy between clients and a MongoDB server that can lose
//! the answers of write commands while their requests are still on their way.
//!
//! Armed, it takes the next few write commands (`insert`, `update`,
//! `delete`, `findAndModify`) a client sends, closes that client's
//! connection at once (the client sees a network error: an unknown outcome),
//! and delivers the request to the server later, on the connection it came
//! on, throwing the server's answer away. The bank test's `lose-answer`
//! nemesis and `tandem-mongodb`'s `tests/lost_answers.rs` use it. That is what a network
//! partition or a failover does to a request in flight, and what the
//! protocol's apply deadlines and the coordinator's doubt are for: a client
//! that repeats a step while the first copy is still on its way must not have
//! it land twice.
//!
//! `failCommand` cannot do this: its `closeConnection` fails the command
//! before it runs, and `blockConnection` runs it and answers (the Rust driver
//! has no socket timeout to give up first).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The wire protocol's `OP_MSG` opcode.
const OP_MSG: i32 = 2013;

/// The commands whose answers the proxy may lose.
const WRITES: [&[u8]; 4] = [b"insert", b"update", b"delete", b"findAndModify"];

/// What the proxy holds next.
#[derive(Default)]
struct Armed {
    /// How many more write requests to hold.
    left: u32,
    /// How long each held request waits before it is delivered.
    delay: Duration,
}

#[derive(Default)]
struct Control {
    armed: Mutex<Armed>,
    held: AtomicU64,
    delivered: AtomicU64,
    delivered_signal: Notify,
}

/// A proxy listening on `127.0.0.1`, forwarding to one server.
pub struct LosingProxy {
    port: u16,
    control: Arc<Control>,
    accept: tokio::task::JoinHandle<()>,
}

impl LosingProxy {
    /// Starts a proxy to `upstream` (`host:port`) on a free loopback port.
    pub async fn start(upstream: String) -> std::io::Result<LosingProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let control = Arc::new(Control::default());
        let shared = control.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let control = shared.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    // A server that is down (a kill-server nemesis) closes
                    // the client at once, as the server itself would.
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        connection(client, server, control).await;
                    }
                });
            }
        });
        Ok(LosingProxy {
            port,
            control,
            accept,
        })
    }

    /// The port the proxy listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Holds the next `count` write requests, each delivered `delay` later.
    pub fn arm(&self, count: u32, delay: Duration) {
        *self.control.armed.lock().unwrap() = Armed { left: count, delay };
    }

    /// Holds nothing more (requests already held are still delivered).
    pub fn disarm(&self) {
        *self.control.armed.lock().unwrap() = Armed::default();
    }

    /// Requests held so far, and those of them delivered to the server.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.control.held.load(Ordering::SeqCst),
            self.control.delivered.load(Ordering::SeqCst),
        )
    }

    /// Waits until every held request has been delivered (and answered, or its
    /// connection lost).
    pub async fn all_delivered(&self) {
        loop {
            let notified = self.control.delivered_signal.notified();
            let (held, delivered) = self.counts();
            if delivered >= held {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for LosingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Whether `message` is an `OP_MSG` whose command is a write: the first key
/// of its body section names the command.
fn is_write(message: &[u8]) -> bool {
    // Header (16 bytes: length, request id, response to, opcode), flag bits
    // (4), section kind 0 (1), the body's length (4), the first element's type.
    if message.len() < 27
        || i32::from_le_bytes([message[12], message[13], message[14], message[15]]) != OP_MSG
    {
        return false;
    }
    if message[20] != 0 {
        return false;
    }
    let key = &message[26..];
    WRITES
        .iter()
        .any(|name| key.len() > name.len() && key.starts_with(name) && key[name.len()] == 0)
}

/// One wire message: its 4-byte little-endian length, then the rest.
async fn read_message(from: &mut (impl AsyncReadExt + Unpin)) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    from.read_exact(&mut len).await.ok()?;
    let n = usize::try_from(i32::from_le_bytes(len)).ok()?;
    if !(4..=64 * 1024 * 1024).contains(&n) {
        return None;
    }
    let mut message = len.to_vec();
    message.resize(n, 0);
    from.read_exact(&mut message[4..]).await.ok()?;
    Some(message)
}

async fn connection(client: TcpStream, server: TcpStream, control: Arc<Control>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // Answers flow back until the proxy stops them; the task then hands the
    // server's side back, so that a held request can still be answered.
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
        let delay = {
            let mut armed = control.armed.lock().unwrap();
            (armed.left > 0 && is_write(&message)).then(|| {
                armed.left -= 1;
                armed.delay
            })
        };
        let Some(delay) = delay else {
            if server_write.write_all(&message).await.is_err() {
                return;
            }
            continue;
        };
        // The answer is lost: the client's connection closes now...
        control.held.fetch_add(1, Ordering::SeqCst);
        let _ = stop.send(());
        drop(client_read);
        let server_read = answers.await;
        // ...and the request reaches the server later, on its own connection.
        tokio::time::sleep(delay).await;
        if let Ok(mut server_read) = server_read {
            if server_write.write_all(&message).await.is_ok() {
                let _ = read_message(&mut server_read).await;
            }
        }
        control.delivered.fetch_add(1, Ordering::SeqCst);
        control.delivered_signal.notify_waiters();
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op_msg(command: &str) -> Vec<u8> {
        let body = bson::doc! { command: "accounts", "$db": "bank" };
        let mut bytes = Vec::new();
        body.to_writer(&mut bytes).unwrap();
        let mut message = Vec::new();
        let len = i32::try_from(16 + 4 + 1 + bytes.len()).unwrap();
        message.extend_from_slice(&len.to_le_bytes());
        message.extend_from_slice(&7_i32.to_le_bytes());
        message.extend_from_slice(&0_i32.to_le_bytes());
        message.extend_from_slice(&OP_MSG.to_le_bytes());
        message.extend_from_slice(&0_u32.to_le_bytes());
        message.push(0);
        message.extend_from_slice(&bytes);
        message
    }

    #[test]
    fn writes_are_told_from_reads() {
        for write in ["insert", "update", "delete", "findAndModify"] {
            assert!(is_write(&op_msg(write)), "{write}");
        }
        for other in ["find", "hello", "updates", "ping", "getMore"] {
            assert!(!is_write(&op_msg(other)), "{other}");
        }
        let mut legacy = op_msg("update");
        legacy[12..16].copy_from_slice(&2004_i32.to_le_bytes());
        assert!(!is_write(&legacy), "not an OP_MSG");
    }
}
