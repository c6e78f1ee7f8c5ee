//! What a sink connection carries: a plain byte stream (discarded), or a trip-timed one
//! (sbm-send --trip-times), recognised by the header magic at its first byte. For a
//! trip-timed stream the sink measures each message's one-way latency: the time the read
//! holding its last byte returned, minus the write time in its header.
//!
//! A plain or not yet recognised stream costs a few bytes: the latency histograms (tens of
//! KiB each) and the parser exist only once a stream has shown the trip-times magic, so
//! that idle or plain connections stay cheap (sbm-sink may hold thousands).

use crate::report::schema::SinkMessageRow;
use crate::stats::{LatencyHist, Percentiles};
use crate::wire::{self, Event, Parser, WireError};

/// At most this many per-message read times are kept for the reply to the sender.
pub const MAX_REPLY_MESSAGES: usize = 2_000_000;

enum Mode {
    /// Fewer than 4 bytes seen: not yet known. (bytes, how many of them are filled)
    Undecided([u8; 4], usize),
    Plain,
    Trip(Box<TripStream>),
}

/// The state of a trip-timed stream: its parser and what it measured.
pub struct TripStream {
    parser: Parser,
    pub peer_boot_id: Option<String>,
    pub interval_latency: LatencyHist,
    pub latency: LatencyHist,
    /// Read time − content time (version-2 headers; = latency for bulk data).
    pub content_age: LatencyHist,
    pub messages: u64,
    /// (seq, read_ns) for the reply.
    pub read_times: Vec<(u64, u64)>,
    pub negative_latencies: u64,
    events: Vec<Event>,
}

impl TripStream {
    fn new() -> TripStream {
        TripStream {
            parser: Parser::new(),
            peer_boot_id: None,
            interval_latency: LatencyHist::new(),
            latency: LatencyHist::new(),
            content_age: LatencyHist::new(),
            messages: 0,
            read_times: vec![],
            negative_latencies: 0,
            events: vec![],
        }
    }

    fn feed(
        &mut self,
        conn: u64,
        data: &[u8],
        read_ns: u64,
        rows: &mut Vec<SinkMessageRow>,
    ) -> Result<(), WireError> {
        self.parser.feed(data, read_ns, &mut self.events)?;
        for ev in self.events.drain(..) {
            match ev {
                Event::Hello { boot_id } => self.peer_boot_id = Some(boot_id),
                Event::Message {
                    seq,
                    write_ns,
                    content_ns,
                    len,
                    read_ns,
                } => {
                    let latency_us = (read_ns as i64 - write_ns as i64) / 1_000;
                    let content_age_us = (read_ns as i64 - content_ns as i64) / 1_000;
                    self.content_age.record(content_age_us.max(0) as u64);
                    if latency_us < 0 {
                        self.negative_latencies += 1;
                    }
                    let us = latency_us.max(0) as u64;
                    self.interval_latency.record(us);
                    self.latency.record(us);
                    self.messages += 1;
                    if self.read_times.len() < MAX_REPLY_MESSAGES {
                        self.read_times.push((seq, read_ns));
                    }
                    rows.push(SinkMessageRow {
                        conn,
                        seq,
                        bytes: len,
                        write_ns,
                        read_ns,
                        latency_us,
                        content_age_us,
                    });
                }
            }
        }
        Ok(())
    }
}

pub struct StreamState {
    mode: Mode,
    /// Refuse plain streams (`sbm-sink --expect-trip-times`).
    require_trip: bool,
}

impl StreamState {
    pub fn new(require_trip: bool) -> StreamState {
        StreamState {
            mode: Mode::Undecided([0; 4], 0),
            require_trip,
        }
    }

    pub fn is_trip(&self) -> bool {
        matches!(self.mode, Mode::Trip(_))
    }

    /// Known to be a plain stream: nothing in its bytes is read.
    pub fn is_plain(&self) -> bool {
        matches!(self.mode, Mode::Plain)
    }

    /// The trip-timed stream's measurements, once the stream is known to be one.
    pub fn trip(&self) -> Option<&TripStream> {
        match &self.mode {
            Mode::Trip(t) => Some(t),
            _ => None,
        }
    }

    /// The sender's boot id from its hello (trip-timed streams).
    pub fn peer_boot_id(&self) -> Option<&str> {
        self.trip().and_then(|t| t.peer_boot_id.as_deref())
    }

    /// Latencies of the current interval (empty for plain streams).
    pub fn interval_latency(&self) -> Percentiles {
        self.trip()
            .map_or_else(Percentiles::default, |t| t.interval_latency.percentiles())
    }

