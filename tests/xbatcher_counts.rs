//! zarrpipe cuts the same windows as xbatcher: for each case of
//! tests/fixtures/xbatcher_counts.json (written by tests/fixtures/xbatcher_counts.py with
//! xbatcher 0.4.0 on the xarray fixture stores), `SampleLayout::num_samples` equals the number
//! of patches xbatcher's `BatchGenerator` yields for the same `input_dims` / `input_overlap`,
//! and the recorded patches start where zarrpipe's samples start.
//!
//! Each case is checked in up to three forms of zarrpipe's window specification:
//! - `explicit`: nothing iterated, one window per input dim (stride = size - overlap), in
//!   input_dims order. This is xbatcher's model: dims outside input_dims are kept whole
//!   (zarrpipe stacks them as channels, as it does `level`; the sample count is the same).
//! - `iterate_time`: where `time` is an input dim of size 1 and overlap 0, time iterated
//!   instead, both by default (`WindowSpec::new()`) and by `.iterate(["time"])`, with the
//!   other input dims as windows.
//! - `cli`: `WindowSpec::new()` plus every input dim as a window: what
//!   `zarrpipe plan/run --input-dims ... --input-overlap ...` builds.
//!
//! `batch_cases` do the same with xbatcher's `batch_dims` and `concat_input_dims`: the number
//! of batches, the samples in each (xbatcher's stacked `sample` size, divided by the channels
//! zarrpipe stacks from dims such as `level`), and for the first and last batch the windows
//! it holds and its extent along each batch dim.
//!
//! Where zarrpipe deliberately differs, the JSON lists the form, what zarrpipe does instead
//! and why (`notes`); those forms are not compared with xbatcher but with that recorded
//! behaviour, so a change on either side shows up here.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::*;
use serde::Deserialize;
use zarrpipe::batcher::{Batcher, SampleLayout, WindowSpec};
use zarrpipe::store::Dataset;

#[derive(Debug, Deserialize)]
struct Counts {
    versions: BTreeMap<String, String>,
    stores: Vec<String>,
    notes: BTreeMap<String, String>,
    cases: Vec<Case>,
    batch_cases: Vec<BatchCase>,
}

#[derive(Debug, Deserialize)]
struct BatchCase {
    name: String,
    variables: Vec<String>,
    input_dims: Vec<(String, u64)>,
    input_overlap: Vec<(String, i64)>,
    batch_dims: Vec<(String, u64)>,
    concat_input_dims: bool,
    zarrpipe_iterate: Option<Vec<String>>,
    results: BTreeMap<String, BatchResult>,
    differences: Vec<Difference>,
}

#[derive(Debug, Deserialize)]
struct BatchResult {
    error: Option<String>,
    len: Option<u64>,
    #[serde(default)]
    samples: Vec<u64>,
    #[serde(default)]
    batches: Vec<BatchRecord>,
}

#[derive(Debug, Deserialize)]
struct BatchRecord {
    index: u64,
    /// Each patch's start along the input dims (input_dims order), sorted.
    origins: Vec<Vec<u64>>,
    /// (dim, start, stop) of the batch along each batch dim outside input_dims.
    extents: Vec<(String, u64, u64)>,
}

#[derive(Debug, Deserialize)]
struct Case {
    name: String,
    variables: Vec<String>,
    input_dims: Vec<(String, u64)>,
    input_overlap: Vec<(String, i64)>,
    results: BTreeMap<String, XbatcherResult>,
    differences: Vec<Difference>,
}

#[derive(Debug, Deserialize)]
struct XbatcherResult {
    error: Option<String>,
    len: Option<u64>,
    patches: Option<u64>,
    #[serde(default)]
    origins: Vec<PatchOrigin>,
}

#[derive(Debug, Deserialize)]
struct PatchOrigin {
    index: u64,
    /// Start along each input dim, in input_dims order.
    origin: Vec<u64>,
}

#[derive(Debug, Deserialize)]
struct Difference {
    /// `explicit`, `iterate_time`, `cli` or `any`.
    form: String,
    /// `error:<Error variant>`, `count:<n>` or `not_representable`.
    zarrpipe: String,
    note: String,
}

fn counts() -> Counts {
    let path = fixtures().join("xbatcher_counts.json");
    let text = std::fs::read_to_string(path).expect("tests/fixtures/xbatcher_counts.json");
    serde_json::from_str(&text).expect("xbatcher counts parse")
}

