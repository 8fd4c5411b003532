//! Memory that loads write into and stores read from: the host's own, without a copy.
//!
//! A serving engine keeps KV chunks in memory it allocated itself (a pinned arena, a Python
//! buffer, a slice of a huge page). kvtier never needs to know where that memory came from:
//!
//! * **Loads** write into a [`LoadBuf`], an owned, type-erased handle to any [`LoadTarget`]
//!   ([`BytesMut`], `Vec<u8>`, or a raw [`HostRegion`]). Backends see only `&mut [u8]` of the
//!   chunk's length: `fs` reads into it, S3 copies body frames into it, Xet streams into it.
//! * **Stores** read from [`Bytes`]; any [`StoreSource`] (a host region included) becomes one
//!   without a copy through `store_bytes` ([`Bytes::from_owner`]), so one object can fan out
//!   to several adapters by reference count.
//!
//! # Invariants
//! * **Every load buffer comes back.** A buffer handed to kvtier returns in the reply, in
//!   request order, with its original length, whatever happened: hit, miss, several adapters,
//!   a backend actor that died, a worker job that panicked. This is enforced by *lending*
//!   ([`lend`]): a lent buffer carries a stack of homes (channels of the borrowers that lent
//!   it); when the code holding it drops it, it travels back to the innermost home still
//!   listening. A borrower gets its buffers back with [`Homecoming::collect`], which resolves
//!   only once **every** buffer is home, so nothing can still write into a buffer that has been
//!   handed back. (A buffer leaked with `mem::forget` would keep its borrower waiting.)
//! * **A store releases host memory.** [`lend_sources`] wraps sources so the caller can wait
//!   until kvtier (and every HTTP connection task) has dropped its last reference, before the
//!   host reuses or frees the region.
//! * A load writes a buffer completely or reports a miss; a miss may leave partial bytes of an
//!   aborted transfer (the caller must not read a missed buffer), but never changes its length.
//! * A buffer may carry one injected bit flip (`fault_inject`'s `corrupt_body_rate`, set only by
//!   that wrapper): a storage that checks bodies applies it between its read and its check; any
//!   other storage lets it through when it drops the buffer. Either way the flip happens before
//!   the buffer reaches its home, never after (so a reply never changes under the caller).

use std::any::Any;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use bytes::{Bytes, BytesMut};

/// Memory a load can write into: a fixed-length byte region owned by the caller.
///
/// The slice's length is the expected object size and must not change while kvtier holds the
/// target.
pub trait LoadTarget: Any + Send {
    /// The region to fill.
    fn target(&mut self) -> &mut [u8];
    /// The same region, to read.
    fn bytes(&self) -> &[u8];
}

impl LoadTarget for BytesMut {
    fn target(&mut self) -> &mut [u8] {
        self
    }
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl LoadTarget for Vec<u8> {
    fn target(&mut self) -> &mut [u8] {
        self
    }
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// Memory a store can read from. Anything that shows its bytes and can move to another thread.
pub trait StoreSource: AsRef<[u8]> + Send + 'static {}

impl<T: AsRef<[u8]> + Send + 'static> StoreSource for T {}

/// Turns a store source into [`Bytes`] without copying: the bytes stay where they are, and the
/// source is dropped when the last clone of the returned `Bytes` is.
pub(crate) fn store_bytes(source: impl StoreSource) -> Bytes {
    Bytes::from_owner(source)
}

/// A raw region of host memory (a slice of a pinned arena, a Python buffer, ...), usable as a
/// [`LoadTarget`] and as a [`StoreSource`].
///
/// It does not own the memory: it is a pointer and a length that the host vouches for.
pub struct HostRegion {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the constructor's contract makes the region exclusively kvtier's while it holds the
// handle, so moving the handle to another thread is like moving a `&mut [u8]`.
unsafe impl Send for HostRegion {}
// SAFETY: shared access only reads (`AsRef`), and the contract forbids writers meanwhile.
unsafe impl Sync for HostRegion {}

impl HostRegion {
    /// A handle to `len` bytes at `ptr`.
    ///
    /// # Safety
    /// From this call until the handle is dropped (for a load: until the buffer comes back in
    /// the reply, see the module docs; for a store: until [`Released::wait`] returns, or every
    /// [`Bytes`] made from it is dropped):
    /// * `ptr` is non-null and valid for reads and writes of `len` bytes, and the memory is
    ///   not freed or unmapped;
    /// * nothing else reads or writes the region while it is used as a load target, and
    ///   nothing writes it while it is used as a store source;
    /// * no other `HostRegion` overlaps it while either is a load target.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        Self {
            ptr: NonNull::new(ptr).expect("HostRegion::new: null pointer"),
            len,
        }
    }

    /// The address of the first byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl AsRef<[u8]> for HostRegion {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: valid for reads of `len` bytes and not written meanwhile (constructor).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl LoadTarget for HostRegion {
    fn target(&mut self) -> &mut [u8] {
        // SAFETY: valid for writes of `len` bytes and exclusively ours (constructor); `&mut self`
        // makes this the only live slice made from this handle.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
    fn bytes(&self) -> &[u8] {
        self.as_ref()
    }
}

impl fmt::Debug for HostRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostRegion({:p}, {} bytes)", self.ptr, self.len)
    }
}

