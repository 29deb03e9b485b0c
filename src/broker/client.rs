//! The client side of the broker protocol, used by `cyberos tool call|list` inside a skill: one
//! blocking connection, one request frame, one response frame.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use serde_json::{Value, json};

use crate::broker::dispatch::MAX_RESPONSE;
use crate::broker::frame;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("failed to connect to the broker at {path}: {source}")]
    Connect {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("failed to talk to the broker: {0}")]
    Io(#[from] io::Error),
    #[error("the broker sent a malformed response: {0}")]
    Malformed(String),
}

pub struct Client {
    stream: UnixStream,
    next_id: u64,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Self, ClientError> {
        let stream = UnixStream::connect(path).map_err(|source| ClientError::Connect {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Self { stream, next_id: 1 })
    }

    /// Sends one request and returns the whole response object.
    pub fn request(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let body = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .map_err(|e| ClientError::Malformed(e.to_string()))?;
        let mut out = Vec::with_capacity(body.len() + 4);
        frame::encode_into(&body, &mut out);
        self.stream.write_all(&out)?;
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len)?;
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_RESPONSE {
            return Err(ClientError::Malformed(format!(
                "response of {len} bytes exceeds the cap"
            )));
        }
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body)?;
        serde_json::from_slice(&body).map_err(|e| ClientError::Malformed(e.to_string()))
    }
}
