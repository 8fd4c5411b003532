//! Test support for kvtier (not published): the conformance suite every backend's tests call
//! (as object_store's `integration` module), the Garage harness (`garage`), the loopback Hugging
//! Face Hub emulator (`hub`) and small helpers. Tests take it as `use kvtier_testkit as support;`.

pub mod conformance;
pub mod garage;
pub mod hub;
pub mod redis;

use std::time::{Duration, Instant};

use bytes::Bytes;
use kvtier::actors::ObjectKey;

/// Reads an HTTP/1.1 request head (up to and including the blank line) from a test server's
/// connection, byte by byte, so that nothing of the body is consumed.
pub fn read_request_head(c: &mut impl std::io::Read) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if c.read(&mut byte).unwrap_or(0) == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A key for tests: model `m`, rank 0, hash from `i`.
pub fn key(i: u32) -> ObjectKey {
    ObjectKey::new("test-model", 0, i.to_be_bytes().to_vec()).unwrap()
}

/// A salted key.
pub fn salted(i: u32, salt: &str) -> ObjectKey {
    key(i).with_salt(salt).unwrap()
}

/// A payload of `n` bytes derived from `seed`.
pub fn payload(seed: u32, n: usize) -> Bytes {
    Bytes::from(
        (0..n)
            .map(|j| (seed as usize).wrapping_mul(31).wrapping_add(j) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// Polls `f` every 10 ms until it returns true or `secs` pass; returns whether it did.
pub async fn wait_until<F, Fut>(secs: u64, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if f().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
}
