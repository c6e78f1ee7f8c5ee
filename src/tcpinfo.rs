//! `struct tcp_info` parsed by offset from the bytes `getsockopt(TCP_INFO)` returned.
//!
//! `libc::tcp_info` lacks the newer fields and the kernel returns fewer bytes on older
//! releases, so each field is read only when the returned length covers it
//! (offsets from include/uapi/linux/tcp.h).

use crate::ne::{u32_at, u64_at};

/// The fields sbm uses. `None` means the kernel's struct was too short to hold the field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// `tcpi_state` (1 = ESTABLISHED).
    pub state: u8,
    /// `tcpi_ca_state` (0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss).
    pub ca_state: u8,
    /// `tcpi_delivery_rate_app_limited`: the latest delivery-rate sample was app-limited.
    pub delivery_rate_app_limited: bool,
    pub snd_mss: u32,
    pub unacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub pmtu: u32,
    /// Smoothed RTT, µs.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_ssthresh: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    pub total_retrans: u32,
    /// Bytes per second.
    pub pacing_rate: Option<u64>,
    pub bytes_acked: Option<u64>,
    pub bytes_received: Option<u64>,
    pub notsent_bytes: Option<u32>,
    pub min_rtt_us: Option<u32>,
    /// Latest delivery-rate sample, bytes per second.
    pub delivery_rate: Option<u64>,
    /// Cumulative time (µs) busy sending / limited by the peer's window / by the send buffer.
    pub busy_time_us: Option<u64>,
    pub rwnd_limited_us: Option<u64>,
    pub sndbuf_limited_us: Option<u64>,
    pub bytes_sent: Option<u64>,
    pub bytes_retrans: Option<u64>,
    /// tcpi_delivered: packets delivered (acked or sacked) so far.
    pub delivered: Option<u32>,
    /// The peer's advertised window, bytes.
    pub snd_wnd: Option<u32>,
}

/// The smallest struct sbm accepts: everything up to and including `tcpi_total_retrans`,
/// which every kernel since 2.6 returns.
pub const MIN_LEN: usize = 104;

/// Why the bytes could not be a tcp_info.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("tcp_info too short: {0} bytes, need at least {MIN_LEN}")]
pub struct TooShort(pub usize);

impl TcpInfo {
    /// Parses the first `bytes.len()` bytes of a `struct tcp_info`.
    pub fn parse(bytes: &[u8]) -> Result<TcpInfo, TooShort> {
        if bytes.len() < MIN_LEN {
            return Err(TooShort(bytes.len()));
        }
        let u32_req = |off| u32_at(bytes, off).expect("within MIN_LEN");
        Ok(TcpInfo {
            state: bytes[0],
            ca_state: bytes[1],
            delivery_rate_app_limited: bytes[7] & 1 != 0,
            snd_mss: u32_req(16),
            unacked: u32_req(24),
            lost: u32_req(32),
            retrans: u32_req(36),
            pmtu: u32_req(60),
            rtt_us: u32_req(68),
            rttvar_us: u32_req(72),
            snd_ssthresh: u32_req(76),
            snd_cwnd: u32_req(80),
            total_retrans: u32_req(100),
            pacing_rate: u64_at(bytes, 104),
            bytes_acked: u64_at(bytes, 120),
            bytes_received: u64_at(bytes, 128),
            notsent_bytes: u32_at(bytes, 144),
            min_rtt_us: u32_at(bytes, 148),
            delivery_rate: u64_at(bytes, 160),
            busy_time_us: u64_at(bytes, 168),
            rwnd_limited_us: u64_at(bytes, 176),
            sndbuf_limited_us: u64_at(bytes, 184),
            bytes_sent: u64_at(bytes, 200),
            bytes_retrans: u64_at(bytes, 208),
            delivered: u32_at(bytes, 192),
            snd_wnd: u32_at(bytes, 228),
        })
    }
}

/// BBR's own state from getsockopt(TCP_CC_INFO): `struct tcp_bbr_info`
/// (include/uapi/linux/inet_diag.h). Other algorithms return other structs or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BbrInfo {
    /// Max-filtered bottleneck bandwidth estimate, bytes/s.
    pub bw: u64,
    pub min_rtt_us: u32,
    /// Gains in BBR_UNIT (256 = 1.0).
    pub pacing_gain: u32,
    pub cwnd_gain: u32,
}

/// BBR's state machine (v1, net/ipv4/tcp_bbr.c), as its gains show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BbrMode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

impl BbrMode {
    pub fn name(self) -> &'static str {
        match self {
            BbrMode::Startup => "STARTUP",
            BbrMode::Drain => "DRAIN",
            BbrMode::ProbeBw => "PROBE_BW",
            BbrMode::ProbeRtt => "PROBE_RTT",
        }
    }
}

impl BbrInfo {
    pub const LEN: usize = 20;

    /// The mode, read from the gains BBR sets in each: STARTUP and DRAIN keep the high cwnd
    /// gain (2/ln 2 ≈ 2.89) with a pacing gain above or below one, PROBE_BW has a cwnd gain
    /// of 2 (pacing cycling 1.25, 0.75, 1), PROBE_RTT a cwnd gain of 1. None for gains BBRv1
    /// never sets (another BBR version).
    pub fn mode(&self) -> Option<BbrMode> {
        let (pacing, cwnd) = (self.pacing_gain, self.cwnd_gain);
        match cwnd {
            // 2.89 × 256 = 739 (bbr_high_gain).
            700..=780 if pacing > 256 => Some(BbrMode::Startup),
            700..=780 => Some(BbrMode::Drain),
            512 => Some(BbrMode::ProbeBw),
            256 => Some(BbrMode::ProbeRtt),
            _ => None,
        }
    }

