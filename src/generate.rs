//! Synthetic ERA5-like Zarr v3 stores shaped like workload W1.
//!
//! The store is a Zarr v3 group holding four surface variables
//! `(time, latitude, longitude)`, three pressure-level variables
//! `(time, level, latitude, longitude)` and the four coordinate arrays.
//! Every data chunk is one 2-D field, or a latitude x longitude tile of one
//! ([`GenerateOptions::chunks`]); when sharded, one shard holds several time
//! steps (and all levels) of one variable, whole fields, and its inner chunks
//! are fields or tiles. The chunking never changes the values.
//!
//! Values are a smooth large-scale field (a zonal profile plus a few
//! separable waves drifting with time) plus small noise, rounded to 0.01
//! (0.1 for z and msl), so zstd reaches about 2.2:1 on the W1 grid.
//! They depend only on `(seed, variable, time, level, lat, lon)`, so any point
//! can be recomputed with [`expected_value`] to check what a reader returns.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{bail, ensure, Context, Result};
use rayon::prelude::*;
use zarrs::array::builder::ArrayBuilderFillValue;
use zarrs::array::codec::{
    BloscCodec, BloscCompressionLevel, BloscCompressor, BloscShuffleMode, BytesCodec, GzipCodec,
    ZstdCodec,
};
use zarrs::array::{
    data_type, Array, ArrayBuilder, ArrayMetadataOptions, BytesToBytesCodecTraits, CodecOptions,
    Endianness, ZARR_NAN_F32,
};
use zarrs::filesystem::FilesystemStore;
use zarrs::group::GroupBuilder;

/// Compression of the data variables (the bytes-to-bytes stage after `bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Compression {
    /// zstd level 3, no checksum.
    Zstd,
    /// blosc with lz4, clevel 5, byte shuffle.
    BloscLz4,
    /// blosc with zstd, clevel 5, byte shuffle.
    BloscZstd,
    /// gzip level 5.
    Gzip,
    /// `bytes` only.
    None,
}

/// Shape, codecs and seed of a generated store.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Time steps.
    pub time: u64,
    /// Pressure levels of the level variables.
    pub levels: u64,
    /// Latitudes of the grid.
    pub lat: u64,
    /// Longitudes of the grid.
    pub lon: u64,
    /// How the data variables are compressed.
    pub compression: Compression,
    /// Time steps per shard (`sharding_indexed`); `None` writes one object per field.
    pub shard: Option<u64>,
    /// Seed of the random values.
    pub seed: u64,
    /// Latitude x longitude size of a chunk (the inner chunk when sharded);
    /// `None` keeps one whole field per chunk. Tiles need not divide the grid:
    /// edge chunks are partial, and a shard is rounded up to whole tiles.
    pub chunks: Option<[u64; 2]>,
    /// Which variables to write: W1's seven (43 fields) or the training benchmark's six.
    pub variables: VariableSet,
}

/// The variables a store holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum VariableSet {
    /// W1: t2m, u10, v10, msl and z, t, u on `levels` pressure levels (43 fields at 13 levels).
    #[default]
    W1,
    /// The ERA5 U-Net benchmark's setup A (the hackathon's `train_unet.py`): t2m and five
    /// 500 hPa fields, `t2m, V500, U500, T500, Z500, Q500`, each `(time, latitude, longitude)`;
    /// `levels` does not apply.
    SetupA,
}

impl VariableSet {
    fn variables(self) -> &'static [Variable] {
        match self {
            Self::W1 => &VARIABLES,
            Self::SetupA => &SETUP_A_VARIABLES,
        }
    }

    fn has_levels(self) -> bool {
        self.variables().iter().any(|v| v.has_level)
    }
}

impl Default for GenerateOptions {
    /// The W1 store: 16 x 43 fields of 640 x 1280 float32 (2.25 GB decoded).
    fn default() -> Self {
        Self {
            time: 16,
            levels: 13,
            lat: 640,
            lon: 1280,
            compression: Compression::Zstd,
            shard: None,
            seed: 0,
            chunks: None,
            variables: VariableSet::W1,
        }
    }
}

impl GenerateOptions {
    /// The small sample store: 8 x 13 levels on a 128 x 256 grid, zstd.
    pub fn sample() -> Self {
        Self {
            time: 8,
            lat: 128,
            lon: 256,
            ..Self::default()
        }
    }
}

/// What [`generate`] wrote. Counts cover the seven data variables only;
/// the coordinate arrays are a few KiB and are left out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerateReport {
    /// Data variables written.
    pub variables: usize,
    /// Chunk objects written: fields, or shards when sharded.
    pub chunks: u64,
    /// Bytes of those objects on disk.
    pub stored_bytes: u64,
    /// Bytes of the float32 values they hold (in-bounds elements x 4).
    pub decoded_bytes: u64,
}

/// Hours between consecutive time steps (6-hourly, as in most training sets).
const TIME_STEP_HOURS: i64 = 6;

/// The 13 WeatherBench / ERA5 pressure levels in hPa.
const STANDARD_LEVELS: [i32; 13] = [
    50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000,
];

/// Separable waves per field: enough to look like weather, cheap to evaluate.
const WAVES: usize = 4;

/// The physical character of a variable: zonal profile, wave and noise size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    T2m,
    U10,
    V10,
    Msl,
    Z,
    T,
    U,
    V,
    Q,
}