/// Where a lent buffer goes when it is dropped: a borrower's channel and the buffer's position.
struct Home {
    tx: flume::Sender<(usize, LoadBuf)>,
    index: usize,
}

/// One load buffer: any [`LoadTarget`], type-erased, plus the homes it returns to when lent.
///
/// Derefs to the target's bytes.
pub struct LoadBuf {
    target: Option<Box<dyn LoadTarget>>,
    /// Innermost borrower last.
    homes: Vec<Home>,
    /// A byte to flip "in flight" (`fault_inject`'s `corrupt_body_rate`): applied by a storage
    /// between reading the body and checking it ([`LoadBuf::apply_injected_flip`]), or, by a
    /// storage with no check of its own, when the buffer is dropped (after the read).
    flip: Option<usize>,
}

impl LoadBuf {
    /// Wraps a target.
    pub fn new(target: impl LoadTarget) -> Self {
        Self {
            target: Some(Box::new(target)),
            homes: Vec::new(),
            flip: None,
        }
    }

    /// Asks for byte `at` (modulo the length) to be flipped on its way from the store: fault
    /// injection of a body changed in flight, with the size kept.
    pub(crate) fn inject_flip(&mut self, at: usize) {
        self.flip = Some(at);
    }

    /// Applies an injected flip now (a storage calls this after reading the body and before
    /// checking it, where corruption in flight would happen). No-op without one.
    pub(crate) fn apply_injected_flip(&mut self) {
        if let Some(at) = self.flip.take() {
            let len = self.len();
            if len > 0 {
                self[at % len] ^= 0x01;
            }
        }
    }

    /// A zeroed `BytesMut` of `len` bytes.
    pub fn zeroed(len: usize) -> Self {
        Self::new(BytesMut::zeroed(len))
    }

    /// The original target, if it is a `T`; otherwise the buffer itself.
    pub(crate) fn downcast<T: LoadTarget>(mut self) -> Result<T, LoadBuf> {
        if !self.is::<T>() {
            return Err(self);
        }
        let target = self.target.take().expect("a LoadBuf always has its target");
        let any: Box<dyn Any> = target;
        Ok(*any.downcast::<T>().expect("checked by `is`"))
    }

    /// True when the target is a `T`.
    pub fn is<T: LoadTarget>(&self) -> bool {
        self.target
            .as_deref()
            .is_some_and(|t| (t as &dyn Any).is::<T>())
    }
}

impl Deref for LoadBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.target
            .as_deref()
            .expect("a LoadBuf always has its target")
            .bytes()
    }
}

impl DerefMut for LoadBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.target
            .as_deref_mut()
            .expect("a LoadBuf always has its target")
            .target()
    }
}

impl fmt::Debug for LoadBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LoadBuf({} bytes", self.len())?;
        if !self.homes.is_empty() {
            write!(f, ", lent {}x", self.homes.len())?;
        }
        f.write_str(")")
    }
}

impl From<BytesMut> for LoadBuf {
    fn from(b: BytesMut) -> Self {
        Self::new(b)
    }
}

impl From<Vec<u8>> for LoadBuf {
    fn from(b: Vec<u8>) -> Self {
        Self::new(b)
    }
}

