//! Native-endian integers at byte offsets of what the kernel hands over (tcp_info, control
//! messages, netlink messages, the patched kernel's `struct tcp_replenish_info`): one
//! reader for all of them, None past the end of the bytes.

fn bytes<const N: usize>(b: &[u8], off: usize) -> Option<[u8; N]> {
    b.get(off..off.checked_add(N)?)?.try_into().ok()
}

pub fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    bytes(b, off).map(u16::from_ne_bytes)
}

pub fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    bytes(b, off).map(u32::from_ne_bytes)
}

pub fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    bytes(b, off).map(u64::from_ne_bytes)
}

pub fn i64_at(b: &[u8], off: usize) -> Option<i64> {
    bytes(b, off).map(i64::from_ne_bytes)
}

pub fn usize_at(b: &[u8], off: usize) -> Option<usize> {
    bytes(b, off).map(usize::from_ne_bytes)
}

/// `n` rounded up to netlink's 4-byte alignment (NLMSG_ALIGN, NLA_ALIGN).
pub fn align4(n: usize) -> usize {
    (n + 3) & !3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netlink_alignment_rounds_up_to_four() {
        assert_eq!([0, 1, 3, 4, 5, 8].map(align4), [0, 4, 4, 4, 8, 8]);
    }

    #[test]
    fn reads_within_and_none_past_the_end() {
        let b: Vec<u8> = (1..=9).collect();
        assert_eq!(u16_at(&b, 0), Some(u16::from_ne_bytes([1, 2])));
        assert_eq!(u32_at(&b, 5), Some(u32::from_ne_bytes([6, 7, 8, 9])));
        assert_eq!(u32_at(&b, 6), None);
        assert_eq!(
            u64_at(&b, 1),
            Some(u64::from_ne_bytes([2, 3, 4, 5, 6, 7, 8, 9]))
        );
        assert_eq!(i64_at(&b, 2), None);
        assert_eq!(u32_at(&b, usize::MAX), None);
    }
}
