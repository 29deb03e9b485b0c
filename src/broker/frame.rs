//! Length-prefixed framing (CONTRACT §4): a 4-byte big-endian length, then that many bytes.
//!
//! The decoder is incremental and never trusts the prefix: it buffers at most `max_frame` bytes
//! of a body, and a longer frame is skipped as it streams in, without being buffered, then
//! reported once as [`Frame::TooLarge`]. It never closes anything itself: the caller decides.

/// One decoded unit of input.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete body within the cap.
    Body(Vec<u8>),
    /// A body longer than the cap was skipped entirely.
    TooLarge { len: u32 },
}

enum State {
    Header { buf: [u8; 4], have: usize },
    Body { len: usize },
    Skip { len: u32, left: u64 },
}

pub struct Decoder {
    state: State,
    body: Vec<u8>,
    max_frame: usize,
}

impl Decoder {
    pub fn new(max_frame: usize) -> Self {
        Self {
            state: State::Header {
                buf: [0; 4],
                have: 0,
            },
            body: Vec::new(),
            max_frame,
        }
    }

    /// True when no partial frame is pending (a clean point for the peer to hang up).
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Header { have: 0, .. })
    }

    /// Consumes `input`, appending every completed frame to `out`.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<Frame>) {
        while !input.is_empty() {
            match &mut self.state {
                State::Header { buf, have } => {
                    let n = (4 - *have).min(input.len());
                    buf[*have..*have + n].copy_from_slice(&input[..n]);
                    *have += n;
                    input = &input[n..];
                    if *have == 4 {
                        let len = u32::from_be_bytes(*buf);
                        self.start_frame(len, out);
                    }
                }
                State::Body { len } => {
                    let want = *len - self.body.len();
                    let n = want.min(input.len());
                    self.body.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if self.body.len() == *len {
                        out.push(Frame::Body(std::mem::take(&mut self.body)));
                        self.state = State::Header {
                            buf: [0; 4],
                            have: 0,
                        };
                    }
                }
                State::Skip { len, left } => {
                    let n = (*left).min(input.len() as u64);
                    *left -= n;
                    input = &input[n as usize..];
                    if *left == 0 {
                        out.push(Frame::TooLarge { len: *len });
                        self.state = State::Header {
                            buf: [0; 4],
                            have: 0,
                        };
                    }
                }
            }
        }
    }

    fn start_frame(&mut self, len: u32, out: &mut Vec<Frame>) {
        let size = len as usize;
        if size > self.max_frame {
            self.state = State::Skip {
                len,
                left: u64::from(len),
            };
        } else if size == 0 {
            out.push(Frame::Body(Vec::new()));
            self.state = State::Header {
                buf: [0; 4],
                have: 0,
            };
        } else {
            // Grow with the data actually received, not with what the prefix promises.
            self.body = Vec::with_capacity(size.min(64 * 1024));
            self.state = State::Body { len: size };
        }
    }
}

/// Appends one frame (prefix + body) to `out`.
pub fn encode_into(body: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(body.len()).expect("frame bodies are capped far below 4 GiB");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        encode_into(body, &mut v);
        v
    }

    #[test]
    fn frames_split_over_single_bytes_decode() {
        let mut bytes = frame(b"{\"a\":1}");
        bytes.extend(frame(b"[]"));
        let mut d = Decoder::new(16);
        let mut out = Vec::new();
        for b in &bytes {
            d.feed(std::slice::from_ref(b), &mut out);
        }
        assert_eq!(
            out,
            vec![
                Frame::Body(b"{\"a\":1}".to_vec()),
                Frame::Body(b"[]".to_vec())
            ]
        );
        assert!(d.is_idle());
    }

    #[test]
    fn oversized_frames_are_skipped_then_reported_once() {
        let mut bytes = frame(&[b'x'; 40]);
        bytes.extend(frame(b"ok"));
        let mut d = Decoder::new(16);
        let mut out = Vec::new();
        d.feed(&bytes[..10], &mut out);
        assert!(out.is_empty());
        d.feed(&bytes[10..], &mut out);
        assert_eq!(
            out,
            vec![Frame::TooLarge { len: 40 }, Frame::Body(b"ok".to_vec())]
        );
    }

    #[test]
    fn a_huge_prefix_allocates_nothing_up_front() {
        let mut d = Decoder::new(1 << 20);
        let mut out = Vec::new();
        d.feed(&u32::MAX.to_be_bytes(), &mut out);
        d.feed(&[0u8; 1000], &mut out);
        assert!(out.is_empty());
        assert_eq!(d.body.capacity(), 0);
        assert!(!d.is_idle());
    }

    #[test]
    fn zero_length_frames_are_empty_bodies() {
        let mut d = Decoder::new(16);
        let mut out = Vec::new();
        d.feed(&frame(b""), &mut out);
        assert_eq!(out, vec![Frame::Body(Vec::new())]);
    }
}
