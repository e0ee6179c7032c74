use super::store::StoreArgs;
use std::sync::Arc;

use anyhow::Context;
use zarrpipe::codec::CpuDecoder;
use zarrpipe::stats::variable_stats;

#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Dataset path or URL (file://, http(s)://, s3://, gs://, az://).
    url: String,
    #[command(flatten)]
    store: StoreArgs,
    /// A variable to summarise (repeatable; default: every variable, and every one must be
    /// readable).
    #[arg(long = "var", value_name = "NAME")]
    variables: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: StatsArgs) -> anyhow::Result<()> {
    let dataset = args.store.open(&args.url).await?;
    // By default every array, those zarrpipe cannot read included, so that one is named
    // (with how to leave it out) rather than skipped.
    let names = if args.variables.is_empty() {
        dataset.variable_names()
    } else {
        args.variables.clone()
    };
    let variables: Vec<_> = names
        .iter()
        .map(|name| dataset.variable(name).cloned())
        .collect::<Result<_, _>>()?;
    let decoder = Arc::new(CpuDecoder::new());
    let concurrency = 2 * rayon::current_num_threads();
    let mut all = Vec::new();
    for variable in &variables {
        let stats = variable_stats(variable, decoder.clone(), concurrency)
            .await
            .with_context(|| format!("statistics of `{}`", variable.name()))?;
        all.push(stats);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    println!(
        "{:<16} {:>12} {:>10} {:>14} {:>14} {:>14}",
        "variable", "count", "nan", "min", "max", "mean"
    );
    let show = |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{v:.6}"));
    for stats in &all {
        println!(
            "{:<16} {:>12} {:>10} {:>14} {:>14} {:>14}",
            stats.variable,
            stats.count,
            stats.nan_count,
            show(stats.min),
            show(stats.max),
            show(stats.mean)
        );
    }
    Ok(())
}
