//! The command-line interface as plain clap data (CONTRACT §2). Nothing here has behaviour: each
//! command's `cmd::*::run` turns these values into a validated request before doing any work.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Name of the hidden subcommand through which the broker re-executes itself as the sandbox's
/// supervisor. The parent builds the child's argv from this same constant.
pub const SANDBOX_CHILD_COMMAND: &str = "__sandbox-child";

#[derive(Debug, Parser)]
#[command(
    name = "cyberos",
    version,
    about = "Run untrusted AI-agent skills in a Linux sandbox behind a capability broker",
    propagate_version = true,
    disable_help_subcommand = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate, sign, list and run skills; watch the broker's journal.
    #[command(subcommand)]
    Skill(SkillCommand),
    /// Client used inside a skill to ask the broker for a tool (uses $CYBEROS_BROKER_SOCKET).
    #[command(subcommand)]
    Tool(ToolCommand),
    /// Inspect the sandbox support of this machine.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Internal: the re-executed sandbox supervisor. Not for direct use.
    #[command(name = SANDBOX_CHILD_COMMAND, hide = true)]
    SandboxChild,
}

#[derive(Debug, Subcommand)]
pub enum SkillCommand {
    /// Run a skill's `main` in the sandbox and broker its tool calls.
    Invoke(InvokeArgs),
    /// Check a bundle's SKILL.md against schema v1.
    Validate(ValidateArgs),
    /// Create a new skill bundle with a commented starter SKILL.md and main.
    Scaffold(ScaffoldArgs),
    /// Generate an ed25519 key pair (FILE and FILE.pub).
    Keygen(KeygenArgs),
    /// Sign a bundle's SKILL.md in place.
    Sign(SignArgs),
    /// List the skills in the skills directory.
    List(ListArgs),
    /// Operator view of the broker's journal.
    #[command(subcommand)]
    Broker(BrokerCommand),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxMode {
    /// Warn once for each sandbox layer this machine lacks, and run anyway.
    BestEffort,
    /// Refuse to run (exit 125) when any sandbox layer is missing.
    Strict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuditMode {
    /// A journal failure is a warning; tool calls still run.
    BestEffort,
    /// No tool call runs unaudited: an unusable journal fails the invocation or the call.
    Required,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  cyberos skill invoke ./examples/skills/hello-shell --json -- world"
)]
pub struct InvokeArgs {
    /// A bundle directory (a path), or a skill id looked up in the skills directory.
    pub skill: String,
    /// Directory holding skill bundles by id.
    #[arg(long, value_name = "DIR")]
    pub skills_dir: Option<PathBuf>,
    /// The cyberos home (memory root, journal).
    #[arg(long, value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// Tenant UUID recorded on the invocation.
    #[arg(long, value_name = "UUID")]
    pub tenant: Option<String>,
    /// Use this invocation id instead of a new one.
    #[arg(long, value_name = "UUID")]
    pub invocation_id: Option<String>,
    /// Shorter budget than the skill's effort_minutes (e.g. 90s, 2m, 1500ms).
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// What to do when a sandbox layer is unavailable.
    #[arg(long, value_enum, default_value_t = SandboxMode::BestEffort)]
    pub sandbox: SandboxMode,
    /// What to do when the journal cannot be written.
    #[arg(long, value_enum, default_value_t = AuditMode::BestEffort)]
    pub audit: AuditMode,
    /// Pin HOST:PORT to ADDR for the HTTP tools (as curl --resolve).
    #[arg(long, value_name = "HOST:PORT:ADDR")]
    pub resolve: Vec<String>,
    /// Print a JSON summary as the last line on stdout.
    #[arg(long)]
    pub json: bool,
    /// Arguments passed to the skill's main.
    #[arg(last = true, value_name = "ARGS")]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  cyberos skill validate ./examples/skills/hello-shell --json")]
pub struct ValidateArgs {
    /// The bundle directory (or its SKILL.md).
    pub bundle: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Check min/max_broker_version against this version instead of the binary's.
    #[arg(long, value_name = "SEMVER")]
    pub broker_version: Option<String>,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  cyberos skill scaffold note-taker --dir ./skills")]
pub struct ScaffoldArgs {
    /// The new skill's id (lowercase letters, digits, dashes).
    pub id: String,
    /// Parent directory of the new bundle (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  cyberos skill keygen --out ./signing.key")]
pub struct KeygenArgs {
    /// Private key file to write; the public key goes to FILE.pub.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  cyberos skill sign ./my-skill --key ./signing.key")]
pub struct SignArgs {
    /// The bundle directory (or its SKILL.md).
    pub bundle: PathBuf,
    /// The private key file written by `skill keygen`.
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  cyberos skill list --json")]
pub struct ListArgs {
    /// Directory holding skill bundles by id.
    #[arg(long, value_name = "DIR")]
    pub skills_dir: Option<PathBuf>,
    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum BrokerCommand {
    /// Active invocations and today's counters, as JSON.
    Status(HomeArgs),
    /// Follow one invocation's journal rows as they are written.
    Tail(TailArgs),
    /// Rebuild an invocation's tool-call sequence from the journal.
    Replay(ReplayArgs),
    /// Check the journal's hash chain (exit 3 when broken).
    #[command(
        after_help = "Example:\n  cyberos skill broker verify || echo 'journal tampered with'"
    )]
    Verify(HomeArgs),
    /// Remove journal rows older than DATE, keeping the chain verifiable.
    Prune(PruneArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  cyberos skill broker status")]
pub struct HomeArgs {
    /// The cyberos home (memory root, journal).
    #[arg(long, value_name = "DIR")]
    pub home: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  cyberos skill broker tail --invocation 0e3b1a2c-4f5d-4789-abcd-ef0123456789"
)]
pub struct TailArgs {
    /// The invocation id.
    #[arg(long, value_name = "ID")]
    pub invocation: String,
    /// One JSON object per row.
    #[arg(long)]
    pub json: bool,
    /// How long to wait for an unknown invocation to appear.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub wait: String,
    /// The cyberos home (memory root, journal).
    #[arg(long, value_name = "DIR")]
    pub home: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  cyberos skill broker replay --invocation 0e3b1a2c-4f5d-4789-abcd-ef0123456789 --json"
)]
pub struct ReplayArgs {
    /// The invocation id.
    #[arg(long, value_name = "ID")]
    pub invocation: String,
    /// Print the replay as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// The cyberos home (memory root, journal).
    #[arg(long, value_name = "DIR")]
    pub home: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  cyberos skill broker prune --before 2026-01-01")]
pub struct PruneArgs {
    /// Remove rows written before this UTC date (YYYY-MM-DD) or RFC 3339 time.
    #[arg(long, value_name = "DATE")]
    pub before: String,
    /// The cyberos home (memory root, journal).
    #[arg(long, value_name = "DIR")]
    pub home: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// Call one tool through the broker and print its result JSON.
    #[command(
        after_help = "Example (inside a skill):\n  cyberos tool call MemoryRead '{\"path\":\"memories/notes/today.md\"}'"
    )]
    Call(ToolCallArgs),
    /// List the tools this skill may call.
    #[command(after_help = "Example (inside a skill):\n  cyberos tool list")]
    List,
}

#[derive(Debug, Args)]
pub struct ToolCallArgs {
    /// The tool name (e.g. Read, MemoryRead, HttpFetch).
    pub tool: String,
    /// The tool's arguments as a JSON object (default `{}`).
    pub args_json: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Report which sandbox layers this machine supports.
    #[command(after_help = "Example:\n  cyberos sandbox check --json")]
    Check(SandboxCheckArgs),
}

#[derive(Debug, Args)]
pub struct SandboxCheckArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}
