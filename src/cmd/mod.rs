//! One file per subcommand. Each `run` turns clap's plain data into a validated request, does the
//! work, and returns the process exit code; errors carry their code through `exit::Coded`.

pub mod keygen;
pub mod list;
pub mod scaffold;
pub mod sign;
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
        Command::Skill(_) | Command::Tool(_) | Command::Sandbox(_) | Command::SandboxChild => Err(
            crate::exit::coded(crate::exit::USAGE, "this command is not available yet"),
        ),
    }
}
