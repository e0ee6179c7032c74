//! One step of a chunk column counted on every core, a block of elements at a time.

use std::ops::Range;

use rayon::prelude::*;

use super::moments::Moments;

/// Values of one step, a range of its elements at a time.
pub(super) trait StepValues: Sync {
    fn values(&self, elements: Range<usize>) -> Vec<f64>;
}

/// Elements of one step a core counts at a time. Blocks are merged in their order, so the
/// moments do not depend on the number of cores.
const STEP_BLOCK: usize = 1 << 16;

/// One step of a chunk column: its values, the step before (for the tendencies) and the
/// channel of each run of `run` values. Counted on every core, a block of elements each, each
/// run of a block in two passes.
pub(super) struct StepMoments<'a, S: StepValues> {
    pub(super) len: usize,
    pub(super) values: &'a S,
    pub(super) before: Option<&'a S>,
    pub(super) run: usize,
    pub(super) run_channels: &'a [usize],
    pub(super) channels: usize,
}

impl<S: StepValues> StepMoments<'_, S> {
    pub(super) fn add_to(&self, values: &mut [Moments], tendencies: &mut [Moments]) {
        let len = self.len;
        let blocks: Vec<(Vec<Moments>, Vec<Moments>)> = (0..len.div_ceil(STEP_BLOCK))
            .into_par_iter()
            .map(|block| self.block(block * STEP_BLOCK..((block + 1) * STEP_BLOCK).min(len)))
            .collect();
        for (block_values, block_tendencies) in &blocks {
            Moments::merge_each(values, block_values);
            Moments::merge_each(tendencies, block_tendencies);
        }
    }

    fn block(&self, elements: Range<usize>) -> (Vec<Moments>, Vec<Moments>) {
        let mut values = vec![Moments::default(); self.channels];
        let mut tendencies = vec![Moments::default(); self.channels];
        let block_values = self.values.values(elements.clone());
        let differences = self.before.map(|before| {
            let mut differences = before.values(elements.clone());
            for (difference, value) in differences.iter_mut().zip(&block_values) {
                *difference = value - *difference;
            }
            differences
        });
        let mut first = elements.start;
        while first < elements.end {
            let run = first / self.run;
            let end = ((run + 1) * self.run).min(elements.end);
            let channel = self.run_channels[run];
            let here = first - elements.start..end - elements.start;
            values[channel].merge(&Moments::from_values(&block_values[here.clone()]));
            if let Some(differences) = &differences {
                // A NaN difference is left out, not counted.
                let mut moments = Moments::from_values(&differences[here]);
                moments.nan = 0;
                tendencies[channel].merge(&moments);
            }
            first = end;
        }
        (values, tendencies)
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use super::{StepMoments, StepValues, STEP_BLOCK};
    use crate::stats::moments::tests::assert_close;
    use crate::stats::Moments;

    impl StepValues for Vec<f64> {
        fn values(&self, elements: Range<usize>) -> Vec<f64> {
            self[elements].to_vec()
        }
    }

    #[test]
    fn a_step_counted_in_blocks_equals_one_pass() {
        // Three channels over several blocks, a channel per value and in runs that straddle
        // blocks, NaNs among the values and the step before, as one core would count them.
        let len = 3 * STEP_BLOCK + 5;
        let value = |i: usize, shift: f64| match i % 997 {
            0 => f64::NAN,
            _ => ((i * 37) % 1013) as f64 * 0.25 + 280.0 + shift,
        };
        let values: Vec<f64> = (0..len).map(|i| value(i, 0.0)).collect();
        let before: Vec<f64> = (0..len).map(|i| value(i + 1, -1.5)).collect();
        for run in [1, 1000] {
            let run_channels: Vec<usize> = (0..len.div_ceil(run)).map(|r| r % 3).collect();
            let mut one_pass = (vec![Moments::default(); 3], vec![Moments::default(); 3]);
            for i in 0..len {
                let channel = run_channels[i / run];
                one_pass.0[channel].add(values[i]);
                let difference = values[i] - before[i];
                if !difference.is_nan() {
                    one_pass.1[channel].add(difference);
                }
            }
            let mut blocks = (vec![Moments::default(); 3], vec![Moments::default(); 3]);
            let step = StepMoments {
                len,
                values: &values,
                before: Some(&before),
                run,
                run_channels: &run_channels,
                channels: 3,
            };
            step.add_to(&mut blocks.0, &mut blocks.1);
            let pairs = one_pass.0.iter().zip(&blocks.0);
            for (a, b) in pairs.chain(one_pass.1.iter().zip(&blocks.1)) {
                assert_close(a, b);
            }
        }
    }
}
