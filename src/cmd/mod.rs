//! One file per subcommand. Each `run` turns clap's plain data into a validated request, does the
//! work, and returns the process exit code; errors carry their code through `exit::Coded`.

pub mod broker;
mod invoke;
pub mod keygen;
pub mod list;
pub mod sandbox;
pub mod scaffold;
pub mod sign;
mod tool;
pub mod validate;

use crate::cli::{Cli, Command, SkillCommand};

/// Dispatches a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Skill(SkillCommand::Validate(args)) => validate::run(args),
        Command::Skill(SkillCommand::Scaffold(args)) => scaffold::run(args),
        Command::Skill(SkillCommand::Keygen(args)) => keygen::run(args),
        Command::Skill(SkillCommand::Sign(args)) => sign::run(args),
        Command::Skill(SkillCommand::List(args)) => list::run(args),
        Command::Skill(SkillCommand::Broker(command)) => broker::run(command),
        Command::Skill(SkillCommand::Invoke(args)) => invoke::run(args),
        Command::Tool(command) => tool::run(command),
        Command::Sandbox(command) => sandbox::run(command),
        Command::SandboxChild => Ok(crate::sandbox::child_main()),
    }
}
