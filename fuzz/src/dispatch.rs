//! JSON-RPC end to end through the enforcer: a fuzzed frontmatter is parsed into the policy of
//! a real `Shared`, and fuzzed frames go through `jsonrpc::parse` and `dispatch::handle` with the
//! real tools and a real journal. Checked against an independent reading of the contract: which
//! frames get which response (ids echoed, notifications silent), which tools the frontmatter
//! allows, and that the journal holds exactly one denied row or one started/completed pair per
//! call that reached enforcement, numbered call-1..call-N, with an intact hash chain. Nothing
//! outside the allowed file tree and the memory root may change.
//!
//! Every absolute path in a request is confined to the fixture before it is sent, and every
//! symlink in the fixture points at least as deep as it sits, so even a broken enforcer could
//! not reach a file outside the fixture's temporary directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arbitrary::{Arbitrary, Unstructured};
use cyberos::broker::dispatch::{self, MAX_RESPONSE, Shared};
use cyberos::broker::jsonrpc;
use cyberos::journal::Journal;
use cyberos::skill::Manifest;
use cyberos::skill::manifest::{SyncClass, TenantScope};
use cyberos::tools::{self, Invocation, ToolName};
use cyberos::util::TraceContext;
use serde_json::{Map, Value, json};

use super::fixture::{self, Recycled, Snapshot};

const SKILL_ID: &str = "fuzz-skill";

/// A manifest with nothing allowed, for oracles that fill in one field.
pub fn base_manifest() -> Manifest {
    Manifest {
        id: SKILL_ID.into(),
        version: semver::Version::new(1, 0, 0),
        description: "fuzz".into(),
        allowed_memory_scopes: vec![],
        allowed_tools: vec![],
        disallowed_tools: vec![],
        effort_minutes: 1,
        min_broker_version: None,
        max_broker_version: None,
        signature: None,
        sync_class: SyncClass::Private,
        tenant_scope: TenantScope::Any,
        tags: vec![],
        extensions: BTreeMap::new(),
        allowed_files: vec![],
        allowed_domains: vec![],
    }
}

/// Tool names a request may ask for: every real one, and near misses.
const TOOL_NAMES: &[&str] = &[
    "Read",
    "Write",
    "Edit",
    "Glob",
    "Grep",
    "Bash",
    "MemoryRead",
    "MemorySearch",
    "MemoryEmit",
    "HttpFetch",
    "HttpPost",
    "read",
    "NoSuchTool",
    "",
    "Read ",
];

const MEMORY_GLOBS: &[&str] = &[
    "memories/**",
    "memories/*.md",
    "memories/link/**",
    "**",
    "notes/*",
    "{memories,notes}/**",
];

/// File globs, all below `<base>/in/files/` (the allowed tree).
const FILE_GLOBS: &[&str] = &[
    "**",
    "*.txt",
    "sub/**",
    "{a.txt,sub/*}",
    "link_out",
    "dir_out/**",
    "**/*.md",
    "dangling",
    "fifo",
];

const DOMAINS: &[&str] = &["api.example.com", "*.example.com", "127.0.0.1", "*"];

const ARG_KEYS: &[&str] = &[
    "path",
    "content",
    "create_dirs",
    "old_string",
    "new_string",
    "replace_all",
    "offset",
    "limit",
    "payload",
    "body",
    "query",
    "pattern",
    "glob",
    "case_insensitive",
    "max_results",
    "cmd",
    "url",
];

/// Names that lead somewhere interesting in the fixture.
const PATH_NAMES: &[&str] = &[
    "in",
    "files",
    "a.txt",
    "sub",
    "b.md",
    "link_out",
    "dir_out",
    "dangling",
    "link_in",
    "fifo",
    "secret.txt",
    "out",
    "x",
    "outside",
    "new.txt",
    "memories",
    "notes",
    "link",
    "a.md",
    "home",
    "memory",
];

#[derive(Debug, Arbitrary)]
enum Sel {
    Known(u8),
    Raw(String),
}

#[derive(Debug, Arbitrary)]
struct Front {
    allowed: u16,
    disallowed: u16,
    memory: Vec<Sel>,
    files: Vec<Sel>,
    domains: Vec<Sel>,
    shareable: bool,
    audit_required: bool,
}

