//! Security: SCRAM authentication, TLS, and credentials kept out of every log
//! line and error message.
//!
//! SecantusDB 0.7.0b3 has `--auth` (SCRAM-SHA-256, users made with
//! `createUser`) and TLS (`--tls-cert-file` / `--tls-key-file`). With `--auth`
//! every command but the handshake needs a logged-in user, and there is no
//! localhost exception, so a user is made on a server started without
//! `--auth`, which is then restarted with `--auth` on the same storage
//! directory (`:memory:` would not survive the restart). The TLS server keeps
//! its data in `:memory:`.
//!
//! Each test starts its own `secantusd-py` from `.venv/bin` on a free
//! 127.0.0.1 port and stops it when done. Without `.venv/bin/secantusd-py`
//! the tests print why and pass, unless `TANDEM_REQUIRE_MONGODB=1`.
//!
//! Every `tracing` event and span of the process (the `mongodb` driver's own
//! events at every level included: `tracing-unstable` is on for these tests)
//! is captured, and no password may appear in it.

mod support;

use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use bson::doc;
use support::{secantusd_or_skip, Fixture, Secantus, TempDir};
use tandem::store::StoreError;
use tandem::{DocumentChange, StoreErrorKind, Transaction, TxError, TxState};
use tandem_mongodb::MongoStore;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

/// The test user; its password is never written anywhere but the server.
const USER: &str = "tandem_app";
/// A password with characters a URI must percent-encode (`: @ / # ? %`).
const PASSWORD: &str = "Zq7:kP@ss/w0rd#x?9%";
/// A wrong password, as secret as the right one.
const WRONG_PASSWORD: &str = "Wr0ng:Pa55/word@z";

// ---------------------------------------------------------------------------
// Capturing every tracing event of the process.

/// Every captured event and span, as `LEVEL target: fields`.
static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Writes every field of an event or span into one line.
struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={value}", field.name());
    }
}

/// A layer that keeps everything, at every level, from every target.
struct CaptureAll;

impl<S: Subscriber> Layer<S> for CaptureAll {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut line = Line(format!("{} {}:", meta.level(), meta.target()));
        event.record(&mut line);
        push(line.0);
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        let meta = attrs.metadata();
        let mut line = Line(format!("span {} {}:", meta.target(), meta.name()));
        attrs.record(&mut line);
        push(line.0);
    }

    fn on_record(&self, _span: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut line = Line("span record:".to_owned());
        values.record(&mut line);
        push(line.0);
    }
}

fn push(line: String) {
    LINES.lock().unwrap_or_else(|e| e.into_inner()).push(line);
}

/// Installs the capturing subscriber for the whole process (once).
fn capture() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        tracing::subscriber::set_global_default(Registry::default().with(CaptureAll))
            .expect("no other global subscriber in this test binary");
    });
}

