//! `cyberos`: parse, dispatch, map the error to an exit code. Nothing else.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // The re-executed sandbox supervisor starts on every invocation: dispatch it before building
    // the whole command-line parser, which it does not need.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == cyberos::cli::SANDBOX_CHILD_COMMAND)
    {
        return ExitCode::from(cyberos::sandbox::child_main());
    }
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
    let telemetry = cyberos::telemetry::init(telemetry_mode(&cli.command));
    let result = cyberos::cmd::run(cli);
    telemetry.shutdown();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("cyberos: {err:#}");
            ExitCode::from(cyberos::exit::code_of(&err))
        }
    }
}

/// The sandbox child must stay single-threaded until it has set up its namespaces, and the tool
/// client runs inside a sandbox without network: neither exports telemetry.
fn telemetry_mode(command: &cyberos::cli::Command) -> cyberos::telemetry::Mode {
    use cyberos::cli::Command;
    match command {
        Command::SandboxChild | Command::Tool(_) => cyberos::telemetry::Mode::DiagnosticsOnly,
        _ => cyberos::telemetry::Mode::Export,
    }
}
