//! The allocator of the module's own (Rust) allocations: jemalloc, kept from returning freed
//! memory to the system (feature `jemalloc`, on by default), or the C library's `malloc`.
//!
//! Why: a Xet store commit serializes its xorb into a fresh 64 MiB buffer. glibc's `malloc`
//! maps and unmaps every block above its 32 MiB mmap threshold, and jemalloc by default purges
//! freed blocks of 8 MiB and more at once, so either way each commit page-faults a new buffer
//! in: about one fault per 4 KiB stored, a quarter of a store's CPU (docs/benchmarks.md,
//! "hfbucket"). With `dirty_decay_ms:-1,muzzy_decay_ms:-1` jemalloc keeps freed pages and
//! hands them to the next commit.
//!
//! # Invariants
//! * **Only the module's allocations.** jemalloc's symbols are prefixed (`_rjem_`), so the
//!   interpreter, torch and LMCache keep the C library's `malloc`. Nothing allocated on one side
//!   is freed on the other: host memory is only borrowed (`HostRegion`), and what the module
//!   returns to Python is copied into Python objects.
//! * **Bounded, not leaked.** Kept pages are the high-water mark of the module's heap, reused by
//!   every later allocation; they are not returned to the system. An operator who prefers that
//!   memory back over the CPU sets `_RJEM_MALLOC_CONF` (read after [`MALLOC_CONF`], so it wins),
//!   e.g. `dirty_decay_ms:10000,muzzy_decay_ms:0` for jemalloc's defaults; a build without the
//!   feature uses the C library's `malloc`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// jemalloc's options as this module sets them, before the environment's `_RJEM_MALLOC_CONF`.
#[cfg(feature = "jemalloc")]
pub const MALLOC_CONF: &std::ffi::CStr = c"dirty_decay_ms:-1,muzzy_decay_ms:-1";

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The options string jemalloc reads at its first allocation (its `malloc_conf` global, under
/// the prefixed name the build gives it).
#[cfg(feature = "jemalloc")]
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: Option<&'static std::ffi::c_char> =
    // SAFETY: a pointer to the first byte of a static C string is valid for 'static.
    Some(unsafe { &*MALLOC_CONF.as_ptr() });

/// Reads one of jemalloc's `ssize_t` settings (`opt.dirty_decay_ms`, ...) through `mallctl`.
#[cfg(feature = "jemalloc")]
fn read_isize(name: &std::ffi::CStr) -> Option<isize> {
    let mut value: isize = 0;
    let mut len = std::mem::size_of::<isize>();
    // SAFETY: `name` is NUL-terminated; `value` and `len` describe a writable `ssize_t`, the
    // type of every setting read here; no new value is written (null, 0).
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            (&mut value as *mut isize).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    (rc == 0 && len == std::mem::size_of::<isize>()).then_some(value)
}

/// `kvtier._native.allocator()`: which allocator serves the module's own allocations, and, for
/// jemalloc, its decay settings in effect (`-1`: freed pages are kept for reuse) and the options
/// string the module sets.
#[pyfunction]
pub fn allocator(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    #[cfg(feature = "jemalloc")]
    {
        d.set_item("name", "jemalloc")?;
        d.set_item("malloc_conf", MALLOC_CONF.to_str().unwrap_or_default())?;
        d.set_item("dirty_decay_ms", read_isize(c"opt.dirty_decay_ms"))?;
        d.set_item("muzzy_decay_ms", read_isize(c"opt.muzzy_decay_ms"))?;
    }
    #[cfg(not(feature = "jemalloc"))]
    d.set_item("name", "system")?;
    Ok(d)
}