/// The captured lines so far.
fn captured() -> Vec<String> {
    LINES.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The forms of a password that must never be shown: as given, and percent-encoded.
fn forms(password: &str) -> Vec<String> {
    vec![password.to_owned(), encode(password)]
}

/// Panics if any secret occurs in any captured line or in `texts`.
fn assert_nowhere(secrets: &[&str], texts: &[String]) {
    let lines = captured();
    for secret in secrets.iter().flat_map(|s| forms(s)) {
        for line in &lines {
            assert!(
                !line.contains(&secret),
                "a log line shows a password: {line}"
            );
        }
        for text in texts {
            assert!(!text.contains(&secret), "an error shows a password: {text}");
        }
    }
}

/// An error's `Display` and `Debug`, for the redaction checks.
fn shown(err: &dyn ShowBoth) -> Vec<String> {
    err.both()
}

trait ShowBoth {
    fn both(&self) -> Vec<String>;
}

impl<T: std::fmt::Display + std::fmt::Debug> ShowBoth for T {
    fn both(&self) -> Vec<String> {
        vec![self.to_string(), format!("{self:?}")]
    }
}

// ---------------------------------------------------------------------------
// Helpers

/// Percent-encodes everything but the URI's unreserved characters.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `user:password`, percent-encoded for a URI.
fn userinfo(user: &str, password: &str) -> String {
    format!("{}:{}", encode(user), encode(password))
}

/// Connects with a short server selection timeout.
async fn connect(uri: &str, timeout: Duration) -> Result<MongoStore, StoreError> {
    MongoStore::builder()
        .server_selection_timeout(timeout)
        .connect(uri)
        .await
}

/// Connects and expects an error within `limit`; returns it.
async fn refused(uri: &str, limit: Duration) -> StoreError {
    let started = Instant::now();
    let result = tokio::time::timeout(limit + Duration::from_secs(5), connect(uri, limit))
        .await
        .expect("connect returns within its server selection timeout");
    let err = match result {
        Ok(_) => panic!("connect succeeded, expected a refusal"),
        Err(e) => e,
    };
    assert!(
        started.elapsed() < limit + Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    err
}

/// A transfer that commits on `fx`: seeded, run, checked, audited.
async fn a_transfer_commits(fx: &Fixture) {
    let accounts = fx.accounts();
    let initial = fx.accounts_with(&[("A", 1000), ("B", 0)]).await;
    let tx = Transaction::new()
        .change(
            DocumentChange::update(accounts.clone(), "A")
                .inc("balance", -100_i64)
                .require_gte("balance", 100_i64),
        )
        .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 100_i64));
    let receipt = fx
        .coordinator()
        .run(tx)
        .await
        .expect("the transfer commits");
    assert_eq!(receipt.state, TxState::Done);
    let expected = vec![
        (accounts.clone(), doc! { "_id": "A", "balance": 900_i64 }),
        (accounts, doc! { "_id": "B", "balance": 100_i64 }),
    ];
    fx.assert_after(&initial, &expected, &[TxState::Done]).await;
}

/// Starts a server without `--auth` on `storage`, makes the test user there,
/// stops it, and starts it again with `--auth` on the same storage.
async fn server_with_a_user(bin: &Path, dir: &TempDir) -> Secantus {
    let storage = dir.path().join("data");
    let storage = storage.to_str().expect("a UTF-8 path");
    let mut open = Secantus::start(bin, dir.path(), storage, &[]);
    let admin = connect(&open.uri(None, ""), Duration::from_secs(10))
        .await
        .expect("connect to the server before --auth");
    admin
        .client()
        .database("admin")
        .run_command(doc! {
            "createUser": USER,
            "pwd": PASSWORD,
            "roles": [
                { "role": "readWriteAnyDatabase", "db": "admin" },
                { "role": "dbAdminAnyDatabase", "db": "admin" },
            ],
        })
        .await
        .expect("createUser");
    drop(admin);
    open.stop();
    Secantus::start(bin, dir.path(), storage, &["--auth"])
}

// ---------------------------------------------------------------------------
// Authentication

/// The right password connects and runs a transaction; a wrong one is
/// `Unauthorized`; no credentials at all pass the `ping` (SecantusDB, like
/// mongod, lets the handshake through) but the transaction's first write is
/// `Unauthorized`, before its record exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_authentication() {
    capture();
    let Some(bin) = secantusd_or_skip() else {
        return;
    };
    let dir = TempDir::new("auth");
    let server = server_with_a_user(&bin, &dir).await;
    let mut texts = Vec::new();

    let good = server.uri(Some(&userinfo(USER, PASSWORD)), "authSource=admin");
    let store = connect(&good, Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log_tail()));
    texts.push(format!("{store:?}"));
    let fx = Fixture::on_mongodb(store, "auth");
    a_transfer_commits(&fx).await;
    fx.cleanup().await;

    let bad = server.uri(Some(&userinfo(USER, WRONG_PASSWORD)), "authSource=admin");
    let err = refused(&bad, Duration::from_secs(5)).await;
    assert_eq!(err.kind, StoreErrorKind::Unauthorized, "{err}");
    assert!(err.message.contains("authentication failed"), "{err}");
    texts.extend(shown(&err));

    let unknown = server.uri(Some(&userinfo("nobody", PASSWORD)), "authSource=admin");
    let err = refused(&unknown, Duration::from_secs(5)).await;
    assert_eq!(err.kind, StoreErrorKind::Unauthorized, "{err}");
    texts.extend(shown(&err));

    let anonymous = connect(&server.uri(None, ""), Duration::from_secs(5))
        .await
        .expect("ping needs no login");
    let fx = Fixture::on_mongodb(anonymous, "anonymous");
    let tx =
        Transaction::new().change(DocumentChange::update(fx.accounts(), "A").inc("balance", 1_i64));
    match fx.coordinator().run(tx).await {
        Err(TxError::Interrupted {
            state: None,
            source,
            ..
        }) => {
            assert_eq!(source.kind, StoreErrorKind::Unauthorized, "{source}");
            assert_eq!(source.code, Some(13), "{source}");
        }
        other => panic!("{other:?}"),
    }
    assert_nowhere(&[PASSWORD, WRONG_PASSWORD], &texts);
}

