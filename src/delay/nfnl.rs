//! The nfnetlink_queue wire format (include/uapi/linux/netfilter/nfnetlink_queue.h):
//! building config and verdict requests and parsing packet messages. Pure byte work, so
//! it is unit-tested against hand-laid messages.

use crate::ne::{align4, u16_at, u32_at};

/// `NFNL_SUBSYS_QUEUE`.
const SUBSYS_QUEUE: u16 = 3;
const MSG_PACKET: u16 = 0;
const MSG_VERDICT: u16 = 1;
const MSG_CONFIG: u16 = 2;
const MSG_VERDICT_BATCH: u16 = 3;

const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
pub const NLMSG_ERROR: u16 = 2;

const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_SKB_INFO: u16 = 17;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;

const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_META: u8 = 1;
/// `NFQA_CFG_F_GSO`: hand GSO packets over unsegmented.
const NFQA_CFG_F_GSO: u32 = 4;
/// `NFQA_SKB_GSO`: this packet is a GSO packet.
const NFQA_SKB_GSO: u32 = 2;

pub const NF_ACCEPT: u32 = 1;

const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;

/// A netlink request under construction: nlmsghdr + nfgenmsg + attributes.
struct Request {
    buf: Vec<u8>,
}

impl Request {
    fn new(msg: u16, flags: u16, seq: u32, queue: u16) -> Request {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len, patched in finish()
        buf.extend_from_slice(&((SUBSYS_QUEUE << 8) | msg).to_ne_bytes());
        buf.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid: the kernel
        buf.push(libc::AF_UNSPEC as u8); // nfgen_family
        buf.push(0); // NFNETLINK_V0
        buf.extend_from_slice(&queue.to_be_bytes()); // res_id
        Request { buf }
    }

    fn attr(mut self, ty: u16, payload: &[u8]) -> Request {
        let len = 4 + payload.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        self.buf.resize(align4(self.buf.len()), 0);
        self
    }

    fn finish(mut self) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

/// Binds this socket to queue `queue` (acknowledged).
pub fn bind_queue(seq: u32, queue: u16) -> Vec<u8> {
    // struct nfqnl_msg_config_cmd { __u8 command; __u8 _pad; __be16 pf; }
    Request::new(MSG_CONFIG, NLM_F_ACK, seq, queue)
        .attr(NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0])
        .finish()
}

/// Metadata-only copies (no payload), the longest queue `max_len`, GSO pass-through.
pub fn configure_queue(seq: u32, queue: u16, max_len: u32) -> Vec<u8> {
    // struct nfqnl_msg_config_params { __be32 copy_range; __u8 copy_mode; } __packed
    let mut params = 0u32.to_be_bytes().to_vec();
    params.push(NFQNL_COPY_META);
    Request::new(MSG_CONFIG, NLM_F_ACK, seq, queue)
        .attr(NFQA_CFG_PARAMS, &params)
        .attr(NFQA_CFG_QUEUE_MAXLEN, &max_len.to_be_bytes())
        .attr(NFQA_CFG_FLAGS, &NFQA_CFG_F_GSO.to_be_bytes())
        .attr(NFQA_CFG_MASK, &NFQA_CFG_F_GSO.to_be_bytes())
        .finish()
}

/// A verdict for one packet, or (batch) for every packet of the queue with id ≤ `id`.
pub fn verdict(seq: u32, queue: u16, id: u32, verdict: u32, batch: bool) -> Vec<u8> {
    // struct nfqnl_msg_verdict_hdr { __be32 verdict; __be32 id; }
    let mut hdr = verdict.to_be_bytes().to_vec();
    hdr.extend_from_slice(&id.to_be_bytes());
    let msg = if batch {
        MSG_VERDICT_BATCH
    } else {
        MSG_VERDICT
    };
    Request::new(msg, 0, seq, queue)
        .attr(NFQA_VERDICT_HDR, &hdr)
        .finish()
}

