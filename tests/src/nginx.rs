//! A real nginx on loopback for the connection-rotation tests: its configuration lives in
//! `tests/nginx/`, its prefix directory (configuration copy, pid file, logs, temp files) under
//! the tests' target tmp dir, and it listens on two unprivileged loopback ports (HTTP/1.1 and
//! HTTP/2 cleartext with prior knowledge). It runs in the foreground as a child of the test
//! (`daemon off`) and is stopped by its master's pid when dropped.
//!
//! nginx is found through `$NGINX`, then `PATH`, then `/usr/sbin/nginx` (Debian's package puts it
//! there). When it is missing, [`Nginx::binary`] says so: the tests skip with a message, except
//! under `CI=true`, where a missing nginx is a broken CI image and fails them.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const CONF: &str = include_str!("../nginx/rotation.conf");
const LOCATIONS: &str = include_str!("../nginx/locations.conf");

/// How long nginx may take to start, reload or stop before the harness gives up. Only a bound on
/// a hung process: every wait returns as soon as the event it waits for is seen.
const PATIENCE: Duration = Duration::from_secs(20);

/// Which of nginx's two listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// HTTP/1.1 with keep-alive.
    Http1,
    /// HTTP/2 over cleartext, prior knowledge.
    H2c,
}

impl Protocol {
    /// Both.
    pub const ALL: [Protocol; 2] = [Protocol::Http1, Protocol::H2c];

    /// A short name for messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            Protocol::Http1 => "http1.1",
            Protocol::H2c => "h2c",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of nginx's access log (the `rotation` format of `tests/nginx/rotation.conf`).
#[derive(Debug, Clone, PartialEq)]
pub struct Processed {
    /// When nginx finished the request (seconds since the epoch, millisecond precision).
    pub msec: f64,
    /// nginx's connection serial number.
    pub connection: u64,
    /// Which request on its connection this was (1-based).
    pub connection_requests: u64,
    /// The listener's port.
    pub port: u16,
    /// The method.
    pub method: String,
    /// The path.
    pub uri: String,
    /// The status nginx answered.
    pub status: u16,
    /// The `x-op` header: the test's operation id (`-` when absent).
    pub op: String,
    /// The `Idempotency-Key` header (`-` when absent): the key, read back from the
    /// structured-field string the client sends (nginx logs its quotes as `\x22`).
    pub key: String,
    /// The `retry-attempt` header (`-` on a first attempt, which does not send it).
    pub attempt: String,
}

impl Processed {
    fn parse(line: &str) -> Option<Processed> {
        let mut f = line.split(' ');
        let mut next = || f.next();
        let msec = next()?.parse().ok()?;
        let connection = next()?.parse().ok()?;
        let connection_requests = next()?.parse().ok()?;
        let port = next()?.parse().ok()?;
        let method = next()?.to_owned();
        let uri = next()?.to_owned();
        let status = next()?.parse().ok()?;
        let op = next()?.strip_prefix("op=")?.to_owned();
        let key = unquote(next()?.strip_prefix("key=")?);
        let attempt = next()?.strip_prefix("attempt=")?.to_owned();
        Some(Processed {
            msec,
            connection,
            connection_requests,
            port,
            method,
            uri,
            status,
            op,
            key,
            attempt,
        })
    }
}

/// A logged header value as the client sent it: a structured-field string's quotes (logged as
/// `\x22`) removed, so a key reads as the caller gave it.
fn unquote(logged: &str) -> String {
    let value = logged.replace("\\x22", "\"");
    match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(inner) => inner.to_owned(),
        None => value,
    }
}

/// A running nginx; dropping it stops it (fast shutdown) by its master's pid.
pub struct Nginx {
    binary: PathBuf,
    prefix: PathBuf,
    h1_port: u16,
    h2_port: u16,
    master: Option<Child>,
}

/// Why nginx cannot be used here.
#[derive(Debug)]
pub struct Missing(pub String);

