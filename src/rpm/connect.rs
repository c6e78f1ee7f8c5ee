//! sbm-rpm's connections, timed as the responsiveness draft counts them: the TCP
//! handshake (connect() to established), the TLS handshake divided by its round trips
//! (TLS 1.3: 1, TLS 1.2: 2), then HTTP/2 (prior knowledge in cleartext, ALPN under TLS) or
//! HTTP/1.1; and the requests the test makes on them.

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Serialize;
use tokio::net::TcpSocket;

use super::rule::{PerWrite, RuledStream};
use super::server::H2_WINDOW;
use super::tls::{ALPN_H2, ALPN_HTTP11};
use crate::sys;
use crate::tcpinfo::TcpInfo;

pub type ClientBody = BoxBody<Bytes, std::convert::Infallible>;

/// Which HTTP the client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum HttpChoice {
    /// HTTP/2 where the server offers it (ALPN under TLS; in cleartext, HTTP/2 with prior
    /// knowledge first, HTTP/1.1 if the server does not answer it).
    Auto,
    #[value(name = "2")]
    #[serde(rename = "2")]
    Http2,
    #[value(name = "1.1")]
    #[serde(rename = "1.1")]
    Http11,
}

/// The HTTP a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum HttpVersion {
    #[serde(rename = "HTTP/2")]
    H2,
    #[serde(rename = "HTTP/1.1")]
    H1,
}

impl HttpVersion {
    pub fn name(self) -> &'static str {
        match self {
            HttpVersion::H2 => "HTTP/2",
            HttpVersion::H1 => "HTTP/1.1",
        }
    }
}

/// Where and how to connect.
#[derive(Clone)]
pub struct Endpoint {
    pub addr: SocketAddr,
    /// Bytes HTTP/2 may hold per stream above the socket (hyper's max_send_buf_size).
    pub h2_send_buffer: usize,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The name TLS verifies (the URL's host).
    pub server_name: String,
    pub authority: String,
    pub connect_timeout: Duration,
}

impl Endpoint {
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

/// A connection's request side.
#[derive(Clone)]
pub enum Sender {
    H2(http2::SendRequest<ClientBody>),
    /// HTTP/1.1 carries one request at a time; the test uses each for one long transfer.
    H1(Arc<tokio::sync::Mutex<http1::SendRequest<ClientBody>>>),
}

/// A connection with what establishing it cost.
pub struct Connected {
    pub sender: Sender,
    pub version: HttpVersion,
    pub tcp_ms: f64,
    /// The TLS handshake per round trip, and how many round trips it took.
    pub tls_ms: Option<f64>,
    pub tls_round_trips: Option<u32>,
    /// A second descriptor of the socket, for tcp_info while hyper owns the stream.
    pub socket: OwnedFd,
}

impl Connected {
    pub fn tcp_info(&self) -> Option<TcpInfo> {
        sys::tcp_info(self.socket.as_fd()).ok()
    }
}

/// Why a connection or request failed, naming the step.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connect to {addr}: {source}")]
    Tcp {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("connect to {0}: no answer within {1:?}")]
    Timeout(SocketAddr, Duration),
    #[error("TLS handshake with {addr}: {source}")]
    Tls {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("HTTP handshake with {addr}: {source}")]
    Http {
        addr: SocketAddr,
        source: hyper::Error,
    },
    #[error("the endpoint's readiness rule: {0}")]
    Rule(String),
}

/// Connects, applying `rule` (sbm-rpm's upload rule; `PerWrite::None` and no options for
/// everything else) before the first byte.
pub async fn connect(
    ep: &Endpoint,
    http: HttpChoice,
    nodelay: bool,
    rule: Option<&super::rule::EndpointRule>,
) -> Result<Connected, ConnectError> {
    let addr = ep.addr;
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|source| ConnectError::Tcp { addr, source })?;
    if nodelay {
        socket
            .set_nodelay(true)
            .map_err(|source| ConnectError::Tcp { addr, source })?;
    }
    let per_write = match rule {
        Some(r) => r.apply(socket.as_fd()).map_err(ConnectError::Rule)?.1,
        None => PerWrite::None,
    };
    let started = Instant::now();
    let stream = match tokio::time::timeout(ep.connect_timeout, socket.connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(source)) => return Err(ConnectError::Tcp { addr, source }),
        Err(_) => return Err(ConnectError::Timeout(addr, ep.connect_timeout)),
    };
    let tcp_ms = started.elapsed().as_secs_f64() * 1e3;
    let dup = nix::unistd::dup(stream.as_fd()).map_err(|e| ConnectError::Tcp {
        addr,
        source: e.into(),
    })?;
    let ruled = RuledStream::new(stream, per_write);
    match &ep.tls {
        Some(config) => {
            let name =
                rustls::pki_types::ServerName::try_from(ep.server_name.clone()).map_err(|e| {
                    ConnectError::Tls {
                        addr,
                        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
                    }
                })?;
            let mut config = (**config).clone();
            config.alpn_protocols = match http {
                HttpChoice::Auto => vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()],
                HttpChoice::Http2 => vec![ALPN_H2.to_vec()],
                HttpChoice::Http11 => vec![ALPN_HTTP11.to_vec()],
            };
            let tls_start = Instant::now();
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            let fut = connector.connect(name, ruled);
            let tls = match tokio::time::timeout(ep.connect_timeout, fut).await {
                Ok(Ok(s)) => s,
                Ok(Err(source)) => return Err(ConnectError::Tls { addr, source }),
                Err(_) => return Err(ConnectError::Timeout(addr, ep.connect_timeout)),
            };
            let tls_total = tls_start.elapsed().as_secs_f64() * 1e3;
            let (_, session) = tls.get_ref();
            let round_trips = match session.protocol_version() {
                Some(rustls::ProtocolVersion::TLSv1_2) => 2,
                _ => 1,
            };
            let version = match session.alpn_protocol() {
                Some(p) if p == ALPN_H2 => HttpVersion::H2,
                _ => HttpVersion::H1,
            };
            let sender = handshake(TokioIo::new(tls), version, addr, ep.h2_send_buffer).await?;
            Ok(Connected {
                sender,
                version,
                tcp_ms,
                tls_ms: Some(tls_total / f64::from(round_trips)),
                tls_round_trips: Some(round_trips),
                socket: dup,
            })
        }
        None => {
            let version = match http {
                HttpChoice::Http11 => HttpVersion::H1,
                HttpChoice::Auto | HttpChoice::Http2 => HttpVersion::H2,
            };
            let sender = handshake(TokioIo::new(ruled), version, addr, ep.h2_send_buffer).await?;
            Ok(Connected {
                sender,
                version,
                tcp_ms,
                tls_ms: None,
                tls_round_trips: None,
                socket: dup,
            })
        }
    }
}

