use super::store::StoreArgs;
use zarrpipe::info::describe;

#[derive(Debug, clap::Args)]
pub struct InfoArgs {
    /// Dataset path or URL (file://, http(s)://, s3://, gs://, az://).
    url: String,
    #[command(flatten)]
    store: StoreArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: InfoArgs) -> anyhow::Result<()> {
    let dataset = args.store.open(&args.url).await?;
    let info = describe(&dataset).await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&info)?);
        return Ok(());
    }
    let consolidated = if info.consolidated {
        ", consolidated"
    } else {
        ""
    };
    println!("{} (Zarr v{}{consolidated})", info.url, info.zarr_format);
    let dims: Vec<String> = info
        .dims
        .iter()
        .map(|(name, length)| format!("{name}={length}"))
        .collect();
    println!("dimensions: {}", dims.join(", "));
    for variable in &info.variables {
        let kind = if variable.coordinate {
            "coord"
        } else {
            "data "
        };
        let stored = variable.stored_bytes.map_or("?".to_string(), megabytes);
        println!(
            "{kind} {:<12} {:<8} ({}) shape {:?} chunks {:?} x {:?} codecs [{}] stored {} decoded {}",
            variable.name,
            variable.dtype.to_string(),
            variable.dims.join(", "),
            variable.shape,
            variable.chunk_shape,
            variable.chunk_grid,
            variable.codecs.join(", "),
            stored,
            variable
                .decoded_bytes
                .map_or("more than 2^64 bytes".to_string(), megabytes),
        );
    }
    for unreadable in &info.unreadable {
        println!("unreadable {}: {}", unreadable.name, unreadable.reason);
    }
    if let Some(missing) = &info.missing {
        super::plan::print_missing(missing);
    }
    Ok(())
}

fn megabytes(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}
