//! `kvtier._native`: the Rust core of the `kvtier` Python package (PyO3, abi3 ≥ CPython 3.11).
//!
//! [`Core`] runs one kvtier [`Tier`] (one adapter, parsed from kvtier's adapter JSON) on a thread
//! of its own that runs an actix `System`; the Python object only holds a handle: a channel of
//! commands into that thread, the receiving ends of the completion channels, and three eventfds.
//! `kvtier.lmcache.KvtierL2Adapter` (pure Python) wraps it in LMCache's `L2AdapterInterface`.
//!
//! # Invariants
//! * **No Python thread, no asyncio.** Operations run on the tier's actors; when one finishes,
//!   the runtime thread queues its result and writes an 8-byte 1 to the operation's eventfd
//!   (store, lookup-and-lock, load: three distinct fds), which is what LMCache polls.
//! * **Zero copy, and host memory outlives every use.** A store reads from, and a load writes
//!   into, the `MemoryObj`'s own memory (`data_ptr`, `get_size()`) through a [`HostRegion`].
//!   The command carries a strong reference to every `MemoryObj` (so the tensor behind the
//!   pointer cannot be freed), and the reference is released only after the operation has
//!   finished *and* kvtier holds no reference to the region any more ([`Tier::store_from`]
//!   returns once every source is released; [`Tier::load_bufs`] once every buffer is home).
//! * **The GIL is released** whenever a call waits for the runtime (`close`, `delete`, status,
//!   usage, listing, start-up). Submits, `unlock` and `touch` never wait: they only send a
//!   command.
//! * **Events come before completions.** Usage events (stored, accessed, deleted) reach the
//!   event channel before the completion of the operation that caused them is queued: after
//!   each operation the runtime thread sends one more message through the controller's mailbox
//!   and waits for its reply (the backend publishes its events to the controller before it
//!   replies, and the mailbox is first-in first-out). So a host that takes a result and then
//!   drains the events sees that operation's events.
//! * **Submits after `close` fail at once**: their failed result is queued immediately. A submit
//!   checks the closed flag and sends its command while holding the GIL, and `close` sets the
//!   flag and sends its own command while holding the GIL too, so no command can follow the
//!   runtime's last one (commands found after it are failed, not dropped, all the same).
//! * **No locks.** Shared state is channels (`flume`) and atomics; results waiting for a
//!   per-task query sit in Python dicts, read and written only while holding the GIL (a dict
//!   operation on int keys runs no Python code, so it cannot switch threads midway).

#![warn(missing_docs)]

mod alloc;

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::thread;

use kvtier::actors::{ListKeys, TakeResult};
use kvtier::config::{parse_adapter_json, split_fleet_json};
use kvtier::{AdapterSpec, Bitmap, HostRegion, ObjectKey, Tier, TierConfig, TierEvent, UsageEvent};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// The key fields as Python sees them: (chunk_hash, model_name, kv_rank, object_group_id,
/// cache_salt).
type KeyTuple = (Vec<u8>, String, u32, u32, String);

/// One page of a listing: (key, size) entries and the next cursor.
type Page = (Vec<(KeyTuple, u64)>, Option<String>);

/// A listing's reply: the page, or (is the request invalid, message).
type ListReply = Result<Page, (bool, String)>;

/// A command for the runtime thread.
enum Cmd {
    Store {
        task: u64,
        keys: Vec<Option<(ObjectKey, HostRegion)>>,
        objs: Vec<Py<PyAny>>,
    },
    Lookup {
        task: u64,
        keys: Vec<Option<ObjectKey>>,
    },
    Load {
        task: u64,
        keys: Vec<Option<(ObjectKey, HostRegion)>>,
        objs: Vec<Py<PyAny>>,
    },
    Unlock(Vec<ObjectKey>),
    Touch(Vec<ObjectKey>),
    Delete(Vec<ObjectKey>, flume::Sender<usize>),
    Status(flume::Sender<String>),
    Usage(flume::Sender<String>),
    List {
        model: Option<String>,
        cursor: Option<String>,
        page_size: usize,
        reply: flume::Sender<ListReply>,
    },
    Close,
}

