//! Other tools' peers, recognised from the first bytes they send, so that a user who points
//! iperf3 at sbm (or sbm at iperf3) is told what is on the other end instead of watching
//! zeros or a bare "connection reset".
//!
//! iperf3 (src/iperf_api.c and iperf_client_api.c of iperf 3.x) opens its control
//! connection with a 37-byte cookie, 36 characters of the alphabet `a-z2-7` and a NUL, then
//! waits for the server's one-byte state; a server answers a new control connection with
//! `PARAM_EXCHANGE` (9). sbm-sink never sends during a stream and sbm-send never before its
//! data, so each side can tell from those bytes alone. (iperf 2 interoperates with sbm-send
//! and sbm-sink as a plain byte stream and needs no recognising.)

/// iperf3's cookie: 36 characters and a NUL.
pub const IPERF3_COOKIE_LEN: usize = 37;
/// iperf3's state byte `PARAM_EXCHANGE`: the server's first byte on a control connection.
const IPERF3_PARAM_EXCHANGE: u8 = 9;

/// A peer that is not sbm's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForeignPeer {
    Iperf3Client,
    Iperf3Server,
}

impl ForeignPeer {
    /// What the peer is (a noun phrase), how it showed it, and what to run instead.
    pub fn explain(self) -> &'static str {
        match self {
            ForeignPeer::Iperf3Client => {
                "an iperf3 client (it opened with iperf3's 37-byte cookie), and sbm-sink does \
                 not speak iperf3's control protocol: measure with sbm-send -c against \
                 sbm-sink, or run iperf3 -s for iperf3"
            }
            ForeignPeer::Iperf3Server => {
                "an iperf3 server (it answered with iperf3's PARAM_EXCHANGE state), not an \
                 sbm-sink: run sbm-sink there for sbm-send, or use iperf3 -c against iperf3 -s"
            }
        }
    }
}

/// Whether a connection's first bytes (all of them so far) are an iperf3 client's cookie.
pub fn is_iperf3_cookie(first: &[u8]) -> bool {
    first.len() == IPERF3_COOKIE_LEN
        && first[IPERF3_COOKIE_LEN - 1] == 0
        && first[..IPERF3_COOKIE_LEN - 1]
            .iter()
            .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(b))
}

/// What a server sent sbm-send, which expects nothing from an sbm-sink before its own
/// half-close: iperf3's state byte alone is an iperf3 server.
pub fn server_from_first_bytes(first: &[u8]) -> Option<ForeignPeer> {
    (first == [IPERF3_PARAM_EXCHANGE]).then_some(ForeignPeer::Iperf3Server)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_iperf3_cookie_is_recognised_and_nothing_else_is() {
        let mut cookie = b"abcdefghijklmnopqrstuvwxyz234567abcd".to_vec();
        cookie.push(0);
        assert!(is_iperf3_cookie(&cookie));
        // Too short, too long, no NUL, a character outside base32's.
        assert!(!is_iperf3_cookie(&cookie[..36]));
        assert!(!is_iperf3_cookie(&[cookie.clone(), vec![0]].concat()));
        let mut no_nul = cookie.clone();
        no_nul[36] = b'a';
        assert!(!is_iperf3_cookie(&no_nul));
        let mut eight = cookie.clone();
        eight[3] = b'8';
        assert!(!is_iperf3_cookie(&eight));
        assert!(!is_iperf3_cookie(&[0u8; 37]));
    }

    #[test]
    fn only_iperf3_state_byte_alone_names_a_server() {
        assert_eq!(
            server_from_first_bytes(&[9]),
            Some(ForeignPeer::Iperf3Server)
        );
        assert_eq!(server_from_first_bytes(&[9, 0]), None);
        assert_eq!(server_from_first_bytes(b"{"), None);
        assert_eq!(server_from_first_bytes(&[]), None);
    }
}
