//! Embedding kvtier in an actor-based host: start the runtime inside the host's actix `System`,
//! then talk to the controller with messages.
//!
//! Run: `cargo run --example embed` (uses a temporary directory), or pass a directory:
//! `cargo run --example embed -- /var/cache/kvtier`.

use bytes::Bytes;
use kvtier::actors::config::EvictionConfig;
use kvtier::actors::{Delete, GetUsage, Load, LookupAndLock, Store, Unlock};
use kvtier::{AdapterConfig, LoadBuf, ObjectKey, Tier, TierConfig};

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let dir = std::env::args()
        .nth(1)
        .map(Into::into)
        .unwrap_or_else(|| tmp.path().to_owned());

    // Or from a file and the environment: TierConfig::load(&ConfigSources::file("kvtier.toml"))
    let adapter = AdapterConfig::fs(&dir)
        .capacity_gb(1.0)
        .eviction(EvictionConfig::lru()); // watermark 0.8, ratio 0.2 of the keys
    let tier = Tier::start(&TierConfig::default().adapter(adapter)).await?;
    let controller = tier.controller().clone();

    // Keys: model, KV rank, chunk hash, optional cache salt.
    let base =
        ObjectKey::new("meta-llama/Llama-3.1-8B", 0, vec![0u8; 16])?.with_salt("tenant-a")?;
    let keys: Vec<ObjectKey> = (0u8..8)
        .map(|i| base.with_hash(vec![i; 16]))
        .collect::<Result<_, _>>()?;
    let chunk = 256 * 1024;
    let objects: Vec<Bytes> = (0u8..8).map(|i| Bytes::from(vec![i; chunk])).collect();

    let report = controller
        .send(Store {
            keys: keys.clone(),
            objects,
        })
        .await?;
    println!("stored: {:?}", report.adapters);

    let hits = controller
        .send(LookupAndLock { keys: keys.clone() })
        .await?;
    println!("lookup_and_lock: {hits}");

    let buffers = keys.iter().map(|_| LoadBuf::zeroed(chunk)).collect();
    let loaded = controller
        .send(Load {
            keys: keys.clone(),
            buffers,
        })
        .await?;
    println!(
        "loaded: {}, first byte of chunk 3: {}",
        loaded.hits, loaded.buffers[3][0]
    );

    controller.do_send(Unlock { keys: keys.clone() });
    let usage = controller.send(GetUsage).await?;
    println!("usage: {:?}", usage.adapters[0]);

    let deleted = controller
        .send(Delete {
            keys,
            adapter: None,
        })
        .await?;
    println!("deleted {} keys", deleted.all_keys().count());
    tier.close().await;
    Ok(())
}
