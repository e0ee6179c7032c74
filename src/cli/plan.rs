use std::sync::Arc;

use zarrpipe::batcher::{Batcher, MissingSteps, PlanSummary, SampleLayout};
use zarrpipe::pipeline::{apply_missing_steps, label_channels};

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
    let mut layout = SampleLayout::new(
        &dataset,
        &variables,
        &args.windows.resolved_spec(&dataset).await?,
    )?;
    label_channels(&dataset, &mut layout).await?;
    let layout =
        Arc::new(apply_missing_steps(&dataset, layout, args.windows.missing.into()).await?);
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
        if let Some((steps, policy)) = layout.missing_steps() {
            json["missing"] = serde_json::json!({
                "policy": policy.to_string(),
                "dim": steps.dim,
                "frequency": steps.frequency_text,
                "steps": steps.count(),
                "dates": steps.dates(),
                "gaps": steps.gaps,
                "absent": steps.absent,
                "unchecked": steps.unchecked,
                "skipped": layout.skipped(),
            });
        }
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
    if let Some((steps, policy)) = layout.missing_steps() {
        print_missing(steps);
        if layout.skipped() > 0 {
            let what = match layout.batch_groups() {
                Some(_) => "batches",
                None => "samples",
            };
            println!(
                "{} {what} left out: they touch a missing step (--missing {policy})",
                layout.skipped()
            );
        }
    }
    if plan.estimated {
        println!(
            "(reads estimated from the first {} batches, scaled up to the epoch)",
            plan.planned_batches
        );
    }
    Ok(())
}

/// The missing steps, one line each (at most 20 dates shown), and what was not checked.
pub fn print_missing(steps: &MissingSteps) {
    let frequency = steps
        .frequency_text
        .as_deref()
        .map_or(String::new(), |f| format!(", every {f}"));
    if steps.is_empty() {
        println!("missing steps along `{}`{frequency}: none", steps.dim);
    } else {
        let dates = steps.dates();
        let more = match steps.count().saturating_sub(20) {
            0 => String::new(),
            more => format!(" and {more} more"),
        };
        let shown: Vec<&str> = dates.iter().take(20).map(String::as_str).collect();
        println!(
            "missing steps along `{}`{frequency}: {} ({}{more})",
            steps.dim,
            steps.count(),
            shown.join(", ")
        );
        for step in &steps.absent {
            println!("  {} absent: {}", step.date, step.variables.join(", "));
        }
    }
    for why in &steps.unchecked {
        println!("  not checked: {why}");
    }
}
