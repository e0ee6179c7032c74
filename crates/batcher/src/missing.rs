//! Missing time steps: what is missing ([`MissingSteps`], found by the pipeline crate from the
//! time coordinate and the store's listing) and what samples that touch one become
//! ([`Missing`]).
//!
//! Two kinds of step are missing: steps of the coordinate's regular frequency that the
//! coordinate leaves out (gaps), and stored steps whose data is absent. Under
//! [`Missing::Skip`] a sample is left out when a stored step its inputs or targets use is
//! absent, or when a gap lies anywhere in the span of steps it uses (its history and leads
//! would no longer be whole steps apart). [`Missing::Fill`] keeps every sample: absent data
//! reads as the fill value, and a gap's steps, laid out on the regular grid, are NaN.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// What becomes of samples whose inputs or targets touch a missing step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Missing {
    /// Leave them out of the epoch (counts, shuffling, ranks and resume stay exact).
    #[default]
    Skip,
    /// Keep them: absent data reads as the fill value; a gap's steps are NaN, the time
    /// dimension laid out on the coordinate's regular grid (an iterated time dimension only).
    Fill,
    /// Refuse the epoch, naming the missing dates.
    Error,
    /// Do not look for missing steps (no coordinate read, no listing at build): samples are
    /// cut from the stored steps as they are. For stores known to be whole, or too large to
    /// list at every start.
    Ignore,
}

impl std::str::FromStr for Missing {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "skip" => Ok(Missing::Skip),
            "fill" => Ok(Missing::Fill),
            "error" => Ok(Missing::Error),
            "ignore" => Ok(Missing::Ignore),
            _ => Err(format!(
                "unknown missing-step handling `{text}`: expected skip, fill, error or ignore"
            )),
        }
    }
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Missing::Skip => "skip",
            Missing::Fill => "fill",
            Missing::Error => "error",
            Missing::Ignore => "ignore",
        })
    }
}

/// Steps of the regular frequency that the coordinate leaves out between two stored steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// The stored step after which the steps are left out.
    pub after: u64,
    /// How many regular steps are left out.
    pub steps: u64,
    /// The dates (or coordinate values) of the steps left out, at most
    /// [`MissingSteps::MAX_NAMED`] of them.
    pub dates: Vec<String>,
}

/// A stored step whose data is absent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbsentStep {
    /// Its index along the time dimension.
    pub index: u64,
    /// Its date (or coordinate value).
    pub date: String,
    /// The variables whose whole field at this step is absent.
    pub variables: Vec<String>,
}

/// The missing steps along one dimension (time).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MissingSteps {
    /// The dimension the steps are missing along.
    pub dim: String,
    /// Stored steps along `dim`.
    pub length: u64,
    /// The regular step of the coordinate (its most common difference), in its units, and
    /// as text (`6 hours`); `None` without a coordinate of two or more values.
    pub frequency: Option<f64>,
    /// [`frequency`](Self::frequency) as text, e.g. `6 hours`.
    pub frequency_text: Option<String>,
    /// Gaps in the coordinate, in order.
    pub gaps: Vec<Gap>,
    /// Stored steps without data, in order.
    pub absent: Vec<AbsentStep>,
    /// What was not checked, and why (say, a store that cannot be listed).
    pub unchecked: Vec<String>,
}

impl MissingSteps {
    /// The most dates named per gap (a gap of years at an hourly frequency has many).
    pub const MAX_NAMED: usize = 100;

    /// No step is missing.
    pub fn is_empty(&self) -> bool {
        self.gaps.is_empty() && self.absent.is_empty()
    }

    /// Missing steps: those left out by gaps, and the absent ones.
    pub fn count(&self) -> u64 {
        self.gaps.iter().map(|gap| gap.steps).sum::<u64>() + self.absent.len() as u64
    }

    /// Whether a sample that uses the stored steps `used` (each an inclusive range) touches a
    /// missing step: one of them absent, or a gap anywhere between the first and the last.
    pub fn touches(&self, used: &[(u64, u64)]) -> bool {
        let (Some(lo), Some(hi)) = (
            used.iter().map(|r| r.0).min(),
            used.iter().map(|r| r.1).max(),
        ) else {
            return false;
        };
        let gap = self.gaps.partition_point(|gap| gap.after < lo);
        if self.gaps.get(gap).is_some_and(|gap| gap.after < hi) {
            return true;
        }
        used.iter().any(|&(first, last)| {
            let at = self.absent.partition_point(|step| step.index < first);
            self.absent.get(at).is_some_and(|step| step.index <= last)
        })
    }

    /// The missing dates a sample using `used` touches, for an error message.
    pub fn dates_touched(&self, used: &[(u64, u64)]) -> Vec<String> {
        let lo = used.iter().map(|r| r.0).min().unwrap_or(0);
        let hi = used.iter().map(|r| r.1).max().unwrap_or(0);
        let gaps = self
            .gaps
            .iter()
            .filter(|gap| lo <= gap.after && gap.after < hi);
        let mut dates: Vec<String> = gaps.flat_map(|gap| gap.dates.iter().cloned()).collect();
        let absent = self.absent.iter().filter(|step| {
            used.iter()
                .any(|&(first, last)| first <= step.index && step.index <= last)
        });
        dates.extend(absent.map(|step| step.date.clone()));
        dates
    }