#[derive(Debug, Arbitrary)]
enum PSeg {
    Name(u8),
    Dot,
    DotDot,
    Empty,
    Raw(String),
}

#[derive(Debug, Arbitrary)]
enum Val {
    /// An absolute path below the fixture (`<base>/in/files/` + segments).
    FilePath(Vec<PSeg>),
    /// A memory path (relative).
    MemPath(Vec<PSeg>),
    Str(String),
    Num(u64),
    Neg(i64),
    Float(f64),
    Bool(bool),
    Null,
    Obj(Vec<(String, String)>),
    Arr(Vec<String>),
}

#[derive(Debug, Arbitrary)]
enum Key {
    Known(u8),
    Raw(String),
}

#[derive(Debug, Arbitrary)]
enum Args {
    Absent,
    Null,
    NotObject(String),
    Object(Vec<(Key, Val)>),
}

#[derive(Debug, Arbitrary)]
enum Params {
    Absent,
    Call {
        tool: Sel,
        args: Args,
        traceparent: Option<String>,
        extra: Option<(String, Val)>,
    },
    Empty,
    Array(Vec<Val>),
    Scalar(Val),
}

#[derive(Debug, Arbitrary)]
enum Id {
    Absent,
    Null,
    Num(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    Obj,
}

#[derive(Debug, Arbitrary)]
enum Method {
    Call,
    List,
    Status,
    Other(String),
    NotString(u8),
}

#[derive(Debug, Arbitrary)]
struct Msg {
    id: Id,
    method: Method,
    params: Params,
    /// `"2.0"`, or something else when false.
    version_ok: bool,
    not_an_object: bool,
}

#[derive(Debug, Arbitrary)]
enum FrameIn {
    Raw(Vec<u8>),
    One(Msg),
    Batch(Vec<Msg>),
}

#[derive(Debug, Arbitrary)]
struct Input {
    front: Front,
    frames: Vec<FrameIn>,
}

/// The fixture's files and memory tree. Every symlink's target lies at least as deep below
/// `base` as the link itself (see the module doc).
pub(crate) struct Files {
    _dir: tempfile::TempDir,
    base: PathBuf,
    home: PathBuf,
    outside: PathBuf,
    before: Snapshot,
}

fn build_files() -> Files {
    let (dir, base) = fixture::tempdir("cyberos-fuzz-rpc-");
    let files = base.join("in/files");
    let outside = base.join("out/x/outside");
    let home = base.join("home");
    let s = |p: &Path| p.to_str().expect("utf-8").to_owned();
    fixture::write(&outside.join("secret.txt"), "outside\n");
    fixture::write(&outside.join("d/deep.md"), "outside\n");
    fixture::write(&files.join("a.txt"), "hello world\nhello again\n");
    fixture::write(&files.join("sub/b.md"), "# b\nhello\n");
    fixture::write(&files.join("sub/deeper/c.txt"), "c\n");
    fixture::symlink(&s(&outside.join("secret.txt")), &files.join("link_out"));
    fixture::symlink(&s(&outside), &files.join("dir_out"));
    fixture::symlink(&s(&outside.join("new.txt")), &files.join("dangling"));
    fixture::symlink("sub", &files.join("link_in"));
    let fifo = std::ffi::CString::new(s(&files.join("fifo"))).expect("no NUL");
    // SAFETY: `fifo` is a valid NUL-terminated path; mkfifo has no other preconditions.
    let rc = unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo");
    let memory = home.join("memory");
    fixture::write(&memory.join("memories/a.md"), "inside hello\n");
    fixture::write(&memory.join("notes/n.md"), "note hello\n");
    fixture::symlink(&s(&outside.join("d")), &memory.join("memories/link"));
    std::fs::create_dir_all(home.join("scratch")).expect("scratch");
    let before = fixture::snapshot(&outside);
    Files {
        _dir: dir,
        base,
        home,
        outside,
        before,
    }
}

static FILES: Recycled<Files> = Recycled::new(u32::MAX);

pub(crate) struct Audit {
    _dir: tempfile::TempDir,
    journal: Arc<Journal>,
    runs: u64,
}

fn build_audit() -> Audit {
    let (dir, path) = fixture::tempdir("cyberos-fuzz-journal-");
    let journal = Journal::open(&path).expect("journal");
    Audit {
        _dir: dir,
        journal: Arc::new(journal),
        runs: 0,
    }
}

/// One journal for many runs (each run is its own invocation id); replaced now and then so it
/// does not grow without bound.
static AUDIT: Recycled<Audit> = Recycled::new(20_000);

fn pick<'a>(list: &[&'a str], i: u8) -> &'a str {
    list[usize::from(i) % list.len()]
}