/// A finished store: task, success, bytes of new keys, and the `MemoryObj`s to release.
type StoreDone = (u64, bool, u64, Vec<Py<PyAny>>);
/// A finished lookup or load: task, one bit per key, and the `MemoryObj`s to release.
type BitsDone = (u64, Vec<bool>, Vec<Py<PyAny>>);

/// Where the runtime thread puts results, and the fds it signals.
#[derive(Clone)]
struct Completions {
    store: flume::Sender<StoreDone>,
    lookup: flume::Sender<BitsDone>,
    load: flume::Sender<BitsDone>,
    fds: [RawFd; 3],
}

impl Completions {
    fn store(&self, done: StoreDone) {
        let _ = self.store.send(done);
        signal(self.fds[0]);
    }
    fn lookup(&self, done: BitsDone) {
        let _ = self.lookup.send(done);
        signal(self.fds[1]);
    }
    fn load(&self, done: BitsDone) {
        let _ = self.load.send(done);
        signal(self.fds[2]);
    }
    /// Fails a command at once (after close).
    fn fail(&self, cmd: Cmd) {
        match cmd {
            Cmd::Store { task, objs, .. } => self.store((task, false, 0, objs)),
            Cmd::Lookup { task, keys } => self.lookup((task, vec![false; keys.len()], vec![])),
            Cmd::Load { task, keys, objs } => self.load((task, vec![false; keys.len()], objs)),
            Cmd::Delete(_, reply) => {
                let _ = reply.send(0);
            }
            Cmd::Status(reply) | Cmd::Usage(reply) => {
                let _ = reply.send("null".into());
            }
            Cmd::List { reply, .. } => {
                let _ = reply.send(Err((false, "kvtier adapter is closed".into())));
            }
            Cmd::Unlock(_) | Cmd::Touch(_) | Cmd::Close => {}
        }
    }
}

/// Writes an 8-byte 1 to an eventfd (the counter adds up; the reader resets it).
fn signal(fd: RawFd) {
    if fd < 0 {
        return;
    }
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to a descriptor; a closed or full eventfd only
    // makes the write fail, which is harmless (a full counter is already readable).
    unsafe {
        libc::write(fd, (&one as *const u64).cast(), 8);
    }
}

/// A new non-blocking eventfd, owned: dropping it closes it (rustix's safe wrapper).
fn new_eventfd() -> PyResult<OwnedFd> {
    use rustix::event::{eventfd, EventfdFlags};
    eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
        .map_err(|e| PyRuntimeError::new_err(format!("kvtier: eventfd failed: {e}")))
}

