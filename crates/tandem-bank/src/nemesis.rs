//! The nemesis: the faults a run injects, and the `failCommand` failpoints it arms.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use bson::{doc, Bson, Document};
use mongodb::options::ClientOptions;

use crate::rng::Rng;

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Nemesis {
    /// SIGKILL a random worker process, then start it again.
    KillWorker,
    /// SIGKILL the database server, then restart it on the same storage and port.
    KillServer,
    /// Arm a random `failCommand` failpoint for the workers, then turn it off.
    Failpoint,
    /// SIGSTOP a random worker for longer than the lease, then SIGCONT it: a
    /// stalled coordinator that wakes up after recovery took its transaction over.
    Pause,
    /// Arm `failCommand` with `blockConnection` on write commands for longer
    /// than the lease: a write that lands after recovery took its transaction over.
    SlowWrite,
    /// Lose the answers of the next few write commands a worker sends to one
    /// server while their requests are still on their way (the workers talk
    /// to each server through a [`LosingProxy`](tandem::testing::LosingProxy)):
    /// the worker sees a network error, repeats or gives up, and the first
    /// copy lands later, up to past the lease.
    LoseAnswer,
}

impl Nemesis {
    /// Every nemesis.
    pub const ALL: [Nemesis; 6] = [
        Nemesis::KillWorker,
        Nemesis::KillServer,
        Nemesis::Failpoint,
        Nemesis::Pause,
        Nemesis::SlowWrite,
        Nemesis::LoseAnswer,
    ];

    /// Its name on the command line and in the output.
    pub fn name(self) -> &'static str {
        match self {
            Nemesis::KillWorker => "kill-worker",
            Nemesis::KillServer => "kill-server",
            Nemesis::Failpoint => "failpoint",
            Nemesis::Pause => "pause",
            Nemesis::SlowWrite => "slow-write",
            Nemesis::LoseAnswer => "lose-answer",
        }
    }

    /// Parses `all`, `none`, or a comma-separated list of names.
    pub fn parse_list(text: &str) -> Result<BTreeSet<Nemesis>, String> {
        match text.trim() {
            "all" => return Ok(Self::ALL.into_iter().collect()),
            "none" | "" => return Ok(BTreeSet::new()),
            _ => {}
        }
        text.split(',')
            .map(|name| {
                let name = name.trim();
                Self::ALL
                    .into_iter()
                    .find(|n| n.name() == name)
                    .ok_or_else(|| {
                        format!(
                            "unknown nemesis {name:?} (choose from kill-worker, kill-server, failpoint, pause, slow-write, lose-answer)"
                        )
                    })
            })
            .collect()
    }
}

impl fmt::Display for Nemesis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The commands a failpoint may fail: every command a transaction sends.
pub const FAIL_COMMANDS: [&str; 5] = ["update", "findAndModify", "insert", "delete", "find"];

/// Error codes after which a command's outcome is unknown: ShutdownInProgress,
/// InterruptedAtShutdown, NotWritablePrimary, WriteConflict.
pub const FAIL_CODES: [i32; 4] = [91, 11600, 10107, 112];

/// Write-concern error codes after which a write is applied but its success unknown:
/// ShutdownInProgress and WriteConcernFailed.
pub const WRITE_CONCERN_CODES: [i32; 2] = [91, 64];

