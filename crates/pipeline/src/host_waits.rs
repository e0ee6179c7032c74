//! The ranks of one data-parallel job on a host share their consumers' waits through a small
//! file in shared memory (`/dev/shm`, or the temporary folder where there is none), one slot
//! per rank, so that each rank's `auto` sees the longest wait of any rank ([`PeerWaits`]). Every rank of
//! the job opens it under the job's name ([`PipelineBuilder::share_waits_on_host`]).
//!
//! [`PipelineBuilder::share_waits_on_host`]: crate::PipelineBuilder::share_waits_on_host

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use memmap2::MmapMut;
use zarrpipe_core::PeerWaits;

use crate::error::{Error, Result};

/// The longest job name taken: it is part of a file name.
const LONGEST_JOB: usize = 100;

/// One rank's view of its job's waits: slot 0 counts the ranks that hold the file open, slot
/// `1 + rank` holds a rank's waits in nanoseconds since it opened the file.
#[derive(Debug)]
pub struct HostWaits {
    map: MmapMut,
    rank: usize,
    ranks: usize,
    path: PathBuf,
    read: Mutex<SlotsRead>,
}

/// What this rank has read of the slots.
#[derive(Debug)]
struct SlotsRead {
    /// Each rank's slot when last read.
    last: Vec<u64>,
    /// The job's waits counted so far.
    counted: u64,
}

impl HostWaits {
    /// Opens (or creates) the table of the job named `job` as rank `rank` of `ranks`. `job`
    /// names one run of the job: every rank passes the same name, and no other run on the host
    /// uses it at the same time (`zarrpipe` under `torchrun` uses its launcher's process id).
    /// The name and rank are checked first ([`check`](Self::check)).
    pub fn open(job: &str, rank: usize, ranks: usize) -> Result<Self> {
        Self::check(job, rank, ranks)?;
        Self::open_checked(job, rank, ranks)
    }

