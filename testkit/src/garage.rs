//! A real Garage S3 server for integration tests: one single-node instance per [`Garage`],
//! bound to 127.0.0.1 only, with its own temporary directory and free ports, so tests can run
//! in parallel; or a real multi-node cluster, [`GarageCluster`], for fault tests.
//!
//! ```ignore
//! let g = Garage::start();                 // ~0.15-0.3 s (up to ~0.9 s with several at once)
//! g.create_bucket("kvtier-test");          // ~0.1 s (two CLI calls)
//! // S3 client: endpoint g.s3_endpoint, region g.region ("garage"), credentials
//! // g.access_key_id / g.secret_access_key, **path-style** addressing.
//! ```
//!
//! How it starts: `garage -c <dir>/garage.toml server --single-node --default-access-key`.
//! Garage 2.x then applies a one-node layout (zone `dc1`) and imports the fixed test key
//! ([`TEST_ACCESS_KEY_ID`], allowed to create buckets) inside the server, before its S3 port
//! opens. That replaces five CLI round trips (`node id`, `layout assign`, `layout apply`,
//! `key import`, `key allow --create-bucket`) and works again on restart with the same
//! directory.
//!
//! The binary is `$KVTIER_GARAGE_BIN`, else `$KVTIER_TOOLS_DIR/garage-2.5.0/bin/garage`
//! (`KVTIER_TOOLS_DIR` defaults to `~/.cache/kvtier-tools`), else `garage` on `PATH`. When none
//! exists the test panics and says to run `scripts/test-all.sh`; it is never skipped.
//!
//! The server's log (stdout and stderr, appended across restarts) is `<dir>/garage.log`; its
//! tail is included in every panic. `KVTIER_GARAGE_LOG` sets the server's `RUST_LOG`
//! (default `netapp=info,garage=info`). Set `KVTIER_GARAGE_KEEP=1` to keep the directory after
//! the test (its path is printed).
//!
//! A watchdog (`sh`, reading a pipe from the test process) kills the server by its PID if the
//! test process dies without running `Drop` (SIGKILL, abort), so no server outlives its test
//! binary.
//!
//! The methods block (process spawns and polling); from an async test they stall the calling
//! thread for the duration, which is fine for `start`, `stop` and `restart` in tests.
//!
//! ## Clusters
//!
//! ```ignore
//! let mut c = GarageCluster::start(3);     // ~2 s: 3 nodes, replication_factor = 3
//! c.create_bucket("kvtier-test");
//! let ep = c.node(0).s3_endpoint.clone();  // any node serves S3 for the whole cluster
//! c.stop(2);                               // SIGKILL one node: quorum 2 of 3 still holds
//! c.restart(2);                            // back, reconnected to the running nodes
//! ```
//!
//! Each node is a [`Garage`] of its own (directory, RPC/S3/admin ports on 127.0.0.1, log,
//! watchdog), all sharing one `rpc_secret`. Started without `--single-node`: the harness
//! connects every pair (`garage node connect <id>@127.0.0.1:<rpc>`), assigns every node a role
//! in a zone of its own (`dc1`, `dc2`, …; `garage layout assign -z dcN -c 1G <id>`), applies
//! layout version 1, imports the test key (`garage key import`, `garage key allow
//! --create-bucket`) and waits until every node reports a healthy cluster. A restarted node
//! is reconnected explicitly to the running ones (Garage's own peer discovery retries only
//! every 60 s).

#![allow(dead_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rand::RngCore;

/// The fixed test access key id every instance imports (Garage's own format: `GK` + 24 hex
/// digits; Garage 2.x would accept any id of 8+ characters in `[A-Za-z0-9._-]`).
pub const TEST_ACCESS_KEY_ID: &str = "GK6b76746965722d7465737421";
/// The secret of [`TEST_ACCESS_KEY_ID`] (64 hex digits, like the secrets Garage generates).
pub const TEST_SECRET_ACCESS_KEY: &str =
    "6b76746965722d746573742d7365637265742d6b65792d666f722d6761726167";