async fn handshake<I>(
    io: I,
    version: HttpVersion,
    addr: SocketAddr,
    h2_send_buffer: usize,
) -> Result<Sender, ConnectError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    match version {
        HttpVersion::H2 => {
            let (sender, conn) = http2::Builder::new(TokioExecutor::new())
                .initial_stream_window_size(H2_WINDOW)
                .initial_connection_window_size(H2_WINDOW)
                .max_send_buf_size(h2_send_buffer)
                .handshake(io)
                .await
                .map_err(|source| ConnectError::Http { addr, source })?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(Sender::H2(sender))
        }
        HttpVersion::H1 => {
            let (sender, conn) = http1::Builder::new()
                .handshake(io)
                .await
                .map_err(|source| ConnectError::Http { addr, source })?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(Sender::H1(Arc::new(tokio::sync::Mutex::new(sender))))
        }
    }
}

/// A request for `path` in the form the connection's HTTP needs (HTTP/2: absolute URI;
/// HTTP/1.1: origin form and Host).
pub fn request(
    ep: &Endpoint,
    version: HttpVersion,
    method: hyper::Method,
    path: &str,
    body: ClientBody,
) -> Request<ClientBody> {
    let builder = Request::builder().method(method.clone());
    let builder = match version {
        HttpVersion::H2 => builder.uri(format!("{}://{}{path}", ep.scheme(), ep.authority)),
        HttpVersion::H1 => builder.uri(path).header("host", &ep.authority),
    };
    let builder = if method == hyper::Method::POST {
        builder.header("content-type", "application/octet-stream")
    } else {
        // The draft: GETs ask for identity so that nothing is compressed.
        builder.header("accept-encoding", "identity")
    };
    builder.body(body).expect("a valid request")
}

pub fn empty() -> ClientBody {
    Empty::new().boxed()
}

/// Sends a request and waits for the response head.
pub async fn send(sender: &Sender, req: Request<ClientBody>) -> Result<Response<Incoming>, String> {
    match sender {
        Sender::H2(s) => {
            let mut s = s.clone();
            s.ready().await.map_err(|e| e.to_string())?;
            s.send_request(req).await.map_err(|e| e.to_string())
        }
        Sender::H1(s) => {
            let mut s = s.lock().await;
            s.ready().await.map_err(|e| e.to_string())?;
            s.send_request(req).await.map_err(|e| e.to_string())
        }
    }
}

/// GETs `path` and reads the whole body; the milliseconds from sending to the last byte.
/// `probe_id`, where given, goes in the `x-sbm-probe` header (sbm-rpm-server's ledger).
pub async fn get_all(
    ep: &Endpoint,
    c: &Sender,
    version: HttpVersion,
    path: &str,
    probe_id: Option<&str>,
) -> Result<(f64, Bytes), String> {
    let mut req = request(ep, version, hyper::Method::GET, path, empty());
    if let Some(id) = probe_id {
        if let Ok(v) = hyper::header::HeaderValue::from_str(id) {
            req.headers_mut().insert(super::server::PROBE_HEADER, v);
        }
    }
    let started = Instant::now();
    let resp = send(c, req).await?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading the body: {e}"))?
        .to_bytes();
    if !status.is_success() {
        return Err(format!("GET {path}: status {status}"));
    }
    Ok((started.elapsed().as_secs_f64() * 1e3, body))
}
