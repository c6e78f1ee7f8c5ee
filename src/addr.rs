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
    #[error("'{0}' resolves to no {1} address")]
    NoAddressOf(String, &'static str),
    /// A usage error: an address literal of the family not asked for.
    #[error("'{0}' is not an address of the family asked for: {1}")]
    WrongFamily(String, &'static str),
}

impl AddrError {
    /// Bad input (exit status 2) rather than a name the system could not resolve (1).
    pub fn is_usage(&self) -> bool {
        matches!(self, AddrError::BadPort(_) | AddrError::WrongFamily(..))
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
    resolve_in(spec, port, Family::Any)
}

/// Which addresses a name may resolve to (iperf's `-4` and `-6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    #[default]
    Any,
    V4,
    V6,
}

impl Family {
    fn admits(self, a: &SocketAddr) -> bool {
        match self {
            Family::Any => true,
            Family::V4 => a.is_ipv4(),
            Family::V6 => a.is_ipv6(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Family::Any => "any address",
            Family::V4 => "IPv4 (-4)",
            Family::V6 => "IPv6 (-6)",
        }
    }
}

/// [`resolve_with_port`], taking the first address of `family`. An address literal of the
/// other family is a usage error; a name with none of that family resolves to nothing.
pub fn resolve_in(spec: &str, port: u16, family: Family) -> Result<SocketAddr, AddrError> {
    let literal = spec.parse::<SocketAddr>().ok().or_else(|| {
        spec.trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .ok()
            .map(|ip| SocketAddr::new(ip, port))
    });
    if let Some(sa) = literal {
        return if family.admits(&sa) {
            Ok(sa)
        } else {
            Err(AddrError::WrongFamily(spec.into(), family.name()))
        };
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
        .find(|a| family.admits(a))
        .ok_or_else(|| match family {
            Family::Any => AddrError::NoAddress(spec.into()),
            f => AddrError::NoAddressOf(spec.into(), f.name()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_filters_names_and_refuses_literals_of_the_other() {
        assert!(resolve_in("localhost", 9, Family::V4).unwrap().is_ipv4());
        assert_eq!(
            resolve_in("::1", 9, Family::V6).unwrap(),
            "[::1]:9".parse().unwrap()
        );
        let wrong = resolve_in("127.0.0.1", 9, Family::V6).unwrap_err();
        assert!(
            wrong.is_usage() && wrong.to_string().contains("IPv6 (-6)"),
            "{wrong}"
        );
        assert!(resolve_in("[::1]:9", 9, Family::V4).unwrap_err().is_usage());
        assert_eq!(
            resolve_in("198.18.0.2:7", 9, Family::Any).unwrap(),
            "198.18.0.2:7".parse().unwrap()
        );
    }

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
