//! Embedding kvtier with an S3 adapter.
//!
//! Run against any S3-compatible store, for example a local Garage started by
//! `scripts/garage-local.sh` (which exports `KVTIER_S3_ADAPTER`):
//!
//! ```sh
//! scripts/garage-local.sh cargo run --example s3
//! # or, with your own store:
//! KVTIER_S3_ADAPTER='{"type": "s3", "s3_endpoint": "s3://my-bucket", "s3_region": "us-east-1"}' \
//!   cargo run --example s3
//! ```

use bytes::Bytes;
use kvtier::actors::{GetStatus, ListKeys, Load, LookupAndLock, Store, Unlock};
use kvtier::config::parse_adapter_json;
use kvtier::{ObjectKey, Tier, TierConfig};

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let json = std::env::var("KVTIER_S3_ADAPTER")
        .map_err(|_| "set KVTIER_S3_ADAPTER to an s3 adapter JSON (see the file's docs)")?;
    let adapter = parse_adapter_json(0, &json)?; // the same strict parser as the CLI
    let tier = Tier::start(&TierConfig::with_adapters(vec![adapter])).await?;
    let controller = tier.controller().clone();

    let base = ObjectKey::new("example-model", 0, vec![0u8; 16])?;
    let keys: Vec<ObjectKey> = (0u8..4)
        .map(|i| base.with_hash(vec![i; 16]))
        .collect::<Result<_, _>>()?;
    let chunk = 1 << 20;
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

    let page = controller
        .send(ListKeys {
            model: Some("example-model".into()),
            cursor: None,
            page_size: 10,
            adapter: 0,
        })
        .await??;
    for (key, size) in &page.entries {
        println!("  {key}  {size} bytes");
    }
    let status = controller.send(GetStatus).await?;
    println!(
        "status: {}",
        serde_json::to_string_pretty(&status.adapters[0])?
    );
    tier.close().await;
    Ok(())
}
