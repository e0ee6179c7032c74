//! Bounded fuzzing of metadata handling: real array metadata (v3 `zarr.json` of a plain, a
//! sharded and a v2 `.zarray` array) with values replaced by hostile ones (boundary and
//! negative numbers, wrong types, arrays of the wrong length, keys removed), then opened,
//! laid out, planned and one chunk read. Nothing may panic or abort, and memory must not
//! follow what a shape claims: every step either works or is an error.
//!
//! `cargo test --test fuzz_metadata` runs 256 cases in seconds;
//! `ZARRPIPE_FUZZ_CASES=100000 cargo test --release --test fuzz_metadata` runs more. A crash
//! found becomes a named case in `regressions` below.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::{path::Path as ObjectPath, ObjectStoreExt, PutPayload};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};
use zarrpipe::batcher::{Batcher, SampleLayout, WindowSpec};
use zarrpipe::codec::decode_on_cpu;
use zarrpipe::store::{fetch_chunk, ChunkRequest, Dataset};

fn fuzz_cases() -> u32 {
    std::env::var("ZARRPIPE_FUZZ_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(256)
}

/// The files of an array, relative to the array, from the fixture stores.
fn array_files(store: &str, array: &str) -> Vec<(String, Vec<u8>)> {
    let root = common::fixtures().join("stores").join(store).join(array);
    let mut files = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let relative = path
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                files.push((relative, std::fs::read(&path).unwrap()));
            }
        }
    }
    files
}

/// Values that break arithmetic and assumptions.
fn hostile_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            json!(0),
            json!(1),
            json!(-1),
            json!(u64::MAX),
            json!(u64::MAX - 5),
            json!(1u64 << 62),
            json!(1u64 << 40),
            json!(i64::MIN),
            json!(1e300),
            json!(null),
            json!(""),
            json!("float128"),
            json!("not a codec"),
            json!([]),
            json!([0]),
            json!([1u64 << 62, 1u64 << 62]),
            json!([u64::MAX, 1, 1]),
            json!({}),
            json!(true),
        ]),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-z_]{0,12}".prop_map(|s| json!(s)),
    ]
}

/// One change to a JSON document: a value somewhere replaced, or a key removed.
#[derive(Clone, Debug)]
enum Edit {
    Replace { path: usize, value: Value },
    Remove { path: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<prop::sample::Index>(), hostile_value())
            .prop_map(|(at, value)| Edit::Replace { path: at.index(usize::MAX), value }),
        1 => any::<prop::sample::Index>().prop_map(|at| Edit::Remove { path: at.index(usize::MAX) }),
    ]
}

/// Every JSON pointer inside `value`, the root excluded.
fn pointers(value: &Value, prefix: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let pointer = format!("{prefix}/{}", key.replace('~', "~0").replace('/', "~1"));
                out.push(pointer.clone());
                pointers(child, pointer, out);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                let pointer = format!("{prefix}/{index}");
                out.push(pointer.clone());
                pointers(child, pointer, out);
            }
        }
        _ => {}
    }
}

