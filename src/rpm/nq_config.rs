//! The responsiveness test's configuration object, served at `/.well-known/nq`
//! (draft-ietf-ippm-responsiveness-09, "Well-Known URI For Test Server Discovery"): read
//! and checked as the draft requires (version 1; the three URLs present once each, http or
//! https, one host; `test_endpoint` at most once; unknown names ignored), and written.

use serde::Serialize;

/// The path of the configuration object on a test server.
pub const WELL_KNOWN_PATH: &str = "/.well-known/nq";
/// sbm-rpm-server's paths for the three test URLs.
pub const LARGE_PATH: &str = "/large";
pub const SMALL_PATH: &str = "/small";
pub const UPLOAD_PATH: &str = "/upload";

/// A checked configuration object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NqConfig {
    pub version: u64,
    pub urls: NqUrls,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_endpoint: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NqUrls {
    pub large_download_url: String,
    pub small_download_url: String,
    pub upload_url: String,
}

/// A URL taken apart as far as the test needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestUrl {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, at least "/".
    pub path: String,
}

impl TestUrl {
    /// `host:port` as an HTTP authority (IPv6 literals in brackets).
    pub fn authority(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    pub fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }

    pub fn to_url(&self) -> String {
        format!("{}://{}{}", self.scheme(), self.authority(), self.path)
    }
}

/// Parses an `http://` or `https://` URL: host (a name, an IPv4 address or a bracketed
/// IPv6 address), optional port, path.
pub fn parse_url(url: &str) -> Result<TestUrl, String> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!("'{url}' is not an http:// or https:// URL"));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.contains('@') {
        return Err(format!(
            "'{url}': user information in a test URL is not supported"
        ));
    }
    let default_port = if tls { 443 } else { 80 };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let end = v6
            .find(']')
            .ok_or_else(|| format!("'{url}': unclosed '[' in the host"))?;
        let host = &v6[..end];
        let port = match &v6[end + 1..] {
            "" => default_port,
            p => parse_port(url, p.strip_prefix(':').unwrap_or(p))?,
        };
        (host.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), parse_port(url, p)?),
            None => (authority.to_string(), default_port),
        }
    };
    if host.is_empty() {
        return Err(format!("'{url}' has no host"));
    }
    Ok(TestUrl {
        tls,
        host,
        port,
        path: path.to_string(),
    })
}

fn parse_port(url: &str, p: &str) -> Result<u16, String> {
    p.parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("'{url}': '{p}' is not a port (1-65535)"))
}

impl NqConfig {
    /// Reads a configuration object as the draft says a client must: any violation makes
    /// the whole object invalid (the error says which).
    pub fn parse(body: &str) -> Result<NqConfig, String> {
        // Duplicate names are invalid, and serde_json keeps the last of a duplicate
        // silently: count them on the raw object first.
        let top: serde_json::Value =
            serde_json::from_str(body).map_err(|e| format!("not a JSON object: {e}"))?;
        let obj = top
            .as_object()
            .ok_or_else(|| "not a JSON object".to_string())?;
        for name in ["version", "urls", "test_endpoint"] {
            if count_key(body, name) > 1 {
                return Err(format!("\"{name}\" appears more than once"));
            }
        }
        let version = obj
            .get("version")
            .ok_or("no \"version\"")?
            .as_u64()
            .ok_or("\"version\" is not an integer")?;
        if version != 1 {
            return Err(format!(
                "version {version}: only version 1 of the configuration is understood"
            ));
        }
        let urls = obj
            .get("urls")
            .and_then(|u| u.as_object())
            .ok_or("no \"urls\" object")?;
        let get = |name: &str| -> Result<(String, TestUrl), String> {
            if count_key(body, name) > 1 {
                return Err(format!("\"{name}\" appears more than once"));
            }
            let s = urls
                .get(name)
                .and_then(|v| v.as_str())
                .ok_or_else(|| format!("no \"{name}\" in \"urls\""))?;
            Ok((
                s.to_string(),
                parse_url(s).map_err(|e| format!("{name}: {e}"))?,
            ))
        };
        let (large, large_u) = get("large_download_url")?;
        let (small, small_u) = get("small_download_url")?;
        let (upload, upload_u) = get("upload_url")?;
        if large_u.host != small_u.host || large_u.host != upload_u.host {
            return Err(format!(
                "the three URLs name different hosts ({}, {}, {}); the draft requires one",
                large_u.host, small_u.host, upload_u.host
            ));
        }
        let test_endpoint = match obj.get("test_endpoint") {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .ok_or("\"test_endpoint\" is not a string")?
                    .to_string(),
            ),
        };
        Ok(NqConfig {
            version,
            urls: NqUrls {
                large_download_url: large,
                small_download_url: small,
                upload_url: upload,
            },
            test_endpoint,
        })
    }

    /// The configuration a server at `base` (scheme://authority) serves for its own paths.
    pub fn for_base(base: &str, test_endpoint: Option<String>) -> NqConfig {
        NqConfig {
            version: 1,
            urls: NqUrls {
                large_download_url: format!("{base}{}", LARGE_PATH),
                small_download_url: format!("{base}{}", SMALL_PATH),
                upload_url: format!("{base}{}", UPLOAD_PATH),
            },
            test_endpoint,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the configuration serializes")
    }
}

