//! The `mxfuse` command line: argument syntax ([`args`]), the commands ([`rewrite`],
//! [`inspect`]) and their output pieces ([`table`], [`report`], [`sites`], [`dot`]).
//!
//! Exit status: 0 on success, 1 on bad input (one `error: ...` line on stderr), 2 on usage
//! errors (clap's own, unknown rule names, malformed `--set`).

pub mod args;
pub mod dot;
pub mod inspect;
pub mod notes;
pub mod paths;
pub mod report;
pub mod rewrite;
pub mod sites;
pub mod stats;
pub mod table;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::Error;

/// Why a command failed, which decides the exit status.
#[derive(Debug)]
pub enum CliError {
    /// Bad input: exit 1.
    Input(Error),
    /// Bad command line: exit 2.
    Usage(String),
}

impl From<Error> for CliError {
    fn from(e: Error) -> CliError {
        CliError::Input(e)
    }
}

/// Runs `mxfuse` with these arguments (the first is the program name).
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match args::Cli::try_parse_from(args) {
        Ok(cli) => cli,
        // clap prints help/version (exit 0) or the usage error (exit 2) itself.
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let result = match &cli.command {
        args::Command::Rewrite(a) => rewrite::run_rewrite(a),
        args::Command::Inspect(a) => inspect::run_inspect(a),
        args::Command::Rules => Ok(crate::pipeline::rule_names()
            .iter()
            .map(|r| format!("{r}\n"))
            .collect()),
    };
    match result {
        Ok(text) => {
            let _ = std::io::stdout().write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(CliError::Input(e)) => {
            eprintln!("error: {}", one_line(&e.to_string()));
            ExitCode::from(1)
        }
        Err(CliError::Usage(msg)) => {
            eprintln!("error: {}", one_line(&msg));
            ExitCode::from(2)
        }
    }
}

/// `KEY=VALUE` pairs of `--set`.
pub fn parse_settings(pairs: &[String]) -> Result<BTreeMap<String, String>, CliError> {
    pairs
        .iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => Err(CliError::Usage(format!(
                "--set expects KEY=VALUE, got '{p}'"
            ))),
        })
        .collect()
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}
