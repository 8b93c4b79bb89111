//! TLS for the HTTPS tracker: the rustls server configuration, from PEM files
//! or from a self-signed certificate made at start, and its reload.
//!
//! Only rustls' `ring` provider is used, named explicitly, so that no build
//! ever needs aws-lc.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::NoServerSessionStorage;
use rustls::{CipherSuite, ServerConfig};
use tracker_runtime::reloadable::Reloadable;

/// The TLS configuration every worker's HTTPS listeners use, replaced on
/// SIGHUP; workers pick up a new one on their next accept.
pub type SharedTlsConfig = Arc<Reloadable<ServerConfig>>;

/// The one crypto provider: ring, with the SHA-256 cipher suites first.
/// A handshake's key schedule hashes with its suite's hash: SHA-256 runs on
/// the SHA instructions of current x86 and ARM CPUs, SHA-384 does not (it was
/// a tenth of a worker's time in handshakes), and AES-128-GCM is as safe for
/// a tracker's answers. Clients pay the same difference.
pub fn provider() -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites.sort_by_key(|suite| {
        matches!(
            suite.suite(),
            CipherSuite::TLS13_AES_256_GCM_SHA384
                | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
                | CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
        )
    });
    Arc::new(provider)
}

/// A server configuration ready to serve, with what the log should say of it.
pub struct LoadedConfig {
    pub config: ServerConfig,
    /// SHA-256 of the leaf certificate, as colon-separated hex (what browsers
    /// and `openssl x509 -fingerprint -sha256` show).
    pub fingerprint: String,
}

/// The largest certificate or key file read: a chain of a few certificates
/// takes some kilobytes.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// Reads a certificate chain (leaf first) and its private key from PEM files,
/// regular files of at most 1 MiB each.
/// The key may be PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
pub fn load_pem_files(cert_file: &Path, key_file: &Path) -> Result<LoadedConfig, String> {
    let read = |path: &Path| {
        tracker_runtime::files::read_regular(path, MAX_PEM_BYTES)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let (cert_pem, key_pem) = (read(cert_file)?, read(key_file)?);
    from_pem(&cert_pem, &key_pem).map_err(|e| {
        format!(
            "TLS certificate {} and key {}: {e}",
            cert_file.display(),
            key_file.display()
        )
    })
}

/// Builds a configuration from PEM text: a certificate chain and a key.
pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<LoadedConfig, String> {
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("bad certificate PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no certificate (BEGIN CERTIFICATE) in the certificate file".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            "no private key (BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY) in the key file"
                .to_string()
        }
        e => format!("bad private key PEM: {e}"),
    })?;
    server_config(certs, key)
}

/// A certificate for `names` (DNS names or IP addresses), signed by its own
/// key, and its configuration. Clients must be told to trust it.
pub fn self_signed(names: &[String]) -> Result<(LoadedConfig, String), String> {
    let certified = rcgen::generate_simple_self_signed(names.to_vec())
        .map_err(|e| format!("cannot make a self-signed certificate: {e}"))?;
    let cert_pem = certified.cert.pem();
    let key = PrivateKeyDer::Pkcs8(certified.key_pair.serialize_der().into());
    let loaded = server_config(vec![certified.cert.der().clone()], key)?;
    Ok((loaded, cert_pem))
}

fn server_config(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<LoadedConfig, String> {
    let leaf = certs
        .first()
        .ok_or("the certificate file holds no certificate")?;
    let fingerprint = fingerprint(leaf);
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS protocol versions: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the certificate and key do not make a TLS identity: {e}"))?;
    // Resumption by stateless tickets, one ticketer for every worker: a client
    // that comes back lands on any worker, and the ticketer takes only a read
    // lock. The default session cache would be one mutex shared by all workers,
    // and useless across them.
    config.ticketer = rustls::crypto::ring::Ticketer::new()
        .map_err(|e| format!("cannot make a TLS session ticketer: {e}"))?;
    config.session_storage = Arc::new(NoServerSessionStorage {});
    // Say plainly that this is HTTP/1.1 to clients that ask (never h2).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Our order (see `provider`), not the client's, which often puts
    // AES-256-GCM with SHA-384 first.
    config.ignore_client_order = true;
    Ok(LoadedConfig {
        config,
        fingerprint,
    })
}

fn fingerprint(cert: &CertificateDer<'_>) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, cert.as_ref());
    let hex: Vec<String> = digest.as_ref().iter().map(|b| format!("{b:02X}")).collect();
    hex.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["localhost".into(), "127.0.0.1".into()]
    }

    #[test]
    fn self_signed_certificates_serve_and_parse_back() {
        let (loaded, pem) = self_signed(&names()).unwrap();
        assert_eq!(loaded.config.alpn_protocols, [b"http/1.1".to_vec()]);
        assert_eq!(loaded.fingerprint.len(), 32 * 3 - 1);
        let cert = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        assert_eq!(fingerprint(&cert), loaded.fingerprint);
    }

    #[test]
    fn reads_pkcs8_pkcs1_and_sec1_keys() {
        let ec = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(names())
            .unwrap()
            .self_signed(&ec)
            .unwrap();
        let pkcs8 = ec.serialize_pem();
        assert!(pkcs8.contains("BEGIN PRIVATE KEY"));
        from_pem(cert.pem().as_bytes(), pkcs8.as_bytes()).unwrap();
        // rcgen writes PKCS#8 only: these were made with openssl (see
        // testdata/README).
        assert!(SEC1_KEY.contains("BEGIN EC PRIVATE KEY"));
        from_pem(EC_CERT.as_bytes(), SEC1_KEY.as_bytes()).unwrap();
        assert!(PKCS1_KEY.contains("BEGIN RSA PRIVATE KEY"));
        from_pem(RSA_CERT.as_bytes(), PKCS1_KEY.as_bytes()).unwrap();
    }

    #[test]
    fn explains_what_is_wrong() {
        let (_, pem) = self_signed(&names()).unwrap();
        let err = from_pem(b"", b"").err().unwrap();
        assert!(err.contains("no certificate"), "{err}");
        let err = from_pem(pem.as_bytes(), b"").err().unwrap();
        assert!(err.contains("no private key"), "{err}");
        let other = rcgen::KeyPair::generate().unwrap().serialize_pem();
        let err = from_pem(pem.as_bytes(), other.as_bytes()).err().unwrap();
        assert!(
            err.contains("do not make"),
            "a key of another certificate: {err}"
        );
        let err = load_pem_files(Path::new("/nonexistent/c.pem"), Path::new("k.pem"))
            .err()
            .unwrap();
        assert!(err.contains("/nonexistent/c.pem"), "{err}");
    }

    const EC_CERT: &str = include_str!("../testdata/ec-cert.pem");
    const SEC1_KEY: &str = include_str!("../testdata/ec-sec1-key.pem");
    const RSA_CERT: &str = include_str!("../testdata/rsa-cert.pem");
    const PKCS1_KEY: &str = include_str!("../testdata/rsa-pkcs1-key.pem");
}
