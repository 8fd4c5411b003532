//! The raw aws-sdk-s3 baseline of `kvtier bench` (feature `s3`): the same objects and requests
//! in flight as the pipeline, through a plain `aws-sdk-s3` client on its own tokio runtime, with
//! no actors.
//!
//! The client is built here, from the adapter's [`S3Config`], with the SDK's own default HTTPS
//! client (hyper 1 and rustls 0.23, like kvtier's connector), not with kvtier's: the baseline is
//! what a plain SDK user gets. It keeps the adapter's settings that change the work per byte
//! (checksums, payload signing, stalled-stream protection on downloads only), so the two differ
//! only in the client. Nothing here is library API: the actors crate exports no client internals.

use std::time::{Duration, Instant};

use aws_config::BehaviorVersion;
use aws_sdk_s3::config::{
    Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
    StalledStreamProtectionConfig,
};
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use kvtier::actors::backends::s3::{ResolvedEndpoint, S3Config};
use kvtier::actors::NameFormat;
use kvtier::config::{AdapterSpec, TierConfig};

use super::args::BenchOptions;
use super::report::{BenchReport, PhaseReport, S3Baseline};
use super::timer::{peak_rss_bytes, Timer};
use super::workload::Workload;

/// With an `s3` adapter (and neither `--stream` nor `--no-baseline`): the raw baseline after the
/// pipeline, on other payloads of the same sizes, compared with the pipeline's phases.
pub(super) async fn after_pipeline(
    config: &TierConfig,
    opts: BenchOptions,
    nonce: u64,
    phases: &[PhaseReport],
    load_phase: &PhaseReport,
) -> Result<Option<S3Baseline>, String> {
    let Some(c) = config.adapters.iter().find_map(|a| match &a.spec {
        AdapterSpec::S3(c) if !opts.stream && !opts.no_baseline => Some(c.clone()),
        _ => None,
    }) else {
        return Ok(None);
    };
    // Other payloads of the same sizes: Garage deduplicates identical blocks, which would let
    // the baseline skip the server's writes.
    let other = Workload::new(0, opts.chunks, opts.chunk_size, !nonce, true);
    let (put, get, _) = raw_s3_baseline(&c, &other, raw_in_flight(&c, opts)).await?;
    let store = phases
        .iter()
        .find(|p| p.phase == "store")
        .map_or(0.0, |p| p.gbps);
    Ok(Some(S3Baseline {
        store_vs_raw: store / put.gbps.max(1e-12),
        load_vs_raw: load_phase.gbps / get.gbps.max(1e-12),
        put,
        get,
    }))
}

/// A plain aws-sdk-s3 client for the adapter: its region, endpoint, addressing style, S3
/// Express setting and credentials (static keys, else the SDK's default chain), its CA bundle,
/// and its checksum mode; the SDK's default HTTPS client, retries and timeouts otherwise.
async fn plain_client(cfg: &S3Config, ep: &ResolvedEndpoint) -> Result<aws_sdk_s3::Client, String> {
    let mut loader =
        aws_config::defaults(BehaviorVersion::latest()).region(Region::new(cfg.s3_region.clone()));
    if let (Some(id), Some(secret)) = (&cfg.aws_access_key_id, &cfg.aws_secret_access_key) {
        loader = loader.credentials_provider(Credentials::new(
            id.expose(),
            secret.expose(),
            None,
            None,
            "kvtier-bench",
        ));
    }
    if let Some(path) = &cfg.s3_ca_bundle {
        loader = loader.http_client(https_client_trusting(path)?);
    }
    let shared = loader.load().await;
    // As the adapter: PUTs carry a CRC32C with `s3_checksum = "crc32c"` or `auto` signing over
    // plain HTTP; GETs check it with `s3_checksum = "crc32c"` only.
    let mut b = aws_sdk_s3::config::Builder::from(&shared)
        .force_path_style(ep.force_path_style)
        .disable_s3_express_session_auth(!cfg.s3_enable_s3express)
        .request_checksum_calculation(if cfg.put_crc32c(ep) {
            RequestChecksumCalculation::WhenSupported
        } else {
            RequestChecksumCalculation::WhenRequired
        })
        .response_checksum_validation(if cfg.get_crc32c() {
            ResponseChecksumValidation::WhenSupported
        } else {
            ResponseChecksumValidation::WhenRequired
        })
        .stalled_stream_protection(
            StalledStreamProtectionConfig::enabled()
                .upload_enabled(false)
                .download_enabled(true)
                .build(),
        );
    if let Some(url) = &ep.endpoint_url {
        b = b.endpoint_url(url);
    }
    Ok(aws_sdk_s3::Client::from_conf(b.build()))
}