/// How often `"name"` appears as an object key in `body` (a JSON string followed by ':').
fn count_key(body: &str, name: &str) -> usize {
    let quoted = format!("\"{name}\"");
    body.match_indices(&quoted)
        .filter(|(i, _)| body[i + quoted.len()..].trim_start().starts_with(':'))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{
      "version": 1,
      "urls": {
        "large_download_url": "https://nq.example:8443/large",
        "small_download_url": "https://nq.example:8443/small",
        "upload_url": "https://nq.example:8443/upload",
        "future_url": "https://elsewhere/x"
      },
      "test_endpoint": "198.18.0.2",
      "unknown": 3
    }"#;

    #[test]
    fn a_valid_object_is_read_and_unknown_names_are_ignored() {
        let c = NqConfig::parse(GOOD).unwrap();
        assert_eq!(c.version, 1);
        assert_eq!(c.urls.small_download_url, "https://nq.example:8443/small");
        assert_eq!(c.test_endpoint.as_deref(), Some("198.18.0.2"));
        let u = parse_url(&c.urls.large_download_url).unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port, u.path.as_str()),
            (true, "nq.example", 8443, "/large")
        );
    }

    #[test]
    fn each_rule_of_the_draft_invalidates_the_whole_object() {
        let cases = [
            (
                GOOD.replace("\"version\": 1", "\"version\": 2"),
                "version 2",
            ),
            (GOOD.replace("\"version\": 1,", ""), "no \"version\""),
            (
                GOOD.replace(
                    "https://nq.example:8443/upload",
                    "https://other:8443/upload",
                ),
                "different hosts",
            ),
            (
                GOOD.replace("\"unknown\": 3", "\"test_endpoint\": \"x\""),
                "more than once",
            ),
            (
                GOOD.replace("\"future_url\"", "\"upload_url\""),
                "more than once",
            ),
            (
                GOOD.replace("\"upload_url\": \"https://nq.example:8443/upload\",", ""),
                "no \"upload_url\"",
            ),
            (
                GOOD.replace("https://nq.example:8443/small", "ftp://nq.example/small"),
                "not an http",
            ),
        ];
        for (body, needle) in cases {
            let e = NqConfig::parse(&body).unwrap_err();
            assert!(e.contains(needle), "{needle}: {e}");
        }
    }

    #[test]
    fn urls_parse_with_default_ports_and_ipv6_literals() {
        let u = parse_url("http://[2001:2::1]:8080/small").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("2001:2::1", 8080));
        assert_eq!(u.authority(), "[2001:2::1]:8080");
        let u = parse_url("https://198.18.0.2").unwrap();
        assert_eq!((u.port, u.path.as_str()), (443, "/"));
        assert_eq!(u.to_url(), "https://198.18.0.2/");
        assert!(parse_url("http://h:0/").is_err());
        assert!(parse_url("http://:80/").is_err());
    }

    #[test]
    fn what_a_server_writes_a_client_reads() {
        let c = NqConfig::for_base("http://198.18.0.2:8080", None);
        assert_eq!(NqConfig::parse(&c.to_json()).unwrap(), c);
    }
}
