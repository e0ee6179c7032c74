//! Moments of a set of numbers: counted in two passes over a run, or one value at a time, and
//! merged.

use super::Summary;

/// Sums [`Moments::from_values`] keeps apart, so that they run side by side, a vector at a
/// time (one sum's Kahan carry would make each value wait for the one before).
const LANES: usize = 4;

/// Calls `each` on `values` by [`LANES`], the last ones padded with NaN.
fn by_lanes(values: &[f64], mut each: impl FnMut(&[f64; LANES])) {
    let whole = values.chunks_exact(LANES);
    let rest = whole.remainder();
    for lane_values in whole {
        each(lane_values.try_into().expect("LANES values"));
    }
    if !rest.is_empty() {
        let mut last = [f64::NAN; LANES];
        last[..rest.len()].copy_from_slice(rest);
        each(&last);
    }
}

/// Adds `value` to `sum`, keeping in `carry` what rounding lost, to take back next time.
fn kahan_add(sum: &mut f64, carry: &mut f64, value: f64) {
    let value = value - *carry;
    let total = *sum + value;
    *carry = (total - *sum) - value;
    *sum = total;
}

/// Running moments of a set of numbers, NaN counted apart: counted in two passes over a run of
/// values ([`Moments::from_values`]) or one value at a time ([`Moments::add`], Welford's
/// update), and merged with Chan et al.'s formula.
#[derive(Clone, Copy, Debug, Default)]
pub struct Moments {
    pub(super) count: u64,
    pub(super) nan: u64,
    mean: f64,
    m2: f64,
    min: f64,
    max: f64,
}

impl Moments {
    /// The moments of `values`: NaN apart, the numbers in two passes (their sum, then their
    /// squared deviations from the mean), with no division per value.
    ///
    /// ```
    /// let moments = zarrpipe::stats::Moments::from_values(&[1.0, f64::NAN, 3.0]);
    /// assert_eq!((moments.mean(), moments.std()), (Some(2.0), Some(1.0)));
    /// ```
    pub fn from_values(values: &[f64]) -> Self {
        // The sum is compensated (Kahan), so that the mean of numbers that nearly cancel
        // (tendencies) keeps its digits, as Welford's update does. Selects, not branches, so
        // that the lanes compile to vector instructions.
        let (mut sums, mut carries, mut counts) = ([0.0; LANES], [0.0; LANES], [0u64; LANES]);
        let (mut mins, mut maxs) = ([f64::INFINITY; LANES], [f64::NEG_INFINITY; LANES]);
        by_lanes(values, |lane_values| {
            for lane in 0..LANES {
                let value = lane_values[lane];
                let number = !value.is_nan();
                counts[lane] += number as u64;
                let addend = if number { value } else { 0.0 };
                kahan_add(&mut sums[lane], &mut carries[lane], addend);
                // Comparisons with NaN are false: these pass over it.
                let (min, max) = (&mut mins[lane], &mut maxs[lane]);
                *min = if value < *min { value } else { *min };
                *max = if value > *max { value } else { *max };
            }
        });
        let count: u64 = counts.iter().sum();
        let nan = values.len() as u64 - count;
        if count == 0 {
            return Self {
                nan,
                ..Self::default()
            };
        }
        let (mut sum, mut carry) = (0.0, 0.0);
        for lane in 0..LANES {
            kahan_add(&mut sum, &mut carry, sums[lane]);
            kahan_add(&mut sum, &mut carry, -carries[lane]);
        }
        let mean = sum / count as f64;
        let mut m2 = [0.0; LANES];
        by_lanes(values, |lane_values| {
            for lane in 0..LANES {
                let deviation = lane_values[lane] - mean;
                let number = !deviation.is_nan();
                m2[lane] += if number { deviation * deviation } else { 0.0 };
            }
        });
        Self {
            count,
            nan,
            mean,
            m2: m2.iter().sum(),
            min: mins.into_iter().fold(f64::INFINITY, f64::min),
            max: maxs.into_iter().fold(f64::NEG_INFINITY, f64::max),
        }
    }

    /// Counts a value: NaN apart, a number into the moments.
    pub fn add(&mut self, value: f64) {
        if value.is_nan() {
            self.nan += 1;
            return;
        }
        self.count += 1;
        if self.count == 1 {
            (self.min, self.max) = (value, value);
        } else {
            self.min = self.min.min(value);
            self.max = self.max.max(value);
        }
        let delta = value - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (value - self.mean);
    }

    /// Adds the values `other` counted.
    pub fn merge(&mut self, other: &Moments) {
        let nan = self.nan + other.nan;
        if other.count == 0 {
            self.nan = nan;
            return;
        }
        if self.count == 0 {
            *self = *other;
            self.nan = nan;
            return;
        }
        let (a, b) = (self.count as f64, other.count as f64);
        let n = a + b;
        let delta = other.mean - self.mean;
        self.mean += delta * b / n;
        self.m2 += other.m2 + delta * delta * a * b / n;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.count += other.count;
        self.nan = nan;
    }

