//! Embedding kvtier with a Hugging Face bucket adapter.
//!
//! Against the loopback Hub emulator (its Xet storage is xet-client's own local CAS server):
//!
//! ```sh
//! cargo run --release --example hub_emulator -- --port 8088 --token hf_local &   # prints its endpoint
//! KVTIER_HF_ADAPTER='{"type": "hfbucket", "bucket_handle": "hf://buckets/my-org/lmcache-kv/prod",
//!   "hf_endpoint": "http://127.0.0.1:8088", "token": "hf_local", "create_bucket_if_missing": true}' \
//!   cargo run --example hfbucket
//! ```
//!
//! Against the real Hub, leave out `hf_endpoint` and `token` and export `HF_TOKEN`.

use bytes::Bytes;
use kvtier::actors::{GetStatus, Load, LookupAndLock, Store, Unlock};
use kvtier::config::parse_adapter_json;
use kvtier::{ObjectKey, Tier, TierConfig};

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let json = std::env::var("KVTIER_HF_ADAPTER")
        .map_err(|_| "set KVTIER_HF_ADAPTER to an hfbucket adapter JSON (see the file's docs)")?;
    let tier = Tier::start(&TierConfig::with_adapters(vec![parse_adapter_json(
        0, &json,
    )?]))
    .await?;
    let controller = tier.controller().clone();

    let base = ObjectKey::new("example-model", 0, vec![0u8; 16])?.with_salt("tenant-a")?;
    let keys: Vec<ObjectKey> = (0u8..4)
        .map(|i| base.with_hash(vec![i; 16]))
        .collect::<Result<_, _>>()?;
    let chunk = 256 * 1024;
    let objects: Vec<Bytes> = (0u8..4).map(|i| Bytes::from(vec![i; chunk])).collect();
    let stored = controller
        .send(Store {
            keys: keys.clone(),
            objects,
        })
        .await?;
    println!("store: {:?}", stored.adapters[0].1);
    let hits = controller
        .send(LookupAndLock { keys: keys.clone() })
        .await?;
    let buffers = keys
        .iter()
        .map(|_| kvtier::LoadBuf::zeroed(chunk))
        .collect();
    let loaded = controller
        .send(Load {
            keys: keys.clone(),
            buffers,
        })
        .await?;
    println!("lookup {hits}, load {}", loaded.hits);
    controller.do_send(Unlock { keys });
    let status = controller.send(GetStatus).await?;
    println!("{}", serde_json::to_string_pretty(&status.adapters[0])?);
    tier.close().await;
    Ok(())
}
