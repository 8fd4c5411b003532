//! Tests of the direct S3 data path: signing, ranged reads into host memory, failure
//! classification and retries, against in-process fakes (no server).

use super::*;

#[test]
fn object_names_are_encoded_once_keeping_slashes() {
    let got: String = utf8_percent_encode("p/m@1@0@abc def+%", KEY_ENCODE).collect();
    assert_eq!(got, "p/m%401%400%40abc%20def%2B%25");
}

#[test]
fn error_code_reads_code_and_message() {
    let full = br#"<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>SlowDown</Code><Message>Please &amp; reduce</Message><RequestId>1</RequestId></Error>"#;
    assert_eq!(
        error_code(full),
        (Some("SlowDown".into()), Some("Please & reduce".into()))
    );
    // Cut short (a body read up to ERROR_BODY_MAX): the fields read so far.
    assert_eq!(
        error_code(b"<Error><Code>NoSuchBucket</Code><Message>The spec"),
        (Some("NoSuchBucket".into()), Some("The spec".into()))
    );
    assert_eq!(
        error_code(b"<Error><Code>SlowDown</Code></Error>")
            .0
            .as_deref(),
        Some("SlowDown")
    );
    assert_eq!(error_code(b"not xml"), (None, None));
    assert_eq!(error_code(b""), (None, None));
}

#[test]
fn crc32c_header_is_base64_big_endian() {
    // CRC32C("123456789") = 0xE3069283.
    assert_eq!(crc32c_header(b"123456789"), "4waSgw==");
}

/// The cost of `s3_checksum = "crc32c"` per pass on this machine, in GB/s on one core, over
/// 4 MiB and 256 KiB objects. Run in release:
/// `cargo test --release -p kvtier-actors --lib -- --ignored crc32c_cost --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn crc32c_cost() {
    for size in [4usize << 20, 256 << 10] {
        let data: Vec<u8> = (0..size as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let rounds = (1usize << 30) / size;
        let t = std::time::Instant::now();
        let mut last = String::new();
        for _ in 0..rounds {
            last = crc32c_header(&data);
        }
        let gbps = (rounds * size) as f64 / t.elapsed().as_secs_f64() / 1e9;
        eprintln!(
            "crc32c, {} KiB objects: {gbps:.1} GB/s on one core ({last})",
            size >> 10
        );
    }
}

fn direct(cfg: &S3Config, creds: Credentials) -> Result<Direct, &'static str> {
    let ep = cfg.validate().unwrap();
    let (_, hyper) = super::super::http::client(None, Duration::from_secs(1), true, None).unwrap();
    Direct::new(cfg, &ep, hyper, creds)
}

fn config(endpoint: &str) -> S3Config {
    let mut c = S3Config::for_endpoint(endpoint, "kvcache", "us-west-2", "AKID", "SECRET");
    c.s3_bucket = None;
    c
}

fn static_creds() -> Credentials {
    Credentials::new("AKID", "SECRET", None, None, "test")
}

/// What the SDK's own endpoint resolver (`DefaultResolver`, the SDK's endpoint rules)
/// gives for `cfg`, with the parameters the SDK client built by `build_clients` uses.
fn sdk_resolved(cfg: &S3Config) -> String {
    use aws_sdk_s3::config::endpoint::{DefaultResolver, Params, ResolveEndpoint};
    let ep = cfg.validate().unwrap();
    let mut params = Params::builder()
        .region(cfg.s3_region.clone())
        .bucket(ep.bucket.clone())
        .force_path_style(ep.force_path_style)
        .use_fips(false)
        .use_dual_stack(false)
        .accelerate(false)
        .disable_s3_express_session_auth(!cfg.s3_enable_s3express);
    if let Some(url) = &ep.endpoint_url {
        params = params.endpoint(url.clone());
    }
    let params = params.build().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let resolved = rt
        .block_on(DefaultResolver::new().resolve_endpoint(&params))
        .unwrap();
    resolved.url().trim_end_matches('/').to_owned()
}

/// The URL of the GET the SDK client (built by `build_clients` from `cfg`) would send for
/// `object`, captured by an interceptor just before it is sent (nothing is sent).
fn sdk_request(cfg: &S3Config, object: &str) -> http::Uri {
    use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef;
    use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
    #[derive(Debug)]
    struct Capture(std::sync::mpsc::Sender<String>);
    impl Intercept for Capture {
        fn name(&self) -> &'static str {
            "capture"
        }
        fn read_before_transmit(
            &self,
            ctx: &BeforeTransmitInterceptorContextRef<'_>,
            _: &RuntimeComponents,
            _: &mut ConfigBag,
        ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
            let _ = self.0.send(ctx.request().uri().to_owned());
            Err("captured; not sent".into())
        }
    }
    let ep = cfg.validate().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let uri = rt.block_on(async {
        let provider = SharedCredentialsProvider::new(static_creds());
        let clients = super::super::client::build_clients(cfg, &ep, None, Some(provider))
            .await
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let _ = clients
            .sdk
            .get_object()
            .bucket(&ep.bucket)
            .key(object)
            .customize()
            .interceptor(Capture(tx))
            .send()
            .await;
        rx.try_recv().expect("the SDK built no request")
    });
    // The SDK adds `?x-id=GetObject`; the object URL is the rest.
    uri.split('?').next().unwrap().parse().unwrap()
}

