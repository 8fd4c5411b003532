//! kvtier's own HTTP client for the SDK: hyper on rustls, so that we choose
//!
//! - what ALPN offers: `h2` then `http/1.1` with `s3_prefer_http2 = true`, `http/1.1` alone
//!   with false (`aws-smithy-http-client`'s connector always offers `h2` first);
//! - how large a connection's HTTP/1.1 read buffer may grow: [`READ_BUF_MAX`] instead of
//!   hyper's ~408 KiB, which at 64 GETs in flight held ~25 MiB beyond the caller's buffers;
//! - an optional fixed address for every host name ([`client`]'s `resolve_to`, like curl's
//!   `--resolve`), for virtual-host-style requests to servers without DNS entries.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use aws_sdk_s3::config::http::{HttpRequest, HttpResponse};
use aws_sdk_s3::config::SharedHttpClient;
use aws_smithy_runtime_api::client::http::{
    http_client_fn, HttpConnector, HttpConnectorFuture, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_types::body::SdkBody;
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use hyper_util::client::legacy::connect::HttpConnector as TcpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::storage::BackendError;

/// Largest HTTP/1.1 read buffer per connection. Body bytes are copied out of it into the
/// caller's buffer as they arrive, so a larger buffer only means fewer, larger reads.
pub(super) const READ_BUF_MAX: usize = 64 * 1024;

/// Host-name resolution: the system's, or one fixed address for every name.
#[derive(Clone, Debug)]
pub(super) enum Resolve {
    /// The system resolver.
    System(GaiResolver),
    /// This address for every host name.
    Fixed(IpAddr),
}

type Addrs = Box<dyn Iterator<Item = SocketAddr> + Send>;

impl tower_service::Service<Name> for Resolve {
    type Response = Addrs;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Addrs, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match self {
            Resolve::System(r) => r.poll_ready(cx),
            Resolve::Fixed(_) => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, name: Name) -> Self::Future {
        match self {
            Resolve::System(r) => {
                let fut = r.call(name);
                Box::pin(async move { fut.await.map(|a| Box::new(a) as Addrs) })
            }
            // Port 0 is replaced by the URL's port.
            Resolve::Fixed(ip) => {
                let addr = SocketAddr::new(*ip, 0);
                Box::pin(async move { Ok(Box::new(std::iter::once(addr)) as Addrs) })
            }
        }
    }
}

/// The pooled hyper client under both the SDK and the direct data path
/// ([`super::direct`]); cloning it shares the pool.
pub(super) type HyperClient = Client<hyper_rustls::HttpsConnector<TcpConnector<Resolve>>, SdkBody>;

/// The connector: one pooled hyper client.
#[derive(Clone, Debug)]
struct KvtierConnector(HyperClient);

impl HttpConnector for KvtierConnector {
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

/// The TLS settings used: native roots plus `ca_bundle` (ALPN is set by [`client`]).
pub(super) fn tls_config(
    ca_bundle: Option<&std::path::Path>,
) -> Result<rustls::ClientConfig, BackendError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_bundle {
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| BackendError::invalid(format!("s3_ca_bundle {}: {e}", path.display())))?;
        for cert in certs {
            let cert = cert.map_err(|e| {
                BackendError::invalid(format!("s3_ca_bundle {}: {e}", path.display()))
            })?;
            roots.add(cert).map_err(|e| {
                BackendError::invalid(format!("s3_ca_bundle {}: {e}", path.display()))
            })?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| BackendError::invalid(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The HTTP client, for the SDK and as the plain hyper client it wraps (one connection pool):
/// ALPN `h2`, `http/1.1` when `prefer_http2`, else `http/1.1` only (plain `http://` endpoints
/// always speak HTTP/1.1); every host resolved to `resolve_to` when given.
pub(super) fn client(
    ca_bundle: Option<&std::path::Path>,
    connect_timeout: Duration,
    prefer_http2: bool,
    resolve_to: Option<IpAddr>,
) -> Result<(SharedHttpClient, HyperClient), BackendError> {
    let mut tls = tls_config(ca_bundle)?;
    tls.alpn_protocols = if prefer_http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    let resolver = match resolve_to {
        Some(ip) => Resolve::Fixed(ip),
        None => Resolve::System(GaiResolver::new()),
    };
    let mut tcp = TcpConnector::new_with_resolver(resolver);
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(connect_timeout));
    // Plain http:// URLs (disable_tls) pass through; https:// ones get TLS, and hyper speaks
    // HTTP/2 on connections where ALPN chose `h2`.
    let https = hyper_rustls::HttpsConnector::from((tcp, tls));
    let hyper = Client::builder(TokioExecutor::new())
        .http1_max_buf_size(READ_BUF_MAX)
        .build(https);
    let connector = KvtierConnector(hyper.clone());
    let sdk = http_client_fn(move |_, _| SharedHttpConnector::new(connector.clone()));
    Ok((sdk, hyper))
}
