//! The optional per-message header of `sbm-send --trip-times`, and the sink's parser.
//!
//! Wire format (all integers big-endian), 32 bytes at the start of every message:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `SBMt` |
//! | 4 | 2 | version (2; 1 is read too) |
//! | 6 | 2 | kind: 0 = hello, 1 = data |
//! | 8 | 8 | sequence (hello 0, data from 1, +1 per message) |
//! | 16 | 8 | write time, CLOCK_REALTIME ns (when the message's first write started) |
//! | 24 | 4 | message length in bytes, header included (hello: 32 + 36) |
//! | 28 | 4 | content age at the first write, µs (version 2; 0 in version 1) |
//!
//! The content age says how old the message's content was when its first write started
//! (an application-limited source generated it earlier; a bulk source writes it at once:
//! 0), so the sink knows the content time, write time − age, and measures the age of the
//! content when its last byte arrives.
//!
//! A hello carries the sender's boot id (36 ASCII bytes) after the header and comes first.
//! Without `--trip-times` the stream carries no header bytes at all; the sink recognises a
//! trip-timed stream by the magic at its first byte.

pub const MAGIC: [u8; 4] = *b"SBMt";
pub const VERSION: u16 = 2;
/// The oldest header version the parser reads (no content age).
pub const OLDEST_VERSION: u16 = 1;
pub const HEADER_LEN: usize = 32;
pub const BOOT_ID_LEN: usize = 36;
pub const HELLO_LEN: usize = HEADER_LEN + BOOT_ID_LEN;
const KIND_HELLO: u16 = 0;
const KIND_DATA: u16 = 1;
/// Longest message the sink accepts (sbm-send's -l is at most 1 GiB).
pub const MAX_MESSAGE: u32 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: u16,
    pub seq: u64,
    pub write_ns: u64,
    pub len: u32,
    /// How old the content was at `write_ns`, µs.
    pub content_age_us: u32,
}

impl Header {
    pub fn data(seq: u64, write_ns: u64, len: u32) -> Header {
        Header {
            kind: KIND_DATA,
            seq,
            write_ns,
            len,
            content_age_us: 0,
        }
    }

    /// The same header for content generated at `content_ns` (≤ the write time; an age
    /// beyond u32 µs, 71 minutes, saturates).
    pub fn with_content_time(mut self, content_ns: u64) -> Header {
        let age_us = self.write_ns.saturating_sub(content_ns) / 1_000;
        self.content_age_us = age_us.min(u64::from(u32::MAX)) as u32;
        self
    }

    /// When the content was generated.
    pub fn content_ns(&self) -> u64 {
        self.write_ns
            .saturating_sub(u64::from(self.content_age_us) * 1_000)
    }

    pub fn encode(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&VERSION.to_be_bytes());
        out[6..8].copy_from_slice(&self.kind.to_be_bytes());
        out[8..16].copy_from_slice(&self.seq.to_be_bytes());
        out[16..24].copy_from_slice(&self.write_ns.to_be_bytes());
        out[24..28].copy_from_slice(&self.len.to_be_bytes());
        out[28..32].copy_from_slice(&self.content_age_us.to_be_bytes());
    }
}

/// The hello: header + the sender's boot id.
pub fn hello(boot_id: &str, write_ns: u64) -> Vec<u8> {
    let mut b = vec![0u8; HELLO_LEN];
    Header {
        kind: KIND_HELLO,
        seq: 0,
        write_ns,
        len: HELLO_LEN as u32,
        content_age_us: 0,
    }
    .encode(&mut b);
    let id = boot_id.as_bytes();
    let n = id.len().min(BOOT_ID_LEN);
    b[HEADER_LEN..HEADER_LEN + n].copy_from_slice(&id[..n]);
    b
}

/// What the parser found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Hello {
        boot_id: String,
    },
    /// A data message whose last byte was read at `read_ns`.
    Message {
        seq: u64,
        write_ns: u64,
        /// When its content was generated (= write_ns for bulk data and version 1).
        content_ns: u64,
        len: u32,
        read_ns: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("bad magic {0:02x?} at stream offset {1}: not an sbm trip-times header")]
    Magic([u8; 4], u64),
    #[error("unknown header version {0}")]
    Version(u16),
    #[error("unknown message kind {0}")]
    Kind(u16),
    #[error("message {got} out of sequence (expected {expected})")]
    Sequence { got: u64, expected: u64 },
    #[error("message length {0} is impossible (header {HEADER_LEN} B, at most {MAX_MESSAGE} B)")]
    Length(u32),
    #[error("the hello must come first")]
    HelloNotFirst,
    #[error("stream ended inside {0}")]
    Truncated(&'static str),
}

/// Incremental parser of one trip-timed stream.
#[derive(Debug)]
pub struct Parser {
    header: [u8; HELLO_LEN],
    have: usize,
    /// Bytes of the current message body still to come.
    remaining: u64,
    current: Option<Header>,
    expected_seq: u64,
    offset: u64,
}