#[derive(Clone, Copy)]
struct Variable {
    name: &'static str,
    long_name: &'static str,
    units: &'static str,
    has_level: bool,
    /// The pressure (hPa) of a single-level field such as `Z500`; `None` for surface fields
    /// and for level variables (whose pressure comes from the level coordinate).
    pressure: Option<f64>,
    kind: Kind,
}

const VARIABLES: [Variable; 7] = [
    Variable {
        name: "t2m",
        long_name: "2 metre temperature",
        units: "K",
        has_level: false,
        pressure: None,
        kind: Kind::T2m,
    },
    Variable {
        name: "u10",
        long_name: "10 metre U wind component",
        units: "m s**-1",
        has_level: false,
        pressure: None,
        kind: Kind::U10,
    },
    Variable {
        name: "v10",
        long_name: "10 metre V wind component",
        units: "m s**-1",
        has_level: false,
        pressure: None,
        kind: Kind::V10,
    },
    Variable {
        name: "msl",
        long_name: "Mean sea level pressure",
        units: "Pa",
        has_level: false,
        pressure: None,
        kind: Kind::Msl,
    },
    Variable {
        name: "z",
        long_name: "Geopotential",
        units: "m**2 s**-2",
        has_level: true,
        pressure: None,
        kind: Kind::Z,
    },
    Variable {
        name: "t",
        long_name: "Temperature",
        units: "K",
        has_level: true,
        pressure: None,
        kind: Kind::T,
    },
    Variable {
        name: "u",
        long_name: "U component of wind",
        units: "m s**-1",
        has_level: true,
        pressure: None,
        kind: Kind::U,
    },
];

/// Setup A of the training benchmark: the hackathon's six fields, as single-level variables.
const SETUP_A_VARIABLES: [Variable; 6] = [
    VARIABLES[0],
    Variable {
        name: "V500",
        long_name: "V component of wind at 500 hPa",
        units: "m s**-1",
        has_level: false,
        pressure: Some(500.0),
        kind: Kind::V,
    },
    Variable {
        name: "U500",
        long_name: "U component of wind at 500 hPa",
        units: "m s**-1",
        has_level: false,
        pressure: Some(500.0),
        kind: Kind::U,
    },
    Variable {
        name: "T500",
        long_name: "Temperature at 500 hPa",
        units: "K",
        has_level: false,
        pressure: Some(500.0),
        kind: Kind::T,
    },
    Variable {
        name: "Z500",
        long_name: "Geopotential at 500 hPa",
        units: "m**2 s**-2",
        has_level: false,
        pressure: Some(500.0),
        kind: Kind::Z,
    },
    Variable {
        name: "Q500",
        long_name: "Specific humidity at 500 hPa",
        units: "kg kg**-1",
        has_level: false,
        pressure: Some(500.0),
        kind: Kind::Q,
    },
];

/// Names of W1's data variables, surface ones first.
pub fn variable_names() -> impl Iterator<Item = &'static str> {
    VARIABLES.iter().map(|v| v.name)
}

/// Names of the data variables `set` writes, in the order they are written.
pub fn variable_names_of(set: VariableSet) -> impl Iterator<Item = &'static str> {
    set.variables().iter().map(|v| v.name)
}

/// Writes the store at `path`, which must be absent or an empty directory.
///
/// Chunks (or shards) are generated and encoded in parallel, one per rayon
/// task, so memory stays at a few chunks per thread. `progress` is called
/// after each chunk object with (done, total), one call at a time and with
/// `done` increasing, from whichever worker thread finished it.
pub fn generate(
    path: &Path,
    options: &GenerateOptions,
    progress: impl Fn(u64, u64) + Sync,
) -> Result<GenerateReport> {
    validate(options)?;
    prepare_directory(path)?;
    let store = Arc::new(
        FilesystemStore::new(path)
            .with_context(|| format!("cannot open a filesystem store at {}", path.display()))?,
    );
    let grid = Grid::new(options);

    write_group(&store, options, path)?;
    write_coordinates(&store, &grid, options)?;
    let variables = options.variables.variables();
    let arrays = variables
        .iter()
        .map(|variable| create_variable(&store, variable, options))
        .collect::<Result<Vec<_>>>()?;

    let tasks = chunk_tasks(options);
    let total = tasks.len() as u64;
    // Counting and reporting under one lock keeps `done` increasing across calls.
    let done = Mutex::new(0u64);
    let sizes = tasks
        .par_iter()
        .map(|task| {
            let sizes = write_chunk(&store, &arrays[task.variable], &grid, options, task)?;
            let mut done = done.lock().unwrap_or_else(PoisonError::into_inner);
            *done += 1;
            progress(*done, total);
            Ok(sizes)
        })
        .collect::<Result<Vec<(u64, u64)>>>()?;

    Ok(GenerateReport {
        variables: variables.len(),
        chunks: total,
        stored_bytes: sizes.iter().map(|s| s.0).sum(),
        decoded_bytes: sizes.iter().map(|s| s.1).sum(),
    })
}

/// The value [`generate`] writes for `variable` at one point, or `None` for an
/// unknown variable or an index out of range. `level` is ignored for surface
/// variables. Meant for checking stores; it rebuilds the field tables per call.
pub fn expected_value(
    options: &GenerateOptions,
    variable: &str,
    time: u64,
    level: u64,
    lat: u64,
    lon: u64,
) -> Option<f32> {
    let variables = options.variables.variables();
    let index = variables.iter().position(|v| v.name == variable)?;
    let level = if variables[index].has_level { level } else { 0 };
    if time >= options.time || level >= options.levels || lat >= options.lat || lon >= options.lon {
        return None;
    }
    let grid = Grid::new(options);
    let field = Field::new(options, index, time, level, &grid);
    Some(field.at(lat as usize, lon as usize))
}

