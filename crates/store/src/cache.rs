//! A bounded on-disk cache of fetched chunks, least recently used first out, so later epochs
//! over a remote store read locally.
//!
//! One file per entry, named by a hash of the dataset URL and the entry's key. A file holds a
//! magic number, the full id (so a hash collision reads as a miss), the payload and a CRC-32C
//! of id and payload: an entry that fails the check is deleted and fetched again. Files are
//! written to a temporary name and renamed, so a reader never sees half an entry.
//!
//! Several processes (one per rank) may share a directory: each reads entries the others
//! wrote, marks a hit by the file's modification time, and re-reads the directory after every
//! eighth of the bound it writes, evicting the least recently used files of all of them; so
//! together they stay within the bound plus an eighth of it per process.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;

use crate::{Error, Result};

const MAGIC: &[u8; 4] = b"ZPC1";
const SUFFIX: &str = "zpc";

/// The chunk cache of one or more datasets (entries are keyed by dataset URL and key).
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<State>,
    temp_counter: AtomicU64,
    /// Bytes this process wrote since it last read the directory.
    written_since_scan: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// file hash -> (size on disk, last use)
    entries: HashMap<u64, (u64, u64)>,
    /// last use -> file hash, oldest first
    by_use: BTreeMap<u64, u64>,
    total: u64,
    clock: u64,
}

impl State {
    fn touch(&mut self, hash: u64, size: u64) {
        self.clock += 1;
        if let Some((old_size, used)) = self.entries.insert(hash, (size, self.clock)) {
            self.by_use.remove(&used);
            self.total -= old_size;
        }
        self.by_use.insert(self.clock, hash);
        self.total += size;
    }

    fn forget(&mut self, hash: u64) {
        if let Some((size, used)) = self.entries.remove(&hash) {
            self.by_use.remove(&used);
            self.total -= size;
        }
    }
}

/// What a cache lookup found.
#[derive(Debug)]
pub(crate) enum Lookup {
    Hit(Bytes),
    Miss,
    /// The entry was there but failed its checksum (it has been removed).
    Corrupt,
}

impl DiskCache {
    /// Opens (creating it if needed) a cache directory holding at most `max_bytes`; entries
    /// already there are kept, oldest-modified first out.
    pub fn open(dir: impl Into<PathBuf>, max_bytes: u64) -> Result<Self> {
        let dir = dir.into();
        let io_error = |source| Error::Cache {
            path: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(io_error)?;
        let state = scan(&dir).map_err(io_error)?;
        let cache = Self {
            dir,
            max_bytes,
            state: Mutex::new(state),
            temp_counter: AtomicU64::new(0),
            written_since_scan: AtomicU64::new(0),
        };
        cache.evict();
        Ok(cache)
    }

    /// The directory entries are kept in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes of the entries held now.
    pub fn size(&self) -> u64 {
        self.lock().total
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no entry is held now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file of an entry (tests corrupt it on purpose).
    pub fn entry_path(&self, id: &str) -> PathBuf {
        self.path(hash(id))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn path(&self, hash: u64) -> PathBuf {
        self.dir.join(format!("{hash:016x}.{SUFFIX}"))
    }

    /// Reads an entry (blocking: call from a blocking task). Another process may have written
    /// it, so the file is tried even when this one has not seen it.
    pub(crate) fn get_blocking(&self, id: &str) -> Lookup {
        let hash = hash(id);
        let path = self.path(hash);
        let Ok(file) = std::fs::read(&path) else {
            self.lock().forget(hash);
            return Lookup::Miss;
        };
        let payload = decode_entry(&file, id)
            .map(|payload| payload.as_ptr() as usize - file.as_ptr() as usize..payload.len());
        match payload {
            Some(Range { start, end: length }) => {
                self.lock().touch(hash, file.len() as u64);
                // The last use, for the other processes' evictions.
                let now = std::fs::FileTimes::new().set_modified(std::time::SystemTime::now());
                if let Ok(handle) = std::fs::File::options().write(true).open(&path) {
                    let _ = handle.set_times(now);
                }
                Lookup::Hit(Bytes::from(file).slice(start..start + length))
            }
            None => {
                let _ = std::fs::remove_file(&path);
                self.lock().forget(hash);
                Lookup::Corrupt
            }
        }
    }

    /// Stores an entry, evicting the least recently used ones past the size bound (blocking).
    /// A failure to write leaves the cache without the entry: it is fetched again next time.
    pub(crate) fn put_blocking(&self, id: &str, payload: &[u8]) {
        let entry = encode_entry(id, payload);
        if entry.len() as u64 > self.max_bytes {
            return;
        }
        let hash = hash(id);
        let counter = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        let temp = self
            .dir
            .join(format!("{hash:016x}.{}.{counter}.tmp", std::process::id()));
        let written = std::fs::write(&temp, &entry).and_then(|()| {
            std::fs::rename(&temp, self.path(hash)).inspect_err(|_| {
                let _ = std::fs::remove_file(&temp);
            })
        });
        if written.is_ok() {
            self.lock().touch(hash, entry.len() as u64);
            let written = self
                .written_since_scan
                .fetch_add(entry.len() as u64, Ordering::Relaxed);
            if written >= self.max_bytes / 8 {
                // See what the other processes sharing the directory wrote and used.
                self.written_since_scan.store(0, Ordering::Relaxed);
                if let Ok(state) = scan(&self.dir) {
                    *self.lock() = state;
                }
            }
            self.evict();
        }
    }

    fn evict(&self) {
        loop {
            let victim = {
                let mut state = self.lock();
                if state.total <= self.max_bytes {
                    return;
                }
                let Some((_, &hash)) = state.by_use.iter().next() else {
                    return;
                };
                state.forget(hash);
                hash
            };
            if let Err(error) = std::fs::remove_file(self.path(victim)) {
                if error.kind() != io::ErrorKind::NotFound {
                    return;
                }
            }
        }
    }
}

/// The entries in `dir`, least recently modified first.
fn scan(dir: &Path) -> io::Result<State> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(hash) = name
            .to_str()
            .and_then(|name| name.strip_suffix(&format!(".{SUFFIX}")))
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        else {
            continue;
        };
        let Ok(metadata) = entry.metadata() else {
            continue;
        };
        let modified = metadata.modified().unwrap_or(std::time::UNIX_EPOCH);
        found.push((modified, hash, metadata.len()));
    }
    found.sort();
    let mut state = State::default();
    for (_, hash, size) in found {
        state.touch(hash, size);
    }
    Ok(state)
}

/// FNV-1a, 64 bits: stable across Rust versions (file names must survive upgrades).
fn hash(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ byte as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn encode_entry(id: &str, payload: &[u8]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(4 + 4 + id.len() + payload.len() + 4);
    entry.extend_from_slice(MAGIC);
    entry.extend_from_slice(&(id.len() as u32).to_le_bytes());
    entry.extend_from_slice(id.as_bytes());
    entry.extend_from_slice(payload);
    let checksum = crc32c::crc32c(&entry[4..]);
    entry.extend_from_slice(&checksum.to_le_bytes());
    entry
}

/// The payload of a well-formed entry for `id`; `None` for anything else.
fn decode_entry<'a>(entry: &'a [u8], id: &str) -> Option<&'a [u8]> {
    let body = entry.strip_prefix(MAGIC)?;
    let (body, checksum) = body.split_at_checked(body.len().checked_sub(4)?)?;
    if crc32c::crc32c(body) != u32::from_le_bytes(checksum.try_into().ok()?) {
        return None;
    }
    let (length, rest) = body.split_at_checked(4)?;
    let length = u32::from_le_bytes(length.try_into().ok()?) as usize;
    let (stored_id, payload) = rest.split_at_checked(length)?;
    (stored_id == id.as_bytes()).then_some(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(lookup: Lookup) -> Option<Vec<u8>> {
        match lookup {
            Lookup::Hit(bytes) => Some(bytes.to_vec()),
            _ => None,
        }
    }

    #[test]
    fn entries_round_trip_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
        assert!(matches!(
            cache.get_blocking("s3://b/x#t2m/c/0"),
            Lookup::Miss
        ));
        cache.put_blocking("s3://b/x#t2m/c/0", b"chunk bytes");
        assert_eq!(
            hit(cache.get_blocking("s3://b/x#t2m/c/0")).unwrap(),
            b"chunk bytes"
        );
        drop(cache);
        let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(cache.len(), 1);
        assert_eq!(
            hit(cache.get_blocking("s3://b/x#t2m/c/0")).unwrap(),
            b"chunk bytes"
        );
    }

