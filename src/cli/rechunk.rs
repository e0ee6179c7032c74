use std::path::PathBuf;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use zarrpipe::rechunk::{parse_dim_sizes, rechunk, Codec, DimSizes, RechunkOptions};

use super::store::StoreArgs;

#[derive(Debug, clap::Args)]
pub struct RechunkArgs {
    /// The source dataset (Zarr v2 or v3; a path or URL).
    source: String,
    /// The destination directory: absent, empty, or an interrupted rechunk's (it resumes).
    destination: PathBuf,
    /// A data variable to rewrite (repeatable), with every coordinate; default: every array.
    #[arg(long = "var", value_name = "NAME")]
    variables: Vec<String>,
    /// Chunk sizes, DIM=N,... (the inner chunks when sharded). Other dimensions keep the
    /// source's chunk size; 1-D coordinates are written as one chunk.
    #[arg(long, value_name = "DIM=N,...", value_parser = |text: &str| parse_dim_sizes("--chunks", text))]
    chunks: Option<DimSizes>,
    /// Shard sizes, DIM=N,..., each a multiple of the chunk size along DIM (sharding_indexed);
    /// other dimensions get one chunk per shard.
    #[arg(long, value_name = "DIM=N,...", value_parser = |text: &str| parse_dim_sizes("--shard", text))]
    shard: Option<DimSizes>,
    /// Compression of every chunk: zstd[:LEVEL], blosc-lz4[:CLEVEL], blosc-zstd[:CLEVEL],
    /// gzip[:LEVEL] or none.
    #[arg(long, default_value = "zstd:3", value_parser = |text: &str| text.parse::<Codec>())]
    codec: Codec,
    /// Destination chunks (shards) read and written at once (default: the number of cores);
    /// memory is about this many decoded shards.
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    /// Stop after writing N destination chunks, as an interruption would (for tests).
    #[arg(long, value_name = "N", hide = true)]
    stop_after: Option<u64>,
    #[command(flatten)]
    store: StoreArgs,
}

pub async fn run(args: RechunkArgs) -> anyhow::Result<()> {
    let source = args.store.open(&args.source).await?;
    let mut options = RechunkOptions {
        variables: args.variables,
        chunks: args.chunks.unwrap_or_default(),
        shards: args.shard.unwrap_or_default(),
        codec: args.codec,
        stop_after: args.stop_after,
        ..Default::default()
    };
    if let Some(concurrency) = args.concurrency {
        options.concurrency = concurrency.max(1);
    }
    let bar = ProgressBar::new(0);
    bar.set_style(ProgressStyle::with_template(
        "rechunking {bar:40} {pos}/{len} chunks {elapsed}/{duration}",
    )?);
    let started = Instant::now();
    let result = rechunk(&source, &args.destination, &options, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .await;
    bar.finish_and_clear();
    let report = result?;
    println!(
        "wrote {}: {} arrays, {} chunks ({} written now, {} by an earlier run), {:.1} MB decoded in {:.1} s",
        args.destination.display(),
        report.arrays,
        report.chunks,
        report.written,
        report.chunks - report.written,
        report.decoded_bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
