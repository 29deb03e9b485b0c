//! The frame decoder fed a byte stream in arbitrary chunks, checked against a whole-stream
//! reference decoder: the same frames in the same order, and idle exactly when no partial frame
//! is pending, however the stream is cut.

use arbitrary::{Arbitrary, Unstructured};
use cyberos::broker::dispatch::MAX_REQUEST;
use cyberos::broker::frame::{self, Decoder, Frame};

/// A piece of the stream: well-formed frames make completed frames likely; raw bytes and bare
/// prefixes make everything else possible.
#[derive(Debug, Arbitrary)]
enum Piece {
    Frame(Vec<u8>),
    Raw(Vec<u8>),
    Prefix(u32),
}

#[derive(Debug, Arbitrary)]
struct Input {
    /// The cap: small so that both kept and skipped frames are common; `None` is the broker's.
    max_frame: Option<u8>,
    /// Chunk lengths, cycled (0 feeds an empty slice).
    cuts: Vec<u8>,
    pieces: Vec<Piece>,
}

/// Decodes the whole stream at once: the frames, and whether a partial frame is left over.
fn reference(stream: &[u8], max_frame: usize) -> (Vec<Frame>, bool) {
    let mut frames = Vec::new();
    let mut rest = stream;
    loop {
        if rest.is_empty() {
            return (frames, false);
        }
        if rest.len() < 4 {
            return (frames, true);
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let body = &rest[4..];
        if body.len() < len as usize {
            return (frames, true);
        }
        frames.push(if len as usize > max_frame {
            Frame::TooLarge { len }
        } else {
            Frame::Body(body[..len as usize].to_vec())
        });
        rest = &body[len as usize..];
    }
}

pub fn run(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let max_frame = input.max_frame.map_or(MAX_REQUEST, usize::from);
    let mut stream = Vec::new();
    for piece in &input.pieces {
        match piece {
            Piece::Frame(body) => frame::encode_into(body, &mut stream),
            Piece::Raw(bytes) => stream.extend_from_slice(bytes),
            Piece::Prefix(len) => stream.extend_from_slice(&len.to_be_bytes()),
        }
    }
    let (expected, pending) = reference(&stream, max_frame);

    let mut decoder = Decoder::new(max_frame);
    let mut got = Vec::new();
    let mut rest = &stream[..];
    let mut cuts = input.cuts.iter().cycle();
    while !rest.is_empty() {
        let n = match cuts.next() {
            Some(0) => {
                // A frame completes only when its last byte arrives: an empty read yields none.
                let before = got.len();
                decoder.feed(&[], &mut got);
                assert_eq!(got.len(), before, "an empty chunk produced a frame");
                1
            }
            Some(&n) => usize::from(n).min(rest.len()),
            None => rest.len(),
        };
        decoder.feed(&rest[..n], &mut got);
        rest = &rest[n..];
    }
    assert_eq!(
        got, expected,
        "decoded frames differ (max_frame {max_frame})"
    );
    assert_eq!(decoder.is_idle(), !pending, "idle state differs");

    // Every kept body survives a round trip through the encoder.
    for body in got.iter().filter_map(|f| match f {
        Frame::Body(b) => Some(b),
        Frame::TooLarge { .. } => None,
    }) {
        let mut encoded = Vec::new();
        frame::encode_into(body, &mut encoded);
        let mut again = Vec::new();
        let mut fresh = Decoder::new(max_frame);
        fresh.feed(&encoded, &mut again);
        assert_eq!(again, [Frame::Body(body.clone())]);
        assert!(fresh.is_idle());
    }
}
