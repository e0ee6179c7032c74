use super::store::StoreArgs;
use std::sync::Arc;

use zarrpipe::codec::CpuDecoder;
use zarrpipe::pipeline::{index_range, CoordValue, Selection};
use zarrpipe::stats::{channel_stats, stats_dim, StatsOptions};

#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Dataset path or URL (file://, http(s)://, s3://, gs://, az://).
    url: String,
    #[command(flatten)]
    store: StoreArgs,
    /// A variable to summarise (repeatable, in channel order; default: every data variable,
    /// and every one must be readable).
    #[arg(long = "var", value_name = "NAME")]
    variables: Vec<String>,
    /// First time step covered, a date (2020-01-01, 2020-01-01T06:00) or coordinate value
    /// (default: the first step): the training split's start.
    #[arg(long, value_name = "DATE")]
    start: Option<String>,
    /// Last time step covered, included (default: the last step).
    #[arg(long, value_name = "DATE")]
    end: Option<String>,
    /// The dimension the range and the tendencies run along (default: the dataset's time
    /// dimension, as `info` names it).
    #[arg(long, value_name = "DIM")]
    dim: Option<String>,
    /// Print JSON (what --normalize reads) instead of a table.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: StatsArgs) -> anyhow::Result<()> {
    let dataset = args.store.open(&args.url).await?;
    let dim = stats_dim(&dataset, args.dim.as_deref());
    let steps = match (&args.start, &args.end) {
        (None, None) => None,
        (start, end) => {
            // An open end is the coordinate's own first or last value.
            let selection = Selection {
                dim,
                from: start
                    .as_deref()
                    .map_or(CoordValue::Number(f64::MIN), Into::into),
                to: end
                    .as_deref()
                    .map_or(CoordValue::Number(f64::MAX), Into::into),
            };
            Some(index_range(&dataset, &selection).await?)
        }
    };
    let options = StatsOptions {
        variables: args.variables.clone(),
        dim: args.dim.clone(),
        steps,
        start: args.start.clone(),
        end: args.end.clone(),
        ..StatsOptions::default()
    };
    let report = channel_stats(&dataset, Arc::new(CpuDecoder::new()), &options).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let over = &report.computed_over;
    if let (Some(dim), Some([first, end])) = (&over.dim, over.steps) {
        println!("over steps {first}..{end} of `{dim}`");
    }
    if !over.missing_left_out.is_empty() {
        let dates = &over.missing_left_out;
        println!("missing steps left out: {}", dates.join(", "));
    }
    println!(
        "{:<20} {:>12} {:>10} {:>14} {:>14} {:>14} {:>14} {:>14}",
        "channel", "count", "nan", "min", "max", "mean", "std", "tendency std"
    );
    let show = |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{v:.6}"));
    for stats in &report.channels {
        println!(
            "{:<20} {:>12} {:>10} {:>14} {:>14} {:>14} {:>14} {:>14}",
            stats.channel,
            stats.count,
            stats.nan_count,
            show(stats.min),
            show(stats.max),
            show(stats.mean),
            show(stats.std),
            show(stats.tendency.as_ref().and_then(|t| t.std)),
        );
    }
    Ok(())
}
