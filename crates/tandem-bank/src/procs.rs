//! The child processes of a run: the managed server and the workers.
//!
//! Every child is killed when its handle is dropped, so an error or a panic in
//! the controller leaves nothing running. On Linux the children also get
//! `PR_SET_PDEATHSIG`, so they die with the controller even if it is killed
//! with SIGKILL, and the workers stop by themselves when their standard input
//! (a pipe from the controller) closes.

use std::fs::{File, OpenOptions};
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use bson::doc;
use mongodb::options::ClientOptions;

use crate::worker::WorkerArgs;

/// The server executable's path inside the virtualenv `scripts/db.sh install` makes.
pub const SECANTUSD: &str = ".venv/bin/secantusd-py";

/// Makes `cmd`'s child receive SIGKILL when the thread that spawned it exits.
///
/// The controller spawns every child from its main thread, which lives as long
/// as the process does.
pub fn die_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the forked child before exec and only
        // calls async-signal-safe functions (prctl, getppid).
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::getppid() == 1 {
                    // The parent died before prctl: do not outlive it.
                    return Err(io::Error::other("the parent process is gone"));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// Sends `signal` to process `pid`.
pub fn signal(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Waits up to `timeout` for `child` to exit; `true` if it did.
pub fn wait_for_exit(child: &mut Child, timeout: Duration) -> bool {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => return false,
            Err(_) => return true,
        }
    }
}

/// SIGKILLs `child` (harmless if it is gone) and reaps it.
pub fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = wait_for_exit(child, Duration::from_secs(10));
}

/// Finds the server executable: `explicit`, else `$TANDEM_SECANTUSD`, else
/// `.venv/bin/secantusd-py` in the current directory or one of its parents, or
/// in the workspace this binary was built from.
pub fn locate_secantusd(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_owned())
        } else {
            Err(format!("{} does not exist", p.display()))
        };
    }
    if let Some(p) = std::env::var_os("TANDEM_SECANTUSD") {
        return Ok(PathBuf::from(p));
    }
    let mut candidates = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        candidates.extend(cwd.ancestors().map(|d| d.join(SECANTUSD)));
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    candidates.push(workspace.join(SECANTUSD));
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        format!(
            "SecantusDB is not installed ({SECANTUSD} not found); run `scripts/db.sh install` \
             first, or run the test with `bash scripts/bank.sh`, or set MONGODB_URI"
        )
    })
}

/// A free TCP port on 127.0.0.1 (free when asked; the server binds it right after).
///
/// It is taken below the kernel's ephemeral range when possible, so that while
/// the server is down (killed by the nemesis) no other program asking the
/// kernel for any free port gets it before the server is restarted on it.
pub fn free_port() -> io::Result<u16> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if low > 12_000 {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ u64::from(std::process::id());
        let mut rng = crate::rng::Rng::new(seed);
        for _ in 0..64 {
            let port = rng.range(10_000, u64::from(low) - 1) as u16;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// Where Debian's `libfaketime` package puts the library (multi-threaded variant).
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// Finds libfaketime: `$TANDEM_LIBFAKETIME`, else [`LIBFAKETIME`].
pub fn locate_libfaketime() -> Result<PathBuf, String> {
    let path = std::env::var_os("TANDEM_LIBFAKETIME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(LIBFAKETIME));
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "libfaketime is not installed ({} not found); install Debian's faketime \
             package (bash scripts/bank.sh does when asked for a clock skew)",
            path.display()
        ))
    }
}

/// A server's clock set off from the machine's by libfaketime, drawn anew
/// from `[-max, +max]` at every start (a restart steps the clock, possibly back).
#[derive(Debug)]
pub struct ClockSkew {
    lib: PathBuf,
    max_millis: u64,
    rng: crate::rng::Rng,
    offset_millis: i64,
}

impl ClockSkew {
    /// Offsets up to `max` either way, through the library at `lib`, drawn from `seed`.
    pub fn new(lib: PathBuf, max: Duration, seed: u64) -> Self {
        ClockSkew {
            lib,
            max_millis: u64::try_from(max.as_millis()).unwrap_or(u64::MAX / 4),
            rng: crate::rng::Rng::new(seed),
            offset_millis: 0,
        }
    }

    fn draw(&mut self) -> i64 {
        let span = self.max_millis.saturating_mul(2);
        let drawn = i64::try_from(self.rng.range(0, span)).unwrap_or(0);
        self.offset_millis = drawn - i64::try_from(self.max_millis).unwrap_or(0);
        self.offset_millis
    }
}

/// A SecantusDB server this run manages, on 127.0.0.1, with a real storage
/// directory so that it survives SIGKILL with its acknowledged writes.
#[derive(Debug)]
pub struct Server {
    exe: PathBuf,
    port: u16,
    storage: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    skew: Option<ClockSkew>,
}