/// For every `s3_endpoint` form docs/configuration.md lists (and each addressing style), the direct
/// path's URL and host are the SDK's: its endpoint resolver gives the same endpoint, and
/// the request its client would send has the same URL and authority (the `Host` header).
#[test]
fn object_urls_match_the_sdk_for_every_endpoint_form() {
    let object = "pre/m@1@ab cd+%";
    let mut forms = Vec::new();
    forms.push(config("s3://my-bucket"));
    let mut c = config("s3://my-bucket");
    c.s3_addressing_style = Some(super::super::AddressingStyle::Path);
    forms.push(c);
    let mut c = config("my-bucket.s3.us-west-2.amazonaws.com");
    c.s3_region = "us-west-2".into();
    forms.push(c);
    let mut c = config("s3://my-bucket.cwlota.com");
    c.disable_tls = true;
    forms.push(c);
    forms.push(config("s3://my-bucket.storage.example.com"));
    let mut c = config("https://minio.example.com:9000");
    c.s3_bucket = Some("kvcache".into());
    forms.push(c);
    let mut c = config("http://127.0.0.1:3900");
    c.disable_tls = true;
    c.s3_bucket = Some("kvcache".into());
    forms.push(c);
    for cfg in &forms {
        let d = direct(cfg, static_creds()).unwrap();
        let ours: http::Uri = d.url(object).parse().unwrap();
        let sdk = sdk_request(cfg, object);
        assert_eq!(ours, sdk, "{}", cfg.s3_endpoint);
        assert_eq!(
            ours.authority(),
            sdk.authority(),
            "Host, {}",
            cfg.s3_endpoint
        );
        let resolved = sdk_resolved(cfg);
        let ep = cfg.validate().unwrap();
        // Path style: the resolved URL ends in the bucket; virtual: its host starts with it.
        assert!(
            resolved.ends_with(&format!("/{}", ep.bucket)) == ep.force_path_style,
            "{resolved}"
        );
        let expected = format!("{resolved}/{}", utf8_percent_encode(object, KEY_ENCODE));
        assert_eq!(d.url(object), expected, "{}", cfg.s3_endpoint);
    }
}

/// S3 Express: the direct path stands aside (the SDK signs sessions), and the config hands
/// the SDK the bucket and region unchanged, from which its resolver derives the zonal
/// endpoint.
#[test]
fn s3_express_resolves_to_the_zonal_endpoint() {
    let mut c = config("s3://my-bucket--usw2-az1--x-s3.s3express-usw2-az1.us-west-2.amazonaws.com");
    c.s3_enable_s3express = true;
    assert!(direct(&c, static_creds()).is_err());
    let ep = c.validate().unwrap();
    assert_eq!(
        (ep.bucket.as_str(), ep.endpoint_url.as_deref()),
        ("my-bucket--usw2-az1--x-s3", None)
    );
    assert_eq!(
        sdk_resolved(&c),
        "https://my-bucket--usw2-az1--x-s3.s3express-usw2-az1.us-west-2.amazonaws.com"
    );
}

/// S3 Express sessions are signed by the SDK only.
#[test]
fn s3_express_stays_on_the_sdk() {
    let mut c = config("s3://my-bucket");
    c.s3_enable_s3express = true;
    assert!(direct(&c, static_creds()).is_err());
}

/// `Debug` never shows the credentials.
#[test]
fn debug_has_no_secret() {
    let d = direct(&config("s3://my-bucket"), static_creds()).unwrap();
    let shown = format!("{d:?}");
    assert!(
        !shown.contains("SECRET") && !shown.contains("AKID"),
        "{shown}"
    );
}

#[test]
fn aws_regional_hosts() {
    assert_eq!(aws_host("us-east-1"), "s3.us-east-1.amazonaws.com");
    assert_eq!(aws_host("cn-north-1"), "s3.cn-north-1.amazonaws.com.cn");
    let mut c = config("s3://my-bucket");
    c.s3_region = "cn-north-1".into();
    assert_eq!(
        direct(&c, static_creds()).unwrap().url("k"),
        format!("{}/k", sdk_resolved(&c))
    );
}

#[test]
fn virtual_host_labels() {
    assert!(host_label("kvtier-test"));
    assert!(!host_label("Upper"));
    assert!(!host_label("dotted.bucket"));
    assert!(!host_label("ab"));
}
