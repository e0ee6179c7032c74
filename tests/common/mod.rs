//! Helpers shared by the integration tests: the fixture manifest written by
//! tests/fixtures/make_fixtures.py, whole-array reads through the library, and a loopback
//! HTTP server for the fixture stores.

#![allow(dead_code)]

pub mod servers;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use zarrpipe::codec::CpuDecoder;
use zarrpipe::store::Variable;

/// The fixtures directory: beside the sources the test was built from, or under the working
/// directory when the test binary runs on another machine (the GPU hosts).
pub fn fixtures() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    if built.exists() {
        built
    } else {
        PathBuf::from("tests/fixtures")
    }
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
    zarrpipe::codec::read_array(variable, Arc::new(CpuDecoder::new()), 8).await
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

/// Writes zarr-python's inline consolidated metadata into the root `zarr.json`, so the store
/// opens in one request and can be served by a plain HTTP server (which cannot list).
pub fn consolidate(root: &Path) {
    let read = |path: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    };
    let mut metadata = serde_json::Map::new();
    for entry in std::fs::read_dir(root).unwrap() {
        let entry = entry.unwrap();
        let document = entry.path().join("zarr.json");
        if document.exists() {
            let name = entry.file_name().to_string_lossy().into_owned();
            metadata.insert(name, read(&document));
        }
    }
    let mut group = read(&root.join("zarr.json"));
    group["consolidated_metadata"] = serde_json::json!({
        "kind": "inline",
        "must_understand": false,
        "metadata": metadata,
    });
    std::fs::write(root.join("zarr.json"), group.to_string()).unwrap();
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

/// For GPU tests: `Some(value)` where the GPU path runs here. Where it cannot (no device,
/// driver or nvCOMP, or a build without `cuda`) the test says it is skipped and passes, unless
/// `ZARRPIPE_REQUIRE_GPU` is set (runs on a GPU host), where that fails the test. Any other
/// error fails it.
#[allow(dead_code)] // used by the GPU test binaries only
pub fn on_gpu<T>(opened: Result<T, zarrpipe::codec::Error>) -> Option<T> {
    let error = match opened {
        Ok(value) => return Some(value),
        Err(error) => error,
    };
    let reason = zarrpipe::error_chain(&error);
    let unavailable = matches!(
        error,
        zarrpipe::codec::Error::Cuda(zarrpipe::cuda::CudaError::Unavailable { .. })
    );
    if !unavailable || std::env::var_os("ZARRPIPE_REQUIRE_GPU").is_some() {
        panic!("these tests need a CUDA device and nvCOMP 6 (NVCOMP_LIB): {reason}");
    }
    println!("skipped: no usable GPU here ({reason})");
    None
}
