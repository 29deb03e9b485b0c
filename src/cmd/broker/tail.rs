//! `skill broker tail`: an invocation's rows so far, then each new one as it is written, until
//! the invocation completes. A cheap `PRAGMA data_version` check every 50 ms decides whether to
//! run the (indexed) query for new rows, so many tails can follow a busy journal.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::cli::TailArgs;
use crate::exit;
use crate::journal::{Journal, kind};
use crate::util;

use super::format::{Style, row_line};

/// Well under the 250 ms within which a new row must show.
const POLL: Duration = Duration::from_millis(50);

struct Signals {
    int: Arc<AtomicBool>,
    term: Arc<AtomicBool>,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        let int = Arc::new(AtomicBool::new(false));
        let term = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&int))?;
        signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&term))?;
        Ok(Self { int, term })
    }

    /// The exit code for a signal received, if any.
    fn received(&self) -> Option<u8> {
        if self.int.load(Ordering::Relaxed) {
            Some(exit::INTERRUPTED)
        } else if self.term.load(Ordering::Relaxed) {
            Some(exit::TERMINATED)
        } else {
            None
        }
    }
}

pub fn run(args: &TailArgs) -> anyhow::Result<u8> {
    let wait = util::parse_duration(&args.wait)
        .map_err(|e| exit::coded(exit::USAGE, format!("--wait: {e}")))?;
    let home = super::home(args.home.as_deref())?;
    let signals = Signals::install()?;
    let id = args.invocation.as_str();
    let deadline = Instant::now() + wait;

    // Until the invocation shows up (or the journal itself does).
    let mut opened = None;
    let journal = loop {
        if opened.is_none() {
            opened = super::open(&home)?;
        }
        if let Some(journal) = opened.take() {
            if journal.invocation(id)?.is_some() || !journal.rows_for(id, 0)?.is_empty() {
                break journal;
            }
            opened = Some(journal);
        }
        if let Some(code) = signals.received() {
            return Ok(code);
        }
        if Instant::now() >= deadline {
            return Err(super::unknown_invocation(id, &home));
        }
        std::thread::sleep(POLL);
    };
    follow(&journal, id, args.json, &signals)
}

fn follow(journal: &Journal, id: &str, json: bool, signals: &Signals) -> anyhow::Result<u8> {
    let style = Style::for_stdout();
    let mut stdout = std::io::stdout().lock();
    let mut last_seq = 0;
    let mut seen_version = None;
    loop {
        // Read liveness before the rows: a broker that wrote its last row and then died is
        // only declared gone after that row has been printed.
        let broker_gone = journal
            .invocation(id)?
            .is_some_and(|inv| inv.completed_ms.is_none() && !inv.broker.is_alive());
        let version = journal.data_version()?;
        if seen_version != Some(version) || broker_gone {
            seen_version = Some(version);
            for row in journal.rows_for(id, last_seq)? {
                last_seq = row.seq;
                let line = if json {
                    row.to_json().to_string()
                } else {
                    row_line(&row, style)
                };
                let written = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
                if let Err(err) = written {
                    // A reader that went away (`| head`) is a normal end, not an error.
                    if err.kind() == std::io::ErrorKind::BrokenPipe {
                        return Ok(exit::SUCCESS);
                    }
                    return Err(err.into());
                }
                if row.kind == kind::INVOKED_COMPLETED {
                    return Ok(exit::SUCCESS);
                }
            }
        }
        if broker_gone {
            return Err(exit::coded(
                exit::ERROR,
                format!(
                    "the broker of invocation {id} is no longer running and never completed it; `cyberos skill broker replay --invocation {id}` shows what it left"
                ),
            ));
        }
        if let Some(code) = signals.received() {
            return Ok(code);
        }
        std::thread::sleep(POLL);
    }
}
