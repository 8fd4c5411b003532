//! Builds the `aws-sdk-s3` client for an [`S3Config`].

use std::net::IpAddr;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_credential_types::Credentials;
use aws_sdk_s3::config::{
    Region, RequestChecksumCalculation, ResponseChecksumValidation, StalledStreamProtectionConfig,
};
use aws_smithy_types::retry::RetryConfig;
use aws_smithy_types::timeout::TimeoutConfig;

use super::config::{ResolvedEndpoint, S3Config};
use super::http::HyperClient;
use crate::storage::BackendError;

/// Connection timeout: a refused or black-holed endpoint fails fast and counts toward the breaker.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest a single request attempt may take, unless `s3_attempt_timeout_secs` says otherwise.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts per request: the SDK's standard retry strategy (5xx, 503 SlowDown, throttling,
/// with backoff) gets the same number as kvtier's own policy for the direct path
/// ([`crate::retry::RetryPolicy::S3`]).
pub(crate) const MAX_ATTEMPTS: u32 = crate::retry::RetryPolicy::S3.max_attempts;

/// What [`build_clients`] returns.
pub(crate) struct Clients {
    /// The SDK client.
    pub sdk: aws_sdk_s3::Client,
    /// The hyper client under it, for the direct data path (one connection pool for both).
    pub hyper: HyperClient,
    /// Where the SDK client gets its credentials.
    pub credentials: SharedCredentialsProvider,
}

/// Builds the SDK client, the hyper client under it and the credentials provider. Must run
/// inside a tokio runtime (the default credential chain is async). `resolve_to`, when given,
/// replaces DNS for every host (like curl's `--resolve`): for virtual-host-style requests to
/// test servers and private endpoints without DNS entries. `credentials`, when given, replaces
/// the config's (static keys or the default chain).
///
/// The SDK and the default credential chain's providers (IMDS, ECS, STS web identity, SSO) all
/// send through our own HTTP client: the AWS crates are built without a default one.
pub(crate) async fn build_clients(
    cfg: &S3Config,
    ep: &ResolvedEndpoint,
    resolve_to: Option<IpAddr>,
    credentials: Option<SharedCredentialsProvider>,
) -> Result<Clients, BackendError> {
    let (http, hyper) = super::http::client(
        cfg.s3_ca_bundle.as_deref(),
        CONNECT_TIMEOUT,
        cfg.s3_prefer_http2,
        resolve_to,
    )?;

    let region = Region::new(cfg.s3_region.clone());
    let static_keys = match (&cfg.aws_access_key_id, &cfg.aws_secret_access_key) {
        (Some(id), Some(secret)) => Some(SharedCredentialsProvider::new(Credentials::new(
            id.expose(),
            secret.expose(),
            None,
            None,
            "kvtier-static",
        ))),
        _ => None,
    };
    let (mut b, credentials) = match credentials.or(static_keys) {
        Some(creds) => {
            let b = aws_sdk_s3::config::Builder::new()
                .behavior_version(BehaviorVersion::latest())
                .region(region)
                .credentials_provider(creds.clone());
            (b, creds)
        }
        None => {
            let shared = aws_config::defaults(BehaviorVersion::latest())
                .region(region)
                .http_client(http.clone())
                .load()
                .await;
            let creds = shared.credentials_provider().ok_or_else(|| BackendError::invalid("s3: no AWS credentials: set aws_access_key_id and aws_secret_access_key, or configure the default chain (environment, profile, web identity, instance metadata)"))?;
            (aws_sdk_s3::config::Builder::from(&shared), creds)
        }
    };
    let crc = cfg.s3_checksum == super::config::ChecksumMode::Crc32c;
    b = b
        .http_client(http)
        .force_path_style(ep.force_path_style)
        .disable_s3_express_session_auth(!cfg.s3_enable_s3express)
        // Without `s3_checksum`, integrity comes from TLS or the payload signature, and CRCs
        // (CPU on every byte) are only sent where an API requires them. With it, PUTs carry
        // the CRC32C the store verifies and GETs check the one the store returns.
        .request_checksum_calculation(if crc {
            RequestChecksumCalculation::WhenSupported
        } else {
            RequestChecksumCalculation::WhenRequired
        })
        .response_checksum_validation(if crc {
            ResponseChecksumValidation::WhenSupported
        } else {
            ResponseChecksumValidation::WhenRequired
        })
        .retry_config(RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS))
        .stalled_stream_protection(stalled_stream_protection())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .operation_timeout(Duration::from_secs_f64(cfg.retry_timeout_secs))
                .operation_attempt_timeout(
                    cfg.s3_attempt_timeout_secs
                        .map_or(ATTEMPT_TIMEOUT, Duration::from_secs_f64),
                )
                .build(),
        );
    if let Some(url) = &ep.endpoint_url {
        b = b.endpoint_url(url);
    }
    Ok(Clients {
        sdk: aws_sdk_s3::Client::from_conf(b.build()),
        hyper,
        credentials,
    })
}