/// The SDK's default HTTPS client, trusting the certificates of the PEM file `path` besides the
/// platform's roots (the adapter's `s3_ca_bundle`).
fn https_client_trusting(
    path: &std::path::Path,
) -> Result<aws_sdk_s3::config::SharedHttpClient, String> {
    use aws_smithy_http_client::tls::{self, TlsContext, TrustStore};
    let pem = std::fs::read(path).map_err(|e| format!("s3_ca_bundle {}: {e}", path.display()))?;
    let trust = TrustStore::default().with_pem_certificate(pem);
    let tls = TlsContext::builder()
        .with_trust_store(trust)
        .build()
        .map_err(|e| format!("s3_ca_bundle {}: {e}", path.display()))?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::AwsLc,
        ))
        .tls_context(tls)
        .build_https())
}

/// The baseline's own multi-threaded tokio runtime: `s3_num_io_threads` workers capped at the
/// number of CPUs, like the adapter's.
fn io_runtime(cfg: &S3Config) -> std::io::Result<tokio::runtime::Runtime> {
    let threads = cfg
        .s3_num_io_threads
        .min(std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("kvtier-bench-s3")
        .enable_all()
        .build()
}

/// Sends a PUT, hashing and signing its payload only when `sign_payload` (the adapter's
/// `s3_payload_signing`), otherwise as `UNSIGNED-PAYLOAD`; whether it succeeded.
async fn send_put(
    req: aws_sdk_s3::operation::put_object::builders::PutObjectFluentBuilder,
    sign_payload: bool,
) -> bool {
    if sign_payload {
        req.send().await.is_ok()
    } else {
        req.customize()
            .disable_payload_signing()
            .send()
            .await
            .is_ok()
    }
}

/// Requests the raw loop keeps in flight: what the pipeline can have at the network, i.e. the
/// adapter's `s3_num_io_threads` bound, or fewer if the pipeline submits fewer.
fn raw_in_flight(cfg: &S3Config, opts: BenchOptions) -> usize {
    cfg.s3_num_io_threads
        .min(opts.concurrency * opts.batch)
        .max(1)
}

/// `--client raw-s3`: only the raw aws-sdk-s3 loop, reported in the pipeline's shape (phases
/// `store` and `load`), for `scripts/compare/compare.sh`.
pub(super) async fn raw_only(
    config: &TierConfig,
    opts: BenchOptions,
) -> Result<BenchReport, String> {
    let cfg = config
        .adapters
        .iter()
        .find_map(|a| match &a.spec {
            AdapterSpec::S3(c) => Some(c.clone()),
            _ => None,
        })
        .ok_or("--client raw-s3 needs an s3 adapter (--l2-adapter '{\"type\": \"s3\", ...}')")?;
    let nonce: u64 = rand::random();
    let work = Workload::new(0, opts.chunks, opts.chunk_size, nonce, true);
    let in_flight = raw_in_flight(&cfg, opts);
    let (mut put, mut get, verified) = raw_s3_baseline(&cfg, &work, in_flight).await?;
    put.phase = "store".into();
    get.phase = "load".into();
    let ok = |p: &PhaseReport| p.bytes / opts.chunk_size as u64;
    let errors = (opts.chunks as u64 - ok(&put)) + (opts.chunks as u64 - ok(&get));
    Ok(BenchReport {
        client: opts.client,
        store_gbps: put.gbps,
        load_gbps: get.gbps,
        lookup_keys_per_s: 0.0,
        verified,
        evicted_keys: 0,
        errors,
        chunks: opts.chunks,
        chunk_size: opts.chunk_size,
        batch: 1,
        concurrency: in_flight,
        lookup_hits: 0,
        load_hits: ok(&get) as usize,
        phases: vec![put, get],
        baseline_read_gbps: None,
        load_vs_baseline: None,
        overfill_keys: 0,
        usage: Vec::new(),
        status: serde_json::Value::Null,
        s3_baseline: None,
        peak_rss_mib: peak_rss_bytes() as f64 / (1024.0 * 1024.0),
        stream: false,
        host_arena: false,
        host_copies_saved_bytes: 0,
        bytes_in_flight_mib: (in_flight * opts.chunk_size) as f64 / (1024.0 * 1024.0),
        adapters: config.to_redacted_json()["adapters"].clone(),
        metrics: None,
    })
}

/// Plain concurrent PUTs then GETs of the workload's payloads through a [`plain_client`], on a runtime with the same number of threads, `in_flight`
/// requests at a time, with no actors. GET bodies are collected into memory (one copy, as the
/// pipeline's copy into the caller's buffer) and compared with the payloads after the clock
/// stops; the third result says whether every byte matched. The objects are deleted afterwards.
async fn raw_s3_baseline(
    cfg: &S3Config,
    work: &Workload,
    in_flight: usize,
) -> Result<(PhaseReport, PhaseReport, bool), String> {
    let ep = cfg.validate().map_err(|e| e.to_string())?;
    let rt = io_runtime(cfg).map_err(|e| e.to_string())?;
    let (c, e) = (cfg.clone(), ep.clone());
    let client = rt
        .spawn(async move { plain_client(&c, &e).await })
        .await
        .map_err(|e| e.to_string())??;
    // The same kind of names as the pipeline's (LMCache object names of the workload's keys):
    // the server's cost per object depends on where its name lands in the metadata index.
    let names: Vec<String> = work
        .keys
        .iter()
        .map(|k| {
            format!(
                "{}{}",
                cfg.key_prefix(),
                k.object_name(NameFormat::default())
            )
        })
        .collect();
    let bucket = ep.bucket.clone();
    let signed = cfg.signs_payload(&ep);

    let mut timer = Timer::new("raw_put");
    let puts: Vec<(Duration, bool)> = stream::iter(0..names.len())
        .map(|i| {
            let (client, bucket) = (client.clone(), bucket.clone());
            let (name, data) = (names[i].clone(), work.payload(i));
            let task = rt.spawn(async move {
                let t = Instant::now();
                let req = client
                    .put_object()
                    .bucket(bucket)
                    .key(name)
                    .body(aws_sdk_s3::primitives::ByteStream::from(data));
                (t.elapsed(), send_put(req, signed).await)
            });
            async move { task.await.unwrap_or((Duration::ZERO, false)) }
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    puts.iter().for_each(|(d, _)| timer.record(*d));
    let ok = puts.iter().filter(|(_, ok)| *ok).count();
    let put = timer.finish(work.keys.len(), (ok * work.size) as u64);

    let mut timer = Timer::new("raw_get");
    let gets: Vec<(usize, Duration, Option<Bytes>)> = stream::iter(0..names.len())
        .map(|i| {
            let (client, bucket, name) = (client.clone(), bucket.clone(), names[i].clone());
            let task = rt.spawn(async move {
                let t = Instant::now();
                let body = match client.get_object().bucket(bucket).key(name).send().await {
                    Ok(r) => r.body.collect().await.ok().map(|b| b.into_bytes()),
                    Err(_) => None,
                };
                (t.elapsed(), body)
            });
            async move {
                let (d, body) = task.await.unwrap_or((Duration::ZERO, None));
                (i, d, body)
            }
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    gets.iter().for_each(|(_, d, _)| timer.record(*d));
    let got: usize = gets
        .iter()
        .filter_map(|(_, _, b)| b.as_ref())
        .map(|b| b.len())
        .sum();
    let get = timer.finish(work.keys.len(), got as u64);
    let verified = gets
        .iter()
        .all(|(i, _, b)| b.as_ref().is_some_and(|b| work.matches(*i, b)));
    drop(gets);

    // Clean up the baseline's objects.
    for chunk in names.chunks(1000) {
        let ids: Vec<_> = chunk
            .iter()
            .filter_map(|n| {
                aws_sdk_s3::types::ObjectIdentifier::builder()
                    .key(n)
                    .build()
                    .ok()
            })
            .collect();
        if let Ok(d) = aws_sdk_s3::types::Delete::builder()
            .set_objects(Some(ids))
            .quiet(true)
            .build()
        {
            let (client, bucket) = (client.clone(), bucket.clone());
            let _ = rt
                .spawn(async move {
                    client
                        .delete_objects()
                        .bucket(bucket)
                        .delete(d)
                        .send()
                        .await
                })
                .await;
        }
    }
    rt.shutdown_background();
    Ok((put, get, verified))
}
