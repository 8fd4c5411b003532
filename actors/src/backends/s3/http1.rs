//! An HTTP/1.1-only connector for `s3_prefer_http2 = false`: hyper on rustls, offering only
//! `http/1.1` in ALPN. (`aws-smithy-http-client`'s own connector always offers `h2` first and
//! has no switch for it.)

use std::time::Duration;

use aws_sdk_s3::config::http::{HttpRequest, HttpResponse};
use aws_sdk_s3::config::SharedHttpClient;
use aws_smithy_runtime_api::client::http::{
    http_client_fn, HttpConnector, HttpConnectorFuture, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_types::body::SdkBody;
use hyper_util::client::legacy::connect::HttpConnector as TcpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::storage::BackendError;

type Inner = Client<hyper_rustls::HttpsConnector<TcpConnector>, SdkBody>;

/// The connector: one pooled hyper client, HTTP/1.1 only.
#[derive(Clone, Debug)]
struct Http1Connector(Inner);

impl HttpConnector for Http1Connector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let request = match request.try_into_http1x() {
            Ok(r) => r,
            Err(e) => return HttpConnectorFuture::ready(Err(ConnectorError::user(e.into()))),
        };
        let client = self.0.clone();
        HttpConnectorFuture::new(async move {
            let response = client.request(request).await.map_err(|e| {
                if e.is_connect() {
                    ConnectorError::io(e.into())
                } else {
                    ConnectorError::other(e.into(), None)
                }
            })?;
            let (parts, body) = response.into_parts();
            let response = http::Response::from_parts(parts, SdkBody::from_body_1_x(body));
            HttpResponse::try_from(response).map_err(|e| ConnectorError::other(e.into(), None))
        })
    }
}

/// The TLS settings used: native roots plus `ca_bundle`, ALPN `http/1.1` only.
pub fn tls_config(
    ca_bundle: Option<&std::path::Path>,
) -> Result<rustls::ClientConfig, BackendError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_bundle {
        let certs = CertificateDer::pem_file_iter(path).map_err(|e| BackendError::Invalid {
            reason: format!("s3_ca_bundle {}: {e}", path.display()),
        })?;
        for cert in certs {
            let cert = cert.map_err(|e| BackendError::Invalid {
                reason: format!("s3_ca_bundle {}: {e}", path.display()),
            })?;
            roots.add(cert).map_err(|e| BackendError::Invalid {
                reason: format!("s3_ca_bundle {}: {e}", path.display()),
            })?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| BackendError::Invalid {
            reason: format!("TLS setup: {e}"),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// An SDK HTTP client that speaks HTTP/1.1 only (ALPN `http/1.1`).
pub fn client(
    ca_bundle: Option<&std::path::Path>,
    connect_timeout: Duration,
) -> Result<SharedHttpClient, BackendError> {
    let mut tls = tls_config(ca_bundle)?;
    // Offer http/1.1 explicitly (hyper-rustls's HTTP/1-only builder would offer no ALPN at all).
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut tcp = TcpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(connect_timeout));
    // Plain http:// URLs (disable_tls) pass through; https:// ones get TLS.
    let https = hyper_rustls::HttpsConnector::from((tcp, tls));
    let connector = Http1Connector(Client::builder(TokioExecutor::new()).build(https));
    Ok(http_client_fn(move |_, _| {
        SharedHttpConnector::new(connector.clone())
    }))
}
