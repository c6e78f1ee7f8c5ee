//! Host:port parsing for `--connect` and `--listen`.

use std::net::{SocketAddr, ToSocketAddrs};

/// sbm-sink's default port: clear of iperf 2 (5001) and iperf3 (5201).
pub const DEFAULT_PORT: u16 = 5301;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AddrError {
    #[error("cannot resolve '{0}': {1}")]
    Resolve(String, String),
    #[error("'{0}' resolves to no address")]
    NoAddress(String),
}

/// Resolves `HOST:PORT`, `[V6]:PORT`, `HOST` or `V6` (default port) to one address.
pub fn resolve(spec: &str) -> Result<SocketAddr, AddrError> {
    if let Ok(sa) = spec.parse::<SocketAddr>() {
        return Ok(sa);
    }
    if let Ok(ip) = spec
        .trim_matches(|c| c == '[' || c == ']')
        .parse::<std::net::IpAddr>()
    {
        return Ok(SocketAddr::new(ip, DEFAULT_PORT));
    }
    let with_port = if spec
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        spec.to_string()
    } else {
        format!("{spec}:{DEFAULT_PORT}")
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
        assert!(resolve("1.2.3.4:99999").is_err());
    }
}
