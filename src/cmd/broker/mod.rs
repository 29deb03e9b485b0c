//! `cyberos skill broker ...`: the operator's view of the journal (CONTRACT §7). These commands
//! only read the journal, except `prune`; they never touch a running invocation.

mod format;
mod prune;
mod replay;
mod status;
mod tail;
mod verify;

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::cli::BrokerCommand;
use crate::journal::Journal;

/// Dispatches `skill broker <subcommand>`.
pub fn run(command: BrokerCommand) -> anyhow::Result<u8> {
    match command {
        BrokerCommand::Status(args) => status::run(&home(args.home.as_deref())?),
        BrokerCommand::Tail(args) => tail::run(&args),
        BrokerCommand::Replay(args) => replay::run(&args),
        BrokerCommand::Verify(args) => verify::run(&home(args.home.as_deref())?),
        BrokerCommand::Prune(args) => prune::run(&args),
    }
}

/// The cyberos home: `--home` > `$CYBEROS_HOME` > `$XDG_DATA_HOME/cyberos` >
/// `~/.local/share/cyberos` (CONTRACT §2).
pub(crate) fn home(arg: Option<&Path>) -> anyhow::Result<PathBuf> {
    let var = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(home) = arg.map(Path::to_owned).or_else(|| var("CYBEROS_HOME")) {
        return Ok(home);
    }
    if let Some(xdg) = var("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        return Ok(xdg.join("cyberos"));
    }
    var("HOME")
        .map(|h| h.join(".local/share/cyberos"))
        .context("failed to find the cyberos home: set --home, $CYBEROS_HOME or $HOME")
}

/// Opens an existing journal; a missing one is `None` (the caller decides what that means).
fn open(home: &Path) -> anyhow::Result<Option<Journal>> {
    Ok(Journal::open_existing(home)?)
}

/// The error for an invocation the journal does not know (exit 1).
fn unknown_invocation(id: &str, home: &Path) -> anyhow::Error {
    crate::exit::coded(
        crate::exit::ERROR,
        format!(
            "invocation {id} is not in the journal {}",
            home.join("journal.db").display()
        ),
    )
}