/// One message the kernel sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming {
    Packet {
        queue: u16,
        id: u32,
        gso: bool,
    },
    /// NLMSG_ERROR: errno 0 is an acknowledgement.
    Ack {
        seq: u32,
        errno: i32,
    },
    Other {
        msg_type: u16,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed netlink message at byte {0}")]
pub struct Malformed(pub usize);

/// Parses every netlink message in one datagram, calling `each` for each.
pub fn parse(datagram: &[u8], mut each: impl FnMut(Incoming)) -> Result<(), Malformed> {
    let mut off = 0;
    while off + NLMSG_HDRLEN <= datagram.len() {
        let len = u32_at(datagram, off).ok_or(Malformed(off))? as usize;
        if len < NLMSG_HDRLEN || off + len > datagram.len() {
            return Err(Malformed(off));
        }
        let msg = &datagram[off..off + len];
        let ty = u16_at(msg, 4).ok_or(Malformed(off))?;
        let seq = u32_at(msg, 8).ok_or(Malformed(off))?;
        each(match ty {
            NLMSG_ERROR if len >= NLMSG_HDRLEN + 4 => Incoming::Ack {
                seq,
                errno: -(u32_at(msg, NLMSG_HDRLEN).ok_or(Malformed(off))? as i32),
            },
            t if t == (SUBSYS_QUEUE << 8) | MSG_PACKET => {
                parse_packet(msg).ok_or(Malformed(off))?
            }
            t => Incoming::Other { msg_type: t },
        });
        off += align4(len);
    }
    Ok(())
}

fn parse_packet(msg: &[u8]) -> Option<Incoming> {
    if msg.len() < NLMSG_HDRLEN + NFGENMSG_LEN {
        return None;
    }
    let queue = u16::from_be_bytes([msg[NLMSG_HDRLEN + 2], msg[NLMSG_HDRLEN + 3]]);
    let mut id = None;
    let mut gso = false;
    let mut off = NLMSG_HDRLEN + NFGENMSG_LEN;
    while off + 4 <= msg.len() {
        let alen = u16_at(msg, off)? as usize;
        let aty = u16_at(msg, off + 2)? & 0x3fff; // strip NLA_F_NESTED / NET_BYTEORDER
        if alen < 4 || off + alen > msg.len() {
            return None;
        }
        let payload = &msg[off + 4..off + alen];
        match aty {
            // struct nfqnl_msg_packet_hdr { __be32 packet_id; __be16 hw_protocol; __u8 hook; }
            NFQA_PACKET_HDR if payload.len() >= 4 => {
                id = Some(u32::from_be_bytes(
                    payload[..4].try_into().expect("4 bytes"),
                ));
            }
            NFQA_SKB_INFO if payload.len() >= 4 => {
                gso = u32::from_be_bytes(payload[..4].try_into().expect("4 bytes")) & NFQA_SKB_GSO
                    != 0;
            }
            _ => {}
        }
        off += align4(alen);
    }
    Some(Incoming::Packet {
        queue,
        id: id?,
        gso,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet message as the kernel lays it out (nfqnl_build_packet_message).
    fn kernel_packet(queue: u16, id: u32, skb_info: Option<u32>) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&(3u16 << 8).to_ne_bytes()); // NFQNL_MSG_PACKET
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&[2, 0]); // AF_INET, V0
        m.extend_from_slice(&queue.to_be_bytes());
        // NFQA_PACKET_HDR: 4 + 7 bytes, padded to 12
        m.extend_from_slice(&11u16.to_ne_bytes());
        m.extend_from_slice(&1u16.to_ne_bytes());
        m.extend_from_slice(&id.to_be_bytes());
        m.extend_from_slice(&0x0800u16.to_be_bytes());
        m.push(2); // NF_INET_FORWARD
        m.push(0);
        // NFQA_IFINDEX_INDEV (5) with NET_BYTEORDER flag set
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&(5u16 | 1 << 14).to_ne_bytes());
        m.extend_from_slice(&7u32.to_be_bytes());
        if let Some(info) = skb_info {
            m.extend_from_slice(&8u16.to_ne_bytes());
            m.extend_from_slice(&17u16.to_ne_bytes());
            m.extend_from_slice(&info.to_be_bytes());
        }
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    fn collect(d: &[u8]) -> Result<Vec<Incoming>, Malformed> {
        let mut v = vec![];
        parse(d, |m| v.push(m))?;
        Ok(v)
    }

    #[test]
    fn packets_in_one_datagram() {
        let mut d = kernel_packet(1, 41, None);
        d.extend(kernel_packet(1, 42, Some(NFQA_SKB_GSO)));
        assert_eq!(
            collect(&d).unwrap(),
            [
                Incoming::Packet {
                    queue: 1,
                    id: 41,
                    gso: false
                },
                Incoming::Packet {
                    queue: 1,
                    id: 42,
                    gso: true
                }
            ]
        );
    }

    #[test]
    fn acks_and_errors() {
        let mut m = Vec::new();
        m.extend_from_slice(&36u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&9u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&(-(libc::EPERM)).to_ne_bytes());
        m.extend_from_slice(&[0u8; 16]);
        assert_eq!(
            collect(&m).unwrap(),
            [Incoming::Ack {
                seq: 9,
                errno: libc::EPERM
            }]
        );
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let d = kernel_packet(0, 1, None);
        for cut in [17, 20, 25, d.len() - 1] {
            let mut t = d[..cut].to_vec();
            // keep the header's length claiming the full message
            t.resize(cut, 0);
            assert!(
                collect(&t).is_err() || collect(&t).unwrap().is_empty(),
                "cut {cut}"
            );
        }
        let mut bad = d.clone();
        bad[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(collect(&bad).is_err());
    }

    #[test]
    fn requests_are_laid_out_as_the_kernel_expects() {
        let b = bind_queue(5, 258);
        assert_eq!(u32_at(&b, 0).unwrap() as usize, b.len());
        assert_eq!(u16_at(&b, 4).unwrap(), (3 << 8) | 2);
        assert_eq!(u16_at(&b, 6).unwrap(), NLM_F_REQUEST | NLM_F_ACK);
        assert_eq!(u32_at(&b, 8).unwrap(), 5);
        assert_eq!(&b[18..20], &258u16.to_be_bytes());
        assert_eq!(&b[20..24], &[8, 0, 1, 0]); // nla_len 8, NFQA_CFG_CMD
        assert_eq!(b[24], NFQNL_CFG_CMD_BIND);

        let c = configure_queue(6, 0, 65_536);
        assert_eq!(c.len() % 4, 0);
        assert_eq!(u16_at(&c, 20).unwrap(), 9); // params: 4 + 5 bytes
        assert_eq!(&c[24..29], &[0, 0, 0, 0, NFQNL_COPY_META]);

        let v = verdict(7, 1, 0x01020304, NF_ACCEPT, true);
        assert_eq!(u16_at(&v, 4).unwrap(), (3 << 8) | 3);
        assert_eq!(&v[24..32], &[0, 0, 0, 1, 1, 2, 3, 4]);
    }
}