impl Case {
    fn overlap(&self, dim: &str) -> i64 {
        self.input_overlap
            .iter()
            .find(|(name, _)| name == dim)
            .map_or(0, |(_, overlap)| *overlap)
    }

    /// `dim`'s window as zarrpipe's (size, stride); `None` where the stride would be negative.
    fn window(&self, dim: &str, size: u64) -> Option<(u64, u64)> {
        let stride = size as i64 - self.overlap(dim);
        (stride >= 0).then_some((size, stride as u64))
    }

    fn with_windows(&self, mut spec: WindowSpec, skip: Option<&str>) -> Option<WindowSpec> {
        for (dim, size) in &self.input_dims {
            if Some(dim.as_str()) == skip {
                continue;
            }
            let (size, stride) = self.window(dim, *size)?;
            spec = spec.window(dim.clone(), size, stride);
        }
        Some(spec)
    }

    /// The forms of window specification this case is checked in: (form, label, spec), spec
    /// `None` where the case cannot be expressed in that form.
    fn forms(&self) -> Vec<(&'static str, &'static str, Option<WindowSpec>)> {
        let mut forms = vec![(
            "explicit",
            "iterate([]) + windows",
            self.with_windows(WindowSpec::new().iterate(Vec::<String>::new()), None),
        )];
        let time_step = self
            .input_dims
            .iter()
            .any(|(dim, size)| dim == "time" && *size == 1 && self.overlap(dim) == 0);
        if time_step {
            let others = |spec| self.with_windows(spec, Some("time"));
            forms.push(("iterate_time", "default", others(WindowSpec::new())));
            forms.push((
                "iterate_time",
                "iterate([time])",
                others(WindowSpec::new().iterate(["time"])),
            ));
        }
        // The CLI refuses overlap >= size before building anything.
        let cli_accepts = self
            .input_dims
            .iter()
            .all(|(dim, size)| self.overlap(dim) < *size as i64);
        if cli_accepts {
            forms.push((
                "cli",
                "new() + windows",
                self.with_windows(WindowSpec::new(), None),
            ));
        }
        forms
    }
}

/// zarrpipe's number for the sample with these starts along its sample dims.
fn sample_index(layout: &SampleLayout, origin: &[u64]) -> u64 {
    layout
        .sample_dims()
        .iter()
        .zip(origin)
        .fold(0, |index, (dim, start)| {
            assert_eq!(start % dim.stride, 0, "{start} not on a {dim:?} window");
            index * dim.positions() + start / dim.stride
        })
}