impl Default for Parser {
    fn default() -> Self {
        Parser {
            header: [0; HELLO_LEN],
            have: 0,
            remaining: 0,
            current: None,
            expected_seq: 0,
            offset: 0,
        }
    }
}

impl Parser {
    pub fn new() -> Parser {
        Parser::default()
    }

    /// Feeds bytes read at `read_ns`; events go to `out`. An error ends the stream.
    pub fn feed(
        &mut self,
        mut data: &[u8],
        read_ns: u64,
        out: &mut Vec<Event>,
    ) -> Result<(), WireError> {
        while !data.is_empty() {
            if let Some(h) = self.current {
                let take = (self.remaining as usize).min(data.len());
                self.remaining -= take as u64;
                self.offset += take as u64;
                data = &data[take..];
                if self.remaining == 0 {
                    self.current = None;
                    out.push(Event::Message {
                        seq: h.seq,
                        write_ns: h.write_ns,
                        content_ns: h.content_ns(),
                        len: h.len,
                        read_ns,
                    });
                }
                continue;
            }
            // Collect a header (and, for a hello, the boot id).
            let want = if self.have >= HEADER_LEN && self.kind() == KIND_HELLO {
                HELLO_LEN
            } else {
                HEADER_LEN
            };
            let take = (want - self.have).min(data.len());
            self.header[self.have..self.have + take].copy_from_slice(&data[..take]);
            self.have += take;
            data = &data[take..];
            if self.have == HEADER_LEN {
                self.check_header()?;
            }
            if self.have == HEADER_LEN && self.kind() == KIND_DATA {
                let h = self.start_data()?;
                if self.remaining == 0 {
                    out.push(Event::Message {
                        seq: h.seq,
                        write_ns: h.write_ns,
                        content_ns: h.content_ns(),
                        len: h.len,
                        read_ns,
                    });
                } else {
                    self.current = Some(h);
                }
            } else if self.have == HELLO_LEN {
                let id = String::from_utf8_lossy(&self.header[HEADER_LEN..HELLO_LEN])
                    .trim_end_matches('\0')
                    .to_string();
                out.push(Event::Hello { boot_id: id });
                self.offset += HELLO_LEN as u64;
                self.have = 0;
                self.expected_seq = 1;
            }
        }
        Ok(())
    }

    fn kind(&self) -> u16 {
        u16::from_be_bytes([self.header[6], self.header[7]])
    }

