use std::sync::Arc;

use zarrpipe::batcher::{Batcher, PlanSummary, SampleLayout};

use super::store::StoreArgs;
use super::windows::WindowArgs;

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// Dataset path or URL (file://, http(s)://, s3://, gs://, az://).
    url: String,
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    windows: WindowArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: PlanArgs) -> anyhow::Result<()> {
    let dataset = args.store.open(&args.url).await?;
    let variables = if args.windows.variables.is_empty() {
        dataset.data_variable_names()
    } else {
        args.windows.variables.clone()
    };
    let layout = Arc::new(SampleLayout::new(
        &dataset,
        &variables,
        &args.windows.resolved_spec(&dataset).await?,
    )?);
    let batcher = Batcher::with_options(
        layout.clone(),
        args.windows.batch_size,
        &args.windows.epoch_options()?,
    )?;
    let plan = PlanSummary::of_epoch(&batcher);
    if let Some(why) = layout.why_empty() {
        eprintln!("the epoch has no samples: {why}");
    }
    // Static variables are read once, whole, when a pipeline is built: not in the epoch's
    // reads above.
    let statics: Vec<&str> = layout
        .static_variables()
        .into_iter()
        .map(|number| layout.variables()[number].name())
        .collect();
    if args.json {
        let mut json = serde_json::to_value(&plan)?;
        json["sample_shape"] = serde_json::json!(layout.sample_shape());
        json["batch_size"] = serde_json::json!(batcher.batch_size());
        json["static_variables"] = serde_json::json!(statics);
        println!("{json}");
        return Ok(());
    }
    println!(
        "sample shape {:?}, {} channels",
        layout.sample_shape(),
        layout.channels().len()
    );
    println!(
        "{} samples per epoch in {} batches of {}",
        plan.samples,
        plan.batches,
        batcher.batch_size()
    );
    println!(
        "{} chunk reads per epoch, {:.1} MB decoded for {:.1} MB delivered: read amplification {:.3}",
        plan.chunk_reads,
        plan.bytes_read as f64 / 1e6,
        plan.bytes_delivered as f64 / 1e6,
        plan.read_amplification
    );
    if !statics.is_empty() {
        println!(
            "static fields read once, whole, not per batch: {}",
            statics.join(", ")
        );
    }
    if plan.estimated {
        println!(
            "(reads estimated from the first {} batches, scaled up to the epoch)",
            plan.planned_batches
        );
    }
    Ok(())
}