    /// For each step of the regular grid from the first stored step to the last, the stored
    /// step it is (`None`: left out by a gap).
    pub fn grid(&self) -> Vec<Option<u64>> {
        let mut grid = Vec::new();
        let mut gaps = self.gaps.iter().peekable();
        for index in 0..self.length {
            grid.push(Some(index));
            while let Some(gap) = gaps.next_if(|gap| gap.after == index) {
                grid.extend(std::iter::repeat_n(None, gap.steps as usize));
            }
        }
        grid
    }

    /// Every missing date, in order (gaps' dates as far as named).
    pub fn dates(&self) -> Vec<String> {
        let mut dated: Vec<(u64, usize, String)> = Vec::new();
        for gap in &self.gaps {
            for (n, date) in gap.dates.iter().enumerate() {
                dated.push((gap.after, n + 1, date.clone()));
            }
        }
        dated.extend(self.absent.iter().map(|s| (s.index, 0, s.date.clone())));
        dated.sort();
        dated.into_iter().map(|(_, _, date)| date).collect()
    }

    /// The error of [`Missing::Error`]: the dates touched (the first 20, and how many more).
    pub(crate) fn error(&self, mut dates: Vec<String>) -> Error {
        dates.sort();
        dates.dedup();
        let more = dates.len().saturating_sub(20);
        dates.truncate(20);
        let mut list = dates.join(", ");
        if more > 0 {
            list.push_str(&format!(" and {more} more"));
        }
        Error::MissingSteps {
            dim: self.dim.clone(),
            dates: list,
        }
    }

    /// A stable hash of what is missing, for the layout's hash.
    pub(crate) fn hash_into(&self, hash: &mut crate::sampler::Fnv1a) {
        hash.bytes(self.dim.as_bytes());
        for gap in &self.gaps {
            hash.u64(gap.after);
            hash.u64(gap.steps);
        }
        hash.u64(u64::MAX);
        for step in &self.absent {
            hash.u64(step.index);
        }
    }
}

/// The sampler's units (samples, or batches when the layout fixes them) that are kept: C
/// order over the sample dimensions' units, with the units along one axis filtered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeptUnits {
    /// Units along the filtered axis, before filtering.
    pub along: u64,
    /// Units of the axes after it, per unit of this one.
    pub inner: u64,
    /// The kept units along the axis, in order.
    pub good: Vec<u64>,
}

impl KeptUnits {
    /// Kept units out of `total` (all of them before filtering).
    pub fn count(&self, total: u64) -> u64 {
        let outer = total / (self.along * self.inner).max(1);
        outer * self.good.len() as u64 * self.inner
    }

    /// The unit number, before filtering, of kept unit `kept`.
    pub fn natural(&self, kept: u64) -> u64 {
        let per_outer = (self.good.len() as u64 * self.inner).max(1);
        let (outer, rest) = (kept / per_outer, kept % per_outer);
        let inner = self.inner.max(1);
        let good = self.good[(rest / inner) as usize];
        (outer * self.along + good) * self.inner + rest % inner
    }
}

/// Checks `policy` against the steps: [`Missing::Fill`] on a windowed time dimension with
/// gaps is refused (a window would need steps the store does not have in one piece).
pub(crate) fn check_fill(steps: &MissingSteps, iterated: bool) -> Result<()> {
    if !iterated && !steps.gaps.is_empty() {
        return Err(Error::FillNeedsIteratedTime {
            dim: steps.dim.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps() -> MissingSteps {
        MissingSteps {
            dim: "time".into(),
            length: 10,
            gaps: vec![Gap {
                after: 3,
                steps: 2,
                dates: vec!["a".into(), "b".into()],
            }],
            absent: vec![AbsentStep {
                index: 7,
                date: "c".into(),
                variables: vec!["t2m".into()],
            }],
            ..MissingSteps::default()
        }
    }

    #[test]
    fn a_sample_touches_gaps_in_its_span_and_absent_steps_it_uses() {
        let steps = steps();
        assert!(!steps.touches(&[(3, 3)]));
        assert!(!steps.touches(&[(4, 4)]));
        assert!(steps.touches(&[(3, 4)]));
        assert!(steps.touches(&[(2, 2), (5, 5)])); // the gap lies between history and lead
        assert!(steps.touches(&[(7, 7)]));
        assert!(!steps.touches(&[(6, 6), (8, 8)])); // step 7 is not used
        assert!(steps.touches(&[(6, 8)]));
        assert_eq!(steps.dates_touched(&[(2, 8)]), ["a", "b", "c"]);
        assert_eq!(steps.dates(), ["a", "b", "c"]);
        assert_eq!(steps.count(), 3);
    }

    #[test]
    fn the_grid_puts_gaps_between_stored_steps() {
        let grid = steps().grid();
        assert_eq!(grid.len(), 12);
        assert_eq!(&grid[3..7], &[Some(3), None, None, Some(4)]);
    }

    #[test]
    fn kept_units_map_back_to_natural_numbers() {
        // 2 outer x 4 along x 3 inner, keeping units 1 and 3 along the axis.
        let kept = KeptUnits {
            along: 4,
            inner: 3,
            good: vec![1, 3],
        };
        assert_eq!(kept.count(24), 12);
        let natural: Vec<u64> = (0..12).map(|k| kept.natural(k)).collect();
        assert_eq!(natural, [3, 4, 5, 9, 10, 11, 15, 16, 17, 21, 22, 23]);
    }
}