/// Checks one form against xbatcher's result; returns whether it was compared with xbatcher.
fn check_form(
    context: &str,
    case: &Case,
    form: &str,
    spec: Option<WindowSpec>,
    layout: impl FnOnce(&WindowSpec) -> zarrpipe::batcher::Result<SampleLayout>,
    xbatcher: &XbatcherResult,
    notes: &BTreeMap<String, String>,
) -> bool {
    let recorded = case
        .differences
        .iter()
        .find(|d| d.form == form || d.form == "any");
    if let Some(difference) = recorded {
        // A known difference from xbatcher (see `notes` in the JSON): not compared with
        // xbatcher's count but with what zarrpipe is recorded to do instead.
        let why = &notes[&difference.note];
        let expected = difference.zarrpipe.as_str();
        let Some(spec) = spec else {
            assert_eq!(expected, "not_representable", "{context}: {why}");
            return false;
        };
        let outcome = layout(&spec);
        if let Some(variant) = expected.strip_prefix("error:") {
            let error = outcome.expect_err(&format!("{context}: zarrpipe was to refuse: {why}"));
            let debug = format!("{error:?}");
            assert!(
                debug.starts_with(variant),
                "{context}: expected {variant}, got {debug} ({why})"
            );
        } else if let Some(count) = expected.strip_prefix("count:") {
            let layout = outcome.unwrap_or_else(|e| panic!("{context}: {e} ({why})"));
            let count: u64 = count.parse().expect("count");
            assert_eq!(layout.num_samples(), count, "{context}: {why}");
        } else {
            panic!("{context}: zarrpipe can express it, but it is recorded as `{expected}`");
        }
        println!("{context}: differs from xbatcher as recorded ({expected})");
        return false;
    }
    let spec = spec.unwrap_or_else(|| panic!("{context}: not expressible, and not recorded"));
    if let Some(error) = &xbatcher.error {
        let refused = layout(&spec).map(|l| l.num_samples());
        assert!(
            refused.is_err(),
            "{context}: xbatcher refuses ({error}) but zarrpipe gives {refused:?}"
        );
        return true;
    }
    let layout = layout(&spec).unwrap_or_else(|e| panic!("{context}: {e}"));
    let patches = xbatcher.len.expect("len");
    assert_eq!(xbatcher.patches, Some(patches), "{context}: json");
    assert_eq!(
        layout.num_samples(),
        patches,
        "{context}: samples vs xbatcher patches"
    );
    // The sample dims are exactly the input dims (xbatcher iterates nothing else).
    let names: Vec<&str> = layout
        .sample_dims()
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    let input: Vec<&str> = case.input_dims.iter().map(|(d, _)| d.as_str()).collect();
    let (mut have, mut want) = (names.clone(), input.clone());
    have.sort_unstable();
    want.sort_unstable();
    assert_eq!(have, want, "{context}: sample dims");
    // Each recorded patch is a sample starting at the same place; its number is the same
    // where the sample dims come in input_dims order (both count in C order over them).
    for patch in &xbatcher.origins {
        let origin: Vec<u64> = names
            .iter()
            .map(|name| patch.origin[input.iter().position(|i| i == name).unwrap()])
            .collect();
        let index = sample_index(&layout, &origin);
        assert!(index < layout.num_samples(), "{context}: {patch:?}");
        assert_eq!(
            layout.sample(index).origin,
            origin,
            "{context}: patch {patch:?}"
        );
        if names == input {
            assert_eq!(index, patch.index, "{context}: order of patch {patch:?}");
        }
    }
    true
}

#[tokio::test]
async fn window_counts_match_xbatcher() {
    let counts = counts();
    assert_eq!(
        counts.versions.get("xbatcher").map(String::as_str),
        Some("0.4.0")
    );
    assert!(counts.cases.len() >= 8, "too few cases");
    let mut compared = 0;
    let mut differing = 0;
    for store in &counts.stores {
        let dataset = Dataset::open(&store_path(store))
            .await
            .expect("open fixture store");
        for case in &counts.cases {
            let xbatcher = &case.results[store];
            for (form, label, spec) in case.forms() {
                let context = format!("{store} {} [{form}: {label}]", case.name);
                let layout = |spec: &WindowSpec| {
                    SampleLayout::new(&dataset, case.variables.as_slice(), spec)
                };
                if check_form(&context, case, form, spec, layout, xbatcher, &counts.notes) {
                    compared += 1;
                } else {
                    differing += 1;
                }
            }
        }
    }
    println!("{compared} forms match xbatcher, {differing} differ as recorded");
    assert!(compared >= 2 * 8 * 2, "{compared} comparisons");
}

/// Every listed difference names a note, and every form it names is one this test builds.
#[test]
fn differences_are_explained() {
    let counts = counts();
    for case in &counts.cases {
        let forms: Vec<&str> = case.forms().iter().map(|(form, _, _)| *form).collect();
        for difference in &case.differences {
            assert!(counts.notes.contains_key(&difference.note), "{case:?}");
            let form = difference.form.as_str();
            assert!(form == "any" || forms.contains(&form), "{case:?}");
        }
    }
    for case in &counts.batch_cases {
        for difference in &case.differences {
            assert!(counts.notes.contains_key(&difference.note), "{case:?}");
            assert_eq!(difference.form, "any", "{case:?}");
        }
    }
}

impl BatchCase {
    fn spec(&self) -> WindowSpec {
        let mut spec = WindowSpec::new();
        if let Some(iterate) = &self.zarrpipe_iterate {
            spec = spec.iterate(iterate.clone());
        }
        for (dim, size) in &self.input_dims {
            let overlap = self.input_overlap.iter().find(|(d, _)| d == dim);
            let stride = *size as i64 - overlap.map_or(0, |(_, o)| *o);
            spec = spec.window(dim.clone(), *size, u64::try_from(stride).expect("stride"));
        }
        for (dim, size) in &self.batch_dims {
            spec = spec.batch_dim(dim.clone(), *size);
        }
        spec.concat_input_dims(self.concat_input_dims)
    }
}