    /// Latencies of the whole connection (empty for plain streams).
    pub fn latency(&self) -> Percentiles {
        self.trip()
            .map_or_else(Percentiles::default, |t| t.latency.percentiles())
    }

    /// Content ages of the whole connection (empty for plain streams).
    pub fn content_age(&self) -> Percentiles {
        self.trip()
            .map_or_else(Percentiles::default, |t| t.content_age.percentiles())
    }

    /// Starts a new interval's latency distribution.
    pub fn reset_interval(&mut self) {
        if let Mode::Trip(t) = &mut self.mode {
            t.interval_latency.reset();
        }
    }

    /// Takes the bytes of one read at `read_ns`; finished messages go to `rows`.
    pub fn feed(
        &mut self,
        conn: u64,
        data: &[u8],
        read_ns: u64,
        rows: &mut Vec<SinkMessageRow>,
    ) -> Result<(), WireError> {
        if let Mode::Undecided(head, filled) = &mut self.mode {
            let take = (4 - *filled).min(data.len());
            head[*filled..*filled + take].copy_from_slice(&data[..take]);
            *filled += take;
            if *filled < 4 {
                return Ok(());
            }
            let head = *head;
            if head == wire::MAGIC {
                let mut t = Box::new(TripStream::new());
                t.feed(conn, &head, read_ns, rows)?;
                self.mode = Mode::Trip(t);
            } else if self.require_trip {
                return Err(WireError::Magic(head, 0));
            } else {
                self.mode = Mode::Plain;
            }
            return self.feed(conn, &data[take..], read_ns, rows);
        }
        match &mut self.mode {
            Mode::Trip(t) => t.feed(conn, data, read_ns, rows),
            _ => Ok(()),
        }
    }

    /// The stream ended: a trip-timed stream must end on a message boundary.
    pub fn finish(&mut self, read_ns: u64) -> Result<(), WireError> {
        match &mut self.mode {
            Mode::Trip(t) => t.parser.finish(read_ns, &mut t.events),
            Mode::Undecided(_, n) if *n > 0 && self.require_trip => {
                Err(WireError::Truncated("a header"))
            }
            Mode::Undecided(h, n) if *n >= 2 && h[..*n] == wire::MAGIC[..*n] => {
                Err(WireError::Truncated("a header"))
            }
            _ => Ok(()),
        }
    }
}

/// Same boot id: the sender's write times and our read times share a clock.
pub fn clocks_shared(peer_boot_id: Option<&str>, own_boot_id: Option<&str>) -> Option<bool> {
    match (peer_boot_id, own_boot_id) {
        (Some(p), Some(o)) => Some(p == o),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trip_stream() -> Vec<u8> {
        let mut s = wire::hello("id-1", 0);
        let mut m = vec![0u8; 100];
        wire::Header::data(1, 1_000_000, 100).encode(&mut m);
        s.extend(m);
        s
    }

    #[test]
    fn trip_streams_are_recognised_and_timed() {
        let mut st = StreamState::new(false);
        let mut rows = vec![];
        let s = trip_stream();
        st.feed(1, &s[..2], 5_000_000, &mut rows).unwrap();
        st.feed(1, &s[2..], 9_000_000, &mut rows).unwrap();
        st.finish(10_000_000).unwrap();
        assert!(st.is_trip());
        assert_eq!(clocks_shared(st.peer_boot_id(), Some("id-1")), Some(true));
        assert_eq!(
            rows,
            [SinkMessageRow {
                conn: 1,
                seq: 1,
                bytes: 100,
                write_ns: 1_000_000,
                read_ns: 9_000_000,
                latency_us: 8_000,
                content_age_us: 8_000
            }]
        );
        assert_eq!(st.trip().unwrap().read_times, [(1, 9_000_000)]);
    }

    #[test]
    fn plain_streams_pass_unless_trip_times_are_required() {
        let plain: Vec<u8> = (0..100u8).collect();
        let mut st = StreamState::new(false);
        st.feed(1, &plain, 0, &mut vec![]).unwrap();
        st.finish(0).unwrap();
        assert!(!st.is_trip());
        let mut strict = StreamState::new(true);
        assert!(matches!(
            strict.feed(1, &plain, 0, &mut vec![]),
            Err(WireError::Magic(..))
        ));
    }

    #[test]
    fn a_truncated_header_is_an_error() {
        let mut st = StreamState::new(false);
        st.feed(1, b"SBMt\x00", 0, &mut vec![]).unwrap();
        assert_eq!(st.finish(0), Err(WireError::Truncated("a header")));
        let mut st = StreamState::new(false);
        st.feed(1, b"SB", 0, &mut vec![]).unwrap();
        assert_eq!(st.finish(0), Err(WireError::Truncated("a header")));
    }
}