    fn check_header(&self) -> Result<(), WireError> {
        let h = &self.header;
        if h[0..4] != MAGIC {
            return Err(WireError::Magic([h[0], h[1], h[2], h[3]], self.offset));
        }
        let version = u16::from_be_bytes([h[4], h[5]]);
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(WireError::Version(version));
        }
        match self.kind() {
            KIND_HELLO if self.expected_seq == 0 && self.offset == 0 => Ok(()),
            KIND_HELLO => Err(WireError::HelloNotFirst),
            KIND_DATA if self.expected_seq == 0 => Err(WireError::HelloNotFirst),
            KIND_DATA => Ok(()),
            k => Err(WireError::Kind(k)),
        }
    }

    fn start_data(&mut self) -> Result<Header, WireError> {
        let h = &self.header;
        let seq = u64::from_be_bytes(h[8..16].try_into().expect("8 bytes"));
        let write_ns = u64::from_be_bytes(h[16..24].try_into().expect("8 bytes"));
        let len = u32::from_be_bytes(h[24..28].try_into().expect("4 bytes"));
        // Version 1 wrote 0 here (reserved).
        let content_age_us = u32::from_be_bytes(h[28..32].try_into().expect("4 bytes"));
        if (len as usize) < HEADER_LEN || len > MAX_MESSAGE {
            return Err(WireError::Length(len));
        }
        if seq != self.expected_seq {
            return Err(WireError::Sequence {
                got: seq,
                expected: self.expected_seq,
            });
        }
        self.expected_seq += 1;
        self.offset += HEADER_LEN as u64;
        self.have = 0;
        self.remaining = u64::from(len) - HEADER_LEN as u64;
        Ok(Header {
            content_age_us,
            ..Header::data(seq, write_ns, len)
        })
    }

    /// The stream ended (EOF): an error if it ended inside a header or a message.
    pub fn finish(&mut self, read_ns: u64, out: &mut Vec<Event>) -> Result<(), WireError> {
        let _ = (read_ns, out);
        if self.current.take().is_some() {
            return Err(WireError::Truncated("a message"));
        }
        if self.have > 0 {
            return Err(WireError::Truncated("a header"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(seq: u64, write_ns: u64, len: u32) -> Vec<u8> {
        let mut b = vec![0xAB; len as usize];
        Header::data(seq, write_ns, len).encode(&mut b);
        b
    }

    fn stream() -> Vec<u8> {
        let mut s = hello("0b7c5b2e-7d59-4ac3-9f3b-4c0e6a7f1d11", 1);
        s.extend(message(1, 100, 1000));
        s.extend(message(2, 200, 64));
        s.extend(message(3, 300, 5000));
        s
    }

    #[test]
    fn messages_are_found_across_any_read_boundaries() {
        let s = stream();
        for chunk in [1usize, 7, 31, 32, 33, 999, 100_000] {
            let mut p = Parser::new();
            let mut ev = vec![];
            for (i, c) in s.chunks(chunk).enumerate() {
                p.feed(c, i as u64, &mut ev).unwrap();
            }
            p.finish(9_999, &mut ev).unwrap();
            let seqs: Vec<u64> = ev
                .iter()
                .filter_map(|e| match e {
                    Event::Message { seq, .. } => Some(*seq),
                    _ => None,
                })
                .collect();
            assert_eq!(seqs, [1, 2, 3], "chunk {chunk}");
            assert_eq!(
                ev[0],
                Event::Hello {
                    boot_id: "0b7c5b2e-7d59-4ac3-9f3b-4c0e6a7f1d11".into()
                }
            );
            // The read time is that of the read holding the message's last byte.
            let end_of_1 = HELLO_LEN + 1000;
            if let Event::Message {
                read_ns,
                write_ns,
                len,
                ..
            } = ev[1]
            {
                assert_eq!((write_ns, len), (100, 1000));
                assert_eq!(read_ns, ((end_of_1 - 1) / chunk) as u64, "chunk {chunk}");
            }
        }
    }

    #[test]
    fn bad_streams_are_errors_not_panics() {
        let mut ev = vec![];
        // Garbage.
        assert!(matches!(
            Parser::new().feed(b"GET / HTTP/1.1\r\n\r\n....................", 0, &mut ev),
            Err(WireError::Magic(..))
        ));
        // Wrong version.
        let mut s = stream();
        s[4..6].copy_from_slice(&9u16.to_be_bytes());
        assert_eq!(
            Parser::new().feed(&s, 0, &mut ev),
            Err(WireError::Version(9))
        );
        // Data before the hello.
        assert_eq!(
            Parser::new().feed(&message(1, 1, 64), 0, &mut ev),
            Err(WireError::HelloNotFirst)
        );
        // Out of sequence.
        let mut s = hello("x", 0);
        s.extend(message(1, 1, 64));
        s.extend(message(3, 1, 64));
        assert_eq!(
            Parser::new().feed(&s, 0, &mut ev),
            Err(WireError::Sequence {
                got: 3,
                expected: 2
            })
        );
        // Impossible length.
        let mut s = hello("x", 0);
        s.extend(message(1, 1, 64));
        s[HELLO_LEN + 24..HELLO_LEN + 28].copy_from_slice(&5u32.to_be_bytes());
        assert_eq!(
            Parser::new().feed(&s, 0, &mut ev),
            Err(WireError::Length(5))
        );
        // Truncated header and message.
        let s = stream();
        let mut p = Parser::new();
        p.feed(&s[..HELLO_LEN + 10], 0, &mut ev).unwrap();
        assert_eq!(p.finish(0, &mut ev), Err(WireError::Truncated("a header")));
        let mut p = Parser::new();
        p.feed(&s[..HELLO_LEN + 500], 0, &mut ev).unwrap();
        assert_eq!(p.finish(0, &mut ev), Err(WireError::Truncated("a message")));
    }

    #[test]
    fn content_time_travels_in_version_2_and_version_1_still_reads() {
        let ms = 1_000_000u64;
        let mut s = hello("x", 0);
        let mut m = vec![0u8; 100];
        // Generated at 5 ms, first written at 45 ms: 40 ms old.
        let h = Header::data(1, 45 * ms, 100).with_content_time(5 * ms);
        assert_eq!(h.content_age_us, 40_000);
        h.encode(&mut m);
        s.extend(&m);
        // A version-1 message: reserved 0, content time = write time.
        let mut m1 = message(2, 50 * ms, 64);
        m1[4..6].copy_from_slice(&1u16.to_be_bytes());
        s.extend(&m1);
        let mut ev = vec![];
        Parser::new().feed(&s, 99 * ms, &mut ev).unwrap();
        let content: Vec<u64> = ev
            .iter()
            .filter_map(|e| match e {
                Event::Message { content_ns, .. } => Some(*content_ns),
                _ => None,
            })
            .collect();
        assert_eq!(content, [5 * ms, 50 * ms]);
        // Content "from the future" is age 0, not an underflow.
        assert_eq!(
            Header::data(1, 10, 32).with_content_time(20).content_age_us,
            0
        );
    }

    #[test]
    fn header_only_messages_complete() {
        let mut s = hello("x", 0);
        s.extend(message(1, 5, HEADER_LEN as u32));
        s.extend(message(2, 6, HEADER_LEN as u32));
        let mut p = Parser::new();
        let mut ev = vec![];
        p.feed(&s, 7, &mut ev).unwrap();
        p.finish(8, &mut ev).unwrap();
        assert_eq!(
            ev.iter()
                .filter(|e| matches!(e, Event::Message { .. }))
                .count(),
            2
        );
    }
}
