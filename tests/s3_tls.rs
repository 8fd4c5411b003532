//! `s3_prefer_http2` and `s3_ca_bundle` over real TLS: a loopback rustls server with a
//! certificate trusted only through `s3_ca_bundle` records which protocol ALPN negotiated.
//! The certificate is made with the `openssl` command line.

use std::io::Write;
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;

use kvtier::actors::backends::s3::S3Config;
use kvtier::{AdapterConfig, AdapterSpec, Tier, TierConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

fn openssl(args: &[&str], dir: &std::path::Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("this test needs the openssl command line (Debian package openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test CA (`ca.pem`, trusted through `s3_ca_bundle`) and a localhost leaf it signed.
fn make_cert(dir: &std::path::Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "1",
        "-subj",
        "/CN=kvtier-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ];
    ca.extend(ec);
    openssl(&ca, dir);
    let mut csr = vec![
        "req",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "key.pem",
        "-out",
        "leaf.csr",
    ];
    csr.extend(ec);
    openssl(&csr, dir);
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "leaf.ext",
            "-out",
            "cert.pem",
        ],
        dir,
    );
}

/// Serves one TLS connection offering [h2, http/1.1]; returns the negotiated protocol.
fn serve_once(dir: &std::path::Path) -> (u16, std::thread::JoinHandle<Option<Vec<u8>>>) {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("cert.pem"))
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join("key.pem")).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let (mut tcp, _) = listener.accept().ok()?;
        let mut conn = rustls::ServerConnection::new(Arc::new(cfg)).ok()?;
        while conn.is_handshaking() {
            if let Err(e) = conn.complete_io(&mut tcp) {
                eprintln!("test TLS server: handshake failed: {e}");
                return None;
            }
        }
        let alpn = conn.alpn_protocol().map(|p| p.to_vec());
        // Answer an HTTP/1.1 request with a 404 and close; an h2 client just sees the close.
        if alpn.as_deref() == Some(b"http/1.1") {
            let mut stream = rustls::StreamOwned::new(conn, tcp);
            let _ = stream.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            let _ = stream.flush();
        }
        alpn
    });
    (port, handle)
}

async fn negotiated(prefer_http2: bool) -> Option<Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    make_cert(dir.path());
    let (port, server) = serve_once(dir.path());
    let mut c = S3Config::new(format!("https://localhost:{port}"), "r")
        .bucket("kvtier-tls")
        .access_key_id("AKIDEXAMPLE")
        .secret_access_key("secret");
    c.s3_ca_bundle = Some(dir.path().join("ca.pem"));
    c.s3_prefer_http2 = prefer_http2;
    let tier = Tier::start(&TierConfig::with_adapters(vec![{
        let mut built = AdapterConfig::default();
        built.common = Default::default();
        built.spec = AdapterSpec::S3(c);
        built
    }]))
    .await
    .unwrap();
    let key = kvtier::ObjectKey::new("m", 0, vec![1u8]).unwrap();
    // A HEAD that the server answers 404 (or drops): a miss either way.
    let hits = tier.lookup_and_lock(vec![key]).await.unwrap();
    assert!(!hits.all());
    tier.close().await;
    server.join().unwrap()
}

#[actix_rt::test]
async fn prefer_http2_false_offers_only_http1() {
    assert_eq!(negotiated(false).await.as_deref(), Some(&b"http/1.1"[..]));
}

#[actix_rt::test]
async fn prefer_http2_true_offers_h2() {
    assert_eq!(negotiated(true).await.as_deref(), Some(&b"h2"[..]));
}