/// The most time steps (and chunk objects) `generate` writes: its time coordinate and its
/// list of chunks are held in memory (8 bytes and a few words each).
pub const MAX_GENERATED_STEPS: u64 = 100_000_000;

fn validate(options: &GenerateOptions) -> Result<()> {
    for (name, value) in [
        ("--time", options.time),
        ("--levels", options.levels),
        ("--lat", options.lat),
        ("--lon", options.lon),
    ] {
        ensure!(value > 0, "{name} must be positive (got {value})");
    }
    ensure!(
        options.time <= MAX_GENERATED_STEPS && options.levels <= MAX_GENERATED_STEPS,
        "--time {} and --levels {}: at most {MAX_GENERATED_STEPS} each",
        options.time,
        options.levels
    );
    let field = options
        .lat
        .checked_mul(options.lon)
        .and_then(|n| n.checked_mul(4));
    ensure!(
        field.is_some_and(|bytes| bytes <= zarrpipe_store::MAX_CHUNK_BYTES),
        "--lat {} x --lon {}: a field of float32 must fit a chunk of at most 16 GiB",
        options.lat,
        options.lon
    );
    let objects = options
        .time
        .checked_mul(options.levels)
        .and_then(|n| n.checked_mul(options.variables.variables().len() as u64));
    ensure!(
        objects.is_some_and(|n| n <= MAX_GENERATED_STEPS),
        "--time {} x --levels {}: more than {MAX_GENERATED_STEPS} chunk objects",
        options.time,
        options.levels
    );
    ensure!(
        options.shard != Some(0),
        "shard must hold at least one time step"
    );
    ensure!(
        options.chunks.is_none_or(|[lat, lon]| lat > 0 && lon > 0),
        "chunks must be positive in latitude and longitude (got {:?})",
        options.chunks
    );
    Ok(())
}

/// Refuses to write into anything but an absent path or an empty directory,
/// so a typo cannot mix a new store into existing data.
fn prepare_directory(path: &Path) -> Result<()> {
    match std::fs::read_dir(path) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!(
                    "{} exists and is not empty; choose a new or empty directory",
                    path.display()
                );
            }
            Ok(())
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(path)
            .with_context(|| format!("cannot create directory {}", path.display())),
        Err(err) => {
            Err(err).with_context(|| format!("{} is not a usable directory", path.display()))
        }
    }
}

fn write_group(store: &Arc<FilesystemStore>, options: &GenerateOptions, path: &Path) -> Result<()> {
    let mut attributes = serde_json::Map::new();
    attributes.insert(
        "title".into(),
        "Synthetic ERA5-like reanalysis (zarrpipe W1 layout)".into(),
    );
    attributes.insert("generator".into(), "zarrpipe generate".into());
    attributes.insert("seed".into(), options.seed.into());
    GroupBuilder::new()
        .attributes(attributes)
        .build(store.clone(), "/")
        .with_context(|| format!("cannot build the root group of {}", path.display()))?
        .store_metadata()
        .with_context(|| format!("cannot write the root group metadata of {}", path.display()))
}

// ---------------------------------------------------------------------------
// Arrays and codecs
// ---------------------------------------------------------------------------

/// Keeps array attributes to what we set (no `_zarrs` provenance entry);
/// the group's `generator` attribute already says who wrote the store.
fn metadata_options() -> ArrayMetadataOptions {
    ArrayMetadataOptions::default().with_include_zarrs_metadata(false)
}

fn attributes(units: &str, long_name: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut map = serde_json::Map::new();
    map.insert("units".into(), units.into());
    map.insert("long_name".into(), long_name.into());
    map
}

fn bytes_to_bytes_codecs(
    compression: Compression,
) -> Result<Vec<Arc<dyn BytesToBytesCodecTraits>>> {
    let blosc = |cname| -> Result<Arc<dyn BytesToBytesCodecTraits>> {
        let clevel = BloscCompressionLevel::try_from(5u8)
            .map_err(|level| anyhow::anyhow!("invalid blosc clevel {level}"))?;
        let codec = BloscCodec::new(cname, clevel, None, BloscShuffleMode::Shuffle, Some(4))
            .context("cannot create the blosc codec")?;
        Ok(Arc::new(codec))
    };
    Ok(match compression {
        Compression::Zstd => vec![Arc::new(ZstdCodec::new(3, false))],
        Compression::BloscLz4 => vec![blosc(BloscCompressor::LZ4)?],
        Compression::BloscZstd => vec![blosc(BloscCompressor::Zstd)?],
        Compression::Gzip => vec![Arc::new(
            GzipCodec::new(5).context("cannot create the gzip codec")?,
        )],
        Compression::None => vec![],
    })
}

/// Latitude x longitude size of one chunk (inner chunk when sharded).
fn tile(options: &GenerateOptions) -> [u64; 2] {
    options.chunks.unwrap_or([options.lat, options.lon])
}

/// Latitude x longitude size of one shard: the whole field, rounded up to
/// whole tiles (sharding_indexed needs the shard to be a multiple of them).
fn shard_field(options: &GenerateOptions) -> [u64; 2] {
    let [tlat, tlon] = tile(options);
    [
        options.lat.div_ceil(tlat) * tlat,
        options.lon.div_ceil(tlon) * tlon,
    ]
}