impl Nginx {
    /// The nginx binary, or why there is none.
    pub fn binary() -> Result<PathBuf, Missing> {
        if let Some(path) = std::env::var_os("NGINX") {
            return Ok(PathBuf::from(path));
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/sbin")])
            .map(|dir| dir.join("nginx"))
            .find(|candidate| candidate.is_file())
            .ok_or_else(|| {
                Missing(
                    "nginx not found ($NGINX, PATH, /usr/sbin): install it (Debian: apt-get \
                     install nginx) to run the connection-rotation tests"
                        .to_owned(),
                )
            })
    }

    /// The binary for a test that needs nginx: `None` (after saying why on stderr) when it is
    /// missing outside CI; a panic when it is missing under `CI=true`.
    pub fn required(test: &str) -> Option<PathBuf> {
        match Nginx::binary() {
            Ok(binary) => Some(binary),
            Err(Missing(why)) if std::env::var("CI").as_deref() == Ok("true") => {
                panic!("{test}: CI=true and {why}")
            }
            Err(Missing(why)) => {
                eprintln!("SKIPPED {test}: {why}");
                None
            }
        }
    }

    /// Starts nginx with `keepalive_requests` in a fresh prefix directory under `tmp` (an
    /// integration test's `CARGO_TARGET_TMPDIR`) named after `name`, and returns once its
    /// listeners accept connections.
    pub fn start(
        binary: PathBuf,
        tmp: &Path,
        name: &str,
        keepalive_requests: u32,
    ) -> io::Result<Nginx> {
        static SERIAL: AtomicUsize = AtomicUsize::new(0);
        let prefix = tmp.join(format!(
            "nginx-{name}-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&prefix);
        std::fs::create_dir_all(prefix.join("logs"))?;
        std::fs::create_dir_all(prefix.join("temp"))?;
        let (h1_port, h2_port) = (free_port()?, free_port()?);
        let conf = CONF
            .replace("@KEEPALIVE_REQUESTS@", &keepalive_requests.to_string())
            .replace("@H1_PORT@", &h1_port.to_string())
            .replace("@H2_PORT@", &h2_port.to_string())
            .replace("@PREFIX@", &prefix.display().to_string());
        std::fs::write(prefix.join("nginx.conf"), conf)?;
        std::fs::write(prefix.join("locations.conf"), LOCATIONS)?;
        let mut nginx = Nginx {
            binary,
            prefix,
            h1_port,
            h2_port,
            master: None,
        };
        nginx.start_again()?;
        Ok(nginx)
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.binary);
        c.arg("-p")
            .arg(&self.prefix)
            .arg("-c")
            .arg(self.prefix.join("nginx.conf"))
            .arg("-e")
            .arg("logs/error.log")
            .arg("-g")
            .arg(format!("daemon off; pid {};", self.pid_file().display()))
            .stdin(Stdio::null());
        c
    }

    fn pid_file(&self) -> PathBuf {
        self.prefix.join("nginx.pid")
    }

    /// Starts the (stopped) server again on the same ports; returns once nginx has written its
    /// pid file, which it does after its listening sockets are bound and listening.
    pub fn start_again(&mut self) -> io::Result<()> {
        assert!(self.master.is_none(), "nginx is already running");
        let _ = std::fs::remove_file(self.pid_file());
        let child = self.command().spawn()?;
        let pid = child.id();
        self.master = Some(child);
        let pid_file = self.pid_file();
        wait_for("nginx to start", || {
            if let Some(master) = self.master.as_mut()
                && let Ok(Some(status)) = master.try_wait()
            {
                return Err(io::Error::other(format!(
                    "nginx exited at start ({status}): see {}",
                    self.prefix.join("logs/error.log").display()
                )));
            }
            Ok(std::fs::read_to_string(&pid_file).is_ok_and(|s| s.trim() == pid.to_string()))
        })
    }

    /// `nginx -s reload`: the master re-reads its configuration, starts new workers and lets
    /// the old ones finish their requests (HTTP/2: GOAWAY; HTTP/1.1: close when idle). Returns
    /// once the master has started the new worker; see [`reloaded`](Self::reloaded).
    pub fn reload(&self) -> io::Result<()> {
        let before = self.error_log().matches("start worker process").count();
        let status = self.command().arg("-s").arg("reload").status()?;
        if !status.success() {
            return Err(io::Error::other(format!("nginx -s reload: {status}")));
        }
        wait_for("nginx to start a new worker", || {
            Ok(self.error_log().matches("start worker process").count() > before)
        })
    }

    /// Waits until every worker of an earlier configuration has exited (after a reload).
    pub fn reloaded(&self) -> io::Result<()> {
        wait_for("the old nginx workers to exit", || {
            let log = self.error_log();
            let shutting = log.matches("gracefully shutting down").count();
            let exited = log.matches("exited with code").count();
            Ok(exited >= shutting)
        })
    }

    /// Stops nginx gracefully (`SIGQUIT`, as a service manager does): it stops accepting, lets
    /// requests in flight finish, and exits. Returns once the master has exited; from then on
    /// connections are refused until [`start_again`](Self::start_again).
    pub fn stop(&mut self) -> io::Result<()> {
        let Some(mut master) = self.master.take() else {
            return Ok(());
        };
        signal(master.id(), "QUIT")?;
        master.wait()?;
        Ok(())
    }

    /// The base URL of `protocol`'s listener.
    pub fn url(&self, protocol: Protocol) -> String {
        let port = match protocol {
            Protocol::Http1 => self.h1_port,
            Protocol::H2c => self.h2_port,
        };
        format!("http://127.0.0.1:{port}")
    }

    /// The listener port of `protocol`.
    pub fn port(&self, protocol: Protocol) -> u16 {
        match protocol {
            Protocol::Http1 => self.h1_port,
            Protocol::H2c => self.h2_port,
        }
    }

    /// The prefix directory.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// Every request nginx processed so far (its access log; nginx writes each line when the
    /// request ends, unbuffered).
    pub fn processed(&self) -> Vec<Processed> {
        let log = std::fs::read_to_string(self.prefix.join("logs/access.log")).unwrap_or_default();
        log.lines()
            .map(|l| {
                Processed::parse(l).unwrap_or_else(|| panic!("unparsed access log line {l:?}"))
            })
            .collect()
    }

    /// The error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.prefix.join("logs/error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if let Some(mut master) = self.master.take() {
            // Fast shutdown: the master stops its workers and exits.
            if signal(master.id(), "TERM").is_err() {
                let _ = master.kill();
            }
            let _ = master.wait();
        }
    }
}

/// Sends `signal` to the process `pid` (by pid, never by name).
fn signal(pid: u32, signal: &str) -> io::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()?;
    match status.success() {
        true => Ok(()),
        false => Err(io::Error::other(format!("kill -{signal} {pid}: {status}"))),
    }
}

/// A loopback port that was free a moment ago.
fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Polls `done` (every 2 ms) until it says yes; an error after [`PATIENCE`].
fn wait_for(what: &str, mut done: impl FnMut() -> io::Result<bool>) -> io::Result<()> {
    let start = std::time::Instant::now();
    while !done()? {
        if start.elapsed() > PATIENCE {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("waited {PATIENCE:?} for {what}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}
