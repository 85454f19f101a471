//! The latency-injecting proxy against a local echo server: bytes arrive
//! intact and in order, and no reply arrives sooner than the delay after its
//! request was sent. Only lower bounds on time are asserted: a loaded machine
//! may make anything slower, never faster.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tandem_bench::proxy::Proxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An echo server on a free loopback port; it runs until the test's runtime ends.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = socket.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// Deterministic bytes, different for each connection.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_arrive_intact_and_in_order() {
    let proxy = Proxy::start(echo_server().await, Duration::from_millis(2)).unwrap();
    let mut clients = Vec::new();
    for seed in 1..=4_u64 {
        let addr = proxy.addr();
        clients.push(tokio::spawn(async move {
            let data = pattern(seed, 512 * 1024 + seed as usize);
            let stream = TcpStream::connect(addr).await.unwrap();
            let (mut r, mut w) = stream.into_split();
            let sent = data.clone();
            // Writes of uneven sizes, so chunks split and join anywhere.
            let writer = tokio::spawn(async move {
                let mut at = 0;
                let mut size = 1;
                while at < sent.len() {
                    let end = (at + size).min(sent.len());
                    w.write_all(&sent[at..end]).await.unwrap();
                    at = end;
                    size = size * 7 % 65_521 + 1;
                }
                w.shutdown().await.unwrap();
            });
            let mut got = Vec::with_capacity(data.len());
            r.read_to_end(&mut got).await.unwrap();
            writer.await.unwrap();
            assert_eq!(got.len(), data.len(), "connection {seed}: length");
            assert!(got == data, "connection {seed}: bytes changed or reordered");
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    let stats = proxy.stats();
    assert_eq!(stats.connections, 4);
    assert_eq!(stats.bytes_up, stats.bytes_down);
    assert_eq!(
        stats.bytes_up,
        (1..=4_u64).map(|s| 512 * 1024 + s).sum::<u64>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_comes_no_sooner_than_the_delay() {
    let delay = Duration::from_millis(40);
    let proxy = Proxy::start(echo_server().await, delay).unwrap();
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    stream.set_nodelay(true).unwrap();
    for round in 0..5_u8 {
        let request = [round; 16];
        let sent = Instant::now();
        stream.write_all(&request).await.unwrap();
        let mut reply = [0_u8; 16];
        stream.read_exact(&mut reply).await.unwrap();
        let took = sent.elapsed();
        assert_eq!(reply, request);
        assert!(
            took >= delay,
            "round {round}: the reply came {took:?} after the request, sooner than the delay {delay:?}"
        );
    }
    let stats = proxy.stats();
    assert!(stats.chunks >= 5, "{stats:?}");
    assert!(stats.mean_held().unwrap() >= delay, "{stats:?}");
    assert!(stats.held_median >= delay, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_of_several_concurrent_requests_is_delayed() {
    // Eight connections each send one request at once: no reply comes sooner
    // than the delay after its own request.
    let delay = Duration::from_millis(30);
    let proxy = Proxy::start(echo_server().await, delay).unwrap();
    let mut tasks = Vec::new();
    for i in 0..8_u8 {
        let addr = proxy.addr();
        tasks.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let sent = Instant::now();
            stream.write_all(&[i; 8]).await.unwrap();
            let mut reply = [0_u8; 8];
            stream.read_exact(&mut reply).await.unwrap();
            assert_eq!(reply, [i; 8]);
            sent.elapsed()
        }));
    }
    for t in tasks {
        let took = t.await.unwrap();
        assert!(took >= delay, "{took:?} < {delay:?}");
    }
}

#[tokio::test]
async fn dropping_the_proxy_stops_it() {
    let proxy = Proxy::start(echo_server().await, Duration::from_millis(1)).unwrap();
    let addr = proxy.addr();
    drop(proxy);
    // The listener goes with the proxy's runtime, on the proxy's thread.
    let mut refused = false;
    for _ in 0..100 {
        if TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        refused,
        "the proxy still accepts connections after being dropped"
    );
}
