//! [`FawnDriver`]: drives the Node benchmark of Fawn (`node/fawn_bench.js`) as a child process.
//!
//! The protocol is one JSON object per line each way. The Rust side sends a
//! request (`{"op":"seq","start":K,"n":N}` for `N` transfers one after
//! another, `{"op":"conc","start":K,"n":N,"c":C}` for `N` transfers by `C`
//! concurrent promises, `{"op":"quit"}`), and the Node side answers with what
//! it measured: latencies, wall time, CPU time (`process.cpuUsage`), and the
//! commands it sent, counted by the Node driver's command monitoring. Transfer
//! number `K` uses the same accounts as in every other variant.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The longest any single request may take before the benchmark gives up.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// The Node side of variant (d).
pub struct FawnDriver {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
}

/// The answer to a sequential batch.
#[derive(Clone, Debug, Default)]
pub struct SeqReply {
    /// Latency of each successful transfer.
    pub latencies: Vec<Duration>,
    /// CPU time of the Node process during the batch.
    pub cpu: Duration,
    /// Commands sent during the batch.
    pub commands: u64,
    /// Commands sent with no other in flight.
    pub waves: u64,
    /// Messages of failed transfers.
    pub errors: Vec<String>,
}

/// The answer to a concurrent batch.
#[derive(Clone, Debug, Default)]
pub struct ConcReply {
    /// Time until every transfer had finished.
    pub wall: Duration,
    /// Messages of failed transfers.
    pub errors: Vec<String>,
}

fn nanos(v: &Value) -> Duration {
    Duration::from_nanos(v.as_f64().unwrap_or(0.0).max(0.0) as u64)
}

fn errors(v: &Value) -> Vec<String> {
    v["errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| e.as_str().unwrap_or("?").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

impl FawnDriver {
    /// Starts `node script URI DB POOL COLLECTION` with `node_modules` on `NODE_PATH`,
    /// and waits for its `ready` line. The child is killed if this driver is dropped.
    pub async fn start(
        node: &str,
        script: &Path,
        node_modules: &Path,
        uri: &str,
        db: &str,
        pool: usize,
        collection: &str,
    ) -> Result<Self, String> {
        let mut child = Command::new(node)
            .arg(script)
            .arg(uri)
            .arg(db)
            .arg(pool.to_string())
            .arg(collection)
            .env("NODE_PATH", node_modules)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting {node} {}: {e}", script.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin for the Node process")?;
        let stdout = child
            .stdout
            .take()
            .ok_or("no stdout for the Node process")?;
        let mut driver = FawnDriver {
            child,
            stdin: Some(stdin),
            lines: BufReader::new(stdout).lines(),
        };
        let ready = driver.read().await?;
        if ready["ready"].as_bool() != Some(true) {
            return Err(format!("the Node side did not start: {ready}"));
        }
        Ok(driver)
    }

    async fn read(&mut self) -> Result<Value, String> {
        let line = tokio::time::timeout(REQUEST_TIMEOUT, self.lines.next_line())
            .await
            .map_err(|_| "the Node side did not answer in time".to_owned())?
            .map_err(|e| format!("reading from the Node side: {e}"))?
            .ok_or("the Node side exited")?;
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| format!("unreadable answer from the Node side ({e}): {line}"))?;
        if let Some(err) = v["fatal"].as_str() {
            return Err(format!("the Node side failed: {err}"));
        }
        Ok(v)
    }

    async fn request(&mut self, request: Value) -> Result<Value, String> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or("the Node side was told to quit")?;
        let mut line = request.to_string();
        line.push('\n');
        stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("writing to the Node side: {e}"))?;
        stdin.flush().await.map_err(|e| e.to_string())?;
        self.read().await
    }

    /// Transfers `start .. start + n`, one after another.
    pub async fn sequential(&mut self, start: u64, n: u64) -> Result<SeqReply, String> {
        let v = self
            .request(json!({ "op": "seq", "start": start, "n": n }))
            .await?;
        Ok(SeqReply {
            latencies: v["lat_ns"]
                .as_array()
                .map(|a| a.iter().map(nanos).collect())
                .unwrap_or_default(),
            cpu: Duration::from_micros(v["cpu_us"].as_u64().unwrap_or(0)),
            commands: v["commands"].as_u64().unwrap_or(0),
            waves: v["waves"].as_u64().unwrap_or(0),
            errors: errors(&v),
        })
    }

    /// Transfers `start .. start + n` by `c` concurrent promises.
    pub async fn concurrent(&mut self, start: u64, n: u64, c: usize) -> Result<ConcReply, String> {
        let v = self
            .request(json!({ "op": "conc", "start": start, "n": n, "c": c }))
            .await?;
        Ok(ConcReply {
            wall: nanos(&v["wall_ns"]),
            errors: errors(&v),
        })
    }

    /// Asks the Node side to disconnect and exit, then waits for it (killing it after 10 s).
    pub async fn quit(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"{\"op\":\"quit\"}\n").await;
            let _ = stdin.flush().await;
            drop(stdin);
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