fn yaml_list(items: &[String]) -> String {
    serde_json::to_string(items).expect("strings serialise")
}

/// Tools a fuzzed frontmatter may list. Bash and the HTTP tools are left out: the fuzzer must
/// not run shell commands or reach the network. Requests still name them, to be refused.
const LOCAL_TOOLS: [ToolName; 8] = [
    ToolName::Read,
    ToolName::Write,
    ToolName::Edit,
    ToolName::Glob,
    ToolName::Grep,
    ToolName::MemoryRead,
    ToolName::MemorySearch,
    ToolName::MemoryEmit,
];

fn tool_bits(bits: u16) -> Vec<String> {
    LOCAL_TOOLS
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, t)| t.as_str().to_owned())
        .collect()
}

/// The frontmatter text the fuzzer's choices describe.
fn frontmatter(front: &Front, base: &Path) -> String {
    let files_root = format!("{}/in/files/", base.display());
    let sel = |s: &Sel, list: &[&str]| match s {
        Sel::Known(i) => pick(list, *i).to_owned(),
        Sel::Raw(r) => r.clone(),
    };
    let memory: Vec<String> = front.memory.iter().map(|s| sel(s, MEMORY_GLOBS)).collect();
    let files: Vec<String> = front
        .files
        .iter()
        .map(|s| format!("{files_root}{}", sel(s, FILE_GLOBS)))
        .collect();
    let domains: Vec<String> = front.domains.iter().map(|s| sel(s, DOMAINS)).collect();
    format!(
        "---\nid: {SKILL_ID}\nversion: 1.0.0\ndescription: fuzzed policy\n\
         allowed_memory_scopes: {}\nallowed_tools: {}\ndisallowed_tools: {}\n\
         x-allowed-files: {}\nx-allowed-domains: {}\nsync_class: {}\n---\nbody\n",
        yaml_list(&memory),
        yaml_list(&tool_bits(front.allowed)),
        yaml_list(&tool_bits(front.disallowed)),
        yaml_list(&files),
        yaml_list(&domains),
        if front.shareable {
            "shareable"
        } else {
            "private"
        },
    )
}

