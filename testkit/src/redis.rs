//! A `redis-server` for the fleet tests: Debian's package (`scripts/test-all.sh` installs it),
//! or the binary `KVTIER_REDIS_SERVER` names; on 127.0.0.1, nothing persisted, ended on drop.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
pub struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

/// A port nothing listens on now (for an index that is down, then started on it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl RedisServer {
    /// Starts one on a free port.
    pub fn start() -> Self {
        Self::start_on(free_port())
    }

    /// Starts one on `port`, and returns once it accepts connections.
    pub fn start_on(port: u16) -> Self {
        let bin = std::env::var("KVTIER_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start `{bin}` ({e}): the fleet tests need a Redis server; install \
                     Debian's `redis-server` (scripts/test-all.sh does) or set KVTIER_REDIS_SERVER"
                )
            });
        let server = Self {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills it (as a crash would: nothing is persisted); [`RedisServer::start_on`] its port
    /// brings an empty one back.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills the connections named `name` (a fleet node's is `kvtier-NODE`): that node alone
    /// is cut off, as by a network blip, and reconnects by itself. Returns how many it killed.
    pub fn cut_client(&self, name: &str) -> usize {
        let client = redis::Client::open(self.url()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut conn).unwrap();
        let ids: Vec<String> = list
            .lines()
            .filter(|l| l.split(' ').any(|f| f == format!("name={name}")))
            .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
            .map(str::to_string)
            .collect();
        for id in &ids {
            let _: redis::Value = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query(&mut conn)
                .unwrap();
        }
        ids.len()
    }

    /// The string value of the first key matching `pattern` (`KEYS`), for tests that check
    /// what the index holds; `None` when no key matches.
    pub fn read(&self, pattern: &str) -> Option<String> {
        let client = redis::Client::open(self.url()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut conn).unwrap();
        let key = keys.first()?;
        redis::cmd("GET").arg(key).query(&mut conn).unwrap()
    }

    /// `field` of every hash whose key matches `pattern` (`KEYS`, then `HGET`; an absent
    /// field is `None`).
    pub fn hash_fields(&self, pattern: &str, field: &str) -> Vec<Option<String>> {
        let client = redis::Client::open(self.url()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut conn).unwrap();
        keys.iter()
            .map(|k| {
                redis::cmd("HGET")
                    .arg(k)
                    .arg(field)
                    .query(&mut conn)
                    .unwrap()
            })
            .collect()
    }

    /// Its `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
