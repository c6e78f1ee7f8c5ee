//! Host:port parsing for `--connect` and `--listen`.

use std::net::{SocketAddr, ToSocketAddrs};

/// sbm-sink's default port: clear of iperf 2 (5001) and iperf3 (5201).
pub const DEFAULT_PORT: u16 = 5301;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AddrError {
    /// A usage error: the text cannot be an address.
    #[error("invalid address '{0}': the port must be a number from 0 to 65535")]
    BadPort(String),
    #[error("cannot resolve '{0}': {1}")]
    Resolve(String, String),
    #[error("'{0}' resolves to no address")]
    NoAddress(String),
}

impl AddrError {
    /// Bad input (exit status 2) rather than a name the system could not resolve (1).
    pub fn is_usage(&self) -> bool {
        matches!(self, AddrError::BadPort(_))
    }
}

/// What can be checked without asking a resolver: a port that cannot be one.
pub fn check_syntax(spec: &str) -> Result<(), AddrError> {
    if let Some((host, port)) = spec.rsplit_once(':') {
        let bracketed_or_plain = !host.contains(':') || host.ends_with(']');
        if bracketed_or_plain
            && !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u16>().is_err()
        {
            return Err(AddrError::BadPort(spec.into()));
        }
    }
    Ok(())
}

/// Resolves `HOST:PORT`, `[V6]:PORT`, `HOST` or `V6` (default port) to one address.
pub fn resolve(spec: &str) -> Result<SocketAddr, AddrError> {
    resolve_with_port(spec, DEFAULT_PORT)
}

/// Whether the text names a port (`HOST:PORT`, `[V6]:PORT`, `IP:PORT`); a bare `HOST`,
/// `IP` or `V6` does not.
pub fn has_port(spec: &str) -> bool {
    if spec.parse::<SocketAddr>().is_ok() {
        return true;
    }
    if spec
        .trim_matches(|c| c == '[' || c == ']')
        .parse::<std::net::IpAddr>()
        .is_ok()
    {
        return false;
    }
    spec.rsplit_once(':')
        .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// [`resolve`] with `port` for text that names none (iperf's `-p`).
pub fn resolve_with_port(spec: &str, port: u16) -> Result<SocketAddr, AddrError> {
    if let Ok(sa) = spec.parse::<SocketAddr>() {
        return Ok(sa);
    }
    if let Ok(ip) = spec
        .trim_matches(|c| c == '[' || c == ']')
        .parse::<std::net::IpAddr>()
    {
        return Ok(SocketAddr::new(ip, port));
    }
    check_syntax(spec)?;
    let with_port = if has_port(spec) {
        spec.to_string()
    } else {
        format!("{spec}:{port}")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| AddrError::Resolve(spec.into(), e.to_string()))?
        .next()
        .ok_or_else(|| AddrError::NoAddress(spec.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(
            resolve("198.18.0.2:9000").unwrap(),
            "198.18.0.2:9000".parse().unwrap()
        );
        assert_eq!(
            resolve("198.18.0.2").unwrap(),
            "198.18.0.2:5301".parse().unwrap()
        );
        assert_eq!(resolve("[::1]:7").unwrap(), "[::1]:7".parse().unwrap());
        assert_eq!(resolve("::1").unwrap(), "[::1]:5301".parse().unwrap());
        assert_eq!(resolve("localhost:9").unwrap().port(), 9);
        assert_eq!(resolve_with_port("localhost", 9).unwrap().port(), 9);
        assert_eq!(
            resolve_with_port("[::1]", 9).unwrap(),
            "[::1]:9".parse().unwrap()
        );
        assert_eq!(resolve_with_port("127.0.0.1:7", 9).unwrap().port(), 7);
        assert_eq!(
            resolve("1.2.3.4:99999"),
            Err(AddrError::BadPort("1.2.3.4:99999".into()))
        );
        assert!(resolve("[::1]:70000").unwrap_err().is_usage());
        assert!(!resolve("no-such-host.invalid:9").unwrap_err().is_usage());
    }

    #[test]
    fn which_texts_name_a_port() {
        for (spec, named) in [
            ("198.18.0.2:9000", true),
            ("[2001:2::1]:80", true),
            ("host.example:80", true),
            ("198.18.0.2", false),
            ("2001:2::1", false),
            ("[2001:2::1]", false),
            ("host.example", false),
            ("host.example:", false),
        ] {
            assert_eq!(has_port(spec), named, "{spec}");
        }
    }
}