/// A random `configureFailPoint` command for `failCommand`, aimed at clients
/// named `app_name`, with a description of it.
pub fn random_failpoint(rng: &mut Rng, app_name: &str) -> (Document, String) {
    let times = rng.range(1, 8) as i32;
    let mut commands: Vec<&str> = FAIL_COMMANDS
        .into_iter()
        .filter(|_| rng.percent(40))
        .collect();
    if commands.is_empty() {
        commands.push(FAIL_COMMANDS[rng.index(FAIL_COMMANDS.len())]);
    }
    let mut data = doc! {
        "failCommands": commands.iter().map(|c| Bson::String((*c).into())).collect::<Vec<_>>(),
        "appName": app_name,
    };
    let writes = commands.iter().any(|c| *c != "find");
    let roll = rng.below(100);
    let what = if roll < 20 {
        data.insert("closeConnection", true);
        "closeConnection".to_owned()
    } else if roll < 40 && writes {
        // The write is applied, but reported as failed: an outcome the client cannot know.
        let code = WRITE_CONCERN_CODES[rng.index(WRITE_CONCERN_CODES.len())];
        data.insert(
            "writeConcernError",
            doc! { "code": code, "errmsg": "injected write concern error" },
        );
        format!("writeConcernError {code} (applied, reported failed)")
    } else {
        let code = FAIL_CODES[rng.index(FAIL_CODES.len())];
        data.insert("errorCode", code);
        if rng.coin() {
            data.insert("errorLabels", vec!["RetryableWriteError"]);
            format!("errorCode {code} + RetryableWriteError")
        } else {
            format!("errorCode {code}")
        }
    };
    let command = doc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": times },
        "data": data,
    };
    (
        command,
        format!("failCommand x{times} on [{}], {what}", commands.join(", ")),
    )
}

/// The write commands a transaction sends.
pub const WRITE_COMMANDS: [&str; 4] = ["update", "findAndModify", "insert", "delete"];

/// A random `configureFailPoint` command that delays the next 1 to 3 write
/// commands of clients named `app_name` by more than `lease` before running
/// them, with a description of it.
pub fn slow_failpoint(rng: &mut Rng, app_name: &str, lease: Duration) -> (Document, String) {
    let times = rng.range(1, 3) as i32;
    let block = lease + Duration::from_millis(rng.range(200, 2000));
    let block_ms = i32::try_from(block.as_millis()).unwrap_or(i32::MAX);
    let mut commands: Vec<&str> = WRITE_COMMANDS
        .into_iter()
        .filter(|_| rng.percent(50))
        .collect();
    if commands.is_empty() {
        commands.push(WRITE_COMMANDS[rng.index(WRITE_COMMANDS.len())]);
    }
    let command = doc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": times },
        "data": {
            "failCommands": commands.iter().map(|c| Bson::String((*c).into())).collect::<Vec<_>>(),
            "blockConnection": true,
            "blockTimeMS": block_ms,
            "appName": app_name,
        },
    };
    (
        command,
        format!(
            "failCommand x{times} on [{}], blockConnection {block_ms} ms (lease {lease:?}), then runs",
            commands.join(", ")
        ),
    )
}

/// Whether every host of `uri` is on this machine's loopback interface (or a
/// Unix socket): the nemesis arms failpoints only on such servers.
pub async fn is_loopback(uri: &str) -> bool {
    let Ok(options) = ClientOptions::parse(uri).await else {
        return false;
    };
    !options.hosts.is_empty()
        && options.hosts.iter().all(|h| match h {
            mongodb::options::ServerAddress::Tcp { host, .. } => {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                host == "localhost"
                    || host
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            }
            #[cfg(unix)]
            mongodb::options::ServerAddress::Unix { .. } => true,
            _ => false,
        })
}

/// The command that turns `failCommand` off.
pub fn failpoint_off() -> Document {
    doc! { "configureFailPoint": "failCommand", "mode": "off" }
}

