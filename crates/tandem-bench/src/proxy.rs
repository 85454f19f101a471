//! [`Proxy`]: a TCP proxy on the loopback interface that delays every request
//! by a fixed time, to run the server benchmark as if the server were across a
//! network.
//!
//! Every chunk of bytes read from a client is forwarded to the server `delay`
//! after it was read; replies go back to the client at once. One request
//! therefore costs one round trip of `delay` more than it does on the loopback
//! interface: the delay models a network round trip of `delay` (1 ms by
//! default, about what separates two availability zones of one region), put
//! on the way there rather than split between the two directions. A request
//! split over several chunks is delayed once, as its chunks are read within
//! microseconds of each other and are each held `delay` from their own read.
//!
//! Order is kept: each connection's chunks are written to the server in the
//! order they were read, through one queue per connection. All held chunks, of
//! every connection, pass through one timer thread in the order they were read,
//! each released when its time comes: as every chunk is held the same time,
//! the release times come in that order too. The thread sleeps with the
//! operating system's timer rather than Tokio's, whose millisecond ticks would
//! add up to a millisecond more to every request.
//!
//! The proxy runs on a thread of its own with a single-threaded Tokio runtime,
//! and stops when it is dropped: its runtime ends, and with it the listener and
//! every connection; the timer thread ends once nothing can send it a chunk
//! any more.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

/// The default delay: one network round trip between availability zones.
pub const DEFAULT_DELAY: Duration = Duration::from_millis(1);

/// A chunk read from a client, held until `release`.
struct Held {
    release: Instant,
    read_at: Instant,
    bytes: Vec<u8>,
    to: mpsc::UnboundedSender<(Instant, Vec<u8>)>,
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    chunks: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    held_nanos: AtomicU64,
    /// Each chunk's time held, in microseconds.
    held_micros: Mutex<Vec<u32>>,
}

/// What a [`Proxy`] forwarded so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Client connections accepted.
    pub connections: u64,
    /// Chunks forwarded from clients to the server (each one delayed).
    pub chunks: u64,
    /// Bytes forwarded from clients to the server.
    pub bytes_up: u64,
    /// Bytes forwarded from the server to clients.
    pub bytes_down: u64,
    /// The sum over chunks of the time from reading a chunk to having written
    /// it to the server: the delay as actually added.
    pub held: Duration,
    /// The median of that time over the chunks (to the microsecond).
    pub held_median: Duration,
    /// Its 99th percentile.
    pub held_p99: Duration,
}

impl ProxyStats {
    /// The mean time a chunk was held, if any was forwarded.
    pub fn mean_held(&self) -> Option<Duration> {
        (self.chunks > 0).then(|| self.held / self.chunks.min(u64::from(u32::MAX)) as u32)
    }
}

/// A latency-injecting TCP proxy listening on `127.0.0.1` (see the [module docs](self)).
pub struct Proxy {
    addr: SocketAddr,
    delay: Duration,
    counters: Arc<Counters>,
    /// Dropping it stops the proxy's thread.
    _stop: oneshot::Sender<()>,
}

