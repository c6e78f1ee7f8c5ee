//! TX timestamps: what the kernel reports (`cmsg`), and how reports are matched to the
//! writes that caused them (`ledger`).

pub mod cmsg;
pub mod departures;
pub mod ledger;
pub mod sampler;
pub mod tap;

pub use cmsg::{parse_errqueue_control, ErrqueueMessage, RawReport};
pub use ledger::{IssuedWrite, Stamp, StampState, TimedWrite, WriteLedger, WriteRecord};

/// Which point of a byte's life a report marks (`ee_info`, include/uapi/linux/errqueue.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxKind {
    /// SCM_TSTAMP_SND (0): the driver handed the skb to the device (`skb_tx_timestamp`).
    Snd,
    /// SCM_TSTAMP_SCHED (1): the skb entered the qdisc layer, i.e. left the socket.
    Sched,
    /// SCM_TSTAMP_ACK (2): the peer acknowledged the byte (cumulative ACK).
    Ack,
}

impl TxKind {
    pub const ALL: [TxKind; 3] = [TxKind::Sched, TxKind::Snd, TxKind::Ack];

    pub fn from_ee_info(info: u32) -> Option<TxKind> {
        match info {
            0 => Some(TxKind::Snd),
            1 => Some(TxKind::Sched),
            2 => Some(TxKind::Ack),
            _ => None,
        }
    }

    /// Index into per-kind arrays.
    pub fn index(self) -> usize {
        match self {
            TxKind::Sched => 0,
            TxKind::Snd => 1,
            TxKind::Ack => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TxKind::Sched => "sched",
            TxKind::Snd => "snd",
            TxKind::Ack => "ack",
        }
    }
}
