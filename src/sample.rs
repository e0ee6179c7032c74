//! The embedded sample dataset: a small, deterministic, W1-shaped ERA5-like store that
//! `zarrpipe` and the examples write on first use.
//!
//! It is written atomically: to a temporary directory beside it, marked complete, then
//! renamed into place. A run interrupted while writing leaves only the temporary directory,
//! which the next run removes before writing the sample again; a store at the sample's path
//! without the mark (left by an older zarrpipe) is written again too. The temporary directory
//! is named by the process, so threads of one process (tests running at once) write one at a
//! time, and a thread that finds the sample written meanwhile uses it.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use anyhow::Context;

use crate::generate::{generate, GenerateOptions};

/// Where the sample dataset lives, relative to the working directory.
pub const SAMPLE_PATH: &str = "data/sample.zarr";

/// The file, inside the store, that says the store was written to the end.
pub const COMPLETE_MARK: &str = ".zarrpipe-complete";

/// Writes the sample dataset unless it is already there; returns its path. `progress` is
/// called with (chunks written, chunks in all) while writing.
pub fn ensure_sample(progress: impl Fn(u64, u64) + Sync) -> anyhow::Result<String> {
    ensure_sample_at(Path::new(SAMPLE_PATH), progress)?;
    Ok(SAMPLE_PATH.to_string())
}

/// Whether a complete sample store is at `path`.
pub fn sample_is_complete(path: &Path) -> bool {
    path.join(COMPLETE_MARK).is_file()
}

/// Writes the sample dataset at `path` unless a complete one is there, atomically (see the
/// module's documentation).
pub fn ensure_sample_at(path: &Path, progress: impl Fn(u64, u64) + Sync) -> anyhow::Result<()> {
    /// Held while this process writes a sample: its threads share one temporary directory.
    static WRITING: Mutex<()> = Mutex::new(());
    if sample_is_complete(path) {
        return Ok(());
    }
    // A writer interrupted by a panic left nothing to protect: its partial directory is
    // removed below.
    let _writing = WRITING.lock().unwrap_or_else(PoisonError::into_inner);
    if sample_is_complete(path) {
        // Another thread wrote it while this one waited.
        return Ok(());
    }
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    remove_stale_partials(path)?;
    let partial = partial_path(path, std::process::id());
    generate(&partial, &GenerateOptions::sample(), progress)?;
    std::fs::write(partial.join(COMPLETE_MARK), b"")
        .with_context(|| format!("cannot mark {} complete", partial.display()))?;
    if sample_is_complete(path) {
        // Another process wrote it meanwhile: use that one.
        let _ = std::fs::remove_dir_all(&partial);
        return Ok(());
    }
    if path.exists() {
        // Incomplete (no mark): an older zarrpipe's interrupted run.
        std::fs::remove_dir_all(path)
            .with_context(|| format!("cannot remove the incomplete {}", path.display()))?;
    }
    if let Err(error) = std::fs::rename(&partial, path) {
        // Another process may have put a complete sample there meanwhile: use that one.
        let _ = std::fs::remove_dir_all(&partial);
        if !sample_is_complete(path) {
            return Err(error).with_context(|| {
                format!("cannot move {} to {}", partial.display(), path.display())
            });
        }
    }
    Ok(())
}

/// The temporary directory a process writes the sample in: `.sample.zarr.partial-PID`.
fn partial_path(path: &Path, pid: u32) -> PathBuf {
    let name = path
        .file_name()
        .map_or("sample.zarr".into(), |name| name.to_string_lossy());
    path.with_file_name(format!(".{name}.partial-{pid}"))
}

/// Removes the temporary directories of interrupted runs (those of processes no longer
/// running, where `/proc` says so).
fn remove_stale_partials(path: &Path) -> anyhow::Result<()> {
    let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    let prefix = partial_path(path, 0);
    let prefix = prefix.file_name().unwrap_or_default().to_string_lossy();
    let prefix = prefix.trim_end_matches('0');
    for entry in std::fs::read_dir(parent)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(prefix) else {
            continue;
        };
        let running = pid.parse::<u32>().is_ok_and(|pid| {
            pid != std::process::id() && Path::new(&format!("/proc/{pid}")).exists()
        });
        if !running {
            std::fs::remove_dir_all(entry.path())
                .with_context(|| format!("cannot remove {}", entry.path().display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_first_run_leaves_no_sample_and_the_next_writes_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data/sample.zarr");
        // Interrupt the writing half way (a panic stands in for Ctrl-C).
        let interrupted = std::panic::catch_unwind(|| {
            ensure_sample_at(&path, |done, total| {
                if done * 2 >= total {
                    panic!("interrupted");
                }
            })
        });
        assert!(interrupted.is_err());
        assert!(
            !path.exists(),
            "a partial sample is never at the sample's path"
        );
        // An older zarrpipe's interrupted run: root metadata, no mark.
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(
            path.join("zarr.json"),
            br#"{"zarr_format": 3, "node_type": "group"}"#,
        )
        .unwrap();
        ensure_sample_at(&path, |_, _| {}).unwrap();
        assert!(sample_is_complete(&path));
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(
            leftovers,
            ["sample.zarr"],
            "temporary directories are removed"
        );
        // Every chunk is there: the store reads as written by an uninterrupted run.
        let fresh = dir.path().join("fresh.zarr");
        crate::generate::generate(&fresh, &GenerateOptions::sample(), |_, _| {}).unwrap();
        assert_eq!(count_files(&path), count_files(&fresh) + 1);
        // A complete sample is left alone.
        let marked = std::fs::metadata(path.join(COMPLETE_MARK))
            .unwrap()
            .modified()
            .unwrap();
        ensure_sample_at(&path, |_, _| panic!("must not write again")).unwrap();
        let still = std::fs::metadata(path.join(COMPLETE_MARK))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(marked, still);
    }

    #[test]
    fn threads_asking_at_once_share_one_whole_sample() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data/sample.zarr");
        std::thread::scope(|scope| {
            let writers: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| ensure_sample_at(&path, |_, _| {})))
                .collect();
            for writer in writers {
                writer.join().unwrap().unwrap();
            }
        });
        assert!(sample_is_complete(&path));
        let fresh = dir.path().join("fresh.zarr");
        crate::generate::generate(&fresh, &GenerateOptions::sample(), |_, _| {}).unwrap();
        assert_eq!(count_files(&path), count_files(&fresh) + 1);
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, ["sample.zarr"]);
    }

    fn count_files(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    count_files(&entry.path())
                } else {
                    1
                }
            })
            .sum()
    }
}