impl From<HostRegion> for LoadBuf {
    fn from(r: HostRegion) -> Self {
        Self::new(r)
    }
}

impl Drop for LoadBuf {
    fn drop(&mut self) {
        // A storage that does not check bodies lets an injected flip through, after its read.
        if self.flip.is_some() && self.target.is_some() {
            self.apply_injected_flip();
        }
        let Some(mut target) = self.target.take() else {
            return;
        };
        // Back to the innermost borrower still listening; a home whose borrower went away
        // (its actor stopped) passes the buffer on to the next one out.
        while let Some(home) = self.homes.pop() {
            let back = LoadBuf {
                target: Some(target),
                homes: std::mem::take(&mut self.homes),
                flip: None,
            };
            match home.tx.send((home.index, back)) {
                Ok(()) => return,
                Err(flume::SendError((_, mut back))) => {
                    target = back.target.take().expect("just put there");
                    self.homes = std::mem::take(&mut back.homes);
                }
            }
        }
    }
}

/// The buffers a borrower lent, on their way back. See [`lend`].
pub struct Homecoming {
    tx: flume::Sender<(usize, LoadBuf)>,
    rx: flume::Receiver<(usize, LoadBuf)>,
    slots: Vec<Option<LoadBuf>>,
    missing: usize,
}

/// Lends `buffers`: each now returns to this borrower when dropped, wherever that happens.
/// Pass the returned buffers on; get them back in order with [`Homecoming::collect`] (or take
/// one back early with [`Homecoming::settle`]).
pub fn lend(buffers: Vec<LoadBuf>) -> (Vec<LoadBuf>, Homecoming) {
    let (tx, rx) = flume::unbounded();
    let n = buffers.len();
    let lent = buffers
        .into_iter()
        .enumerate()
        .map(|(index, mut b)| {
            b.homes.push(Home {
                tx: tx.clone(),
                index,
            });
            b
        })
        .collect();
    let slots = std::iter::repeat_with(|| None).take(n).collect();
    (
        lent,
        Homecoming {
            tx,
            rx,
            slots,
            missing: n,
        },
    )
}

impl Homecoming {
    /// Number of buffers lent.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when nothing was lent.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Waits for the next `n` buffers to come home (dropped wherever they were), and gives
    /// them with their positions, without keeping them: for a borrower that lends them again
    /// ([`Homecoming::lend_again`]).
    pub(crate) async fn recall(&mut self, n: usize) -> Vec<(usize, LoadBuf)> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            match self.rx.recv_async().await {
                Ok(v) => out.push(v),
                Err(_) => break,
            }
        }
        out
    }

    /// Lends a recalled buffer again, at position `i`.
    pub(crate) fn lend_again(&self, i: usize, mut buf: LoadBuf) -> LoadBuf {
        buf.homes.push(Home {
            tx: self.tx.clone(),
            index: i,
        });
        buf
    }

    /// Takes back buffers that came home through a reply instead of being dropped, with their
    /// positions (each position at most once).
    pub fn settle(&mut self, returned: impl IntoIterator<Item = (usize, LoadBuf)>) {
        for (i, mut b) in returned {
            b.homes.pop();
            self.put(i, b);
        }
    }

    fn put(&mut self, i: usize, b: LoadBuf) {
        if let Some(slot) = self.slots.get_mut(i) {
            if slot.is_none() {
                self.missing -= 1;
            }
            *slot = Some(b);
        }
    }

    /// Every buffer, if all are home already (no waiting).
    pub(crate) fn try_collect(&mut self) -> Option<Vec<LoadBuf>> {
        while self.missing > 0 {
            match self.rx.try_recv() {
                Ok((i, b)) => self.put(i, b),
                Err(_) => return None,
            }
        }
        Some(self.slots.drain(..).map(|s| s.expect("counted")).collect())
    }

    /// Every buffer, in lending order, once all are home.
    pub async fn collect(mut self) -> Vec<LoadBuf> {
        while self.missing > 0 {
            match self.rx.recv_async().await {
                Ok((i, b)) => self.put(i, b),
                // Unreachable while a lent buffer exists (each holds a sender).
                Err(_) => break,
            }
        }
        self.slots
            .drain(..)
            .map(|s| s.unwrap_or_else(|| LoadBuf::zeroed(0)))
            .collect()
    }
}

