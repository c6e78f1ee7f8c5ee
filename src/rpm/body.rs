//! The bodies the test moves: an endless (or sized) run of zeros sent from one static
//! buffer without copying, and a counter of what a received body delivered.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// The size of each data frame handed to hyper: big enough to keep per-frame cost low, small
/// enough that hyper's write buffer and HTTP/2 flow control see several per window.
const CHUNK: usize = 64 * 1024;
static ZEROS: [u8; CHUNK] = [0; CHUNK];

/// `len` bytes of zeros (None: endless), counting what hyper has taken into `taken`.
#[derive(Debug)]
pub struct Zeros {
    remaining: Option<u64>,
    taken: Arc<AtomicU64>,
}

impl Zeros {
    pub fn new(len: Option<u64>, taken: Arc<AtomicU64>) -> Zeros {
        Zeros {
            remaining: len,
            taken,
        }
    }
}

impl Body for Zeros {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let n = match self.remaining {
            Some(0) => return Poll::Ready(None),
            Some(r) => r.min(CHUNK as u64) as usize,
            None => CHUNK,
        };
        if let Some(r) = self.remaining.as_mut() {
            *r -= n as u64;
        }
        self.taken.fetch_add(n as u64, Ordering::Relaxed);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&ZEROS[..n])))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(r) => SizeHint::with_exact(r),
            None => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn a_sized_body_yields_exactly_its_length_and_counts_it() {
        let taken = Arc::new(AtomicU64::new(0));
        let body = Zeros::new(Some(150_000), taken.clone());
        assert_eq!(body.size_hint().exact(), Some(150_000));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let all = rt.block_on(body.collect()).unwrap().to_bytes();
        assert_eq!(all.len(), 150_000);
        assert!(all.iter().all(|b| *b == 0));
        assert_eq!(taken.load(Ordering::Relaxed), 150_000);
    }
}
