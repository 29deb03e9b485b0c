//! JSON-RPC 2.0 message handling (CONTRACT §4): parsing a frame body into requests, batches and
//! notifications, and building responses. It knows the protocol, not the methods.

use serde_json::{Map, Value, json};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;

/// A well-formed request. `id` is `None` for a notification (no response at all).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: Option<Value>,
    pub method: String,
    pub params: Value,
}

/// One item of a frame: a request to run, or an invalid one already answered.
#[derive(Debug, PartialEq)]
pub enum Item {
    Call(Request),
    Invalid(Value),
}

/// What a frame body turned out to be.
#[derive(Debug, PartialEq)]
pub enum Message {
    Single(Item),
    Batch(Vec<Item>),
    /// The whole body is unusable: answer this error and nothing else.
    Error(Value),
}

/// An error object: code, message and optional data.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>, data: Option<Value>) -> Self {
        Self {
            code,
            message: message.into(),
            data,
        }
    }

    pub fn invalid_params(detail: impl Into<String>) -> Self {
        let detail = detail.into();
        Self::new(
            INVALID_PARAMS,
            "Invalid params",
            Some(json!({"reason": "invalid_args", "kind": "invalid_args", "detail": detail})),
        )
    }

    fn to_json(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("code".into(), json!(self.code));
        obj.insert("message".into(), json!(self.message));
        if let Some(data) = &self.data {
            obj.insert("data".into(), data.clone());
        }
        Value::Object(obj)
    }
}

/// A success response.
pub fn result_response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response.
pub fn error_response(id: &Value, error: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()})
}

/// Parses a frame body.
pub fn parse(body: &[u8]) -> Message {
    // serde_json refuses nesting deeper than 128 levels with an error, so hostile depth is a
    // parse error rather than a stack overflow.
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return Message::Error(error_response(
                &Value::Null,
                &RpcError::new(
                    PARSE_ERROR,
                    "Parse error",
                    Some(json!({"detail": e.to_string()})),
                ),
            ));
        }
    };
    match value {
        Value::Array(items) if items.is_empty() => Message::Error(error_response(
            &Value::Null,
            &RpcError::new(
                INVALID_REQUEST,
                "Invalid Request",
                Some(json!({"detail": "empty batch"})),
            ),
        )),
        Value::Array(items) => Message::Batch(items.into_iter().map(item).collect()),
        other => Message::Single(item(other)),
    }
}

fn item(value: Value) -> Item {
    let Value::Object(mut obj) = value else {
        return Item::Invalid(invalid(&Value::Null, "request must be an object"));
    };
    let id = obj.remove("id");
    let echo = match &id {
        Some(v @ (Value::String(_) | Value::Number(_) | Value::Null)) => v.clone(),
        _ => Value::Null,
    };
    if matches!(&id, Some(v) if !matches!(v, Value::String(_) | Value::Number(_) | Value::Null)) {
        return Item::Invalid(invalid(&echo, "id must be a string, a number or null"));
    }
    if obj.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return Item::Invalid(invalid(&echo, "jsonrpc must be \"2.0\""));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        _ => return Item::Invalid(invalid(&echo, "method must be a string")),
    };
    let params = match obj.remove("params") {
        None => Value::Object(Map::new()),
        Some(p @ (Value::Object(_) | Value::Array(_))) => p,
        Some(_) => return Item::Invalid(invalid(&echo, "params must be an object or an array")),
    };
    Item::Call(Request { id, method, params })
}

fn invalid(id: &Value, detail: &str) -> Value {
    error_response(
        id,
        &RpcError::new(
            INVALID_REQUEST,
            "Invalid Request",
            Some(json!({"detail": detail})),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_specification_examples_parse_as_the_specification_says() {
        assert!(
            matches!(parse(br#"{"jsonrpc":"2.0","method":"foobar,"params":"bar","baz]"#), Message::Error(e) if e["error"]["code"] == -32700)
        );
        assert!(
            matches!(parse(br#"[]"#), Message::Error(e) if e["error"]["code"] == -32600 && e["id"].is_null())
        );
        match parse(br#"[1,2]"#) {
            Message::Batch(items) => {
                assert_eq!(items.len(), 2);
                assert!(
                    items
                        .iter()
                        .all(|i| matches!(i, Item::Invalid(e) if e["error"]["code"] == -32600))
                );
            }
            other => panic!("{other:?}"),
        }
        match parse(br#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#) {
            Message::Single(Item::Invalid(e)) => assert!(e["id"].is_null()),
            other => panic!("{other:?}"),
        }
        match parse(br#"{"jsonrpc":"2.0","method":"tool.list","id":"x"}"#) {
            Message::Single(Item::Call(r)) => assert_eq!(r.id, Some(json!("x"))),
            other => panic!("{other:?}"),
        }
        match parse(br#"{"jsonrpc":"2.0","method":"tool.list"}"#) {
            Message::Single(Item::Call(r)) => assert_eq!(r.id, None),
            other => panic!("{other:?}"),
        }
        match parse(br#"{"jsonrpc":"2.0","method":"m","id":{"a":1}}"#) {
            Message::Single(Item::Invalid(e)) => assert!(e["id"].is_null()),
            other => panic!("{other:?}"),
        }
        match parse(br#"{"jsonrpc":"1.0","method":"m","id":7}"#) {
            Message::Single(Item::Invalid(e)) => assert_eq!(e["id"], 7),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn deep_nesting_is_a_parse_error() {
        let deep = "[".repeat(100_000);
        assert!(
            matches!(parse(deep.as_bytes()), Message::Error(e) if e["error"]["code"] == -32700)
        );
    }
}