impl Proxy {
    /// Listens on a free port of `127.0.0.1` and forwards every connection to
    /// `upstream`, delaying each chunk from a client by `delay`.
    ///
    /// The proxy runs on a thread of its own, with its own single-threaded
    /// Tokio runtime, so that the clients' work does not hold up its
    /// forwarding in a shared runtime's queues; it may be started from
    /// anywhere, inside a runtime or not.
    pub fn start(upstream: SocketAddr, delay: Duration) -> io::Result<Proxy> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let counters = Arc::new(Counters::default());
        let (timer_tx, timer_rx) = std_mpsc::channel::<Held>();
        std::thread::Builder::new()
            .name("bench-proxy-timer".into())
            .spawn(move || timer(timer_rx))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let c = Arc::clone(&counters);
        std::thread::Builder::new()
            .name("bench-proxy".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        // The sender goes with the `Proxy`.
                        _ = stopped => {}
                        () = accept(listener, upstream, delay, timer_tx, c) => {}
                    }
                });
                // Dropping the runtime drops every connection, and with them the
                // last senders to the timer thread, which then ends.
            })?;
        Ok(Proxy {
            addr,
            delay,
            counters,
            _stop: stop,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The delay added to each request.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// What was forwarded so far.
    pub fn stats(&self) -> ProxyStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut held: Vec<u32> = self
            .counters
            .held_micros
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        held.sort_unstable();
        let at = |q: f64| {
            let rank = (q * held.len() as f64).ceil() as usize;
            held.get(rank.clamp(1, held.len().max(1)) - 1)
                .map_or(Duration::ZERO, |us| Duration::from_micros(u64::from(*us)))
        };
        ProxyStats {
            connections: get(&self.counters.connections),
            chunks: get(&self.counters.chunks),
            bytes_up: get(&self.counters.bytes_up),
            bytes_down: get(&self.counters.bytes_down),
            held: Duration::from_nanos(get(&self.counters.held_nanos)),
            held_median: at(0.5),
            held_p99: at(0.99),
        }
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    delay: Duration,
    timer: std_mpsc::Sender<Held>,
    counters: Arc<Counters>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    counters.connections.fetch_add(1, Ordering::Relaxed);
                    let timer = timer.clone();
                    let c = Arc::clone(&counters);
                    connections.spawn(async move {
                        let _ = connection(client, upstream, delay, timer, c).await;
                    });
                }
                // Out of file descriptors, say: try again shortly.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// The timer thread: releases each held chunk to its connection's writer when
/// its time comes, in the order the chunks were read.
fn timer(rx: std_mpsc::Receiver<Held>) {
    while let Ok(held) = rx.recv() {
        let now = Instant::now();
        if held.release > now {
            std::thread::sleep(held.release - now);
        }
        // The connection may be gone; its bytes go with it.
        let _ = held.to.send((held.read_at, held.bytes));
    }
}

async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    delay: Duration,
    timer: std_mpsc::Sender<Held>,
    counters: Arc<Counters>,
) -> io::Result<()> {
    let server = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let (release_tx, mut release_rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();

    // Client → timer: each chunk, stamped with its release time.
    let up = async {
        let mut buf = vec![0_u8; 64 * 1024];
        loop {
            let n = client_read.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            let read_at = Instant::now();
            let held = Held {
                release: read_at + delay,
                read_at,
                bytes: buf[..n].to_vec(),
                to: release_tx.clone(),
            };
            if timer.send(held).is_err() {
                return Err(io::Error::other("the proxy's timer thread is gone"));
            }
        }
        // The last sender goes with the last held chunk: the writer then ends.
        drop(release_tx);
        Ok::<_, io::Error>(())
    };
    // Timer → server, in order.
    let write = async {
        while let Some((read_at, bytes)) = release_rx.recv().await {
            server_write.write_all(&bytes).await?;
            counters.chunks.fetch_add(1, Ordering::Relaxed);
            counters
                .bytes_up
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            let held = read_at.elapsed();
            let nanos = u64::try_from(held.as_nanos()).unwrap_or(u64::MAX);
            counters.held_nanos.fetch_add(nanos, Ordering::Relaxed);
            let micros = u32::try_from(held.as_micros()).unwrap_or(u32::MAX);
            counters
                .held_micros
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(micros);
        }
        server_write.shutdown().await
    };
    // Server → client, at once.
    let down = async {
        let mut buf = vec![0_u8; 64 * 1024];
        loop {
            let n = server_read.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            client_write.write_all(&buf[..n]).await?;
            counters.bytes_down.fetch_add(n as u64, Ordering::Relaxed);
        }
        client_write.shutdown().await
    };
    tokio::pin!(down);
    tokio::select! {
        // The server closed (or failed): the connection is over.
        r = &mut down => r,
        // The client is done sending (or failed), and everything it sent has
        // reached the server: the replies still flow until the server closes.
        r = async { tokio::try_join!(up, write) } => {
            r?;
            down.await
        }
    }
}

/// Parses a delay such as `1ms`, `250us`, `0.5ms`, `2s` or `0` (milliseconds
/// when there is no unit).
pub fn parse_delay(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1e-3)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("not a delay: {text:?} (e.g. 1ms, 250us, 0.5ms)"))?;
    if !value.is_finite() || value < 0.0 || value * scale > 60.0 {
        return Err(format!("delay out of range: {text:?} (0 to 60 s)"));
    }
    Ok(Duration::from_secs_f64(value * scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_parse() {
        assert_eq!(parse_delay("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_delay("0.5ms"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_delay("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_delay("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_delay("3"), Ok(Duration::from_millis(3)));
        assert_eq!(parse_delay("0"), Ok(Duration::ZERO));
        assert!(parse_delay("fast").is_err());
        assert!(parse_delay("-1ms").is_err());
    }
}
