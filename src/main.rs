//! `cyberos`: parse, dispatch, map the error to an exit code. Nothing else.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match cyberos::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() {
                cyberos::exit::USAGE
            } else {
                0
            };
            // Printing help or a usage error can only fail on a closed stdout/stderr.
            if err.print().is_err() {
                return ExitCode::from(code);
            }
            return ExitCode::from(code);
        }
    };
    match cyberos::cmd::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("cyberos: {err:#}");
            ExitCode::from(cyberos::exit::code_of(&err))
        }
    }
}