/// Checks one batch case against xbatcher (or the recorded difference); returns whether it
/// was compared with xbatcher.
fn check_batch_case(context: &str, case: &BatchCase, dataset: &Dataset, notes: &Notes) -> bool {
    let store = context.split(' ').next().unwrap();
    let xbatcher = &case.results[store];
    let layout = SampleLayout::new(dataset, case.variables.as_slice(), &case.spec());
    if let Some(difference) = case.differences.first() {
        let why = &notes[&difference.note];
        let expected = difference.zarrpipe.as_str();
        if let Some(variant) = expected.strip_prefix("error:") {
            let error = layout.expect_err(&format!("{context}: zarrpipe was to refuse: {why}"));
            let debug = format!("{error:?}");
            assert!(debug.starts_with(variant), "{context}: {debug} ({why})");
        } else if let Some(shape) = expected.strip_prefix("batches:") {
            let (count, size) = shape.split_once('x').expect("batches:<count>x<size>");
            let groups = layout.unwrap().batch_groups().expect("batches by layout");
            let found = (groups.count.to_string(), groups.size.to_string());
            assert_eq!(
                (found.0.as_str(), found.1.as_str()),
                (count, size),
                "{context}: {why}"
            );
        } else {
            panic!("{context}: unknown recorded difference `{expected}`");
        }
        println!("{context}: differs from xbatcher as recorded ({expected})");
        return false;
    }
    if let Some(error) = &xbatcher.error {
        let refused = layout.map(|l| l.num_samples());
        assert!(
            refused.is_err(),
            "{context}: xbatcher refuses ({error}), zarrpipe: {refused:?}"
        );
        return true;
    }
    let layout = Arc::new(layout.unwrap_or_else(|e| panic!("{context}: {e}")));
    let groups = layout.batch_groups().expect("batches fixed by the layout");
    assert_eq!(Some(groups.count), xbatcher.len, "{context}: batches");
    // xbatcher stacks dims outside input_dims (level) into `sample`, zarrpipe into channels.
    let stacked = (layout.channels().len() / case.variables.len()) as u64;
    for (batch, samples) in xbatcher.samples.iter().enumerate() {
        assert_eq!(
            groups.size * stacked,
            *samples,
            "{context}: samples in batch {batch}"
        );
    }
    let batcher = Batcher::new(layout.clone(), 1, false).unwrap();
    assert_eq!(batcher.num_batches(), groups.count, "{context}");
    for record in &xbatcher.batches {
        let samples = batcher.batch(record.index);
        let axis = |dim: &str| layout.sample_axis(dim).expect("a sample dim");
        let windows: BTreeSet<Vec<u64>> = samples
            .iter()
            .map(|s| {
                case.input_dims
                    .iter()
                    .map(|(d, _)| s.origin[axis(d)])
                    .collect()
            })
            .collect();
        let expected: BTreeSet<Vec<u64>> = record.origins.iter().cloned().collect();
        assert_eq!(
            windows, expected,
            "{context}: windows of batch {}",
            record.index
        );
        for (dim, start, stop) in &record.extents {
            let steps = samples.iter().map(|s| s.origin[axis(dim)]);
            let (min, max) = (steps.clone().min().unwrap(), steps.max().unwrap());
            assert_eq!(
                (min, max + 1),
                (*start, *stop),
                "{context}: {dim} of {record:?}"
            );
        }
    }
    true
}

type Notes = BTreeMap<String, String>;

#[tokio::test]
async fn batch_counts_match_xbatcher() {
    let counts = counts();
    assert!(counts.batch_cases.len() >= 8, "too few batch cases");
    let (mut compared, mut differing) = (0, 0);
    for store in &counts.stores {
        let dataset = Dataset::open(&store_path(store))
            .await
            .expect("open fixture store");
        for case in &counts.batch_cases {
            let context = format!("{store} {}", case.name);
            if check_batch_case(&context, case, &dataset, &counts.notes) {
                compared += 1;
            } else {
                differing += 1;
            }
        }
    }
    println!("{compared} batch cases match xbatcher, {differing} differ as recorded");
    assert!(compared >= 2 * 8, "{compared} comparisons");
}