/// The credentials `provider` gives now (static keys, or the default chain's first answer).
pub(crate) async fn current_credentials(
    provider: &SharedCredentialsProvider,
) -> Result<Credentials, String> {
    use aws_credential_types::provider::ProvideCredentials;
    provider
        .provide_credentials()
        .await
        .map_err(|e| aws_sdk_s3::error::DisplayErrorContext(&e).to_string())
}

/// The SDK's stalled-stream protection, for downloads only. A GET body streams after the
/// request attempt has returned, so only this notices a server that stops sending mid-body. A
/// PUT's body is sent inside the attempt, which the attempt timeout already bounds; the upload
/// check cost about 10 % of the client's CPU on 4 MiB stores (measured with
/// `scripts/compare/compare.sh`, docs/benchmarks.md) and bought nothing more.
pub(crate) fn stalled_stream_protection() -> StalledStreamProtectionConfig {
    StalledStreamProtectionConfig::enabled()
        .upload_enabled(false)
        .download_enabled(true)
        .build()
}

/// The adapter's own multi-threaded tokio runtime for S3 requests: `s3_num_io_threads`
/// workers, capped at the number of CPUs.
pub(crate) fn io_runtime(cfg: &S3Config) -> std::io::Result<tokio::runtime::Runtime> {
    let threads = cfg
        .s3_num_io_threads
        .min(std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("kvtier-s3")
        .enable_all()
        .build()
}

/// `op` with `config` as its config override, when given.
pub(crate) fn with_config<T, E, B>(
    op: aws_sdk_s3::client::customize::CustomizableOperation<T, E, B>,
    config: Option<aws_sdk_s3::config::Builder>,
) -> aws_sdk_s3::client::customize::CustomizableOperation<T, E, B> {
    match config {
        Some(c) => op.config_override(c),
        None => op,
    }
}

/// Sends a PUT, hashing and signing its payload only when `sign_payload` (see
/// [`PayloadSigning`](super::PayloadSigning)); otherwise as `UNSIGNED-PAYLOAD`; with `config`
/// as its config override, when given.
pub(crate) async fn send_put(
    req: aws_sdk_s3::operation::put_object::builders::PutObjectFluentBuilder,
    sign_payload: bool,
    config: Option<aws_sdk_s3::config::Builder>,
) -> Result<
    aws_sdk_s3::operation::put_object::PutObjectOutput,
    aws_sdk_s3::error::SdkError<
        aws_sdk_s3::operation::put_object::PutObjectError,
        aws_sdk_s3::config::http::HttpResponse,
    >,
> {
    let op = with_config(req.customize(), config);
    if sign_payload {
        op.send().await
    } else {
        op.disable_payload_signing().send().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AWS crates are built without an HTTP client of their own: the default credential
    /// chain must fetch through ours. Here its container (ECS) provider fetches credentials
    /// from a loopback server; the only test in this crate that sets `AWS_*` variables.
    #[test]
    fn default_chain_fetches_through_our_http_client() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && c.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let body = r#"{"AccessKeyId":"AKIDFROMECS","SecretAccessKey":"s","Token":"t","Expiration":"2099-01-01T00:00:00Z"}"#;
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            String::from_utf8_lossy(&head).into_owned()
        });
        for var in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_PROFILE",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_ROLE_ARN",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN",
        ] {
            std::env::remove_var(var);
        }
        std::env::set_var("AWS_CONFIG_FILE", "/nonexistent/kvtier-test/config");
        std::env::set_var(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/kvtier-test/creds",
        );
        std::env::set_var(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            format!("http://127.0.0.1:{port}/creds"),
        );
        let mut cfg = S3Config::for_endpoint("http://127.0.0.1:9", "kv-bucket", "r", "", "");
        cfg.aws_access_key_id = None;
        cfg.aws_secret_access_key = None;
        let ep = cfg.validate().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let creds = rt.block_on(async {
            let clients = build_clients(&cfg, &ep, None, None).await.unwrap();
            current_credentials(&clients.credentials).await
        });
        std::env::remove_var("AWS_CONTAINER_CREDENTIALS_FULL_URI");
        let creds = creds.unwrap();
        assert_eq!(creds.access_key_id(), "AKIDFROMECS");
        assert!(creds.expiry().is_some());
        let head = server.join().unwrap();
        assert!(head.starts_with("GET /creds "), "{head}");
    }

    #[test]
    fn stalled_streams_are_watched_on_downloads_only() {
        let c = stalled_stream_protection();
        assert!(c.is_enabled());
        assert!(
            c.download_enabled(),
            "a GET body stalling mid-stream must be noticed"
        );
        assert!(
            !c.upload_enabled(),
            "PUTs are bounded by the attempt timeout"
        );
    }
}
