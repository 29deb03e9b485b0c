//! The private conversation between the broker, the supervisor (`cyberos __sandbox-child`) and the
//! init: length-prefixed JSON frames over socketpairs. The policy travels here, never through argv
//! or the environment, and the program never holds either socket.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use super::Spec;
use super::report::{Layer, LayerReport, LayerState};

/// Largest frame either side accepts: a Spec with a long argument list fits easily.
const MAX_FRAME: usize = 8 * 1024 * 1024;

/// The single byte that lets the init start the program.
pub(crate) const START: u8 = b'S';

/// Broker → supervisor: what to build.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Request {
    pub spec: Spec,
    /// Layers the operator switched off (`$CYBEROS_SANDBOX_DISABLE`).
    pub disable: Vec<Layer>,
}

/// Supervisor → broker, once the sandbox is built (or failed to be).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Ready {
    Built {
        report: LayerReport,
        /// Host pid of the init (pid 1 of the sandbox's pid namespace when there is one).
        init_pid: i32,
        /// `(st_dev, st_ino)` of the sandbox's pid namespace, when it has its own.
        pid_ns: Option<(u64, u64)>,
    },
    Failed {
        error: String,
    },
}

/// Init → supervisor.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum FromInit {
    /// The init's layers are in place; it waits for [`START`].
    Built {
        layers: Vec<(Layer, LayerState)>,
    },
    Failed {
        error: String,
    },
    /// The program ended with this raw wait status.
    Exited {
        status: i32,
    },
}

pub(crate) fn write_frame<W: Write, T: Serialize>(mut w: W, value: &T) -> io::Result<()> {
    let body = serde_json::to_vec(value).map_err(io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(|_| io::Error::other("frame too large"))?;
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf)?;
    w.flush()
}

/// Reads one frame; `Ok(None)` when the peer closed before sending anything.
pub(crate) fn read_frame<R: Read, T: for<'de> Deserialize<'de>>(mut r: R) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::other(format!(
            "frame of {len} bytes is larger than {MAX_FRAME}"
        )));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(io::Error::other)
}

/// Reads exactly one byte; `Ok(None)` on end of file.
pub(crate) fn read_byte<R: Read>(mut r: R) -> io::Result<Option<u8>> {
    let mut b = [0u8; 1];
    loop {
        match r.read(&mut b) {
            Ok(0) => return Ok(None),
            Ok(_) => return Ok(Some(b[0])),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_eof_is_none() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &FromInit::Exited { status: 9 }).unwrap();
        let mut r = &buf[..];
        let got: Option<FromInit> = read_frame(&mut r).unwrap();
        assert!(matches!(got, Some(FromInit::Exited { status: 9 })));
        let eof: Option<FromInit> = read_frame(&mut r).unwrap();
        assert!(eof.is_none());
    }

    #[test]
    fn oversized_and_truncated_frames_are_errors() {
        let huge = (MAX_FRAME as u32 + 1).to_be_bytes();
        assert!(read_frame::<_, FromInit>(&huge[..]).is_err());
        let short = [0u8, 0, 0, 10, b'{'];
        assert!(read_frame::<_, FromInit>(&short[..]).is_err());
    }
}