    /// BBR's estimate of the path's BDP, bytes: bandwidth × min_rtt (its in-flight target
    /// at unit gain, without the quantization allowance).
    pub fn bdp_bytes(&self) -> u64 {
        self.bw.saturating_mul(u64::from(self.min_rtt_us)) / 1_000_000
    }

    pub fn parse(b: &[u8]) -> Option<BbrInfo> {
        if b.len() < Self::LEN {
            return None;
        }
        Some(BbrInfo {
            bw: u64::from(u32_at(b, 0)?) | (u64::from(u32_at(b, 4)?) << 32),
            min_rtt_us: u32_at(b, 8)?,
            pacing_gain: u32_at(b, 12)?,
            cwnd_gain: u32_at(b, 16)?,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bbr_modes_from_the_gains_bbr_sets() {
        let info = |pacing_gain, cwnd_gain| BbrInfo {
            bw: 250_000,
            min_rtt_us: 20_000,
            pacing_gain,
            cwnd_gain,
        };
        assert_eq!(info(739, 739).mode(), Some(BbrMode::Startup));
        assert_eq!(info(88, 739).mode(), Some(BbrMode::Drain));
        for pacing in [320, 192, 256] {
            assert_eq!(info(pacing, 512).mode(), Some(BbrMode::ProbeBw));
        }
        assert_eq!(info(256, 256).mode(), Some(BbrMode::ProbeRtt));
        assert_eq!(info(256, 300).mode(), None);
        assert_eq!(info(256, 512).bdp_bytes(), 5_000);
    }

    use super::*;

    /// A tcp_info laid out by hand after include/uapi/linux/tcp.h.
    fn sample(len: usize) -> Vec<u8> {
        let mut b = vec![0u8; 280];
        b[0] = 1; // ESTABLISHED
        b[1] = 3; // recovery
        b[7] = 0b0000_0101; // app_limited bit 0 set, fastopen bits above
        let put32 =
            |b: &mut Vec<u8>, off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        let put64 =
            |b: &mut Vec<u8>, off: usize, v: u64| b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        put32(&mut b, 16, 1448);
        put32(&mut b, 68, 172_000);
        put32(&mut b, 80, 42);
        put32(&mut b, 100, 7);
        put64(&mut b, 104, 250_000);
        put64(&mut b, 120, 123_456_789);
        put32(&mut b, 144, 16_384);
        put32(&mut b, 148, 171_900);
        put64(&mut b, 160, 240_000);
        put64(&mut b, 168, 1_000_000);
        put64(&mut b, 176, 2_000);
        put64(&mut b, 184, 3_000);
        put64(&mut b, 200, 200_000_000);
        put64(&mut b, 208, 1_448);
        put32(&mut b, 228, 65_535);
        b.truncate(len);
        b
    }

    #[test]
    fn full_struct() {
        let t = TcpInfo::parse(&sample(280)).unwrap();
        assert_eq!(t.state, 1);
        assert_eq!(t.ca_state, 3);
        assert!(t.delivery_rate_app_limited);
        assert_eq!(t.snd_mss, 1448);
        assert_eq!(t.rtt_us, 172_000);
        assert_eq!(t.snd_cwnd, 42);
        assert_eq!(t.total_retrans, 7);
        assert_eq!(t.pacing_rate, Some(250_000));
        assert_eq!(t.bytes_acked, Some(123_456_789));
        assert_eq!(t.notsent_bytes, Some(16_384));
        assert_eq!(t.min_rtt_us, Some(171_900));
        assert_eq!(t.delivery_rate, Some(240_000));
        assert_eq!(t.busy_time_us, Some(1_000_000));
        assert_eq!(t.rwnd_limited_us, Some(2_000));
        assert_eq!(t.sndbuf_limited_us, Some(3_000));
        assert_eq!(t.bytes_sent, Some(200_000_000));
        assert_eq!(t.bytes_retrans, Some(1_448));
        assert_eq!(t.snd_wnd, Some(65_535));
    }

    #[test]
    fn short_struct_leaves_new_fields_unknown() {
        // 6.1 returns 232 bytes: everything through snd_wnd is there.
        let t = TcpInfo::parse(&sample(232)).unwrap();
        assert_eq!(t.snd_wnd, Some(65_535));
        // A 4.x-era struct of 160 bytes has no delivery rate and no limited times.
        let t = TcpInfo::parse(&sample(160)).unwrap();
        assert_eq!(t.min_rtt_us, Some(171_900));
        assert_eq!(t.delivery_rate, None);
        assert_eq!(t.busy_time_us, None);
        assert_eq!(t.snd_wnd, None);
        // Exactly at MIN_LEN: pacing rate (offset 104) is beyond it.
        let t = TcpInfo::parse(&sample(MIN_LEN)).unwrap();
        assert_eq!(t.total_retrans, 7);
        assert_eq!(t.pacing_rate, None);
    }

    #[test]
    fn too_short_is_an_error() {
        assert_eq!(TcpInfo::parse(&sample(50)), Err(TooShort(50)));
    }

    #[test]
    fn bbr_info_with_its_64_bit_bandwidth_and_gains() {
        let mut b = vec![];
        for v in [0x0000_0010u32, 0x1, 20_123, 739, 512] {
            b.extend(v.to_ne_bytes());
        }
        let i = BbrInfo::parse(&b).unwrap();
        assert_eq!(i.bw, (1u64 << 32) | 16);
        assert_eq!(
            (i.min_rtt_us, i.pacing_gain, i.cwnd_gain),
            (20_123, 739, 512)
        );
        assert_eq!(BbrInfo::parse(&b[..16]), None);
    }
}