// ---------------------------------------------------------------------------
// TLS

/// A CA and a server certificate for 127.0.0.1 signed by it, made now.
struct Pki {
    ca: std::path::PathBuf,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
}

fn make_pki(dir: &Path, name: &str) -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().expect("a CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("tandem test CA {name}"));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca_params.self_signed(&ca_key).expect("the CA certificate");

    let key = KeyPair::generate().expect("a server key");
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("server params");
    params
        .distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params
        .signed_by(&key, &ca, &ca_key)
        .expect("the server certificate");

    let pki = Pki {
        ca: dir.join(format!("{name}-ca.pem")),
        cert: dir.join(format!("{name}-server.pem")),
        key: dir.join(format!("{name}-server.key")),
    };
    std::fs::write(&pki.ca, ca.pem()).expect("write the CA");
    std::fs::write(&pki.cert, cert.pem()).expect("write the certificate");
    std::fs::write(&pki.key, key.serialize_pem()).expect("write the key");
    pki
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// A TLS server with a certificate made at test time: `tls=true&tlsCAFile=`
/// connects and runs a transaction; a plaintext client, and a client trusting
/// another CA, are refused with a typed error within the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_ca_made_at_test_time() {
    capture();
    let Some(bin) = secantusd_or_skip() else {
        return;
    };
    let dir = TempDir::new("tls");
    let pki = make_pki(dir.path(), "good");
    let other = make_pki(dir.path(), "other");
    let server = Secantus::start(
        &bin,
        dir.path(),
        ":memory:",
        &[
            "--tls-cert-file",
            path_str(&pki.cert),
            "--tls-key-file",
            path_str(&pki.key),
        ],
    );

    let uri = server.uri(None, &format!("tls=true&tlsCAFile={}", path_str(&pki.ca)));
    let store = connect(&uri, Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log_tail()));
    let fx = Fixture::on_mongodb(store, "tls");
    a_transfer_commits(&fx).await;
    fx.cleanup().await;

    // Plaintext against TLS: the handshake never completes.
    let err = refused(&server.uri(None, ""), Duration::from_secs(2)).await;
    assert_eq!(err.kind, StoreErrorKind::Unavailable, "{err}");

    // A certificate from a CA the client does not trust.
    let uri = server.uri(None, &format!("tls=true&tlsCAFile={}", path_str(&other.ca)));
    let err = refused(&uri, Duration::from_secs(2)).await;
    assert_eq!(err.kind, StoreErrorKind::Unavailable, "{err}");
    assert!(
        err.message.to_ascii_lowercase().contains("certificate"),
        "{err}"
    );

    // A CA file that does not exist is a bad option, found before any connection.
    let uri = server.uri(None, "tls=true&tlsCAFile=/nonexistent/ca.pem");
    let err = refused(&uri, Duration::from_secs(2)).await;
    assert_eq!(err.kind, StoreErrorKind::BadRequest, "{err}");
}

