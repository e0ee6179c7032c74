//! The CPU threads a GPU pipeline decodes on: how many, and on which of the host's cores.
//!
//! Under `torchrun`, every rank on a host runs a pipeline beside its training loop. Each
//! rank's decode threads go to a share of the cores of their own, so the ranks' decoding
//! does not crowd onto the same cores while others idle, and a rank's threads stay near the
//! memory they write.

use std::sync::Arc;

use crate::{Error, Result};

/// How many threads decode on the CPU, and the cores they may run on (`None`: any core the
/// process may use).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeThreads {
    count: usize,
    cores: Option<Arc<[usize]>>,
}

impl DecodeThreads {
    /// `count` threads (0: one per core), wherever the scheduler puts them.
    pub fn anywhere(count: usize) -> Self {
        Self { count, cores: None }
    }

    /// `count` threads (0: one per core of the share) on the share of this process's cores
    /// that falls to the `rank`-th of `ranks` processes on the host: the cores the process
    /// may use, in order, cut into `ranks` runs of neighbours. One process, or fewer cores
    /// than processes: anywhere.
    pub fn on_rank_share(count: usize, rank: usize, ranks: usize) -> Result<Self> {
        if rank >= ranks {
            return Err(Error::RankOnHost {
                reason: format!(
                    "rank {rank} of {ranks} processes on the host (ranks count from 0)"
                ),
            });
        }
        let allowed = allowed_cores();
        let cores = match allowed.as_deref() {
            Some(cores) if ranks > 1 && cores.len() >= ranks => {
                Some(Arc::from(rank_share(cores, rank, ranks)))
            }
            _ => None,
        };
        Ok(Self { count, cores })
    }

    /// The threads: the count given, or one per core they may use.
    pub fn count(&self) -> usize {
        match (self.count, &self.cores) {
            (0, Some(cores)) => cores.len(),
            (count, _) => count,
        }
    }

    /// The cores the threads run on, `None` where they may run on any.
    pub fn cores(&self) -> Option<&[usize]> {
        self.cores.as_deref()
    }

    /// Keeps the calling thread on these cores (a decode pool's start handler calls it on
    /// each thread); where the system refuses, warns and leaves it on every core.
    pub fn place_calling_thread(&self) {
        if let Some(cores) = &self.cores {
            if let Err(error) = pin_calling_thread(cores) {
                tracing::warn!(target: "zarrpipe", "CPU decoding stays on every core: placing a thread on cores {cores:?} failed: {error}");
            }
        }
    }
}

/// The `rank`-th of `ranks` runs of neighbouring cores; the first `cores % ranks` runs take
/// one core more.
fn rank_share(cores: &[usize], rank: usize, ranks: usize) -> Vec<usize> {
    let (each, more) = (cores.len() / ranks, cores.len() % ranks);
    let start = rank * each + rank.min(more);
    let len = each + usize::from(rank < more);
    cores[start..start + len].to_vec()
}

/// The cores this process may run on, in order; `None` where the system does not say.
#[cfg(target_os = "linux")]
fn allowed_cores() -> Option<Vec<usize>> {
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;
    let set = sched_getaffinity(Pid::from_raw(0)).ok()?;
    let cores: Vec<usize> = (0..CpuSet::count())
        .filter(|&core| set.is_set(core).unwrap_or(false))
        .collect();
    (!cores.is_empty()).then_some(cores)
}

#[cfg(not(target_os = "linux"))]
fn allowed_cores() -> Option<Vec<usize>> {
    None
}

/// How an error of [`pin_calling_thread`] starts where the system refused the call (a
/// sandbox's seccomp policy may), as opposed to taking it and keeping the thread elsewhere.
const REFUSED: &str = "sched_setaffinity refused";

/// Keeps the calling thread on `cores`, and checks that the system took it.
#[cfg(target_os = "linux")]
fn pin_calling_thread(cores: &[usize]) -> std::result::Result<(), String> {
    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    for &core in cores {
        set.set(core)
            .map_err(|error| format!("core {core}: {error}"))?;
    }
    // Pid 0: the calling thread.
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|error| format!("{REFUSED}: {error}"))?;
    let now = sched_getaffinity(Pid::from_raw(0)).map_err(|error| error.to_string())?;
    if now != set {
        return Err("the thread's affinity reads back otherwise".into());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn pin_calling_thread(_cores: &[usize]) -> std::result::Result<(), String> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ranks_shares_cover_the_cores_once_in_runs_of_neighbours() {
        let cores: Vec<usize> = (0..64).collect();
        let shares: Vec<Vec<usize>> = (0..4).map(|rank| rank_share(&cores, rank, 4)).collect();
        assert_eq!(shares[0], (0..16).collect::<Vec<_>>());
        assert_eq!(shares[3], (48..64).collect::<Vec<_>>());
        let odd = [0, 2, 4, 6, 8, 10, 12];
        let shares: Vec<Vec<usize>> = (0..3).map(|rank| rank_share(&odd, rank, 3)).collect();
        assert_eq!(shares, [vec![0, 2, 4], vec![6, 8], vec![10, 12]]);
    }

    #[test]
    fn a_rank_past_the_processes_is_an_error() {
        let error = DecodeThreads::on_rank_share(4, 4, 4).unwrap_err();
        assert!(error.to_string().contains("rank 4 of 4"), "{error}");
    }

    #[test]
    fn one_process_decodes_anywhere() {
        let threads = DecodeThreads::on_rank_share(3, 0, 1).unwrap();
        assert_eq!(threads, DecodeThreads::anywhere(3));
        assert_eq!(threads.count(), 3);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_placed_thread_runs_on_its_share_only() {
        let Some(allowed) = allowed_cores() else {
            return;
        };
        if allowed.len() < 2 {
            return; // One core: a process's only share is all of it.
        }
        let threads = DecodeThreads::on_rank_share(0, 1, 2).unwrap();
        let share = threads.cores().unwrap().to_vec();
        assert_eq!(share, rank_share(&allowed, 1, 2));
        assert_eq!(threads.count(), share.len());
        let cores = share.clone();
        let seen = std::thread::spawn(move || match pin_calling_thread(&cores) {
            Err(error) if error.starts_with(REFUSED) => Err(error),
            placed => {
                placed.unwrap();
                Ok(allowed_cores().unwrap())
            }
        })
        .join()
        .unwrap();
        match seen {
            Ok(seen) => assert_eq!(seen, share),
            // Where the sandbox forbids the call, decoding stays on every core (a warning).
            Err(error) => eprintln!("skipped: {error}"),
        }
        // The spawning thread keeps every core.
        assert_eq!(allowed_cores().unwrap(), allowed);
    }
}