/// The S3 region the server checks in SigV4 signatures.
pub const REGION: &str = "garage";
/// Suffix for virtual-host-style requests (`<bucket>.s3.garage.localhost:<port>`). The
/// system resolver does not resolve these names, so clients must use path-style addressing or
/// resolve the name to 127.0.0.1 themselves.
pub const ROOT_DOMAIN: &str = ".s3.garage.localhost";
/// The version the project installs and tests against.
pub const GARAGE_VERSION: &str = "2.5.0";

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const START_ATTEMPTS: usize = 5;

/// One running (or stopped) single-node Garage server.
pub struct Garage {
    /// `http://127.0.0.1:<port>`: the S3 API, path-style.
    pub s3_endpoint: String,
    /// The S3 API port (stays the same across [`Garage::restart`]).
    pub s3_port: u16,
    /// `"garage"`.
    pub region: String,
    /// [`TEST_ACCESS_KEY_ID`].
    pub access_key_id: String,
    /// [`TEST_SECRET_ACCESS_KEY`].
    pub secret_access_key: String,
    /// [`ROOT_DOMAIN`].
    pub root_domain: String,
    /// `http://127.0.0.1:<port>`: Garage's admin API (`GET /health` needs no token; `/v2/...`
    /// needs `Authorization: Bearer <admin_token>`).
    pub admin_endpoint: String,
    /// Bearer token of the admin API (random per instance).
    pub admin_token: String,
    rpc_port: u16,
    admin_port: u16,
    rpc_secret: String,
    mode: Mode,
    bin: PathBuf,
    config_path: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
    watchdog: Option<Watchdog>,
    // Last field: removed after the server is stopped in `Drop`.
    dir: Option<tempfile::TempDir>,
}

impl Garage {
    /// Starts a fresh server with its own directory and ports, imports the test key and waits
    /// until the S3 API answers and the cluster is healthy. Panics (with the log tail) if it
    /// does not come up within 30 s.
    pub fn start() -> Garage {
        Self::start_with(garage_binary(), Mode::SingleNode, random_hex(32))
    }

    /// Starts one server in `mode`, retrying with new ports (and directory) when one was taken.
    fn start_with(bin: PathBuf, mode: Mode, rpc_secret: String) -> Garage {
        let mut last_log = String::new();
        for _ in 0..START_ATTEMPTS {
            let dir = tempfile::Builder::new()
                .prefix("kvtier-garage-")
                .tempdir()
                .expect("create a temporary directory for Garage");
            let [rpc_port, s3_port, admin_port] = free_ports();
            let mut g = Garage {
                s3_endpoint: format!("http://127.0.0.1:{s3_port}"),
                s3_port,
                region: REGION.to_string(),
                access_key_id: TEST_ACCESS_KEY_ID.to_string(),
                secret_access_key: TEST_SECRET_ACCESS_KEY.to_string(),
                root_domain: ROOT_DOMAIN.to_string(),
                admin_endpoint: format!("http://127.0.0.1:{admin_port}"),
                admin_token: random_hex(32),
                rpc_port,
                admin_port,
                rpc_secret: rpc_secret.clone(),
                mode,
                bin: bin.clone(),
                config_path: dir.path().join("garage.toml"),
                log_path: dir.path().join("garage.log"),
                child: None,
                watchdog: None,
                dir: Some(dir),
            };
            fs::write(&g.config_path, g.config_toml()).expect("write garage.toml");
            match g.spawn_and_wait() {
                Ok(()) => return g,
                // Another process took one of the ports between our probe and Garage's bind:
                // try again with new ports and a new directory.
                Err(StartError::AddrInUse) => last_log = g.log_tail(40),
                Err(StartError::Failed(msg)) => panic!("{msg}"),
            }
        }
        panic!(
            "Garage did not start after {START_ATTEMPTS} attempts: its ports were taken each \
             time.\n--- last log ---\n{last_log}"
        )
    }