/// Creates a data variable and writes its metadata. Sharded arrays get the
/// inner chain `bytes` + compression and the default crc32c-checked index.
fn create_variable(
    store: &Arc<FilesystemStore>,
    variable: &Variable,
    options: &GenerateOptions,
) -> Result<Array<FilesystemStore>> {
    let [tlat, tlon] = tile(options);
    let (shape, inner, dims): (Vec<u64>, Vec<u64>, &[&str]) = if variable.has_level {
        let dims: &[&str] = &["time", "level", "latitude", "longitude"];
        (
            vec![options.time, options.levels, options.lat, options.lon],
            vec![1, 1, tlat, tlon],
            dims,
        )
    } else {
        let dims: &[&str] = &["time", "latitude", "longitude"];
        (
            vec![options.time, options.lat, options.lon],
            vec![1, tlat, tlon],
            dims,
        )
    };
    let chunk = match options.shard {
        Some(n) => {
            let mut shard = shape.clone();
            shard[0] = n;
            let rank = shard.len();
            shard[rank - 2..].copy_from_slice(&shard_field(options));
            shard
        }
        None => inner.clone(),
    };
    let mut builder = ArrayBuilder::new(shape, chunk, data_type::float32(), ZARR_NAN_F32);
    builder
        .array_to_bytes_codec(Arc::new(BytesCodec::new(Some(Endianness::Little))))
        .bytes_to_bytes_codecs(bytes_to_bytes_codecs(options.compression)?)
        .dimension_names(Some(dims.iter().copied()))
        .attributes(attributes(variable.units, variable.long_name));
    if options.shard.is_some() {
        builder.subchunk_shape(inner);
    }
    let array = builder
        .build(store.clone(), &format!("/{}", variable.name))
        .with_context(|| format!("cannot build array {}", variable.name))?;
    array
        .store_metadata_opt(&metadata_options())
        .with_context(|| format!("cannot write metadata of array {}", variable.name))?;
    Ok(array)
}

/// Coordinates are tiny: one uncompressed chunk each, so any reader can use them.
fn write_coordinate<T: zarrs::array::Element>(
    store: &Arc<FilesystemStore>,
    name: &str,
    data_type: zarrs::array::DataType,
    values: &[T],
    fill: impl Into<ArrayBuilderFillValue>,
    attributes: serde_json::Map<String, serde_json::Value>,
) -> Result<()> {
    let len = values.len() as u64;
    let array = ArrayBuilder::new(vec![len], vec![len], data_type, fill)
        .array_to_bytes_codec(Arc::new(BytesCodec::new(Some(Endianness::Little))))
        .dimension_names(Some([name]))
        .attributes(attributes)
        .build(store.clone(), &format!("/{name}"))
        .with_context(|| format!("cannot build coordinate {name}"))?;
    array
        .store_metadata_opt(&metadata_options())
        .with_context(|| format!("cannot write metadata of coordinate {name}"))?;
    // A coordinate equal to the fill value (time 0) must still be written.
    let codec_options = CodecOptions::default().with_store_empty_chunks(true);
    array
        .store_chunk_opt(&[0], values, &codec_options)
        .with_context(|| format!("cannot write coordinate {name}"))
}

fn write_coordinates(
    store: &Arc<FilesystemStore>,
    grid: &Grid,
    options: &GenerateOptions,
) -> Result<()> {
    let time: Vec<i64> = (0..options.time as i64)
        .map(|t| t * TIME_STEP_HOURS)
        .collect();
    let mut time_attributes = attributes("hours since 2000-01-01", "time");
    time_attributes.insert("calendar".into(), "proleptic_gregorian".into());
    write_coordinate(
        store,
        "time",
        data_type::int64(),
        &time,
        0i64,
        time_attributes,
    )?;
    if options.variables.has_levels() {
        write_coordinate(
            store,
            "level",
            data_type::int32(),
            &grid.levels,
            0i32,
            attributes("hPa", "pressure level"),
        )?;
    }
    let lat: Vec<f32> = grid.lat_deg.iter().map(|&v| v as f32).collect();
    write_coordinate(
        store,
        "latitude",
        data_type::float32(),
        &lat,
        0f32,
        attributes("degrees_north", "latitude"),
    )?;
    let lon: Vec<f32> = grid.lon_deg.iter().map(|&v| v as f32).collect();
    write_coordinate(
        store,
        "longitude",
        data_type::float32(),
        &lon,
        0f32,
        attributes("degrees_east", "longitude"),
    )
}

// ---------------------------------------------------------------------------
// Chunk tasks
// ---------------------------------------------------------------------------

/// One chunk object to write: `time_block` is the time index unsharded, the
/// shard index sharded; `level` and `tile` (latitude, longitude chunk
/// indices) are only used unsharded.
struct ChunkTask {
    variable: usize,
    time_block: u64,
    level: u64,
    tile: [u64; 2],
}