fn segments(segs: &[PSeg]) -> String {
    segs.iter()
        .map(|s| match s {
            PSeg::Name(i) => pick(PATH_NAMES, *i).to_owned(),
            PSeg::Dot => ".".to_owned(),
            PSeg::DotDot => "..".to_owned(),
            PSeg::Empty => String::new(),
            PSeg::Raw(r) => r.clone(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn val(v: &Val, base: &Path) -> Value {
    match v {
        Val::FilePath(segs) => json!(format!("{}/in/files/{}", base.display(), segments(segs))),
        Val::MemPath(segs) => json!(segments(segs)),
        Val::Str(s) => json!(s),
        Val::Num(n) => json!(n),
        Val::Neg(n) => json!(n),
        Val::Float(f) => json!(f),
        Val::Bool(b) => json!(b),
        Val::Null => Value::Null,
        Val::Obj(pairs) => {
            Value::Object(pairs.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
        }
        Val::Arr(items) => json!(items),
    }
}

fn message(m: &Msg, base: &Path) -> Value {
    if m.not_an_object {
        return val(&Val::Arr(vec![]), base);
    }
    let mut obj = Map::new();
    obj.insert(
        "jsonrpc".into(),
        json!(if m.version_ok { "2.0" } else { "1.0" }),
    );
    match &m.id {
        Id::Absent => {}
        Id::Null => {
            obj.insert("id".into(), Value::Null);
        }
        Id::Num(n) => {
            obj.insert("id".into(), json!(n));
        }
        Id::Float(f) => {
            obj.insert("id".into(), json!(f));
        }
        Id::Str(s) => {
            obj.insert("id".into(), json!(s));
        }
        Id::Bool(b) => {
            obj.insert("id".into(), json!(b));
        }
        Id::Obj => {
            obj.insert("id".into(), json!({"a": 1}));
        }
    }
    let method = match &m.method {
        Method::Call => json!("tool.call"),
        Method::List => json!("tool.list"),
        Method::Status => json!("broker.status"),
        Method::Other(s) => json!(s),
        Method::NotString(n) => json!(n),
    };
    obj.insert("method".into(), method);
    match &m.params {
        Params::Absent => {}
        Params::Empty => {
            obj.insert("params".into(), json!({}));
        }
        Params::Array(items) => {
            obj.insert(
                "params".into(),
                Value::Array(items.iter().map(|v| val(v, base)).collect()),
            );
        }
        Params::Scalar(v) => {
            obj.insert("params".into(), val(v, base));
        }
        Params::Call {
            tool,
            args,
            traceparent,
            extra,
        } => {
            let mut p = Map::new();
            let tool = match tool {
                Sel::Known(i) => pick(TOOL_NAMES, *i).to_owned(),
                Sel::Raw(r) => r.clone(),
            };
            p.insert("tool".into(), json!(tool));
            match args {
                Args::Absent => {}
                Args::Null => {
                    p.insert("args".into(), Value::Null);
                }
                Args::NotObject(s) => {
                    p.insert("args".into(), json!(s));
                }
                Args::Object(pairs) => {
                    let a: Map<String, Value> = pairs
                        .iter()
                        .map(|(k, v)| {
                            let k = match k {
                                Key::Known(i) => pick(ARG_KEYS, *i).to_owned(),
                                Key::Raw(r) => r.clone(),
                            };
                            (k, val(v, base))
                        })
                        .collect();
                    p.insert("args".into(), Value::Object(a));
                }
            }
            if let Some(tp) = traceparent {
                p.insert("traceparent".into(), json!(tp));
            }
            if let Some((k, v)) = extra {
                p.entry(k.clone()).or_insert_with(|| val(v, base));
            }
            obj.insert("params".into(), Value::Object(p));
        }
    }
    Value::Object(obj)
}

/// Rewrites every absolute path in `v` to lie below `base`, dropping any `..` that would climb
/// above it lexically. With the fixture's symlinks never pointing shallower than they sit, the
/// real path cannot climb above `base` either.
fn confine(v: &mut Value, base: &Path) {
    match v {
        Value::String(s) if s.starts_with('/') => *s = confine_path(s, base),
        Value::Array(items) => items.iter_mut().for_each(|i| confine(i, base)),
        Value::Object(map) => map.values_mut().for_each(|i| confine(i, base)),
        _ => {}
    }
}

fn confine_path(s: &str, base: &Path) -> String {
    let base_str = base.to_str().expect("utf-8");
    let tail = s
        .strip_prefix(base_str)
        .filter(|t| t.starts_with('/'))
        .unwrap_or(s);
    let mut depth = 0usize;
    let mut out = String::from(base_str);
    for seg in tail.split('/').skip(1) {
        match seg {
            ".." if depth == 0 => continue,
            ".." => depth -= 1,
            "" | "." => {}
            _ => depth += 1,
        }
        out.push('/');
        out.push_str(seg);
    }
    out
}

/// What a request item should get, read independently of the implementation.
#[derive(Debug)]
enum Expect {
    /// -32600, with this id.
    Invalid(Value),
    Call {
        id: Option<Value>,
        method: String,
        params: Value,
    },
}

fn classify(v: &Value) -> Expect {
    let Value::Object(obj) = v else {
        return Expect::Invalid(Value::Null);
    };
    let id = obj.get("id").cloned();
    let echo = match &id {
        Some(i @ (Value::String(_) | Value::Number(_) | Value::Null)) => i.clone(),
        _ => Value::Null,
    };
    if id
        .as_ref()
        .is_some_and(|i| !(i.is_string() || i.is_number() || i.is_null()))
    {
        return Expect::Invalid(Value::Null);
    }
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return Expect::Invalid(echo);
    }
    let Some(Value::String(method)) = obj.get("method") else {
        return Expect::Invalid(echo);
    };
    let params = match obj.get("params") {
        None => json!({}),
        Some(p @ (Value::Object(_) | Value::Array(_))) => p.clone(),
        Some(_) => return Expect::Invalid(echo),
    };
    Expect::Call {
        id,
        method: method.clone(),
        params,
    }
}

/// How the contract says a `tool.call` with these params ends, before any tool runs.
#[derive(Debug, PartialEq)]
enum CallFate {
    /// -32602 before enforcement: not counted, no row.
    BadParams,
    /// Refused by the tool lists (`data.reason`).
    Refused(&'static str),
    /// Reached the tool's own checks.
    Reached(ToolName),
}

struct Lists {
    allowed: BTreeSet<String>,
    disallowed: BTreeSet<String>,
}

fn fate(params: &Value, lists: &Lists) -> CallFate {
    let Value::Object(p) = params else {
        return CallFate::BadParams;
    };
    let Some(Value::String(tool)) = p.get("tool") else {
        return CallFate::BadParams;
    };
    if !matches!(p.get("args"), None | Some(Value::Null | Value::Object(_))) {
        return CallFate::BadParams;
    }
    if lists.disallowed.contains(tool) {
        return CallFate::Refused("tool_in_disallowed_tools");
    }
    if !lists.allowed.contains(tool) {
        return CallFate::Refused("tool_not_in_allowed_tools");
    }
    let name = ToolName::parse(tool).expect("only real names reach the lists");
    if tools::tool(name).is_none() {
        return CallFate::Refused("unknown_tool");
    }
    CallFate::Reached(name)
}

/// Tallies over one run, compared with the journal at the end.
#[derive(Default)]
struct Tally {
    /// Calls that reached enforcement (notifications included).
    counted: u64,
    /// Of those, refused by the lists.
    refused: u64,
    /// Answered successes of MemoryEmit (a lower bound of memory.emitted rows).
    emitted_answers: u64,
    /// A tool that changes files was reached.
    mutated: bool,
}

fn check_response(expect: &Expect, got: &Value, lists: &Lists, tally: &mut Tally) {
    assert_eq!(got["jsonrpc"], "2.0", "{got}");
    let has_result = got.get("result").is_some();
    let has_error = got.get("error").is_some();
    assert!(
        has_result != has_error,
        "exactly one of result/error: {got}"
    );
    match expect {
        Expect::Invalid(id) => {
            assert_eq!(&got["id"], id, "{got}");
            assert_eq!(got["error"]["code"], -32600, "{got}");
        }
        Expect::Call { id, method, params } => {
            assert_eq!(Some(&got["id"]), id.as_ref(), "{got}");
            match method.as_str() {
                "tool.call" => check_call(params, got, lists, tally),
                "tool.list" => {
                    let names: BTreeSet<String> = got["result"]["tools"]
                        .as_array()
                        .expect("tools array")
                        .iter()
                        .map(|t| t["name"].as_str().expect("name").to_owned())
                        .collect();
                    let want: BTreeSet<String> = lists
                        .allowed
                        .difference(&lists.disallowed)
                        .filter(|t| ToolName::parse(t).and_then(tools::tool).is_some())
                        .cloned()
                        .collect();
                    assert_eq!(names, want, "tool.list");
                }
                "broker.status" => {
                    assert_eq!(got["result"]["skill_id"], SKILL_ID);
                }
                _ => assert_eq!(got["error"]["code"], -32601, "{got}"),
            }
        }
    }
}

fn check_call(params: &Value, got: &Value, lists: &Lists, tally: &mut Tally) {
    let error = got.get("error");
    let code = error.map(|e| e["code"].as_i64().expect("integer code"));
    let message = error.map(|e| e["message"].as_str().expect("message"));
    match fate(params, lists) {
        CallFate::BadParams => assert_eq!(code, Some(-32602), "{got}"),
        CallFate::Refused(reason) => {
            assert_eq!(message, Some("tool_not_allowed"), "{params} -> {got}");
            assert_eq!(code, Some(-32603));
            assert_eq!(got["error"]["data"]["reason"], reason, "{got}");
            assert_eq!(got["error"]["data"]["skill_id"], SKILL_ID);
        }
        CallFate::Reached(name) => match message {
            None => {
                if name == ToolName::MemoryEmit {
                    tally.emitted_answers += 1;
                }
            }
            Some(
                "scope_violation" | "file_violation" | "domain_violation" | "tool_error"
                | "deadline",
            ) => assert_eq!(code, Some(-32603), "{got}"),
            Some("Invalid params") => assert_eq!(code, Some(-32602), "{got}"),
            Some(other) => panic!("unexpected error {other:?} from {name}: {got}"),
        },
    }
}

/// Walks an item list the way the contract reads it, tallying calls (notifications too).
fn tally_items(items: &[Expect], lists: &Lists, tally: &mut Tally) {
    for item in items {
        if let Expect::Call { method, params, .. } = item {
            if method == "tool.call" {
                match fate(params, lists) {
                    CallFate::BadParams => {}
                    CallFate::Refused(_) => {
                        tally.counted += 1;
                        tally.refused += 1;
                    }
                    CallFate::Reached(name) => {
                        tally.counted += 1;
                        if matches!(
                            name,
                            ToolName::Write | ToolName::Edit | ToolName::MemoryEmit
                        ) {
                            tally.mutated = true;
                        }
                    }
                }
            }
        }
    }
}

fn answered(items: &[Expect]) -> Vec<&Expect> {
    items
        .iter()
        .filter(|e| match e {
            Expect::Invalid(_) => true,
            Expect::Call { id, .. } => id.is_some(),
        })
        .collect()
}

pub fn run(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mutated = FILES.with(build_files, |files| {
        AUDIT.with(build_audit, |audit| run_with(&input, files, audit))
    });
    if mutated {
        FILES.discard();
    }
}

fn run_with(input: &Input, files: &Files, audit: &mut Audit) -> bool {
    let text = frontmatter(&input.front, &files.base);
    let Ok(manifest) = cyberos::skill::parse(&text, &cyberos::skill::broker_version()) else {
        // Only the fuzzed globs can make it invalid; the skill parser has its own target.
        return false;
    };
    let lists = Lists {
        allowed: tool_bits(input.front.allowed).into_iter().collect(),
        disallowed: tool_bits(input.front.disallowed).into_iter().collect(),
    };
    let policy = cyberos::skill::policy::Policy::from_manifest(&manifest)
        .expect("a valid frontmatter compiles");
    audit.runs += 1;
    let invocation_id = format!("00000000-0000-4000-8000-{:012}", audit.runs);
    let mut inv = Invocation::standalone(
        manifest.id.clone(),
        Arc::new(policy),
        files.home.join("memory"),
        files.home.join("scratch"),
    );
    inv.invocation_id = invocation_id.clone();
    inv.sync_class = manifest.sync_class.as_str();
    inv.journal = Some(Arc::clone(&audit.journal));
    let trace = TraceContext::new_root();
    let now = cyberos::util::now_ms();
    let shared = Shared::new(
        inv,
        tools::registry(),
        input.front.audit_required,
        trace,
        now,
        now + 60_000,
        false,
    );

    let mut tally = Tally::default();
    for frame in &input.frames {
        let body = match frame {
            FrameIn::Raw(bytes) => match serde_json::from_slice::<Value>(bytes) {
                // Whatever parses is confined like the structured requests.
                Ok(mut v) => {
                    confine(&mut v, &files.base);
                    serde_json::to_vec(&v).expect("serialise")
                }
                Err(_) => bytes.clone(),
            },
            FrameIn::One(m) => {
                let mut v = message(m, &files.base);
                confine(&mut v, &files.base);
                serde_json::to_vec(&v).expect("serialise")
            }
            FrameIn::Batch(ms) => {
                let mut v = Value::Array(ms.iter().map(|m| message(m, &files.base)).collect());
                confine(&mut v, &files.base);
                serde_json::to_vec(&v).expect("serialise")
            }
        };
        let response = dispatch::handle(&shared, jsonrpc::parse(&body));
        if let Some(r) = &response {
            assert!(r.len() <= MAX_RESPONSE);
        }
        let got: Option<Value> = response.map(|r| {
            serde_json::from_slice(&r).unwrap_or_else(|e| panic!("response is not JSON: {e}"))
        });
        match serde_json::from_slice::<Value>(&body) {
            Err(_) => {
                let got = got.expect("a parse error is answered");
                assert_eq!(got["error"]["code"], -32700, "{got}");
                assert!(got["id"].is_null());
            }
            Ok(Value::Array(items)) if items.is_empty() => {
                let got = got.expect("an empty batch is answered");
                assert_eq!(got["error"]["code"], -32600, "{got}");
            }
            Ok(Value::Array(items)) => {
                let expects: Vec<Expect> = items.iter().map(classify).collect();
                tally_items(&expects, &lists, &mut tally);
                let want = answered(&expects);
                match got {
                    None => assert!(want.is_empty(), "a batch went unanswered: {want:?}"),
                    Some(Value::Array(responses)) => {
                        assert_eq!(responses.len(), want.len(), "{responses:?}");
                        for (e, r) in want.iter().zip(&responses) {
                            check_response(e, r, &lists, &mut tally);
                        }
                    }
                    Some(other) => panic!("a batch answered with {other}"),
                }
            }
            Ok(single) => {
                let expect = classify(&single);
                let items = [expect];
                tally_items(&items, &lists, &mut tally);
                match (answered(&items).first(), got) {
                    (None, None) => {}
                    (Some(e), Some(r)) => check_response(e, &r, &lists, &mut tally),
                    (e, r) => panic!("expected {e:?}, got {r:?}"),
                }
            }
        }
    }

    check_journal(&shared, &audit.journal, &invocation_id, &tally);
    assert_eq!(
        fixture::snapshot(&files.outside),
        files.before,
        "the tree outside the allowed files changed"
    );
    tally.mutated
}

fn check_journal(shared: &Shared, journal: &Journal, invocation_id: &str, tally: &Tally) {
    let tool_calls = shared.tool_calls.load(Ordering::Relaxed);
    let denied = shared.denied.load(Ordering::Relaxed);
    assert_eq!(tool_calls, tally.counted, "calls that reached enforcement");
    assert!(denied >= tally.refused, "refusals by the lists are denials");
    let rows = journal.rows_for(invocation_id, 0).expect("rows");
    let mut by_kind: BTreeMap<&str, u64> = BTreeMap::new();
    let mut call_ids: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for row in &rows {
        *by_kind.entry(row.kind.as_str()).or_default() += 1;
        let p = &row.payload;
        assert_eq!(p["invocation_id"], invocation_id, "{p}");
        assert_eq!(p["skill_id"], SKILL_ID, "{p}");
        assert_eq!(p["trace_id"].as_str().map(str::len), Some(32), "{p}");
        let call_kind = matches!(
            row.kind.as_str(),
            "skill.tool_denied" | "skill.tool_call_started" | "skill.tool_call_completed"
        );
        if let Some(call_id) = p
            .get("call_id")
            .and_then(Value::as_str)
            .filter(|_| call_kind)
        {
            call_ids
                .entry(call_id.to_owned())
                .or_default()
                .push(row.kind.as_str());
        }
    }
    let count = |k: &str| by_kind.get(k).copied().unwrap_or(0);
    let started = count("skill.tool_call_started");
    assert_eq!(count("skill.tool_denied"), denied, "denied rows");
    assert_eq!(
        count("skill.tool_call_completed"),
        started,
        "completed rows"
    );
    assert_eq!(
        started + denied,
        tool_calls,
        "every counted call has its rows"
    );
    assert!(count("memory.emitted") >= tally.emitted_answers);
    // call-1..call-N, each either denied or a started/completed pair, never both.
    let want: BTreeSet<String> = (1..=tool_calls).map(|n| format!("call-{n}")).collect();
    let have: BTreeSet<String> = call_ids.keys().cloned().collect();
    assert_eq!(have, want, "call ids");
    for (id, kinds) in &call_ids {
        let ok = kinds == &["skill.tool_denied"]
            || kinds == &["skill.tool_call_started", "skill.tool_call_completed"];
        assert!(ok, "{id}: {kinds:?}");
    }
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        let broken = journal.verify_span(first.seq, last.seq).expect("verify");
        assert!(broken.is_none(), "chain broken: {broken:?}");
    }
}
