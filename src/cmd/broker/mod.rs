//! `cyberos skill broker ...`: the operator's view of the journal (CONTRACT §7). These commands
//! only read the journal, except `prune`; they never touch a running invocation.

mod format;
mod prune;
mod replay;
mod status;
mod tail;
mod verify;

use std::path::{Path, PathBuf};

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

/// The cyberos home (CONTRACT §2).
fn home(arg: Option<&Path>) -> anyhow::Result<PathBuf> {
    Ok(crate::paths::home(arg)?)
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