fn chunk_tasks(options: &GenerateOptions) -> Vec<ChunkTask> {
    let mut tasks = Vec::new();
    for (variable, v) in options.variables.variables().iter().enumerate() {
        match options.shard {
            Some(n) => {
                for time_block in 0..options.time.div_ceil(n) {
                    tasks.push(ChunkTask {
                        variable,
                        time_block,
                        level: 0,
                        tile: [0, 0],
                    });
                }
            }
            None => {
                let levels = if v.has_level { options.levels } else { 1 };
                let [tlat, tlon] = tile(options);
                for time_block in 0..options.time {
                    for level in 0..levels {
                        for i in 0..options.lat.div_ceil(tlat) {
                            for j in 0..options.lon.div_ceil(tlon) {
                                tasks.push(ChunkTask {
                                    variable,
                                    time_block,
                                    level,
                                    tile: [i, j],
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    tasks
}

/// Generates, encodes and stores one chunk (or whole shard, so it is encoded
/// once); returns (stored bytes, decoded in-bounds bytes).
fn write_chunk(
    store: &FilesystemStore,
    array: &Array<FilesystemStore>,
    grid: &Grid,
    options: &GenerateOptions,
    task: &ChunkTask,
) -> Result<(u64, u64)> {
    let variable = &options.variables.variables()[task.variable];
    let levels = if variable.has_level {
        options.levels
    } else {
        1
    };
    // (time, level) of every field in the chunk, in C order, and the
    // latitude x longitude window each one covers: a tile of one field
    // unsharded, every field of the shard (rounded up to whole tiles) sharded.
    let [tlat, tlon] = tile(options);
    let (times, chunk_levels, origin, window): (Vec<u64>, Vec<u64>, [u64; 2], [u64; 2]) =
        match options.shard {
            Some(n) => (
                (task.time_block * n..(task.time_block + 1) * n).collect(),
                (0..levels).collect(),
                [0, 0],
                shard_field(options),
            ),
            None => (
                vec![task.time_block],
                vec![task.level],
                [task.tile[0] * tlat, task.tile[1] * tlon],
                [tlat, tlon],
            ),
        };
    let window_len = (window[0] * window[1]) as usize;
    // Elements of the window inside the grid (edge tiles are partial).
    let in_bounds = (options.lat.min(origin[0] + window[0]) - origin[0])
        * (options.lon.min(origin[1] + window[1]) - origin[1]);
    let mut data = vec![f32::NAN; times.len() * chunk_levels.len() * window_len];
    let fields = times
        .iter()
        .flat_map(|&t| chunk_levels.iter().map(move |&l| (t, l)));
    let mut valid_fields = 0u64;
    for ((time, level), out) in fields.zip(data.chunks_exact_mut(window_len)) {
        // Past the end of the time axis (last shard): leave the fill value.
        if time < options.time {
            Field::new(options, task.variable, time, level, grid).fill_window(origin, window, out);
            valid_fields += 1;
        }
    }

    let [i, j] = task.tile;
    let indices: Vec<u64> = match (options.shard, variable.has_level) {
        (Some(_), true) => vec![task.time_block, 0, 0, 0],
        (Some(_), false) => vec![task.time_block, 0, 0],
        (None, true) => vec![task.time_block, task.level, i, j],
        (None, false) => vec![task.time_block, i, j],
    };
    array
        .store_chunk(&indices, data)
        .with_context(|| format!("cannot write chunk {indices:?} of {}", variable.name))?;
    let file = store.key_to_fspath(&array.chunk_key(&indices));
    let stored = std::fs::metadata(&file)
        .with_context(|| format!("cannot stat chunk {} of {}", file.display(), variable.name))?
        .len();
    Ok((stored, valid_fields * in_bounds * 4))
}

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

/// Coordinates shared by every field.
struct Grid {
    lat_deg: Vec<f64>,
    lon_deg: Vec<f64>,
    levels: Vec<i32>,
}

impl Grid {
    fn new(options: &GenerateOptions) -> Self {
        let nlat = options.lat;
        let lat_deg = (0..nlat)
            .map(|i| {
                if nlat > 1 {
                    90.0 - 180.0 * i as f64 / (nlat - 1) as f64
                } else {
                    0.0
                }
            })
            .collect();
        let lon_deg = (0..options.lon)
            .map(|j| 360.0 * j as f64 / options.lon as f64)
            .collect();
        Self {
            lat_deg,
            lon_deg,
            levels: pressure_levels(options.levels),
        }
    }
}

/// The standard 13 levels, or `n` evenly spaced ones between 50 and 1000 hPa.
fn pressure_levels(n: u64) -> Vec<i32> {
    match n {
        13 => STANDARD_LEVELS.to_vec(),
        1 => vec![1000],
        _ => (0..n)
            .map(|k| (50.0 + 950.0 * k as f64 / (n - 1) as f64).round() as i32)
            .collect(),
    }
}

/// splitmix64: a tiny, well-mixed hash; enough for reproducible noise.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in [0, 1) from the top 53 bits of a hash.
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Values are rounded to 1 / `rounding_scale`, standing in for ERA5's 16-bit
/// GRIB packing that makes real data compress ~2:1: 0.01, but 0.1 for z and
/// msl, where float32 spacing near 1e5 is ~0.008 so 0.01 would not round at
/// all (their packing step in ERA5 is ~0.2).
fn rounding_scale(kind: Kind) -> f64 {
    match kind {
        Kind::Z | Kind::Msl => 10.0,
        // Specific humidity is about 1e-3 kg/kg at 500 hPa: keep 1e-7.
        Kind::Q => 1e7,
        _ => 100.0,
    }
}

/// Zonal mean, wave amplitude and noise amplitude of a variable at one
/// latitude (radians) and pressure (hPa); magnitudes roughly as in ERA5.
fn profile(kind: Kind, phi: f64, p: f64) -> (f64, f64, f64) {
    let c = phi.cos();
    match kind {
        Kind::T2m => (232.0 + 68.0 * c, 5.0, 0.3),
        Kind::U10 => (1.0 - 5.0 * (4.0 * phi).cos(), 7.0, 0.3),
        Kind::V10 => (0.0, 8.0, 0.3),
        Kind::V => (0.0, 10.0 * p.min(500.0) / 500.0 + 2.0, 0.4),
        // Moist tropics, dry poles; drier with height (scale height about 2.5 km of pressure).
        Kind::Q => {
            let q = 0.012 * c.powi(3) * (p / 1_000.0).powi(3) + 1e-5;
            (q, 0.3 * q, 0.05 * q)
        }
        Kind::Msl => (101_325.0 - 600.0 * (4.0 * phi).cos(), 1_000.0, 5.0),
        Kind::Z => {
            // Hypsometric height with a 7 km scale height; lower poleward.
            let z = 9.806_65 * 7_000.0 * (1_013.25 / p).ln();
            (z * (1.0 - 0.04 * (1.0 - c)), 300.0 + 0.01 * z, 1.0)
        }
        Kind::T => {
            let column = (288.0 * (p / 1_000.0).powf(0.19)).max(215.0);
            (column + (20.0 * c - 10.0) * p / 1_000.0, 4.0, 0.2)
        }
        Kind::U => {
            // Westerly jets near 40 degrees, strongest around 250 hPa.
            let jet = (-((p / 250.0).ln() / 0.6).powi(2) / 2.0).exp();
            let band = (-((phi.abs() - 0.7) / 0.25).powi(2)).exp();
            (
                5.0 + 35.0 * jet * band - 4.0 * (4.0 * phi).cos() * p / 1_000.0,
                8.0,
                0.4,
            )
        }
    }
}

/// One 2-D field, precomputed as separable tables so a point costs a few
/// multiply-adds and one hash: base[i] + sum_k rows[i][k] * cols[j][k] + noise.
struct Field {
    base: Vec<f64>,
    noise: Vec<f64>,
    rows: Vec<[f64; WAVES]>,
    cols: Vec<[f64; WAVES]>,
    key: u64,
    scale: f64,
}

impl Field {
    fn new(options: &GenerateOptions, variable: usize, time: u64, level: u64, grid: &Grid) -> Self {
        let seed = options.seed;
        let spec = &options.variables.variables()[variable];
        let kind = spec.kind;
        let p = spec
            .pressure
            .unwrap_or_else(|| f64::from(grid.levels.get(level as usize).copied().unwrap_or(1000)));
        // Wave shapes depend on (seed, variable, level) only; time moves the
        // phases so consecutive steps look like evolving weather.
        let shape_key = splitmix64(splitmix64(splitmix64(seed) ^ variable as u64) ^ level);
        let key = splitmix64(shape_key ^ time.wrapping_mul(0xD6E8_FEB8_6659_FD93));
        let mut rows = vec![[0.0; WAVES]; grid.lat_deg.len()];
        let mut cols = vec![[0.0; WAVES]; grid.lon_deg.len()];
        let mut base = Vec::with_capacity(grid.lat_deg.len());
        let mut noise = Vec::with_capacity(grid.lat_deg.len());
        for &lat in &grid.lat_deg {
            let (b, _, n) = profile(kind, lat.to_radians(), p);
            base.push(b);
            noise.push(n);
        }
        for k in 0..WAVES {
            let h = splitmix64(shape_key ^ (k as u64 + 1));
            let n_lat = 1.0 + (h % 4) as f64; // 1..4 meridional waves
            let m_lon = 1.0 + ((h >> 8) % 8) as f64; // 1..8 zonal waves
            let lat_phase = unit(splitmix64(h)) * std::f64::consts::TAU;
            let lon_phase = unit(splitmix64(h ^ 1)) * std::f64::consts::TAU;
            let speed = 0.05 + 0.15 * unit(splitmix64(h ^ 2)); // radians per step
            let weight = (0.5 + 0.5 * unit(splitmix64(h ^ 3))) / WAVES as f64 * 2.0;
            for (row, &lat) in rows.iter_mut().zip(&grid.lat_deg) {
                let phi = lat.to_radians();
                let (_, amp, _) = profile(kind, phi, p);
                row[k] = weight * amp * (n_lat * phi + lat_phase).cos();
            }
            let drift = lon_phase + speed * time as f64;
            for (col, &lon) in cols.iter_mut().zip(&grid.lon_deg) {
                col[k] = (m_lon * lon.to_radians() + drift).cos();
            }
        }
        Self {
            base,
            noise,
            rows,
            cols,
            key,
            scale: rounding_scale(kind),
        }
    }

    /// The value at (lat index, lon index); `fill_window` uses the same arithmetic.
    #[inline]
    fn at(&self, i: usize, j: usize) -> f32 {
        let row = &self.rows[i];
        let col = &self.cols[j];
        let mut v = self.base[i];
        for k in 0..WAVES {
            v += row[k] * col[k];
        }
        // Triangular noise in (-1, 1) from the two halves of one hash.
        let h = splitmix64(
            self.key ^ ((i * self.cols.len() + j) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let tri = ((h >> 32) as f64 + (h & 0xFFFF_FFFF) as f64) / (1u64 << 32) as f64 - 1.0;
        v += self.noise[i] * tri;
        ((v * self.scale).round() / self.scale) as f32
    }

    /// The `window` (latitude x longitude points, row-major in `out`) whose
    /// first point is `origin`; points past the grid's edge are left as they
    /// are (the fill value the caller put there).
    fn fill_window(&self, origin: [u64; 2], window: [u64; 2], out: &mut [f32]) {
        let [i0, j0] = origin.map(|x| x as usize);
        let width = window[1] as usize;
        let rows = self.rows.len().saturating_sub(i0).min(window[0] as usize);
        let cols = self.cols.len().saturating_sub(j0).min(width);
        for (di, row) in out.chunks_exact_mut(width).take(rows).enumerate() {
            for (dj, value) in row[..cols].iter_mut().enumerate() {
                *value = self.at(i0 + di, j0 + dj);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zarrs::array::{ArrayShardedExt, ArraySubset};

    fn tiny(compression: Compression, shard: Option<u64>) -> GenerateOptions {
        GenerateOptions {
            time: 2,
            levels: 3,
            lat: 8,
            lon: 16,
            compression,
            shard,
            seed: 7,
            chunks: None,
            variables: VariableSet::W1,
        }
    }

    fn open(path: &Path, name: &str) -> Array<FilesystemStore> {
        let store = Arc::new(FilesystemStore::new(path).expect("store"));
        Array::open(store, &format!("/{name}")).expect("open array")
    }

    /// Generates `options` and checks every variable against `expected_value`.
    fn check_store(options: &GenerateOptions) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store");
        let report = generate(&path, options, |_, _| {}).expect("generate");
        assert_eq!(report.variables, 7);
        let fields = 2 * 4 + 2 * 3 * 3;
        assert_eq!(report.decoded_bytes, fields * 8 * 16 * 4);
        match options.shard {
            Some(_) => assert_eq!(report.chunks, 7),
            None => assert_eq!(report.chunks, fields),
        }
        assert!(report.stored_bytes > 0);

        for v in &VARIABLES {
            let array = open(&path, v.name);
            let (shape, chunk_grid, dims): (Vec<u64>, Vec<u64>, Vec<&str>) = if v.has_level {
                (
                    vec![2, 3, 8, 16],
                    vec![2, 3, 1, 1],
                    vec!["time", "level", "latitude", "longitude"],
                )
            } else {
                (
                    vec![2, 8, 16],
                    vec![2, 1, 1],
                    vec!["time", "latitude", "longitude"],
                )
            };
            assert_eq!(array.shape(), shape.as_slice(), "{}", v.name);
            let names: Vec<Option<String>> = dims.iter().map(|d| Some(d.to_string())).collect();
            assert_eq!(array.dimension_names(), &Some(names), "{}", v.name);
            assert_eq!(array.attributes()["units"], v.units);
            if options.shard.is_some() {
                assert!(array.is_sharded());
                let mut expected_grid = chunk_grid.clone();
                expected_grid[0] = 1; // one shard of 2 time steps
                expected_grid[1] = 1;
                assert_eq!(array.chunk_grid_shape(), expected_grid.as_slice());
                assert_eq!(array.subchunk_grid_shape(), chunk_grid);
            } else {
                assert!(!array.is_sharded());
                assert_eq!(array.chunk_grid_shape(), chunk_grid.as_slice());
            }

            let all = ArraySubset::new_with_shape(shape.clone());
            let values: Vec<f32> = array.retrieve_array_subset(&all).expect("read");
            assert!(values.iter().all(|x| x.is_finite()), "{}", v.name);
            // Spot-check points against the value function, C order indexing.
            for (t, l, i, j) in [(0, 0, 0, 0), (1, 2, 7, 15), (1, 1, 3, 9)] {
                let l = if v.has_level { l } else { 0 };
                let flat = if v.has_level {
                    ((t * 3 + l) * 8 + i) * 16 + j
                } else {
                    (t * 8 + i) * 16 + j
                };
                let expected = expected_value(options, v.name, t, l, i, j).expect("in range");
                assert_eq!(
                    values[flat as usize], expected,
                    "{} at {t},{l},{i},{j}",
                    v.name
                );
            }
        }

        let time = open(&path, "time");
        let time: Vec<i64> = time
            .retrieve_array_subset(&ArraySubset::new_with_shape(vec![2]))
            .expect("time");
        assert_eq!(time, vec![0, TIME_STEP_HOURS]);
        let lat = open(&path, "latitude");
        let lat: Vec<f32> = lat
            .retrieve_array_subset(&ArraySubset::new_with_shape(vec![8]))
            .expect("lat");
        assert_eq!((lat[0], lat[7]), (90.0, -90.0));
        let level = open(&path, "level");
        let level: Vec<i32> = level
            .retrieve_array_subset(&ArraySubset::new_with_shape(vec![3]))
            .expect("level");
        assert_eq!(level, vec![50, 525, 1000]);
    }

    #[test]
    fn generate_each_compression() {
        for compression in [
            Compression::Zstd,
            Compression::BloscLz4,
            Compression::BloscZstd,
            Compression::Gzip,
            Compression::None,
        ] {
            check_store(&tiny(compression, None));
        }
    }

    #[test]
    fn generate_sharded() {
        check_store(&tiny(Compression::Zstd, Some(2)));
        check_store(&tiny(Compression::BloscLz4, Some(2)));
    }

    #[test]
    fn generate_partial_last_shard() {
        let options = GenerateOptions {
            time: 3,
            ..tiny(Compression::Zstd, Some(2))
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let report = generate(&dir.path().join("s"), &options, |_, _| {}).expect("generate");
        assert_eq!(report.chunks, 14);
        assert_eq!(report.decoded_bytes, (3 * 4 + 3 * 3 * 3) * 8 * 16 * 4);
        let array = open(&dir.path().join("s"), "z");
        let values: Vec<f32> = array
            .retrieve_array_subset(&ArraySubset::new_with_shape(vec![3, 3, 8, 16]))
            .expect("read");
        assert!(values.iter().all(|x| x.is_finite()));
        assert_eq!(
            values[values.len() - 1],
            expected_value(&options, "z", 2, 2, 7, 15).expect("in range")
        );
    }

    /// Setup A: six single-level fields named as the hackathon's, no level coordinate, values
    /// of each field's physical size (Q500 a small positive humidity, Z500 about 5 km of
    /// geopotential height), and t2m the same field as W1's.
    #[test]
    fn setup_a_writes_the_six_training_fields() {
        let options = GenerateOptions {
            variables: VariableSet::SetupA,
            ..tiny(Compression::Zstd, None)
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store");
        let report = generate(&path, &options, |_, _| {}).expect("generate");
        assert_eq!(report.variables, 6);
        assert_eq!(report.chunks, 6 * 2);
        assert!(!path.join("level").exists());
        let names: Vec<_> = variable_names_of(VariableSet::SetupA).collect();
        assert_eq!(names, ["t2m", "V500", "U500", "T500", "Z500", "Q500"]);
        for name in names {
            let array = open(&path, name);
            assert_eq!(array.shape(), &[2, 8, 16], "{name}");
            let values: Vec<f32> = array
                .retrieve_array_subset(&ArraySubset::new_with_shape(vec![2, 8, 16]))
                .expect("values");
            for (k, value) in values.iter().enumerate() {
                let (t, i, j) = (k / 128, (k / 16) % 8, k % 16);
                let expected = expected_value(&options, name, t as u64, 0, i as u64, j as u64);
                assert_eq!(Some(*value), expected, "{name}[{t}, {i}, {j}]");
            }
            let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / values.len() as f64;
            let plausible = match name {
                "Q500" => (1e-6..0.01).contains(&mean) && values.iter().all(|&v| v > 0.0),
                "Z500" => (45_000.0..58_000.0).contains(&mean),
                "T500" => (230.0..275.0).contains(&mean),
                "t2m" => (230.0..310.0).contains(&mean),
                _ => mean.abs() < 40.0,
            };
            assert!(plausible, "{name}: mean {mean}");
        }
        let w1 = tiny(Compression::Zstd, None);
        assert_eq!(
            expected_value(&options, "t2m", 1, 0, 3, 5),
            expected_value(&w1, "t2m", 1, 0, 3, 5)
        );
    }

    #[test]
    fn refuses_non_empty_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("keep.txt"), b"x").expect("write");
        let err = generate(dir.path(), &tiny(Compression::Zstd, None), |_, _| {}).unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err:#}");
        // An existing empty directory is fine.
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).expect("mkdir");
        generate(&empty, &tiny(Compression::Zstd, None), |_, _| {})
            .expect("generate into empty dir");
    }

    #[test]
    fn values_are_plausible_and_deterministic() {
        let options = GenerateOptions {
            time: 1,
            levels: 13,
            lat: 32,
            lon: 64,
            ..GenerateOptions::default()
        };
        let grid = Grid::new(&options);
        let ranges = [
            (220.0, 311.0),
            (-25.0, 25.0),
            (-25.0, 25.0),
            (96_000.0, 104_000.0),
            (0.0, 2.2e5),
            (195.0, 310.0),
            (-40.0, 65.0),
        ];
        for (index, (lo, hi)) in ranges.into_iter().enumerate() {
            let levels = if VARIABLES[index].has_level { 13 } else { 1 };
            for level in 0..levels {
                let mut out = vec![0.0; 32 * 64];
                Field::new(&options, index, 0, level, &grid).fill_window(
                    [0, 0],
                    [32, 64],
                    &mut out,
                );
                for &x in &out {
                    let x = f64::from(x);
                    assert!(
                        (lo..=hi).contains(&x),
                        "{} level {level}: {x}",
                        VARIABLES[index].name
                    );
                    // Rounded to 0.01 (checkable where float32 resolves it).
                    if x.abs() < 1_000.0 {
                        assert!((x * 100.0 - (x * 100.0).round()).abs() < 1e-2, "{x}");
                    }
                }
            }
        }
        let a = expected_value(&options, "t", 0, 5, 10, 20);
        assert_eq!(a, expected_value(&options, "t", 0, 5, 10, 20));
        assert_ne!(
            a,
            expected_value(
                &GenerateOptions {
                    seed: 1,
                    ..options.clone()
                },
                "t",
                0,
                5,
                10,
                20
            )
        );
    }

    /// Not a unit test: `cargo test ... zstd_ratio -- --ignored --nocapture`
    /// generates the sample store and prints the compression ratio and time.
    #[test]
    #[ignore]
    fn zstd_ratio() {
        for compression in [
            Compression::Zstd,
            Compression::BloscLz4,
            Compression::BloscZstd,
            Compression::Gzip,
        ] {
            let dir = tempfile::tempdir().expect("tempdir");
            let options = GenerateOptions {
                time: 2,
                compression,
                ..GenerateOptions::sample()
            };
            let start = std::time::Instant::now();
            let report = generate(&dir.path().join("s"), &options, |_, _| {}).expect("generate");
            println!(
                "{compression:?}: {} chunks, {} -> {} bytes, ratio {:.2}, {:.2?}",
                report.chunks,
                report.decoded_bytes,
                report.stored_bytes,
                report.decoded_bytes as f64 / report.stored_bytes as f64,
                start.elapsed()
            );
        }
    }
}