    /// Creates bucket `name` (S3 naming rules: 3 to 63 characters of `a-z 0-9 . -`) and gives
    /// the test key read, write and owner rights on it.
    pub fn create_bucket(&self, name: &str) {
        self.cli(&["bucket", "create", name]);
        self.cli(&[
            "bucket",
            "allow",
            "--read",
            "--write",
            "--owner",
            name,
            "--key",
            &self.access_key_id,
        ]);
    }

    /// Runs `garage -c <config> <args>` against this server and returns its stdout. Panics
    /// with stdout, stderr and the server's log tail if it fails.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self.try_cli(args);
        if !out.status.success() {
            panic!(
                "`garage {}` failed ({}):\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- server log ---\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.log_tail(40)
            );
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Like [`Garage::cli`], but returns the raw output, whatever the exit status.
    pub fn try_cli(&self, args: &[&str]) -> Output {
        let mut cmd = self.command();
        cmd.env("RUST_LOG", "netapp=warn,garage=warn").args(args);
        cmd.output()
            .unwrap_or_else(|e| panic!("run {}: {e}", self.bin.display()))
    }

    /// Kills the server at once (SIGKILL, by its PID) and reaps it, like a crash. The
    /// directory and ports are kept for [`Garage::restart`]. Connections are refused until
    /// then. No-op when already stopped.
    pub fn stop(&mut self) {
        if let Some(w) = self.watchdog.take() {
            w.disarm();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server if it runs, then starts it again on the same directory and ports, and
    /// waits until it serves S3 again. Buckets, objects and the key survive.
    pub fn restart(&mut self) {
        self.stop();
        match self.spawn_and_wait() {
            Ok(()) => {}
            Err(StartError::AddrInUse) => panic!(
                "Garage could not restart: another process took one of its ports ({}, {}, {}) \
                 while it was stopped.\n--- log ---\n{}",
                self.rpc_port,
                self.s3_port,
                self.admin_port,
                self.log_tail(40)
            ),
            Err(StartError::Failed(msg)) => panic!("{msg}"),
        }
    }

    /// Freezes the server (SIGSTOP): connections are still accepted by the kernel but never
    /// answered, so clients time out. Undo with [`Garage::thaw`].
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Resumes a server frozen by [`Garage::freeze`] (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    /// Whether the server process is alive (it may be frozen).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The server's PID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The instance's directory (config, metadata, data, log).
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("directory present").path()
    }

    /// `<dir>/garage.toml`.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// `<dir>/garage.log`.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log_path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The virtual-host-style endpoint of `bucket`: `http://<bucket>.s3.garage.localhost:<port>`.
    /// The name does not resolve through the system resolver: map it to 127.0.0.1 in the client.
    pub fn virtual_host_endpoint(&self, bucket: &str) -> String {
        format!("http://{bucket}{}:{}", self.root_domain, self.s3_port)
    }

    /// The standard AWS environment variables for this server, as (name, value) pairs, e.g.
    /// for `Command::envs` when running the `kvtier` binary against it.
    pub fn aws_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", self.access_key_id.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret_access_key.clone()),
            ("AWS_REGION", self.region.clone()),
            ("AWS_ENDPOINT_URL", self.s3_endpoint.clone()),
        ]
    }

    fn config_toml(&self) -> String {
        let dir = self.dir();
        format!(
            r#"# Written by tests/support/garage.rs
metadata_dir = "{meta}"
data_dir = "{data}"
db_engine = "sqlite"
replication_factor = {replication}

rpc_bind_addr = "127.0.0.1:{rpc}"
rpc_public_addr = "127.0.0.1:{rpc}"
rpc_secret = "{rpc_secret}"

[s3_api]
api_bind_addr = "127.0.0.1:{s3}"
s3_region = "{region}"
root_domain = "{root_domain}"

[admin]
api_bind_addr = "127.0.0.1:{admin}"
admin_token = "{admin_token}"
"#,
            meta = dir.join("meta").display(),
            data = dir.join("data").display(),
            rpc = self.rpc_port,
            rpc_secret = self.rpc_secret,
            replication = match self.mode {
                Mode::SingleNode => 1,
                Mode::Member { replication } => replication,
            },
            s3 = self.s3_port,
            region = self.region,
            root_domain = self.root_domain,
            admin = self.admin_port,
            admin_token = self.admin_token,
        )
    }

    /// `garage -c <config>` with no inherited `GARAGE_*` variables.
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("GARAGE_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("NO_COLOR", "1")
            .arg("-c")
            .arg(&self.config_path)
            .stdin(Stdio::null());
        cmd
    }

    fn spawn_and_wait(&mut self) -> Result<(), StartError> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("open garage.log");
        let log_offset = log.metadata().map(|m| m.len()).unwrap_or(0);
        let log_err = log.try_clone().expect("clone garage.log handle");
        let rust_log = std::env::var("KVTIER_GARAGE_LOG")
            .unwrap_or_else(|_| "netapp=info,garage=info".to_string());
        let mut cmd = self.command();
        cmd.env("RUST_LOG", rust_log);
        match self.mode {
            Mode::SingleNode => {
                cmd.env("GARAGE_DEFAULT_ACCESS_KEY", &self.access_key_id)
                    .env("GARAGE_DEFAULT_SECRET_KEY", &self.secret_access_key)
                    .args(["server", "--single-node", "--default-access-key"]);
            }
            Mode::Member { .. } => {
                cmd.arg("server");
            }
        }
        cmd.stdout(log).stderr(log_err);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.bin.display()));
        self.watchdog = Watchdog::spawn(child.id());
        self.child = Some(child);

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            let probe = if exited.is_none() {
                self.probe()
            } else {
                Probe::NotYet
            };
            // Read the log after probing, so a bind failure that happened before the probes
            // succeeded is seen. A taken RPC port makes Garage abort; a taken S3 port only
            // ends the S3 server (Garage keeps running without it), hence the log check. A
            // taken admin port is not logged until shutdown: `probe` sees it instead.
            let new_log = read_from(&self.log_path, log_offset);
            if probe == Probe::ForeignAdmin
                || new_log.contains("Address already in use")
                || new_log.contains("AddrInUse")
            {
                self.stop();
                return Err(StartError::AddrInUse);
            }
            if let Some(status) = exited {
                self.stop();
                return Err(StartError::Failed(format!(
                    "Garage ({}) exited during startup ({status}).\n--- log ---\n{}",
                    self.bin.display(),
                    self.log_tail(40)
                )));
            }
            if probe == Probe::Ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(StartError::Failed(format!(
                    "Garage ({}) did not become ready within {READY_TIMEOUT:?}.\n--- log ---\n{}",
                    self.bin.display(),
                    self.log_tail(40)
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Ready when the admin API, asked with this instance's token (so it is this instance
    /// answering, not whoever took the port), reports a healthy cluster (layout applied, node
    /// up), and the S3 port answers HTTP (a 403 to this anonymous request). A cluster member
    /// is ready as soon as both APIs answer: its cluster's health is the cluster's business.
    fn probe(&self) -> Probe {
        let member = matches!(self.mode, Mode::Member { .. });
        match http_get(
            self.admin_port,
            "/v2/GetClusterHealth",
            Some(&self.admin_token),
        ) {
            // Our own admin server always accepts our token: another server holds the port.
            Some((401 | 403, _)) => Probe::ForeignAdmin,
            Some((200, body)) if member || body.contains("\"healthy\"") => {
                if http_get(self.s3_port, "/", None).is_some() {
                    Probe::Ready
                } else {
                    Probe::NotYet
                }
            }
            _ => Probe::NotYet,
        }
    }

    /// This node's full id and RPC address, `<64 hex digits>@127.0.0.1:<port>` (what
    /// `garage node connect` takes).
    pub fn node_id(&self) -> String {
        self.cli(&["node", "id", "-q"]).trim().to_string()
    }

    /// The admin API's `GetClusterHealth` reply as seen by this node, with whitespace
    /// removed (e.g. `{"status":"healthy","knownNodes":3,…}`), or `None` if it does not
    /// answer.
    pub fn cluster_health(&self) -> Option<String> {
        match http_get(
            self.admin_port,
            "/v2/GetClusterHealth",
            Some(&self.admin_token),
        ) {
            Some((200, body)) => Some(body.chars().filter(|c| !c.is_whitespace()).collect()),
            _ => None,
        }
    }

    /// The RPC port (other nodes connect here).
    pub fn rpc_port(&self) -> u16 {
        self.rpc_port
    }

    fn signal(&self, sig: &str) {
        let pid = self.pid().expect("Garage is not running");
        let ok = Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill {sig} {pid} failed");
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        self.stop();
        if std::env::var_os("KVTIER_GARAGE_KEEP").is_some() {
            if let Some(dir) = self.dir.take() {
                eprintln!("keeping Garage directory {}", dir.keep().display());
            }
        }
    }
}

/// How a server runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// `--single-node --default-access-key`: layout and key set up by the server itself.
    SingleNode,
    /// A member of a [`GarageCluster`]: layout and key set up by the harness.
    Member { replication: usize },
}

enum StartError {
    AddrInUse,
    Failed(String),
}

#[derive(PartialEq)]
enum Probe {
    NotYet,
    Ready,
    ForeignAdmin,
}

/// Kills the server (by PID) when the test process dies without running `Drop`: the pipe to
/// its stdin then closes without the word `disarm`.
struct Watchdog {
    child: Child,
    stdin: ChildStdin,
}

impl Watchdog {
    fn spawn(pid: u32) -> Option<Watchdog> {
        let script = r#"trap '' INT QUIT HUP; read cmd; [ "$cmd" = disarm ] || kill -9 "$1" 2>/dev/null; exit 0"#;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("kvtier-garage-watchdog")
            .arg(pid.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| eprintln!("warning: no watchdog for Garage (pid {pid}): {e}"))
            .ok()?;
        let stdin = child.stdin.take()?;
        Some(Watchdog { child, stdin })
    }

    /// Tells the watchdog to exit without killing, and reaps it. Called before the server is
    /// killed and reaped, so the watchdog never signals a reused PID.
    fn disarm(mut self) {
        let _ = self.stdin.write_all(b"disarm\n");
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

/// A cluster of Garage nodes on 127.0.0.1 whose `replication_factor` is the node count, with
/// the test key imported. See the module docs. Dropping it stops every node.
pub struct GarageCluster {
    nodes: Vec<Garage>,
    /// `<id>@127.0.0.1:<rpc port>` of every node.
    ids: Vec<String>,
    /// `"garage"`.
    pub region: String,
    /// [`TEST_ACCESS_KEY_ID`].
    pub access_key_id: String,
    /// [`TEST_SECRET_ACCESS_KEY`].
    pub secret_access_key: String,
}

impl GarageCluster {
    /// Starts `n` nodes (1 to 7) with `replication_factor = n`, one zone each, connects them,
    /// applies the layout, imports the test key and waits until every node sees all `n`
    /// storage nodes up. Panics with the logs if any step fails.
    pub fn start(n: usize) -> GarageCluster {
        assert!((1..=7).contains(&n), "a cluster of {n} nodes");
        let bin = garage_binary();
        let secret = random_hex(32);
        let nodes: Vec<Garage> = (0..n)
            .map(|_| {
                Garage::start_with(bin.clone(), Mode::Member { replication: n }, secret.clone())
            })
            .collect();
        let ids: Vec<String> = nodes.iter().map(Garage::node_id).collect();
        let c = GarageCluster {
            nodes,
            ids,
            region: REGION.to_string(),
            access_key_id: TEST_ACCESS_KEY_ID.to_string(),
            secret_access_key: TEST_SECRET_ACCESS_KEY.to_string(),
        };
        // A full mesh at once; Garage's own gossip would take one status exchange (10 s).
        for i in 0..n {
            for j in i + 1..n {
                c.nodes[i].cli(&["node", "connect", &c.ids[j]]);
            }
        }
        let first = &c.nodes[0];
        for (i, id) in c.ids.iter().enumerate() {
            let hex = id.split('@').next().expect("node id");
            let zone = format!("dc{}", i + 1);
            first.cli(&["layout", "assign", "-z", &zone, "-c", "1G", hex]);
        }
        first.cli(&["layout", "apply", "--version", "1"]);
        first.cli(&[
            "key",
            "import",
            "--yes",
            "-n",
            "kvtier-test",
            TEST_ACCESS_KEY_ID,
            TEST_SECRET_ACCESS_KEY,
        ]);
        first.cli(&["key", "allow", "--create-bucket", TEST_ACCESS_KEY_ID]);
        c.wait_converged();
        c
    }

    /// The number of nodes (running or not).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Node `i` (its `s3_endpoint` serves the whole cluster's S3 API).
    pub fn node(&self, i: usize) -> &Garage {
        &self.nodes[i]
    }

    /// Whether node `i` runs (it may be frozen).
    pub fn is_running(&mut self, i: usize) -> bool {
        self.nodes[i].is_running()
    }

    /// Creates bucket `name` through the first running node and gives the test key read,
    /// write and owner rights on it.
    pub fn create_bucket(&self, name: &str) {
        let node = self
            .nodes
            .iter()
            .find(|g| g.pid().is_some())
            .expect("no node of the cluster runs");
        node.create_bucket(name);
    }

    /// Kills node `i` (SIGKILL, like a crash) and waits until the running nodes have seen it
    /// go. Its directory and ports are kept for [`GarageCluster::restart`].
    pub fn stop(&mut self, i: usize) {
        self.nodes[i].stop();
        self.wait_converged();
    }

    /// Kills every node, last first.
    pub fn stop_all(&mut self) {
        for g in self.nodes.iter_mut().rev() {
            g.stop();
        }
    }

    /// Starts node `i` again on its directory and ports, connects it to every running node
    /// and waits until the running nodes see each other.
    pub fn restart(&mut self, i: usize) {
        self.nodes[i].restart();
        for j in 0..self.nodes.len() {
            if j != i && self.nodes[j].pid().is_some() {
                self.nodes[i].cli(&["node", "connect", &self.ids[j]]);
            }
        }
        self.wait_converged();
    }

    /// Waits (up to 30 s) until every running node counts exactly the running nodes as its
    /// storage nodes up, and reports `healthy` when all run. Panics with every log tail.
    pub fn wait_converged(&self) {
        let running: Vec<&Garage> = self.nodes.iter().filter(|g| g.pid().is_some()).collect();
        let up = format!("\"storageNodesUp\":{},", running.len());
        let all = running.len() == self.nodes.len();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let healths: Vec<Option<String>> = running.iter().map(|g| g.cluster_health()).collect();
            let done = healths.iter().all(|h| {
                h.as_deref().is_some_and(|h| {
                    h.contains(&up) && (!all || h.contains("\"status\":\"healthy\""))
                })
            });
            if done {
                return;
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = self
                    .nodes
                    .iter()
                    .enumerate()
                    .map(|(i, g)| format!("--- node {i} log ---\n{}", g.log_tail(20)))
                    .collect();
                panic!(
                    "Garage cluster did not converge within {READY_TIMEOUT:?} ({} of {} nodes \
                     running); health per running node: {healths:?}\n{}",
                    running.len(),
                    self.nodes.len(),
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The Garage binary: `$KVTIER_GARAGE_BIN`, else `$KVTIER_TOOLS_DIR/garage-2.5.0/bin/garage`,
/// else `garage` on `PATH`. Panics with instructions when there is none.
pub fn garage_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("KVTIER_GARAGE_BIN").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "KVTIER_GARAGE_BIN={} does not exist. Run scripts/test-all.sh to install Garage \
             {GARAGE_VERSION}, or unset KVTIER_GARAGE_BIN.",
            p.display()
        );
        return p;
    }
    let tools = std::env::var_os("KVTIER_TOOLS_DIR")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/kvtier-tools")));
    let cached = tools.map(|t| t.join(format!("garage-{GARAGE_VERSION}/bin/garage")));
    if let Some(p) = cached.as_ref().filter(|p| p.is_file()) {
        return p.clone();
    }
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            let p = d.join("garage");
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "Garage {GARAGE_VERSION} is needed by the S3 tests but was not found (looked at \
         $KVTIER_GARAGE_BIN, {}, and `garage` on PATH). Run scripts/test-all.sh once: it \
         installs it with `cargo install garage@{GARAGE_VERSION} --locked --root \
         $KVTIER_TOOLS_DIR/garage-{GARAGE_VERSION}` (about 10 minutes) and exports \
         KVTIER_GARAGE_BIN.",
        cached
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "$KVTIER_TOOLS_DIR/garage-2.5.0/bin/garage".to_string())
    )
}

/// Three distinct free loopback ports (all bound at once, then released).
fn free_ports() -> [u16; 3] {
    let bind = || TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    let ls = [bind(), bind(), bind()];
    ls.map(|l| l.local_addr().expect("local_addr").port())
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::thread_rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn read_from(path: &Path, offset: u64) -> String {
    let mut s = Vec::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_end(&mut s);
    }
    String::from_utf8_lossy(s.get(offset as usize..).unwrap_or(&[])).into_owned()
}

/// `GET <path>` on 127.0.0.1:`port` (HTTP/1.1, `Connection: close`): the status code and
/// the raw rest of the response, or `None` if nothing answers within 2 s.
fn http_get(port: u16, path: &str, bearer: Option<&str>) -> Option<(u16, String)> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    let auth = bearer
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let resp = String::from_utf8_lossy(&resp);
    let rest = resp.strip_prefix("HTTP/1.1 ")?;
    let code = rest.get(..3)?.parse().ok()?;
    Some((code, rest[3..].to_string()))
}

/// A plain aws-sdk-s3 client (path style, static keys): what any other S3 tool, or LMCache,
/// would see.
pub fn plain_client(
    endpoint: &str,
    region: &str,
    access_key_id: &str,
    secret_access_key: &str,
) -> aws_sdk_s3::Client {
    let creds =
        aws_sdk_s3::config::Credentials::new(access_key_id, secret_access_key, None, None, "test");
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new(region.to_owned()))
        .credentials_provider(creds)
        .endpoint_url(endpoint)
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

/// Bytes and object count under `prefix` in `bucket`, as a plain aws-sdk-s3 client lists them
/// (all pages): what "usage equals the bucket's listing" compares with.
pub async fn bucket_listing(
    endpoint: &str,
    region: &str,
    access_key_id: &str,
    secret_access_key: &str,
    bucket: &str,
    prefix: &str,
) -> (u64, usize) {
    let client = plain_client(endpoint, region, access_key_id, secret_access_key);
    let (mut bytes, mut count) = (0u64, 0usize);
    let mut token: Option<String> = None;
    loop {
        let out = client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token.clone())
            .send()
            .await
            .unwrap();
        for o in out.contents() {
            bytes += o.size().unwrap_or(0) as u64;
            count += 1;
        }
        match out.next_continuation_token() {
            Some(t) if out.is_truncated().unwrap_or(false) => token = Some(t.to_owned()),
            _ => return (bytes, count),
        }
    }
}
