//! The `zarrpipe` program: run the sample pipeline, describe datasets, compute statistics and
//! write synthetic W1 stores.

mod cli;

use std::process::ExitCode;

use clap::Parser;

// Reading allocates a buffer per chunk (megabytes each, thousands per epoch); mimalloc reuses
// them where the system allocator maps and unmaps, faulting every page in again. Host batch
// tensors (hundreds of megabytes) are kept for the next batch by `RetainingAllocator`.
#[global_allocator]
static ALLOCATOR: zarrpipe::core::RetainingAllocator<mimalloc::MiMalloc> =
    zarrpipe::core::RetainingAllocator::new(mimalloc::MiMalloc);

fn main() -> ExitCode {
    // Rust ignores SIGPIPE, so `println!` to a closed pipe (`zarrpipe stats URL | head -1`)
    // would panic; the default action ends the program quietly, as other Unix tools end.
    #[cfg(unix)]
    // SAFETY: called first, before any other thread exists; SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = cli::Args::parse();
    // `ZARRPIPE_LOG=zarrpipe::gpu=debug` traces each GPU batch and nvCOMP call on stderr.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("ZARRPIPE_LOG"))
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(zarrpipe::MAX_BLOCKING_THREADS)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            return cli::report(
                &anyhow::Error::new(error).context("cannot start the async runtime"),
            )
        }
    };
    match runtime.block_on(cli::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => cli::report(&error),
    }
}