    #[test]
    fn least_recently_used_entries_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let entry_size = encode_entry("k0", &[0; 100]).len() as u64;
        let cache = DiskCache::open(dir.path(), 3 * entry_size).unwrap();
        for key in ["k0", "k1", "k2"] {
            cache.put_blocking(key, &[0; 100]);
        }
        assert!(hit(cache.get_blocking("k0")).is_some()); // k1 is now the oldest
        cache.put_blocking("k3", &[0; 100]);
        assert_eq!(cache.len(), 3);
        assert!(cache.size() <= 3 * entry_size);
        assert!(matches!(cache.get_blocking("k1"), Lookup::Miss));
        for key in ["k0", "k2", "k3"] {
            assert!(hit(cache.get_blocking(key)).is_some(), "{key}");
        }
        assert!(!cache.entry_path("k1").exists());
        cache.put_blocking("too big", &[0; 1000]);
        assert!(matches!(cache.get_blocking("too big"), Lookup::Miss));
    }

    /// Two processes' caches on one directory: each reads what the other wrote, and together
    /// they stay within the bound plus an eighth of it each.
    #[test]
    fn caches_sharing_a_directory_share_entries_and_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let entry_size = encode_entry("k000", &[0; 1000]).len() as u64;
        let bound = 40 * entry_size;
        let (a, b) = (
            DiskCache::open(dir.path(), bound).unwrap(),
            DiskCache::open(dir.path(), bound).unwrap(),
        );
        a.put_blocking("shared", b"from a");
        assert_eq!(hit(b.get_blocking("shared")).unwrap(), b"from a");
        for i in 0..200 {
            let cache = if i % 2 == 0 { &a } else { &b };
            cache.put_blocking(&format!("k{i:03}"), &[0; 1000]);
        }
        let on_disk: u64 = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().metadata().unwrap().len())
            .sum();
        assert!(
            on_disk <= bound + 2 * (bound / 8 + entry_size),
            "{on_disk} bytes on disk, bound {bound}"
        );
        // The newest entries survive, whoever wrote them.
        assert!(hit(a.get_blocking("k199")).is_some());
        assert!(hit(b.get_blocking("k198")).is_some());
    }

    #[test]
    fn a_corrupt_entry_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
        cache.put_blocking("key", b"payload");
        let path = cache.entry_path("key");
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 6;
        bytes[last] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        assert!(matches!(cache.get_blocking("key"), Lookup::Corrupt));
        assert!(!path.exists());
        assert!(matches!(cache.get_blocking("key"), Lookup::Miss));
        assert_eq!(decode_entry(b"ZPC1", "key"), None);
    }
}