    /// [`open`](Self::open), for a name and rank that passed [`check`](Self::check): what it
    /// can still refuse comes from the file system.
    pub(crate) fn open_checked(job: &str, rank: usize, ranks: usize) -> Result<Self> {
        let path = shared_memory_folder().join(format!("zarrpipe-waits-{job}"));
        let failed = |what: &str, error: std::io::Error| Error::SharedWaits {
            job: job.to_string(),
            reason: format!("{what} {}: {error}", path.display()),
        };
        let file = open_table(&path).map_err(|e| failed("cannot open", e))?;
        let length = ((ranks as u64 + 1) * 8).next_multiple_of(4096);
        let now = file
            .metadata()
            .map_err(|e| failed("cannot read the size of", e))?;
        if now.len() < length {
            // Ranks only ever grow the table; several growing it at once agree on its size.
            file.set_len(length).map_err(|e| failed("cannot size", e))?;
        }
        // SAFETY: the mapping covers `length` bytes, which the file holds (ranks only grow it),
        // and is read and written only through atomics (`slot`), as every rank does.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .len(length as usize)
                .map_mut(&file)
        }
        .map_err(|e| failed("cannot map", e))?;
        let waits = Self {
            map,
            rank,
            ranks,
            path,
            read: Mutex::new(SlotsRead {
                last: vec![0; ranks],
                counted: 0,
            }),
        };
        // A slot left by an earlier run under this name starts again; what the others'
        // slots hold now was waited before this rank came.
        waits.slot(1 + rank).store(0, Ordering::Relaxed);
        {
            let mut read = waits.lock();
            for other in 0..ranks {
                read.last[other] = waits.slot(1 + other).load(Ordering::Relaxed);
            }
        }
        waits.slot(0).fetch_add(1, Ordering::Relaxed);
        Ok(waits)
    }

    /// Whether `job` can name a table (it is part of a file name) and `rank` is one of
    /// `ranks`: what [`open`](Self::open) refuses before it looks at the file system.
    pub fn check(job: &str, rank: usize, ranks: usize) -> Result<()> {
        let refused = |reason: String| Error::SharedWaits {
            job: job.to_string(),
            reason,
        };
        let named_well = !job.is_empty()
            && job.len() <= LONGEST_JOB
            && job
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !named_well || job.starts_with('.') {
            return Err(refused(format!(
                "a job's name is 1 to {LONGEST_JOB} letters, digits, '-', '_' or '.', not starting with '.'"
            )));
        }
        if rank >= ranks {
            return Err(refused(format!("rank {rank} is not one of {ranks} ranks")));
        }
        Ok(())
    }

    /// Where the table lies.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn slot(&self, index: usize) -> &AtomicU64 {
        assert!(index <= self.ranks, "slot {index} of {} ranks", self.ranks);
        // SAFETY: the mapping is page-aligned and holds `ranks + 1` slots of 8 bytes (`open`);
        // every process reads and writes them only through atomics.
        unsafe { AtomicU64::from_ptr(self.map.as_ptr().add(index * 8) as *mut u64) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotsRead> {
        self.read
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

impl PeerWaits for HostWaits {
    fn add(&self, wait: Duration) {
        let nanos = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        self.slot(1 + self.rank).fetch_add(nanos, Ordering::Relaxed);
    }

    fn waited(&self) -> Duration {
        let mut read = self.lock();
        let mut longest = 0;
        for rank in 0..self.ranks {
            let now = self.slot(1 + rank).load(Ordering::Relaxed);
            let last = std::mem::replace(&mut read.last[rank], now);
            // A slot that went down was opened again by its rank, from nothing.
            let added = if now >= last { now - last } else { now };
            longest = longest.max(added);
        }
        read.counted = read.counted.saturating_add(longest);
        Duration::from_nanos(read.counted)
    }
}

impl Drop for HostWaits {
    /// The last rank to let go removes the file; the others' mappings stay valid.
    fn drop(&mut self) {
        if self.slot(0).fetch_sub(1, Ordering::Relaxed) == 1 {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `/dev/shm` where it is a folder (Linux), else the temporary folder.
fn shared_memory_folder() -> PathBuf {
    let shm = Path::new("/dev/shm");
    match shm.is_dir() {
        true => shm.to_path_buf(),
        false => std::env::temp_dir(),
    }
}

fn open_table(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str) -> String {
        format!("test-{}-{name}", std::process::id())
    }

    #[test]
    fn the_jobs_wait_is_the_longest_of_its_ranks_between_two_reads() {
        let job = job("read");
        let ranks: Vec<HostWaits> = (0..3)
            .map(|rank| HostWaits::open(&job, rank, 3).unwrap())
            .collect();
        let ms = Duration::from_millis;
        // One step: rank 1 waits longest, and the job with it.
        ranks[1].add(ms(30));
        ranks[2].add(ms(5));
        ranks[0].add(ms(1));
        assert_eq!(ranks[0].waited(), ms(30));
        // The next: rank 0 waits twice, 12 ms in all.
        ranks[0].add(ms(4));
        ranks[0].add(ms(8));
        ranks[2].add(ms(10));
        assert_eq!(ranks[0].waited(), ms(42));
        // Each rank counts over its own reads, which `auto` makes once a batch: rank 2 read
        // both steps at once, and the longest over both is rank 1's.
        assert_eq!(ranks[2].waited(), ms(30));
        // A rank that opens the table again starts from nothing; what it waits then counts.
        let path = ranks[0].path().to_path_buf();
        let mut ranks = ranks;
        ranks[1] = HostWaits::open(&job, 1, 3).unwrap();
        ranks[1].add(ms(2));
        assert_eq!(ranks[0].waited(), ms(44));
        // The last to let go removes the file.
        assert!(path.exists());
        drop(ranks);
        assert!(!path.exists(), "{}", path.display());
    }

    #[test]
    fn what_an_earlier_run_left_is_not_counted() {
        let job = job("stale");
        let earlier = HostWaits::open(&job, 1, 2).unwrap();
        earlier.add(Duration::from_secs(100));
        // The earlier run's rank 1 is still there (or died holding the file): the new rank 0
        // reads none of its waits.
        let rank = HostWaits::open(&job, 0, 2).unwrap();
        assert_eq!(rank.waited(), Duration::ZERO);
        earlier.add(Duration::from_millis(3));
        assert_eq!(rank.waited(), Duration::from_millis(3));
    }

    #[test]
    fn bad_names_and_ranks_are_refused_naming_them() {
        for bad in ["", "../etc", ".hidden", "a/b", "é", &"x".repeat(101)] {
            let error = HostWaits::open(bad, 0, 2).unwrap_err().to_string();
            assert!(error.contains("job's name"), "{bad}: {error}");
        }
        let error = HostWaits::open(&job("rank"), 2, 2).unwrap_err().to_string();
        assert!(error.contains("rank 2 is not one of 2 ranks"), "{error}");
    }
}