impl Server {
    /// A server (not started yet) on a free port, storing in `storage`, logging to `log`.
    pub fn new(exe: PathBuf, storage: PathBuf, log: PathBuf) -> io::Result<Self> {
        Ok(Server {
            exe,
            port: free_port()?,
            storage,
            log,
            child: None,
            skew: None,
        })
    }

    /// Runs the server under libfaketime, its clock off by a new offset at every start.
    pub fn with_clock_skew(mut self, skew: ClockSkew) -> Self {
        self.skew = Some(skew);
        self
    }

    /// The offset of its clock from the machine's at its last start, in
    /// milliseconds (`None` without a clock skew).
    pub fn clock_offset_millis(&self) -> Option<i64> {
        self.skew.as_ref().map(|s| s.offset_millis)
    }

    /// Its URI.
    pub fn uri(&self) -> String {
        format!("mongodb://127.0.0.1:{}/", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its storage directory.
    pub fn storage(&self) -> &Path {
        &self.storage
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Starts the process (same port, same storage every time) and waits up to
    /// `timeout` until it answers `ping`.
    pub async fn start(&mut self, timeout: Duration) -> Result<(), String> {
        if self.is_running() {
            return Ok(());
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("--host")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--storage-path")
            .arg(&self.storage)
            .arg("--enable-test-commands")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        if let Some(skew) = &mut self.skew {
            let offset = skew.draw();
            // libfaketime reads a relative offset in (fractional) seconds.
            cmd.env("LD_PRELOAD", &skew.lib)
                .env("FAKETIME", format!("{:+.3}", offset as f64 / 1000.0))
                .env("FAKETIME_DONT_RESET", "1");
        }
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.exe.display()))?;
        self.child = Some(child);
        self.wait_ready(timeout).await
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let mut options = ClientOptions::parse(self.uri())
            .await
            .map_err(|e| e.to_string())?;
        options.server_selection_timeout = Some(Duration::from_millis(500));
        options.connect_timeout = Some(Duration::from_millis(500));
        options.direct_connection = Some(true);
        let client = mongodb::Client::with_options(options).map_err(|e| e.to_string())?;
        let admin = client.database("admin");
        let start = Instant::now();
        let result = loop {
            if !self.is_running() {
                break Err(format!(
                    "the server exited during start-up; see {}",
                    self.log.display()
                ));
            }
            let ping = admin.run_command(doc! { "ping": 1 });
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), ping).await {
                break Ok(());
            }
            if start.elapsed() > timeout {
                break Err(format!(
                    "the server did not answer within {timeout:?}; see {}",
                    self.log.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        client.shutdown().await;
        result
    }

    /// SIGKILLs the server and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    /// Stops the server: SIGTERM, then SIGKILL after 10 s.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = signal(child.id(), libc::SIGTERM);
            if !wait_for_exit(&mut child, Duration::from_secs(10)) {
                kill_and_reap(&mut child);
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A worker process.
#[derive(Debug)]
pub struct Worker {
    /// Its settings (the incarnation grows with each restart).
    pub args: WorkerArgs,
    child: Child,
    stdin: Option<ChildStdin>,
    /// Whether it is stopped by SIGSTOP.
    pub paused: bool,
}

impl Worker {
    /// Starts `exe __worker <args>`, its standard error appended to `stderr`.
    pub fn spawn(exe: &Path, args: WorkerArgs, stderr: &Path) -> io::Result<Worker> {
        let err: File = OpenOptions::new().create(true).append(true).open(stderr)?;
        let mut cmd = Command::new(exe);
        cmd.arg("__worker")
            .args(args.to_args())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(err);
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take();
        Ok(Worker {
            args,
            child,
            stdin,
            paused: false,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it exited (and how), without waiting.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL, and reap.
    pub fn kill9(&mut self) {
        kill_and_reap(&mut self.child);
    }

    /// SIGSTOP.
    pub fn pause(&mut self) -> io::Result<()> {
        signal(self.pid(), libc::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    /// SIGCONT.
    pub fn resume(&mut self) -> io::Result<()> {
        if self.paused {
            signal(self.pid(), libc::SIGCONT)?;
            self.paused = false;
        }
        Ok(())
    }

    /// Asks it to stop (closes its standard input).
    pub fn ask_to_stop(&mut self) {
        let _ = self.resume();
        self.stdin = None;
    }

    /// Waits up to `timeout` for it to exit after [`ask_to_stop`](Self::ask_to_stop),
    /// then SIGKILLs it. Returns whether it exited by itself.
    pub fn finish(&mut self, timeout: Duration) -> bool {
        let clean = wait_for_exit(&mut self.child, timeout);
        if !clean {
            self.kill9();
        }
        clean
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}