/// Tells when kvtier has let go of every store source made by [`lend_sources`].
pub struct Released {
    rx: flume::Receiver<()>,
}

impl Released {
    /// Resolves once no `Bytes` made from the sources exists any more.
    pub async fn wait(self) {
        // Every source holds a sender; the channel disconnects when the last one is dropped.
        let _ = self.rx.recv_async().await;
    }

    #[cfg(test)]
    /// True when every source has been released.
    pub(crate) fn is_released(&self) -> bool {
        self.rx.is_disconnected()
    }
}

/// A source that signals its release by dropping its sender.
struct Tracked<S> {
    source: S,
    _tx: flume::Sender<()>,
}

impl<S: AsRef<[u8]>> AsRef<[u8]> for Tracked<S> {
    fn as_ref(&self) -> &[u8] {
        self.source.as_ref()
    }
}

/// Makes [`Bytes`] of host sources without copying, and a [`Released`] that resolves when
/// kvtier no longer references any of them (so the host may reuse the memory).
pub fn lend_sources<S: StoreSource>(sources: Vec<S>) -> (Vec<Bytes>, Released) {
    let (tx, rx) = flume::bounded(0);
    let bytes = sources
        .into_iter()
        .map(|source| {
            store_bytes(Tracked {
                source,
                _tx: tx.clone(),
            })
        })
        .collect();
    (bytes, Released { rx })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_buffer_returns_to_the_innermost_listening_home() {
        let (outer, mut outer_home) = lend(vec![LoadBuf::zeroed(3), LoadBuf::zeroed(5)]);
        let (inner, inner_home) = lend(outer);
        // The inner borrower goes away before the buffers are dropped.
        drop(inner_home);
        drop(inner);
        let back = outer_home.try_collect().expect("both home");
        assert_eq!(back.iter().map(|b| b.len()).collect::<Vec<_>>(), [3, 5]);
        assert!(back.iter().all(|b| b.homes.is_empty()));
    }

    #[test]
    fn settle_takes_buffers_back_from_a_reply() {
        let (lent, mut home) = lend(vec![LoadBuf::zeroed(1), LoadBuf::zeroed(2)]);
        home.settle(lent.into_iter().enumerate());
        let back = home.try_collect().unwrap();
        assert_eq!(back[1].len(), 2);
        // Settled buffers are disarmed: dropping them sends nothing anywhere.
        drop(back);
    }

    #[actix_rt::test]
    async fn collect_waits_for_a_buffer_held_by_another_thread() {
        let (mut lent, home) = lend(vec![LoadBuf::new(vec![0u8; 4])]);
        let mut b = lent.pop().unwrap();
        let t = std::thread::spawn(move || {
            b.copy_from_slice(b"abcd");
            drop(b);
        });
        let back = home.collect().await;
        t.join().unwrap();
        assert_eq!(&back[0][..], b"abcd");
        let v: Vec<u8> = back.into_iter().next().unwrap().downcast().unwrap();
        assert_eq!(v, b"abcd");
    }

    #[test]
    fn host_regions_load_and_store_in_place() {
        let mut arena = vec![0u8; 8];
        let region = unsafe { HostRegion::new(arena.as_mut_ptr().add(4), 4) };
        let mut buf = LoadBuf::from(region);
        buf.copy_from_slice(b"wxyz");
        drop(buf);
        assert_eq!(&arena[4..], b"wxyz");
        let region = unsafe { HostRegion::new(arena.as_mut_ptr(), 8) };
        let (bytes, released) = lend_sources(vec![region]);
        assert_eq!(bytes[0].as_ptr(), arena.as_ptr());
        assert!(!released.is_released());
        drop(bytes);
        assert!(released.is_released());
    }

    #[test]
    fn downcast_gives_back_the_original_type() {
        let b = LoadBuf::from(BytesMut::from(&b"hi"[..]));
        assert!(b.is::<BytesMut>());
        assert!(!b.is::<Vec<u8>>());
        let m: BytesMut = b.downcast().unwrap();
        assert_eq!(&m[..], b"hi");
    }
}