/// Closes the eventfd a slot of [`Core`] owns, once: the slot holds the descriptor an
/// [`OwnedFd`] gave up (`into_raw_fd`), and the swap takes it out for exactly one caller.
fn close_slot(slot: &AtomicI32) {
    let fd = slot.swap(-1, Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: `fd` came from `OwnedFd::into_raw_fd` and the swap above hands it to one
        // caller only, so it is owned here and closed once, by the drop.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
}

/// Splits per-key optional entries into the valid ones and their positions.
fn valid<T>(entries: Vec<Option<T>>) -> (Vec<usize>, Vec<T>) {
    entries
        .into_iter()
        .enumerate()
        .filter_map(|(i, e)| e.map(|e| (i, e)))
        .unzip()
}

/// Spreads the bits of the valid keys back over every position (invalid keys: 0).
fn spread(n: usize, positions: &[usize], bits: &Bitmap) -> Vec<bool> {
    let mut out = vec![false; n];
    for (j, &i) in positions.iter().enumerate() {
        out[i] = j < bits.len() && bits.get(j);
    }
    out
}

fn key_tuple(k: &ObjectKey) -> KeyTuple {
    (
        k.chunk_hash().to_vec(),
        k.model_name().to_owned(),
        k.kv_rank(),
        k.object_group_id(),
        k.cache_salt().unwrap_or("").to_owned(),
    )
}

/// Waits until the controller has handled every message sent to it before this call, in
/// particular the usage events a backend published before replying (see the module docs).
async fn barrier(tier: &Tier) {
    let _ = tier.controller().send(TakeResult(u64::MAX)).await;
}

/// The runtime thread's main loop: runs commands until `Close`, then finishes what is in
/// flight, fails what came after, and stops the tier.
async fn serve(tier: Tier, rx: flume::Receiver<Cmd>, done: Completions) {
    let tier = Rc::new(tier);
    let mut running: Vec<actix_rt::task::JoinHandle<()>> = Vec::new();
    while let Ok(cmd) = rx.recv_async().await {
        running.retain(|h| !h.is_finished());
        let t = tier.clone();
        let d = done.clone();
        match cmd {
            Cmd::Close => break,
            Cmd::Unlock(keys) => tier.unlock(keys),
            // Sent at once: the backend publishes its `accessed` event before handling any
            // operation of a later command (mailboxes are first-in first-out).
            Cmd::Touch(keys) => tier.touch(keys),
            Cmd::Store { task, keys, objs } => running.push(actix_rt::spawn(async move {
                let n = keys.len();
                let (_, pairs) = valid(keys);
                let all_valid = pairs.len() == n;
                let (keys, regions): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
                let (ok, bytes) = if keys.is_empty() {
                    (all_valid, 0)
                } else {
                    match t.store_from(keys, regions).await {
                        Ok(r) => (
                            r.success() && all_valid,
                            r.adapters.iter().map(|(_, o)| o.new_bytes).sum(),
                        ),
                        Err(_) => (false, 0),
                    }
                };
                barrier(&t).await;
                d.store((task, ok, bytes, objs));
            })),
            Cmd::Lookup { task, keys } => running.push(actix_rt::spawn(async move {
                let n = keys.len();
                let (pos, keys) = valid(keys);
                let bits = if keys.is_empty() {
                    Bitmap::zeros(0)
                } else {
                    let m = keys.len();
                    t.lookup_and_lock(keys)
                        .await
                        .unwrap_or_else(|_| Bitmap::zeros(m))
                };
                barrier(&t).await;
                d.lookup((task, spread(n, &pos, &bits), Vec::new()));
            })),
            Cmd::Load { task, keys, objs } => running.push(actix_rt::spawn(async move {
                let n = keys.len();
                let (pos, pairs) = valid(keys);
                let (keys, regions): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
                let bits = if keys.is_empty() {
                    Bitmap::zeros(0)
                } else {
                    // Returns once every region is home: nothing writes into it afterwards.
                    t.load(keys, regions).await.hits
                };
                barrier(&t).await;
                d.load((task, spread(n, &pos, &bits), objs));
            })),
            Cmd::Delete(keys, reply) => running.push(actix_rt::spawn(async move {
                let removed = match t.delete(keys).await {
                    Ok(r) => r.all_keys().count(),
                    Err(_) => 0,
                };
                barrier(&t).await;
                let _ = reply.send(removed);
            })),
            Cmd::Status(reply) => running.push(actix_rt::spawn(async move {
                let s = match t.status().await {
                    Ok(s) => serde_json::to_string(&s).unwrap_or_else(|_| "null".into()),
                    Err(_) => "null".into(),
                };
                let _ = reply.send(s);
            })),
            Cmd::Usage(reply) => running.push(actix_rt::spawn(async move {
                let s = match t.usage().await {
                    Ok(u) => serde_json::to_string(&u).unwrap_or_else(|_| "null".into()),
                    Err(_) => "null".into(),
                };
                let _ = reply.send(s);
            })),
            Cmd::List {
                model,
                cursor,
                page_size,
                reply,
            } => running.push(actix_rt::spawn(async move {
                let r = t
                    .controller()
                    .send(ListKeys {
                        model,
                        cursor,
                        page_size,
                        adapter: 0,
                    })
                    .await;
                let r = match r {
                    Ok(Ok(page)) => Ok((
                        page.entries
                            .iter()
                            .map(|(k, size)| (key_tuple(k), *size))
                            .collect(),
                        page.next,
                    )),
                    Ok(Err(e)) => Err((
                        e.kind() == kvtier::ErrorKind::Invalid,
                        format!("kvtier: list_l2_keys: {e}"),
                    )),
                    Err(_) => Err((false, "kvtier: the runtime has stopped".into())),
                };
                let _ = reply.send(r);
            })),
        }
    }
    // Commands that raced `close` (see the module docs) fail rather than vanish.
    for cmd in rx.drain() {
        done.fail(cmd);
    }
    drop(rx);
    for h in running {
        let _ = h.await;
    }
    match Rc::try_unwrap(tier) {
        Ok(tier) => tier.close().await,
        Err(_) => unreachable!("every task holding the tier has finished"),
    }
}

/// One kvtier runtime with one adapter, for a Python host. See the module docs.
#[pyclass(frozen, module = "kvtier._native")]
pub struct Core {
    cmds: flume::Sender<Cmd>,
    done: Completions,
    store_rx: flume::Receiver<StoreDone>,
    lookup_rx: flume::Receiver<BitsDone>,
    load_rx: flume::Receiver<BitsDone>,
    /// Lookup results drained from `lookup_rx`, waiting for their query: task id → bytes of 0/1.
    lookup_ready: Py<PyDict>,
    /// Load results drained from `load_rx`, waiting for their query.
    load_ready: Py<PyDict>,
    events: flume::Receiver<TierEvent>,
    /// Gets `()` (or is disconnected) when the runtime thread has finished.
    stopped: flume::Receiver<()>,
    fds: [AtomicI32; 3],
    closed: AtomicBool,
    next_task: AtomicU64,
    kind: &'static str,
    storage_kind: &'static str,
}

impl Core {
    fn key(k: &Bound<'_, PyAny>) -> Option<ObjectKey> {
        let hash: Vec<u8> = k.getattr("chunk_hash").ok()?.extract().ok()?;
        let model: String = k.getattr("model_name").ok()?.extract().ok()?;
        let rank: u32 = k.getattr("kv_rank").ok()?.extract().ok()?;
        let group: u32 = k.getattr("object_group_id").ok()?.extract().ok()?;
        let salt: String = k.getattr("cache_salt").ok()?.extract().ok()?;
        ObjectKey::new(model, rank, hash)
            .ok()?
            .with_salt(salt)
            .ok()
            .map(|k| k.with_group(group))
    }

    fn keys(keys: &Bound<'_, PyAny>) -> PyResult<Vec<Option<ObjectKey>>> {
        keys.try_iter()?
            .map(|k| Ok(Self::key(&k?)))
            .collect::<PyResult<_>>()
    }

    /// Keys with the regions of their `MemoryObj`s (None for a key or object that cannot be
    /// used), and strong references to the objects.
    #[allow(clippy::type_complexity)]
    fn regions(
        keys: &Bound<'_, PyAny>,
        objects: &Bound<'_, PyAny>,
    ) -> PyResult<(Vec<Option<(ObjectKey, HostRegion)>>, Vec<Py<PyAny>>)> {
        let keys = Self::keys(keys)?;
        let objs: Vec<Bound<'_, PyAny>> = objects.try_iter()?.collect::<PyResult<_>>()?;
        if objs.len() != keys.len() {
            return Err(PyValueError::new_err(format!(
                "kvtier: {} keys but {} memory objects",
                keys.len(),
                objs.len()
            )));
        }
        let mut out = Vec::with_capacity(keys.len());
        for (k, o) in keys.into_iter().zip(&objs) {
            let ptr: usize = o.getattr("data_ptr")?.extract()?;
            let len: usize = o.call_method0("get_size")?.extract()?;
            out.push(match k {
                Some(k) if ptr != 0 && len > 0 => {
                    // SAFETY: `ptr` is the MemoryObj's own buffer of at least `get_size()`
                    // bytes. The command holds a strong reference to the MemoryObj until the
                    // operation finished and kvtier dropped the region (module docs), so the
                    // memory stays allocated; LMCache's contract gives the buffer to the
                    // adapter for the task's duration (no writer during a store, nothing else
                    // during a load), and LMCache never hands one buffer to two loads at once.
                    Some((k, unsafe { HostRegion::new(ptr as *mut u8, len) }))
                }
                _ => None,
            });
        }
        Ok((out, objs.into_iter().map(Bound::unbind).collect()))
    }

    /// Sends a command unless closed; a command that cannot be sent fails at once.
    fn send(&self, cmd: Cmd) {
        if self.closed.load(Ordering::SeqCst) {
            self.fail(cmd);
            return;
        }
        if let Err(flume::SendError(cmd)) = self.cmds.send(cmd) {
            self.fail(cmd);
        }
    }

    /// Fails a command at once, signalling the eventfds only while they are open (callers
    /// hold the GIL, as `close` does when it closes them, so a closed fd is never written).
    fn fail(&self, cmd: Cmd) {
        let mut done = self.done.clone();
        done.fds = [0, 1, 2].map(|i| self.fds[i].load(Ordering::SeqCst));
        done.fail(cmd);
    }

    fn task(&self) -> u64 {
        self.next_task.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a request with a reply channel and waits for the reply, GIL released.
    fn ask<T: Send>(
        &self,
        py: Python<'_>,
        make: impl FnOnce(flume::Sender<T>) -> Cmd,
    ) -> Option<T> {
        let (tx, rx) = flume::bounded(1);
        self.send(make(tx));
        py.detach(move || rx.recv().ok())
    }

    /// Moves finished results from a channel into a GIL-protected dict.
    fn drain_into(
        py: Python<'_>,
        rx: &flume::Receiver<BitsDone>,
        dict: &Py<PyDict>,
    ) -> PyResult<()> {
        let dict = dict.bind(py);
        for (task, bits, objs) in rx.try_iter() {
            drop(objs);
            let bytes: Vec<u8> = bits.into_iter().map(u8::from).collect();
            dict.set_item(task, PyBytes::new(py, &bytes))?;
        }
        Ok(())
    }

    fn take(
        py: Python<'_>,
        rx: &flume::Receiver<BitsDone>,
        dict: &Py<PyDict>,
        task: u64,
    ) -> PyResult<Option<Py<PyAny>>> {
        Self::drain_into(py, rx, dict)?;
        let dict = dict.bind(py);
        let found = dict.get_item(task)?;
        if found.is_some() {
            dict.del_item(task)?;
        }
        Ok(found.map(Bound::unbind))
    }
}

#[pymethods]
impl Core {
    /// Starts a runtime on one adapter given as kvtier's adapter JSON (the object
    /// `kvtier --l2-adapter` takes). A bad field raises `ValueError` naming the adapter and the
    /// field, before anything is opened; a store that cannot be opened raises `RuntimeError`.
    #[new]
    fn new(py: Python<'_>, adapter_json: &str) -> PyResult<Self> {
        let (adapter_json, fleet) =
            split_fleet_json(0, adapter_json).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let adapter = parse_adapter_json(0, &adapter_json)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let kind = adapter.spec.kind();
        let mut spec = &adapter.spec;
        while let AdapterSpec::FaultInject(f) = spec {
            spec = &f.inner.spec;
        }
        let storage_kind = spec.kind();
        let mut config = TierConfig::with_adapters(vec![adapter]);
        if let Some(fleet) = fleet {
            config = config.fleet(fleet);
        }
        // Owned until the runtime is up: an early return closes them.
        let owned = [new_eventfd()?, new_eventfd()?, new_eventfd()?];
        let fds = owned.each_ref().map(|f| f.as_raw_fd());
        let (store_tx, store_rx) = flume::unbounded();
        let (lookup_tx, lookup_rx) = flume::unbounded();
        let (load_tx, load_rx) = flume::unbounded();
        let done = Completions {
            store: store_tx,
            lookup: lookup_tx,
            load: load_tx,
            fds,
        };
        let (cmds, cmd_rx) = flume::unbounded::<Cmd>();
        let (ready_tx, ready_rx) = flume::bounded::<Result<flume::Receiver<TierEvent>, String>>(1);
        let (stopped_tx, stopped) = flume::bounded::<()>(1);
        let thread_done = done.clone();
        let spawned = thread::Builder::new()
            .name("kvtier-runtime".into())
            .spawn(move || {
                let system = actix::System::new();
                system.block_on(async move {
                    match Tier::start(&config).await {
                        Ok(tier) => {
                            let events = tier.events();
                            // Let the subscription reach the backend before any operation.
                            barrier(&tier).await;
                            let _ = ready_tx.send(Ok(events));
                            serve(tier, cmd_rx, thread_done).await;
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                        }
                    }
                });
                let _ = stopped_tx.send(());
            });
        if let Err(e) = spawned {
            return Err(PyRuntimeError::new_err(format!(
                "kvtier: cannot start the runtime thread: {e}"
            )));
        }
        let events = match py.detach(move || ready_rx.recv()) {
            Ok(Ok(events)) => events,
            Ok(Err(e)) => {
                return Err(PyRuntimeError::new_err(format!("kvtier: {e}")));
            }
            Err(_) => {
                return Err(PyRuntimeError::new_err(
                    "kvtier: the runtime thread stopped during start-up",
                ));
            }
        };
        Ok(Core {
            cmds,
            done,
            store_rx,
            lookup_rx,
            load_rx,
            lookup_ready: PyDict::new(py).unbind(),
            load_ready: PyDict::new(py).unbind(),
            events,
            stopped,
            fds: owned.map(|f| AtomicI32::new(f.into_raw_fd())),
            closed: AtomicBool::new(false),
            next_task: AtomicU64::new(0),
            kind,
            storage_kind,
        })
    }

    /// The adapter's `type` (`s3`, `fs`, ...).
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind
    }

    /// The type of the adapter that holds the bytes: `kind`, or for a `fault_inject` the type
    /// of the innermost adapter it wraps (`memory`, `fs`, `s3`, `hfbucket`).
    #[getter]
    fn storage_kind(&self) -> &'static str {
        self.storage_kind
    }

    /// The eventfd signalled when a store finishes.
    fn store_fd(&self) -> i32 {
        self.fds[0].load(Ordering::SeqCst)
    }

    /// The eventfd signalled when a lookup-and-lock finishes.
    fn lookup_fd(&self) -> i32 {
        self.fds[1].load(Ordering::SeqCst)
    }

    /// The eventfd signalled when a load finishes.
    fn load_fd(&self) -> i32 {
        self.fds[2].load(Ordering::SeqCst)
    }

    /// True once `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Stores each `MemoryObj`'s bytes (read in place) under its key; returns the task id.
    fn submit_store(&self, keys: &Bound<'_, PyAny>, objects: &Bound<'_, PyAny>) -> PyResult<u64> {
        let (keys, objs) = Self::regions(keys, objects)?;
        let task = self.task();
        self.send(Cmd::Store { task, keys, objs });
        Ok(task)
    }

    /// Looks up and locks keys; returns the task id.
    fn submit_lookup(&self, keys: &Bound<'_, PyAny>) -> PyResult<u64> {
        let keys = Self::keys(keys)?;
        let task = self.task();
        self.send(Cmd::Lookup { task, keys });
        Ok(task)
    }

    /// Loads keys into the `MemoryObj`s (written in place); returns the task id.
    fn submit_load(&self, keys: &Bound<'_, PyAny>, objects: &Bound<'_, PyAny>) -> PyResult<u64> {
        let (keys, objs) = Self::regions(keys, objects)?;
        let task = self.task();
        self.send(Cmd::Load { task, keys, objs });
        Ok(task)
    }

    /// Releases one lock on each key (fire-and-forget; unknown keys are ignored).
    fn unlock(&self, keys: &Bound<'_, PyAny>) -> PyResult<()> {
        let keys = Self::keys(keys)?.into_iter().flatten().collect();
        self.send(Cmd::Unlock(keys));
        Ok(())
    }

    /// Marks keys as just used for kvtier's eviction, without I/O and without a lock: the
    /// adapter publishes an `accessed` event for the keys it holds (others are ignored), which
    /// reaches the event channel shortly after (fire-and-forget, like `unlock`).
    fn touch(&self, keys: &Bound<'_, PyAny>) -> PyResult<()> {
        let keys: Vec<ObjectKey> = Self::keys(keys)?.into_iter().flatten().collect();
        if !keys.is_empty() {
            self.send(Cmd::Touch(keys));
        }
        Ok(())
    }

    /// Every finished store not yet popped: a list of (task, success, bytes of new keys).
    fn pop_stores(&self) -> Vec<(u64, bool, u64)> {
        self.store_rx
            .try_iter()
            .map(|(task, ok, bytes, objs)| {
                drop(objs);
                (task, ok, bytes)
            })
            .collect()
    }

    /// The result of a lookup task, once: bytes of 0/1 per key, or None if not finished.
    fn take_lookup(&self, py: Python<'_>, task: u64) -> PyResult<Option<Py<PyAny>>> {
        Self::take(py, &self.lookup_rx, &self.lookup_ready, task)
    }

    /// The result of a load task, once: bytes of 0/1 per key, or None if not finished.
    fn take_load(&self, py: Python<'_>, task: u64) -> PyResult<Option<Py<PyAny>>> {
        Self::take(py, &self.load_rx, &self.load_ready, task)
    }

    /// Deletes keys (locked keys and keys with a store in flight are skipped); waits, GIL
    /// released, and returns how many were removed. Their `deleted` events are in the event
    /// channel when this returns.
    fn delete(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<usize> {
        let keys: Vec<ObjectKey> = Self::keys(keys)?.into_iter().flatten().collect();
        if keys.is_empty() {
            return Ok(0);
        }
        Ok(self.ask(py, |tx| Cmd::Delete(keys, tx)).unwrap_or(0))
    }

    /// Usage events since the last call, in order: a list of (kind, keys, sizes), kind being
    /// `"stored"`, `"accessed"` (lookup hits and touches) or `"deleted"`, each key a tuple
    /// (chunk_hash, model_name, kv_rank, object_group_id, cache_salt). With `wait_s`, when
    /// there is none yet, waits up to that many seconds (GIL released) for the first one:
    /// events the runtime publishes on its own, such as deletions by kvtier's evictor, arrive
    /// without any call from LMCache.
    #[pyo3(signature = (wait_s=None))]
    fn drain_events(
        &self,
        py: Python<'_>,
        wait_s: Option<f64>,
    ) -> Vec<(&'static str, Vec<KeyTuple>, Vec<u64>)> {
        let mut first = None;
        if let Some(wait) = wait_s.filter(|w| *w > 0.0 && self.events.is_empty()) {
            let events = self.events.clone();
            let wait = std::time::Duration::from_secs_f64(wait.min(86_400.0));
            first = py.detach(move || events.recv_timeout(wait).ok());
        }
        first
            .into_iter()
            .chain(self.events.try_iter())
            .filter_map(|e| match e {
                TierEvent::Usage(UsageEvent { kind, .. }) => Some(kind),
                _ => None,
            })
            .map(|kind| {
                use kvtier::actors::UsageEventKind as K;
                match kind {
                    K::Stored { keys, sizes } => {
                        ("stored", keys.iter().map(key_tuple).collect(), sizes)
                    }
                    K::Accessed { keys } => {
                        ("accessed", keys.iter().map(key_tuple).collect(), Vec::new())
                    }
                    K::Deleted { keys, sizes, .. } => {
                        ("deleted", keys.iter().map(key_tuple).collect(), sizes)
                    }
                }
            })
            .collect()
    }

    /// The runtime's status report as JSON text (`null` once closed).
    fn status_json(&self, py: Python<'_>) -> String {
        self.ask(py, Cmd::Status).unwrap_or_else(|| "null".into())
    }

    /// The runtime's usage report as JSON text (`null` once closed).
    fn usage_json(&self, py: Python<'_>) -> String {
        self.ask(py, Cmd::Usage).unwrap_or_else(|| "null".into())
    }

    /// One page of stored keys: (entries of (key tuple, size), next cursor). A malformed
    /// cursor raises `ValueError`; a store that cannot list raises `RuntimeError`.
    #[pyo3(signature = (model_name, page_size, cursor))]
    fn list_keys(
        &self,
        py: Python<'_>,
        model_name: Option<String>,
        page_size: usize,
        cursor: Option<String>,
    ) -> PyResult<Page> {
        let reply = self.ask(py, |reply| Cmd::List {
            model: model_name,
            cursor,
            page_size,
            reply,
        });
        match reply {
            Some(Ok(page)) => Ok(page),
            Some(Err((true, msg))) => Err(PyValueError::new_err(msg)),
            Some(Err((false, msg))) => Err(PyRuntimeError::new_err(msg)),
            None => Err(PyRuntimeError::new_err("kvtier: the runtime has stopped")),
        }
    }

    /// Stops the runtime: later submits fail at once; operations in flight finish first (so
    /// no memory is written after this returns); then the eventfds are closed. Idempotent.
    fn close(&self, py: Python<'_>) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = self.cmds.send(Cmd::Close);
        let stopped = self.stopped.clone();
        py.detach(move || {
            let _ = stopped.recv();
        });
        // The runtime thread that wrote them has finished.
        self.fds.iter().for_each(close_slot);
    }
}

impl Drop for Core {
    /// An adapter dropped without `close` is closed here: the runtime finishes what is in
    /// flight (it never needs the GIL, so waiting for it cannot deadlock) before the eventfds
    /// are closed, so no closed (and possibly reused) descriptor is ever written.
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            let _ = self.cmds.send(Cmd::Close);
            let _ = self.stopped.recv();
        }
        // The runtime thread has finished.
        self.fds.iter().for_each(close_slot);
    }
}

/// Checks kvtier adapter JSON without starting anything: `ValueError` naming the adapter and
/// the field when it is wrong, otherwise the adapter's resolved configuration as JSON text,
/// secrets redacted.
#[pyfunction]
fn check_adapter(adapter_json: &str) -> PyResult<String> {
    let (adapter_json, fleet) =
        split_fleet_json(0, adapter_json).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let adapter =
        parse_adapter_json(0, &adapter_json).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let mut resolved = adapter.to_redacted_json();
    if let (Some(fleet), Some(m)) = (fleet, resolved.as_object_mut()) {
        m.insert(
            "fleet".into(),
            serde_json::to_value(fleet).unwrap_or_default(),
        );
    }
    Ok(resolved.to_string())
}

/// The `kvtier._native` module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Core>()?;
    m.add_function(wrap_pyfunction!(check_adapter, m)?)?;
    m.add_function(wrap_pyfunction!(alloc::allocator, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