/// Checks that the server supports `failCommand` scoped by application name:
/// arms it once for a probe client, sees the probe's `find` fail with code 91
/// while `admin` is unaffected, and turns it off.
pub async fn probe_failpoints(admin: &mongodb::Client, uri: &str, db: &str) -> Result<(), String> {
    let app = format!("tandem-bank-probe-{}", std::process::id());
    let admin_db = admin.database("admin");
    admin_db
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": 1 },
            "data": { "failCommands": ["find"], "errorCode": 91, "appName": &app },
        })
        .await
        .map_err(|e| format!("configureFailPoint refused: {e}"))?;
    let result = async {
        let unaffected = admin
            .database(db)
            .collection::<Document>("accounts")
            .find_one(doc! {})
            .await;
        if let Err(e) = unaffected {
            return Err(format!("a failpoint for another application hit us: {e}"));
        }
        let mut options = ClientOptions::parse(uri).await.map_err(|e| e.to_string())?;
        options.app_name = Some(app.clone());
        options.retry_reads = Some(false);
        options.server_selection_timeout = Some(Duration::from_secs(5));
        let probe = mongodb::Client::with_options(options).map_err(|e| e.to_string())?;
        let hit = probe
            .database(db)
            .collection::<Document>("accounts")
            .find_one(doc! {})
            .await;
        probe.shutdown().await;
        match hit {
            Err(e) => match e.kind.as_ref() {
                mongodb::error::ErrorKind::Command(c) if c.code == 91 => Ok(()),
                _ => Err(format!("the failpoint failed the probe oddly: {e}")),
            },
            Ok(_) => Err("the failpoint did not fire".to_owned()),
        }
    }
    .await;
    let off = admin_db.run_command(failpoint_off()).await;
    result?;
    off.map(|_| ())
        .map_err(|e| format!("turning the failpoint off: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_writes_outlast_the_lease() {
        let mut rng = Rng::new(5);
        let lease = Duration::from_secs(2);
        for _ in 0..100 {
            let (cmd, _) = slow_failpoint(&mut rng, "bank-app", lease);
            let data = cmd.get_document("data").unwrap();
            assert!(data.get_i32("blockTimeMS").unwrap() > 2000);
            assert_eq!(data.get_bool("blockConnection"), Ok(true));
            assert!(data
                .get_array("failCommands")
                .unwrap()
                .iter()
                .all(|c| WRITE_COMMANDS.contains(&c.as_str().unwrap())));
        }
    }

    #[tokio::test]
    async fn only_loopback_servers_count_as_local() {
        assert!(is_loopback("mongodb://127.0.0.1:27017/").await);
        assert!(is_loopback("mongodb://localhost:1,127.0.0.2:2/?replicaSet=rs").await);
        assert!(is_loopback("mongodb://[::1]:27017/").await);
        assert!(!is_loopback("mongodb://db.example.com:27017/").await);
        assert!(!is_loopback("mongodb://127.0.0.1:1,10.0.0.5:2/").await);
        assert!(!is_loopback("not a uri").await);
    }

    #[test]
    fn lists() {
        assert_eq!(Nemesis::parse_list("all").unwrap().len(), 6);
        assert!(Nemesis::parse_list("none").unwrap().is_empty());
        assert_eq!(
            Nemesis::parse_list("pause, kill-worker").unwrap(),
            [Nemesis::KillWorker, Nemesis::Pause].into_iter().collect()
        );
        assert!(Nemesis::parse_list("meteor").is_err());
    }

    #[test]
    fn failpoints_are_well_formed() {
        let mut rng = Rng::new(11);
        let (mut closes, mut wces) = (0, 0);
        for _ in 0..200 {
            let (cmd, text) = random_failpoint(&mut rng, "bank-app");
            assert_eq!(cmd.get_str("configureFailPoint"), Ok("failCommand"));
            let times = cmd.get_document("mode").unwrap().get_i32("times").unwrap();
            assert!((1..=8).contains(&times));
            let data = cmd.get_document("data").unwrap();
            assert_eq!(data.get_str("appName"), Ok("bank-app"));
            let commands = data.get_array("failCommands").unwrap();
            assert!(!commands.is_empty());
            assert!(commands
                .iter()
                .all(|c| FAIL_COMMANDS.contains(&c.as_str().unwrap())));
            if let Ok(code) = data.get_i32("errorCode") {
                assert!(FAIL_CODES.contains(&code));
            } else if let Ok(wce) = data.get_document("writeConcernError") {
                assert!(WRITE_CONCERN_CODES.contains(&wce.get_i32("code").unwrap()));
                assert!(commands.iter().any(|c| c.as_str() != Some("find")));
                wces += 1;
            } else {
                assert_eq!(data.get_bool("closeConnection"), Ok(true));
                closes += 1;
            }
            assert!(text.starts_with("failCommand x"));
        }
        assert!(closes > 0 && wces > 0 && closes + wces < 200);
    }
}
