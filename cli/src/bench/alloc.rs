//! A counting global allocator for the bench: how many large blocks (≥ [`LARGE`]) the process
//! allocates, and their bytes. A chunk-sized staging buffer anywhere on the load or store path
//! shows up here, so a phase whose count is 0 made no intermediate copy of the chunks (the
//! host-arena runs of docs/benchmarks.md read this). Blocks at least as large as the bench's chunk
//! ([`set_chunk_size`]) are counted apart: an HTTP client's receive buffers are large blocks
//! too, but only a staging copy of a whole chunk is chunk-sized.
//!
//! Two relaxed atomic additions per large allocation; small ones only pay a comparison.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Blocks at least this large are counted.
pub const LARGE: usize = 64 * 1024;

static COUNT: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
static CHUNK_SIZE: AtomicUsize = AtomicUsize::new(usize::MAX);
static CHUNKS: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting large blocks.
pub struct Counting;

// SAFETY: every call is forwarded unchanged to `System`; the counters have no effect on memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            note(new_size);
        }
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

fn note(size: usize) {
    if size >= LARGE {
        COUNT.fetch_add(1, Relaxed);
        BYTES.fetch_add(size as u64, Relaxed);
        if size >= CHUNK_SIZE.load(Relaxed) {
            CHUNKS.fetch_add(1, Relaxed);
        }
    }
}

/// Sets the size from which a block counts as chunk-sized (see [`chunk_sized`]).
pub fn set_chunk_size(size: usize) {
    CHUNK_SIZE.store(size.max(LARGE), Relaxed);
}

/// Blocks of at least the chunk size allocated so far.
pub fn chunk_sized() -> u64 {
    CHUNKS.load(Relaxed)
}

/// Large blocks allocated so far, and their bytes.
pub fn large() -> (u64, u64) {
    (COUNT.load(Relaxed), BYTES.load(Relaxed))
}