    fn some(&self, value: f64) -> Option<f64> {
        (self.count > 0).then_some(value)
    }

    /// Mean of the numbers; `None` without any.
    pub fn mean(&self) -> Option<f64> {
        self.some(self.mean)
    }

    /// Population standard deviation.
    pub fn std(&self) -> Option<f64> {
        self.some((self.m2 / self.count.max(1) as f64).max(0.0).sqrt())
    }

    /// Smallest number; `None` without any.
    pub fn min(&self) -> Option<f64> {
        self.some(self.min)
    }

    /// Largest number; `None` without any.
    pub fn max(&self) -> Option<f64> {
        self.some(self.max)
    }

    /// Adds each of `parts` to the moments of `all` at its place (a channel's to its channel's).
    pub(super) fn merge_each(all: &mut [Moments], parts: &[Moments]) {
        for (all, part) in all.iter_mut().zip(parts) {
            all.merge(part);
        }
    }

    pub(super) fn summary(&self) -> Summary {
        Summary {
            count: self.count,
            mean: self.mean(),
            std: self.std(),
            min: self.min(),
            max: self.max(),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::Moments;

    pub(in crate::stats) fn one_at_a_time(values: impl IntoIterator<Item = f64>) -> Moments {
        let mut moments = Moments::default();
        values.into_iter().for_each(|v| moments.add(v));
        moments
    }

    pub(in crate::stats) fn assert_close(a: &Moments, b: &Moments) {
        assert_eq!(
            (a.count, a.nan, a.min(), a.max()),
            (b.count, b.nan, b.min(), b.max())
        );
        let (mean, std) = (a.mean().unwrap(), a.std().unwrap());
        assert!((mean - b.mean().unwrap()).abs() <= 1e-12 * mean.abs().max(1.0));
        assert!((std - b.std().unwrap()).abs() <= 1e-9 * std.max(1e-3));
    }

    #[test]
    fn merged_moments_equal_one_pass() {
        let values: Vec<f64> = (0..1000)
            .map(|i| ((i * 37) % 101) as f64 * 0.5 + 1e6)
            .collect();
        let whole = one_at_a_time(values.iter().copied());
        let mut merged = Moments::default();
        for part in values.chunks(77) {
            merged.merge(&one_at_a_time(part.iter().copied()));
        }
        let two_pass = Moments::from_values(&values);
        let mean = values.iter().sum::<f64>() / 1000.0;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 1000.0;
        for m in [whole, merged, two_pass] {
            assert!((m.mean().unwrap() - mean).abs() < 1e-9);
            assert!((m.std().unwrap() - var.sqrt()).abs() < 1e-9);
            assert_eq!(m.min(), Some(1e6));
        }
        let mut nan = Moments::default();
        nan.add(f64::NAN);
        merged.merge(&nan);
        assert_eq!(merged.nan, 1);
        assert_eq!(Moments::default().mean(), None);
    }

    #[test]
    fn two_passes_equal_one_value_at_a_time() {
        // Values far from zero with a small spread, NaNs among them: where a naive sum of
        // squares would lose the variance.
        let values: Vec<f64> = (0..10_000)
            .map(|i| match i % 113 {
                0 => f64::NAN,
                _ => 1e8 + ((i * 7919) % 1009) as f64 * 1e-3,
            })
            .collect();
        assert_close(
            &one_at_a_time(values.clone()),
            &Moments::from_values(&values),
        );
        let only_nan = Moments::from_values(&[f64::NAN, f64::NAN]);
        assert_eq!(
            (only_nan.count, only_nan.nan, only_nan.mean()),
            (0, 2, None)
        );
        // Numbers that nearly cancel, as tendencies do (a mean a thousandth of their spread):
        // multiples of 2^-40, whose sum is exact in integers. A plain sum or Welford's update
        // miss the mean by about 5e-15.
        let mix = |i: u64| {
            let z = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let units: Vec<i64> = (0..100_000)
            .map(|i| (mix(i) >> 12) as i64 - (1 << 51))
            .collect();
        let cancelling: Vec<f64> = units
            .iter()
            .map(|&k| k as f64 / (1u64 << 40) as f64)
            .collect();
        let sum = units.iter().map(|&k| k as i128).sum::<i128>() as f64;
        let exact = sum / (1u64 << 40) as f64 / 100_000.0;
        let mean = Moments::from_values(&cancelling).mean().unwrap();
        assert!(
            (mean - exact).abs() <= 1e-15 * exact.abs(),
            "{mean} against {exact}"
        );
    }
}
