//! TLS for both programs (rustls with the ring provider): the server's certificate (files,
//! or a self-signed one made at start), the client's trust (a CA file, or none with
//! --insecure, as curl -k), and ALPN offering HTTP/2 and HTTP/1.1.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, ServerConfig, SignatureScheme};

/// ALPN ids, HTTP/2 first.
pub const ALPN_H2: &[u8] = b"h2";
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

// ring, not aws-lc-rs: it builds with a C compiler alone (no cmake, no clang). rustls marks
// it deprecated for lacking post-quantum key exchange, which a test of round trips on a
// lab path does not need.
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's TLS configuration: `cert` and `key` PEM files, or a self-signed
/// certificate for `names` (returned as PEM, so that a client can be pointed at it).
pub fn server_config(
    files: Option<(&Path, &Path)>,
    names: Vec<String>,
) -> Result<(Arc<ServerConfig>, Option<String>), String> {
    let (chain, key, generated) = match files {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .map_err(|e| format!("--cert {}: {e}", cert.display()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("--cert {}: {e}", cert.display()))?;
            if chain.is_empty() {
                return Err(format!("--cert {}: no certificate in it", cert.display()));
            }
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("--key {}: {e}", key.display()))?;
            (chain, key, None)
        }
        None => {
            let ck = rcgen::generate_simple_self_signed(names)
                .map_err(|e| format!("making a self-signed certificate: {e}"))?;
            let pem = ck.cert.pem();
            let key = PrivateKeyDer::try_from(ck.key_pair.serialize_der())
                .map_err(|e| format!("the generated key: {e}"))?;
            (vec![ck.cert.der().clone()], key, Some(pem))
        }
    };
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("the certificate and key: {e}"))?;
    config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()];
    Ok((Arc::new(config), generated))
}

/// How the client trusts the server.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Certificates in a PEM file (a CA, or the server's own self-signed one).
    CaFile(std::path::PathBuf),
    /// No verification (--insecure): for test servers with throwaway certificates.
    Insecure,
}

/// The client's TLS configuration; `alpn` lists the protocols it offers.
pub fn client_config(trust: &Trust, alpn: Vec<Vec<u8>>) -> Result<Arc<ClientConfig>, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let mut config = match trust {
        Trust::CaFile(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("--cacert {}: {e}", path.display()))?
            {
                let cert = cert.map_err(|e| format!("--cacert {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("--cacert {}: {e}", path.display()))?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider())))
            .with_no_client_auth(),
    };
    config.alpn_protocols = alpn;
    Ok(Arc::new(config))
}

/// --insecure: accepts any certificate, but still checks the handshake's signatures with
/// the provider's algorithms (so the handshake costs what a verified one does, less the
/// chain check).
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
