use super::store::StoreArgs;
use zarrpipe::bound::{measure, BoundOptions};
use zarrpipe::pipeline::{default_cpu_decode_threads, DecodeOn};

#[derive(Debug, clap::Args)]
pub struct BoundArgs {
    /// Dataset path (a local store: its chunk files are read).
    url: String,
    /// Variables whose chunk files are read (repeatable; default: every data variable).
    #[arg(long = "var", value_name = "NAME")]
    variables: Vec<String>,
    /// Threads reading and decoding at once (default: every core, as the host path and CPU
    /// decoding beside a GPU use).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Timed passes after one untimed pass that warms the page cache; the best is reported,
    /// and every pass together (as a pipeline's epochs in a row are timed).
    #[arg(long, default_value_t = 2, value_name = "N")]
    passes: usize,
    /// Also time decoding alone, the stored bytes already in memory.
    #[arg(long)]
    decode_only: bool,
    /// Decode each chunk into a place of its own in one buffer as large as a pass's output (at
    /// most 4 GiB), as zarrpipe decodes into a batch, not into a buffer each thread reuses
    /// (which stays in the cores' caches).
    #[arg(long)]
    into_place: bool,
    /// Print JSON instead of a line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: StoreArgs,
}

pub async fn run(args: BoundArgs) -> anyhow::Result<()> {
    let dataset = args.store.open(&args.url).await?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let options = BoundOptions {
        variables: args.variables,
        threads: args.threads.unwrap_or(cores),
        passes: args.passes,
        decode_only: args.decode_only,
        into_place: args.into_place,
    };
    let report = tokio::task::spawn_blocking(move || measure(&dataset, &options)).await??;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    let decode_only = report
        .decode_only_gb_per_s
        .map(|rate| format!("; {rate:.2} GB/s decoding alone, the frames in memory"))
        .unwrap_or_default();
    println!(
        "{}: {} {} chunk files ({:.1} MB stored, {:.1} MB decoded) read and decoded by {} threads{} at {:.2} GB/s decoded (best pass; {:.2} every pass together){decode_only}",
        report.url,
        report.chunks,
        report.codec,
        report.stored_bytes as f64 / 1e6,
        report.decoded_bytes as f64 / 1e6,
        report.threads,
        if report.into_place { " into place" } else { "" },
        report.decoded_gb_per_s,
        report.passes_gb_per_s,
    );
    let auto = default_cpu_decode_threads(DecodeOn::Auto { gpu_share: None }, 1);
    println!("(auto's CPU side decodes on {auto} threads here: --threads {auto} gives its bound)");
    Ok(())
}
