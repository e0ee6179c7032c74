//! The `zarrpipe` program: run the sample pipeline, describe datasets, compute statistics and
//! write synthetic W1 stores.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return cli::report(&anyhow::Error::new(error).context("cannot start the async runtime")),
    };
    match runtime.block_on(cli::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => cli::report(&error),
    }
}
