//! `cyberos tool call|list`: the client a skill runs inside its sandbox. The result JSON goes to
//! stdout; a JSON-RPC error object goes to stderr with exit 1.

use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::broker::client::Client;
use crate::cli::ToolCommand;
use crate::exit;

pub fn run(command: ToolCommand) -> anyhow::Result<u8> {
    let socket = std::env::var_os("CYBEROS_BROKER_SOCKET")
        .map(PathBuf::from)
        .ok_or_else(|| {
            exit::coded(
                exit::USAGE,
                "CYBEROS_BROKER_SOCKET is not set: `cyberos tool` runs inside a skill",
            )
        })?;
    let (method, params) = match command {
        ToolCommand::List => ("tool.list", json!({})),
        ToolCommand::Call(call) => {
            let args: Value = match call.args_json.as_deref() {
                None => json!({}),
                Some(text) => serde_json::from_str(text).map_err(|e| {
                    exit::coded(exit::USAGE, format!("ARGS_JSON is not valid JSON: {e}"))
                })?,
            };
            if !args.is_object() {
                return Err(exit::coded(exit::USAGE, "ARGS_JSON must be a JSON object"));
            }
            let mut params = json!({"tool": call.tool, "args": args});
            if let Some(tp) = std::env::var("TRACEPARENT").ok().filter(|t| !t.is_empty()) {
                params["traceparent"] = json!(tp);
            }
            ("tool.call", params)
        }
    };
    let mut client = Client::connect(&socket)?;
    let response = client
        .request(method, params)
        .context("tool request failed")?;
    if let Some(result) = response.get("result") {
        println!("{result}");
        Ok(exit::SUCCESS)
    } else {
        eprintln!("{}", response.get("error").unwrap_or(&response));
        Ok(exit::ERROR)
    }
}
