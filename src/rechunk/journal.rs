//! The resume journal: the plan of a rechunk (source, options, every destination array's
//! metadata), written atomically before anything else, and an append-only log of the
//! destination chunks finished. A rerun with the same plan skips the logged chunks; both files
//! are removed once the store is complete.

use std::collections::{BTreeSet, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use serde_json::Value;

use super::{RechunkError, LOG_FILE, PLAN_FILE};

/// An open journal: the chunks finished before, and the log to add to.
pub struct Journal {
    dir: PathBuf,
    done: HashSet<(String, Vec<u64>)>,
    log: Mutex<File>,
}

impl Journal {
    /// Starts a journal in `dir` (absent or empty: the plan is written) or resumes the one
    /// there (its plan must equal `plan`). A non-empty `dir` without a plan is refused.
    pub fn open(dir: &Path, plan: &Value) -> anyhow::Result<Self> {
        let plan_path = dir.join(PLAN_FILE);
        let done = match std::fs::read(&plan_path) {
            Ok(bytes) => {
                let stored: Value = serde_json::from_slice(&bytes)
                    .with_context(|| format!("cannot parse {}", plan_path.display()))?;
                if let Some(what) = first_difference(&stored, plan) {
                    return Err(RechunkError::JournalMismatch {
                        path: dir.to_path_buf(),
                        what,
                    }
                    .into());
                }
                read_log(&dir.join(LOG_FILE))?
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                if is_non_empty_dir(dir)? {
                    return Err(RechunkError::DestinationNotEmpty {
                        path: dir.to_path_buf(),
                    }
                    .into());
                }
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create directory {}", dir.display()))?;
                write_atomically(&plan_path, &serde_json::to_vec_pretty(plan)?)?;
                HashSet::new()
            }
            Err(error) => {
                return Err(error).with_context(|| format!("cannot read {}", plan_path.display()))
            }
        };
        let log_path = dir.join(LOG_FILE);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            done,
            log: Mutex::new(log),
        })
    }

    /// True when a previous run finished this destination chunk.
    pub fn is_done(&self, array: &str, indices: &[u64]) -> bool {
        self.done.contains(&(array.to_string(), indices.to_vec()))
    }

    /// How many chunks previous runs finished.
    pub fn done_count(&self) -> u64 {
        self.done.len() as u64
    }

    /// Records a finished chunk: one line, written and flushed in one call (a line cut short
    /// by a crash is ignored on resume).
    pub fn record(&self, array: &str, indices: &[u64]) -> anyhow::Result<()> {
        let indices: Vec<String> = indices.iter().map(u64::to_string).collect();
        let line = format!("{array}\t{}\n", indices.join(","));
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.write_all(line.as_bytes())
            .and_then(|()| log.flush())
            .with_context(|| format!("cannot append to {}", self.dir.join(LOG_FILE).display()))
    }

    /// Removes the journal: the store is complete.
    pub fn finish(self) -> anyhow::Result<()> {
        drop(self.log);
        for name in [LOG_FILE, PLAN_FILE] {
            let path = self.dir.join(name);
            std::fs::remove_file(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
        }
        Ok(())
    }
}

fn is_non_empty_dir(dir: &Path) -> anyhow::Result<bool> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries.next().is_some()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => {
            Err(error).with_context(|| format!("{} is not a usable directory", dir.display()))
        }
    }
}

/// Writes `bytes` to a temporary file beside `path`, syncs it and renames it over `path`.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let temporary = path.with_extension("tmp");
    let mut file = File::create(&temporary)
        .with_context(|| format!("cannot create {}", temporary.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| {
        format!(
            "cannot rename {} to {}",
            temporary.display(),
            path.display()
        )
    })
}

/// Lines `ARRAY<TAB>i,j,k`; an incomplete last line (no newline) is a write cut short.
fn read_log(path: &Path) -> anyhow::Result<HashSet<(String, Vec<u64>)>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(HashSet::new()),
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", path.display())),
    };
    // A line cut short by a crash is dropped from the file too, so the next line starts clean.
    if !text.is_empty() && !text.ends_with('\n') {
        let keep = text.rfind('\n').map_or(0, |at| at + 1);
        OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|file| file.set_len(keep as u64))
            .with_context(|| format!("cannot cut the last line of {}", path.display()))?;
    }
    let mut done = HashSet::new();
    for line in text
        .split_inclusive('\n')
        .filter(|line| line.ends_with('\n'))
    {
        let parsed = line
            .trim_end()
            .split_once('\t')
            .and_then(|(array, indices)| {
                let indices = if indices.is_empty() {
                    Some(Vec::new())
                } else {
                    indices
                        .split(',')
                        .map(|i| i.parse().ok())
                        .collect::<Option<Vec<u64>>>()
                };
                Some((array.to_string(), indices?))
            });
        match parsed {
            Some(entry) => {
                done.insert(entry);
            }
            None => anyhow::bail!("{} has a line it cannot read: {line:?}", path.display()),
        }
    }
    Ok(done)
}

/// The first key (as a path) whose values differ between two plans.
fn first_difference(stored: &Value, plan: &Value) -> Option<String> {
    match (stored, plan) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            keys.into_iter()
                .find_map(|key| match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => first_difference(x, y).map(|inner| join(key, &inner)),
                    _ => Some(key.clone()),
                })
        }
        _ => (stored != plan).then(String::new),
    }
}

fn join(key: &str, inner: &str) -> String {
    if inner.is_empty() {
        key.to_string()
    } else {
        format!("{key}.{inner}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resumes_with_the_same_plan_and_refuses_another() {
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("out");
        let plan = json!({"source": "a", "arrays": {"t2m": {"shape": [4]}}});
        let journal = Journal::open(&dst, &plan).unwrap();
        journal.record("t2m", &[0, 1]).unwrap();
        journal.record("nested/x", &[2]).unwrap();
        drop(journal);
        // A line cut short by a crash.
        let mut log = OpenOptions::new()
            .append(true)
            .open(dst.join(LOG_FILE))
            .unwrap();
        log.write_all(b"t2m\t3,").unwrap();

        let journal = Journal::open(&dst, &plan).unwrap();
        assert_eq!(journal.done_count(), 2);
        assert!(journal.is_done("t2m", &[0, 1]));
        assert!(journal.is_done("nested/x", &[2]));
        assert!(!journal.is_done("t2m", &[3]));
        drop(journal);

        let other = json!({"source": "a", "arrays": {"t2m": {"shape": [5]}}});
        let error = Journal::open(&dst, &other).err().unwrap().to_string();
        assert!(error.contains("arrays.t2m.shape differs"), "{error}");
    }

    #[test]
    fn refuses_a_non_empty_directory_without_a_plan() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data"), b"x").unwrap();
        let error = Journal::open(dir.path(), &json!({}))
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("not empty"), "{error}");
    }
}
