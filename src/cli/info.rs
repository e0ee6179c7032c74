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
    match &info.time_dim {
        Some(time) => println!("iterated as time: {} ({})", time.name, time.reason),
        None => println!("iterated as time: none (no dimension is time by its coordinates or name; --time-dim NAME picks one)"),
    }
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
    for variable in &info.variables {
        if let Some(line) = encoding_line(&variable.encoding, info.mask_and_scale) {
            println!("encoding {}: {line}", variable.name);
        }
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

/// A variable's CF encoding on one line; `None` when it has none.
fn encoding_line(encoding: &zarrpipe::store::Encoding, decoded: bool) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(cf) = &encoding.decoding {
        if let Some(read_as) = cf.read_as {
            parts.push(format!("_Unsigned (read as {read_as})"));
        }
        if !cf.missing.is_empty() {
            let values: Vec<String> = cf.missing.iter().map(f64::to_string).collect();
            parts.push(format!("missing {}", values.join(", ")));
        }
        if let Some(scale) = cf.scale_factor {
            parts.push(format!("scale_factor {scale}"));
        }
        if let Some(offset) = cf.add_offset {
            parts.push(format!("add_offset {offset}"));
        }
    }
    let applied = match (parts.is_empty(), decoded) {
        (true, _) => String::new(),
        (false, true) => " (decoded)".to_string(),
        (false, false) => " (not decoded: --raw-values)".to_string(),
    };
    for (key, value) in &encoding.valid {
        parts.push(format!("{key} {value} (not applied)"));
    }
    (!parts.is_empty()).then(|| format!("{}{applied}", parts.join(", ")))
}