fn apply(document: &mut Value, edits: &[Edit]) {
    for edit in edits {
        let mut all = Vec::new();
        pointers(document, String::new(), &mut all);
        if all.is_empty() {
            return;
        }
        match edit {
            Edit::Replace { path, value } => {
                if let Some(slot) = document.pointer_mut(&all[path % all.len()]) {
                    *slot = value.clone();
                }
            }
            Edit::Remove { path } => {
                let pointer = &all[path % all.len()];
                let (parent, key) = pointer.rsplit_once('/').unwrap();
                let parent = if parent.is_empty() {
                    Some(&mut *document)
                } else {
                    document.pointer_mut(parent)
                };
                match parent {
                    Some(Value::Object(map)) => {
                        map.remove(&key.replace("~1", "/").replace("~0", "~"));
                    }
                    Some(Value::Array(items)) => {
                        if let Ok(index) = key.parse::<usize>() {
                            if index < items.len() {
                                items.remove(index);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// A base array: its store, name, metadata file name and files.
struct Base {
    name: &'static str,
    metadata_file: &'static str,
    root: Value,
    root_file: &'static str,
    files: Vec<(String, Vec<u8>)>,
}

fn bases() -> Vec<Base> {
    let v3_root = json!({"zarr_format": 3, "node_type": "group", "attributes": {}});
    vec![
        Base {
            name: "f32_zstd",
            metadata_file: "zarr.json",
            root: v3_root.clone(),
            root_file: "zarr.json",
            files: array_files("zp3_v3", "f32_zstd"),
        },
        Base {
            name: "f32_sharded",
            metadata_file: "zarr.json",
            root: v3_root,
            root_file: "zarr.json",
            files: array_files("zp3_v3", "f32_sharded"),
        },
        Base {
            name: "f4_bigendian",
            metadata_file: ".zarray",
            root: json!({"zarr_format": 2}),
            root_file: ".zgroup",
            files: array_files("zp3_v2", "f4_bigendian"),
        },
    ]
}

/// How far the cases got: opened, variable readable, laid out, chunk decoded.
static REACHED: [std::sync::atomic::AtomicU64; 4] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 4];

fn reached(step: usize) {
    REACHED[step].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Opens a store holding `base` with its metadata edited, and uses every variable as far as
/// it goes. Returns an error description only for a panic.
fn exercise(
    base: &Base,
    metadata: &Value,
    runtime: &tokio::runtime::Runtime,
) -> Result<(), String> {
    let store = Arc::new(InMemory::new());
    let put = |key: String, bytes: Vec<u8>| {
        let store = store.clone();
        runtime.block_on(async move {
            store
                .put(&ObjectPath::from(key), PutPayload::from(bytes))
                .await
                .unwrap();
        })
    };
    put(base.root_file.into(), base.root.to_string().into_bytes());
    for (file, bytes) in &base.files {
        let bytes = if file == base.metadata_file {
            metadata.to_string().into_bytes()
        } else {
            bytes.clone()
        };
        put(format!("{}/{file}", base.name), bytes);
    }
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        runtime.block_on(async {
            let Ok(dataset) = Dataset::open_store("memory://fuzz", store.clone()).await else {
                return;
            };
            reached(0);
            let _ = zarrpipe::info::describe(&dataset).await;
            for name in dataset.variable_names() {
                let Ok(variable) = dataset.variable(&name) else {
                    continue;
                };
                reached(1);
                let _ = variable.decoded_bytes();
                if let Ok(layout) =
                    SampleLayout::new(&dataset, &[name.as_str()], &WindowSpec::new())
                {
                    reached(2);
                    let layout = Arc::new(layout);
                    if let Ok(batcher) = Batcher::new(layout.clone(), 2, false) {
                        let _ = zarrpipe::batcher::PlanSummary::of_epoch(&batcher);
                    }
                }
                // The first chunk, fetched and decoded.
                if let Some(indices) = variable.every_chunk().next() {
                    let request = ChunkRequest::new(variable.clone(), indices);
                    if let Ok(chunk) = fetch_chunk(request).await {
                        if decode_on_cpu(chunk).is_ok() {
                            reached(3);
                        }
                    }
                }
            }
        })
    }));
    outcome.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    })
}

#[test]
fn hostile_metadata_never_panics() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bases = bases();
    let mut runner = TestRunner::new(Config {
        cases: fuzz_cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (0..bases.len(), prop::collection::vec(edit(), 1..3));
    runner
        .run(&strategy, |(which, edits)| {
            let base = &bases[which];
            let original = &base
                .files
                .iter()
                .find(|(f, _)| f == base.metadata_file)
                .unwrap()
                .1;
            let mut metadata: Value = serde_json::from_slice(original).unwrap();
            apply(&mut metadata, &edits);
            exercise(base, &metadata, &runtime).map_err(|message| {
                TestCaseError::fail(format!("{}: {metadata}: panicked: {message}", base.name))
            })
        })
        .unwrap();
    let counts: Vec<u64> = REACHED
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    eprintln!("opened, variable readable, laid out, chunk decoded: {counts:?}");
}

/// Crashes fuzzing found, kept as named cases.
mod regressions {
    use super::*;

    fn run(base: usize, edit: impl FnOnce(&mut Value)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let bases = bases();
        let base = &bases[base];
        let original = &base
            .files
            .iter()
            .find(|(f, _)| f == base.metadata_file)
            .unwrap()
            .1;
        let mut metadata: Value = serde_json::from_slice(original).unwrap();
        edit(&mut metadata);
        exercise(base, &metadata, &runtime).unwrap();
    }

    /// A shape of 2^62 along one dimension (a capacity overflow planning chunks).
    #[test]
    fn shape_of_2_62() {
        run(0, |m| m["shape"] = json!([1u64 << 62, 45]));
        run(1, |m| m["shape"] = json!([50, 1u64 << 62]));
        run(2, |m| m["shape"] = json!([1u64 << 62, 25]));
    }
}
