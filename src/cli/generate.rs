use std::path::PathBuf;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use zarrpipe::generate::{generate, Compression, GenerateOptions, VariableSet};

#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// Directory to write the store into (must not exist or be empty).
    path: PathBuf,
    /// Time steps.
    #[arg(long, default_value_t = 16)]
    time: u64,
    /// Pressure levels of the level variables z, t, u.
    #[arg(long, default_value_t = 13)]
    levels: u64,
    /// Latitude points.
    #[arg(long, default_value_t = 640)]
    lat: u64,
    /// Longitude points.
    #[arg(long, default_value_t = 1280)]
    lon: u64,
    /// Compression of every chunk.
    #[arg(long, value_enum, default_value_t = Compression::Zstd)]
    codec: Compression,
    /// Time steps per shard (sharding_indexed; its inner chunks are fields, or --chunks tiles); default: none.
    #[arg(long)]
    shard: Option<u64>,
    /// Latitude x longitude size of every chunk, e.g. 320,640 (inner chunks when sharded; a shard
    /// still holds whole fields); default: one whole field per chunk.
    #[arg(long, value_name = "LAT,LON", value_parser = parse_chunks)]
    chunks: Option<[u64; 2]>,
    /// Which variables: `w1` (t2m, u10, v10, msl; z, t, u on --levels levels: 43 fields), or
    /// `setup-a` (the U-Net training benchmark's t2m, V500, U500, T500, Z500, Q500).
    #[arg(long, value_enum, default_value_t = VariableSet::W1)]
    variables: VariableSet,
    /// Seed of the synthetic fields.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let options = GenerateOptions {
        time: args.time,
        levels: args.levels,
        lat: args.lat,
        lon: args.lon,
        compression: args.codec,
        shard: args.shard,
        seed: args.seed,
        chunks: args.chunks,
        variables: args.variables,
    };
    let started = Instant::now();
    let report = write_with_progress(&args.path, &options)?;
    println!(
        "wrote {}: {} variables, {} chunks, {:.1} MB stored, {:.1} MB decoded (ratio {:.2}) in {:.1} s",
        args.path.display(),
        report.variables,
        report.chunks,
        report.stored_bytes as f64 / 1e6,
        report.decoded_bytes as f64 / 1e6,
        report.decoded_bytes as f64 / report.stored_bytes.max(1) as f64,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `LAT,LON`, both positive: the chunk size of --chunks.
fn parse_chunks(value: &str) -> Result<[u64; 2], String> {
    let parse = |part: &str| match part.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "expected LAT,LON as two positive integers (e.g. 320,640), got {value:?}"
        )),
    };
    match value.split_once(',') {
        Some((lat, lon)) => Ok([parse(lat)?, parse(lon)?]),
        None => Err(format!(
            "expected LAT,LON as two positive integers (e.g. 320,640), got {value:?}"
        )),
    }
}

/// Generates with a progress bar on stderr.
pub fn write_with_progress(
    path: &std::path::Path,
    options: &GenerateOptions,
) -> anyhow::Result<zarrpipe::generate::GenerateReport> {
    let bar = generate_progress_bar()?;
    let report = generate(path, options, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    report
}

pub fn generate_progress_bar() -> anyhow::Result<ProgressBar> {
    let bar = ProgressBar::new(0);
    bar.set_style(ProgressStyle::with_template(
        "generating {bar:40} {pos}/{len} chunks",
    )?);
    Ok(bar)
}

#[cfg(test)]
mod tests {
    use super::parse_chunks;

    #[test]
    fn chunks_argument() {
        assert_eq!(parse_chunks("320,640"), Ok([320, 640]));
        assert_eq!(parse_chunks(" 160 , 320"), Ok([160, 320]));
        for bad in ["320", "0,640", "320,", "a,b", "320,640,1", "-1,2"] {
            assert!(parse_chunks(bad).is_err(), "{bad}");
        }
    }
}
