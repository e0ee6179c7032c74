//! Helpers shared by the integration tests: the fixture manifest written by
//! tests/fixtures/make_fixtures.py, whole-array reads through the library, and a loopback
//! HTTP server for the fixture stores.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use futures::{stream, TryStreamExt};
use serde::Deserialize;
use zarrpipe::codec::{CpuDecoder, DecodeExt};
use zarrpipe::store::{ChunkRequest, FetchExt, Variable};

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

#[derive(Debug, Deserialize)]
pub struct Manifest {
    pub stores: Vec<StoreEntry>,
}

#[derive(Debug, Deserialize)]
pub struct StoreEntry {
    pub store: String,
    pub zarr_format: u8,
    pub consolidated: bool,
    #[serde(default)]
    pub coordinates: Option<Vec<String>>,
    #[serde(default)]
    pub attributes: serde_json::Map<String, serde_json::Value>,
    pub arrays: Vec<ArrayEntry>,
}

#[derive(Debug, Deserialize)]
pub struct ArrayEntry {
    pub path: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub chunks: Vec<u64>,
    pub dimension_names: Option<Vec<String>>,
    pub expected: String,
    pub codecs: String,
    pub missing_chunk_files: Vec<String>,
    pub nan_count: u64,
}

impl ArrayEntry {
    /// The codec of this array that zarrs (and so zarrpipe) does not implement, if any:
    /// numcodecs' delta filter.
    pub fn unsupported_codec(&self) -> Option<&'static str> {
        self.codecs.contains("delta(").then_some("delta")
    }
}

pub fn manifest() -> Manifest {
    let text = std::fs::read_to_string(fixtures().join("manifest.json")).expect("fixture manifest");
    serde_json::from_str(&text).expect("manifest parses")
}

pub fn store_path(store: &str) -> String {
    fixtures()
        .join("stores")
        .join(store)
        .to_string_lossy()
        .into_owned()
}

/// Copies a directory tree (a fixture store) to `to`.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

pub fn expected_bytes(array: &ArrayEntry) -> Vec<u8> {
    std::fs::read(fixtures().join(&array.expected)).expect("expected values")
}

/// Reads a whole variable through the fetch and decode stages into C-order native bytes.
pub async fn read_whole(variable: &Arc<Variable>) -> Result<Vec<u8>, zarrpipe::codec::Error> {
    let shape = variable.shape().to_vec();
    let size = variable.dtype().size();
    let mut whole = vec![0u8; shape.iter().product::<u64>() as usize * size];
    let ranges: Vec<_> = shape.iter().map(|&n| 0..n).collect();
    let requests = variable
        .chunks_in(&ranges)
        .into_iter()
        .map(|c| ChunkRequest::new(variable.clone(), c));
    let mut chunks = stream::iter(requests)
        .fetch(8)
        .decode(Arc::new(CpuDecoder::new()), 8);
    while let Some(chunk) = chunks.try_next().await? {
        let (start, chunk_shape) = variable.chunk_region(&chunk.request.indices)?;
        copy_into_whole(&chunk.bytes, &start, &chunk_shape, &shape, size, &mut whole);
    }
    Ok(whole)
}

fn copy_into_whole(
    src: &[u8],
    start: &[u64],
    chunk: &[u64],
    shape: &[u64],
    size: usize,
    out: &mut [u8],
) {
    let rank = shape.len();
    if rank == 0 {
        out.copy_from_slice(&src[..size]);
        return;
    }
    let inside: Vec<u64> = (0..rank)
        .map(|a| chunk[a].min(shape[a] - start[a]))
        .collect();
    let total: u64 = inside[..rank - 1].iter().product();
    let row = inside[rank - 1] as usize * size;
    for flat in 0..total {
        let mut rest = flat;
        let mut coord = vec![0u64; rank];
        for a in (0..rank - 1).rev() {
            coord[a] = rest % inside[a];
            rest /= inside[a];
        }
        let src_offset = (0..rank).fold(0, |o, a| o * chunk[a] + coord[a]) as usize * size;
        let dst_offset =
            (0..rank).fold(0, |o, a| o * shape[a] + start[a] + coord[a]) as usize * size;
        out[dst_offset..dst_offset + row].copy_from_slice(&src[src_offset..src_offset + row]);
    }
}

/// Equal bytes, or equal floats with NaN equal to NaN (fill NaNs may differ in payload).
pub fn same_values(dtype: &str, actual: &[u8], expected: &[u8]) -> bool {
    if actual == expected {
        return true;
    }
    match dtype {
        "float32" => floats_equal::<4>(actual, expected, |b| f32::from_le_bytes(b) as f64),
        "float64" => floats_equal::<8>(actual, expected, f64::from_le_bytes),
        _ => false,
    }
}

fn floats_equal<const N: usize>(a: &[u8], b: &[u8], to_f64: impl Fn([u8; N]) -> f64) -> bool {
    a.len() == b.len()
        && a.chunks_exact(N).zip(b.chunks_exact(N)).all(|(x, y)| {
            let (x, y) = (to_f64(x.try_into().unwrap()), to_f64(y.try_into().unwrap()));
            x == y || (x.is_nan() && y.is_nan())
        })
}

/// Serves `root` over HTTP on a loopback port (range requests included); returns the base URL.
pub async fn serve_directory(root: PathBuf) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let address = listener.local_addr().expect("local address");
    let app = axum::Router::new().fallback_service(tower_http::services::ServeDir::new(root));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    format!("http://{address}")
}
