//! Socket options by number, `TCP_INFO` and the `SIOCOUTQNSD` ioctl.

use std::os::fd::{AsRawFd, BorrowedFd};

use super::SysError;
use crate::tcpinfo::{BbrInfo, TcpInfo};

fn optname(level: i32, name: i32) -> String {
    format!("level={level}, optname={name}")
}

/// `setsockopt(fd, level, name, &value, sizeof(int))`.
pub fn set_int(fd: BorrowedFd<'_>, level: i32, name: i32, value: i32) -> Result<(), SysError> {
    // SAFETY: the pointer and length describe `value`, a live c_int on our stack; the
    // kernel only reads from it during the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(SysError::last(
            "setsockopt",
            format!("{}, value={value}", optname(level, name)),
        ))
    }
}

/// `getsockopt(fd, level, name)` for an int-sized option.
pub fn get_int(fd: BorrowedFd<'_>, level: i32, name: i32) -> Result<i32, SysError> {
    let mut value: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals; the kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut i32).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(SysError::last("getsockopt", optname(level, name)))
    }
}

/// `setsockopt` with a string value, e.g. `TCP_CONGESTION`.
pub fn set_string(fd: BorrowedFd<'_>, level: i32, name: i32, value: &str) -> Result<(), SysError> {
    // SAFETY: pointer and length describe the bytes of `value`, alive for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(SysError::last(
            "setsockopt",
            format!("{}, value={value:?}", optname(level, name)),
        ))
    }
}

/// `getsockopt` into `buf`; returns the length the kernel wrote.
pub fn get_bytes(
    fd: BorrowedFd<'_>,
    level: i32,
    name: i32,
    buf: &mut [u8],
) -> Result<usize, SysError> {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is a live, writable slice of `len` bytes; the kernel copies at most
    // `len` bytes into it and stores the count it copied in `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(SysError::last("getsockopt", optname(level, name)));
    }
    Ok((len as usize).min(buf.len()))
}

/// `getsockopt` with a NUL-padded string value, e.g. `TCP_CONGESTION`.
pub fn get_string(fd: BorrowedFd<'_>, level: i32, name: i32) -> Result<String, SysError> {
    let mut buf = [0u8; 64];
    let len = get_bytes(fd, level, name, &mut buf)?;
    let bytes = &buf[..len];
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// `getsockopt(TCP_INFO)`, parsed by the length the kernel returned.
pub fn tcp_info(fd: BorrowedFd<'_>) -> Result<TcpInfo, SysError> {
    let mut buf = [0u8; 512];
    let len = get_bytes(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut buf).map_err(|e| SysError {
        what: "TCP_INFO".into(),
        ..e
    })?;
    TcpInfo::parse(&buf[..len]).map_err(|e| SysError {
        call: "getsockopt",
        what: "TCP_INFO".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })
}

/// `getsockopt(TCP_CC_INFO)` read as BBR's `struct tcp_bbr_info`: None when the kernel
/// answered with something shorter (another congestion control's struct, or nothing).
pub fn bbr_info(fd: BorrowedFd<'_>) -> Result<Option<BbrInfo>, SysError> {
    let mut buf = [0u8; 64];
    let len = get_bytes(fd, libc::IPPROTO_TCP, libc::TCP_CC_INFO, &mut buf)?;
    Ok(BbrInfo::parse(&buf[..len]))
}

/// `SIOCOUTQNSD` (include/uapi/linux/sockios.h): bytes written but not yet sent.
const SIOCOUTQNSD: libc::c_ulong = 0x894B;

/// Unsent bytes in the socket (the kernel's `write_seq - snd_nxt`).
pub fn outq_notsent(fd: BorrowedFd<'_>) -> Result<u32, SysError> {
    let mut value: libc::c_int = 0;
    // SAFETY: SIOCOUTQNSD writes one int through the pointer, which points at a live local.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            SIOCOUTQNSD as _,
            &mut value as *mut libc::c_int,
        )
    };
    if rc == 0 {
        Ok(value.max(0) as u32)
    } else {
        Err(SysError::last("ioctl", "SIOCOUTQNSD"))
    }
}