/// TLS options against a plaintext server (with credentials in the URI):
/// accepted by `connect`'s parser, then refused with a typed error within the
/// timeout, and the password shows nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_options_against_a_plaintext_server() {
    capture();
    let Some(bin) = secantusd_or_skip() else {
        return;
    };
    let dir = TempDir::new("plain");
    let server = Secantus::start(&bin, dir.path(), ":memory:", &[]);
    let uri = server.uri(
        Some(&userinfo(USER, PASSWORD)),
        "authSource=admin&tls=true&tlsAllowInvalidCertificates=true",
    );
    let err = refused(&uri, Duration::from_secs(2)).await;
    assert_eq!(err.kind, StoreErrorKind::Unavailable, "{err}");
    assert_nowhere(&[PASSWORD], &shown(&err));
}

// ---------------------------------------------------------------------------
// Redaction

/// Good and bad passwords, an unreachable host, malformed URIs and a
/// transaction, every event captured: the passwords appear in no log line and
/// in no error's `Display` or `Debug`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_never_appear_in_logs_or_errors() {
    capture();
    let Some(bin) = secantusd_or_skip() else {
        return;
    };
    let dir = TempDir::new("redact");
    let before = captured().len();
    // createUser itself runs under the capture: the driver logs it with its body removed.
    let server = server_with_a_user(&bin, &dir).await;
    let mut texts: Vec<String> = Vec::new();

    // A good login and a transaction, with a refused one for good measure.
    let good = server.uri(Some(&userinfo(USER, PASSWORD)), "authSource=admin");
    let store = connect(&good, Duration::from_secs(10))
        .await
        .expect("the right password connects");
    texts.push(format!("{store:?}"));
    let fx = Fixture::on_mongodb(store, "redact");
    a_transfer_commits(&fx).await;
    let tx = Transaction::new().change(
        DocumentChange::update(fx.accounts(), "A")
            .inc("balance", -1_000_000_i64)
            .require_gte("balance", 1_000_000_i64),
    );
    let err = fx.coordinator().run(tx).await.unwrap_err();
    texts.extend(shown(&err));
    fx.cleanup().await;

    let limit = Duration::from_secs(3);
    let userinfo_good = userinfo(USER, PASSWORD);
    let userinfo_bad = userinfo(USER, WRONG_PASSWORD);
    let refusals = [
        // A wrong password.
        (
            server.uri(Some(&userinfo_bad), "authSource=admin"),
            StoreErrorKind::Unauthorized,
        ),
        // Nobody listening.
        (
            format!("mongodb://{userinfo_good}@127.0.0.1:1/?authSource=admin"),
            StoreErrorKind::Unavailable,
        ),
        // TLS against a plaintext server.
        (
            server.uri(
                Some(&userinfo_good),
                "authSource=admin&tls=true&tlsAllowInvalidCertificates=true",
            ),
            StoreErrorKind::Unavailable,
        ),
        // Malformed URIs: the parser's messages echo parts of the URI.
        (
            format!("mongodb://{userinfo_good}@127.0.0.1:notaport/"),
            StoreErrorKind::BadRequest,
        ),
        (
            server.uri(Some(&userinfo_good), "authSource=admin&tls=maybe"),
            StoreErrorKind::BadRequest,
        ),
        (
            server.uri(Some(&userinfo_good), "authMechanism=NOPE"),
            StoreErrorKind::BadRequest,
        ),
        (
            format!("mongodb://{USER}:{PASSWORD}@127.0.0.1:{}/", server.port),
            StoreErrorKind::BadRequest,
        ),
    ];
    for (uri, kind) in &refusals {
        let err = refused(uri, limit).await;
        assert_eq!(err.kind, *kind, "{err}");
        texts.extend(shown(&err));
    }

    let lines = captured();
    let new_lines = &lines[before.min(lines.len())..];
    assert!(
        new_lines.iter().any(|l| l.contains("mongodb::")),
        "the driver's own events are captured"
    );
    assert!(
        new_lines.iter().any(|l| l.contains("tandem_mongodb")),
        "the store's events are captured"
    );
    assert!(
        new_lines
            .iter()
            .any(|l| l.contains("DEBUG mongodb::command")),
        "the driver's command events are captured at DEBUG"
    );
    assert!(
        new_lines
            .iter()
            .any(|l| l.contains("commandName=createUser") && l.contains("command={}")),
        "createUser is logged without its body"
    );
    assert_nowhere(&[PASSWORD, WRONG_PASSWORD], &texts);
}
