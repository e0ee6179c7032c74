use zarrpipe::advise::{advise, Advice, AdviseOptions, LayoutFigures};

use super::store::{parse_size, StoreArgs};

#[derive(Debug, clap::Args)]
pub struct AdviseArgs {
    /// The dataset (a path or URL).
    url: String,
    /// The variable to sample (default: the largest data variable of two or more dimensions).
    #[arg(long = "var", value_name = "NAME")]
    variable: Option<String>,
    /// Decoded size of the sample, e.g. 64M (up to 4 steps of the first dimension).
    #[arg(long, default_value = "64M", value_name = "SIZE")]
    sample_size: String,
    /// Requests in flight when reading (the pipeline's default is 64 over all batches).
    #[arg(long, default_value_t = 16, value_name = "N")]
    requests: usize,
    /// Do not measure the GPU even when there is one.
    #[arg(long)]
    no_gpu: bool,
    /// Seconds after which candidates not yet measured are skipped.
    #[arg(long, default_value_t = 20.0, value_name = "SECONDS")]
    time_limit: f64,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    store: StoreArgs,
}

pub async fn run(args: AdviseArgs) -> anyhow::Result<()> {
    let dataset = args.store.open(&args.url).await?;
    let options = AdviseOptions {
        variable: args.variable,
        sample_bytes: parse_size(&args.sample_size)?.max(1),
        requests_in_flight: args.requests.max(1),
        gpu: !args.no_gpu,
        time_limit: super::store::seconds("--time-limit", args.time_limit)?,
    };
    let advice = advise(&dataset, &options).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&advice)?);
    } else {
        print_advice(&args.url, &advice);
    }
    Ok(())
}

fn print_advice(url: &str, advice: &Advice) {
    let sample: Vec<String> = advice
        .sample
        .iter()
        .map(|[a, b]| format!("{a}:{b}"))
        .collect();
    println!("{url}: sampled {}[{}]", advice.variable, sample.join(", "));
    println!(
        "reads: {:.1} MB/s with {} requests in flight, {:.2} ms for one request alone",
        advice.read_bytes_per_s / 1e6,
        advice.requests_in_flight,
        advice.request_s * 1e3
    );
    match (&advice.gpu, &advice.gpu_not_measured) {
        (Some(name), _) => println!("decoding: every CPU core, and the GPU ({name}) together"),
        (None, why) => println!(
            "decoding: every CPU core; GPU not measured: {}",
            why.as_deref().unwrap_or("no GPU")
        ),
    }
    println!();
    println!(
        "{:<38} {:>16} {:>16} {:>7} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9}  limited by",
        "layout",
        "chunk",
        "shard",
        "objects",
        "stored MB",
        "ratio",
        "read ms",
        "CPU ms",
        "GPU ms",
        "feed MB/s"
    );
    let row = |figures: &LayoutFigures, mark: &str| {
        let shape = |s: &[u64]| s.iter().map(u64::to_string).collect::<Vec<_>>().join("x");
        println!(
            "{:<38} {:>16} {:>16} {:>7} {:>9.2} {:>7.2} {:>9.1} {:>9.1} {:>9} {:>9.1}  {}",
            format!("{mark}{}", figures.name),
            shape(&figures.chunk),
            figures.shard.as_deref().map_or("-".to_string(), shape),
            figures.objects,
            figures.stored_bytes as f64 / 1e6,
            figures.decoded_bytes as f64 / figures.stored_bytes.max(1) as f64,
            figures.read_s * 1e3,
            figures.cpu_decode_s * 1e3,
            figures
                .gpu_decode_s
                .map_or("-".to_string(), |s| format!("{:.1}", s * 1e3)),
            figures.feed_bytes_per_s / 1e6,
            figures.limited_by
        );
    };
    row(
        &advice.source,
        if advice.keep_store_layout { "* " } else { "  " },
    );
    for (index, figures) in advice.candidates.iter().enumerate() {
        let best = index == advice.best && !advice.keep_store_layout;
        row(figures, if best { "* " } else { "  " });
    }
    for name in &advice.not_measured {
        println!("  {name}: not measured (time limit)");
    }
    println!();
    println!("fastest: {}", advice.reason);
    println!("(read times of candidates are estimated from the store's measured rates)");
    if let Some(options) = &advice.rechunk {
        println!(
            "write it: zarrpipe rechunk {url} DESTINATION {}",
            options.join(" ")
        );
    }
    println!(
        "decode it: --decode {} (Python: decode_on=\"{}\"): {}",
        advice.decode_on, advice.decode_on, advice.decode_on_reason
    );
}
