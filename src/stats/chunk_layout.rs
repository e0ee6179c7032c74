//! Where the elements of one step of a chunk lie in its bytes, and their channels.

use std::ops::Range;

/// Where the elements of one step of a chunk lie in its bytes (C order over every axis but
/// time, inside the array), and which channel each run of them is.
pub(super) struct ChunkLayout {
    /// Start and inside on every axis but time, and the chunk's shape: what the layout
    /// depends on.
    pub(super) key: Vec<u64>,
    /// Bytes per element.
    pub(super) size: usize,
    /// Elements between consecutive steps in the chunk.
    time_stride: usize,
    pub(super) per_step: usize,
    /// Elements of a step next to each other in the chunk (a whole step where the chunk is
    /// not clipped), and, outside them, each axis's inside and chunk stride.
    span: usize,
    span_axes: Vec<(usize, usize)>,
    /// Elements of a step in a row that are one channel (the axes inside the last stacked
    /// one), and each such run's channel.
    pub(super) run: usize,
    pub(super) run_channels: Vec<usize>,
}

impl ChunkLayout {
    /// What a chunk region's layout depends on.
    pub(super) fn key(
        time_axis: Option<usize>,
        start: &[u64],
        shape: &[u64],
        inside: &[u64],
    ) -> Vec<u64> {
        (0..shape.len())
            .filter(|&a| Some(a) != time_axis)
            .flat_map(|a| [start[a], inside[a]])
            .chain(shape.iter().copied())
            .collect()
    }

    /// The layout of a chunk at `start` of `shape`, `inside` the array, of elements of `size`
    /// bytes, given the time axis and each axis's channel stride (0 where not stacked).
    pub(super) fn new(
        time_axis: Option<usize>,
        channel_strides: &[usize],
        size: usize,
        start: &[u64],
        shape: &[u64],
        inside: &[u64],
    ) -> Self {
        let rank = shape.len();
        let others: Vec<usize> = (0..rank).filter(|&a| Some(a) != time_axis).collect();
        let mut strides = vec![1usize; rank];
        for a in (0..rank.saturating_sub(1)).rev() {
            strides[a] = strides[a + 1] * shape[a + 1] as usize;
        }
        let per_step = others.iter().map(|&a| inside[a] as usize).product();
        // Inner axes stay contiguous as long as the ones inside them are whole.
        let (mut span, mut outer) = (1, others.len());
        while outer > 0 && strides[others[outer - 1]] == span {
            let axis = others[outer - 1];
            span *= inside[axis] as usize;
            outer -= 1;
            if inside[axis] != shape[axis] {
                break;
            }
        }
        let span_axes = others[..outer]
            .iter()
            .map(|&a| (inside[a] as usize, strides[a]))
            .collect();
        let stacked = others
            .iter()
            .rposition(|&a| channel_strides[a] != 0)
            .map_or(0, |last| last + 1);
        let run: usize = others[stacked..]
            .iter()
            .map(|&a| inside[a] as usize)
            .product();
        let first: usize = (0..rank)
            .map(|a| start[a] as usize * channel_strides[a])
            .sum();
        let run_channels = (0..per_step / run.max(1))
            .map(|mut rest| {
                let mut channel = first;
                for &a in others[..stacked].iter().rev() {
                    channel += rest % inside[a] as usize * channel_strides[a];
                    rest /= inside[a] as usize;
                }
                channel
            })
            .collect();
        Self {
            key: Self::key(time_axis, start, shape, inside),
            size,
            time_stride: time_axis.map_or(0, |axis| strides[axis]),
            per_step,
            span,
            span_axes,
            run,
            run_channels,
        }
    }

    /// Where `elements` of step `at` lie in the chunk: pieces (first element, length), each
    /// in one span.
    pub(super) fn pieces(
        &self,
        at: usize,
        elements: Range<usize>,
    ) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mut element = elements.start;
        std::iter::from_fn(move || {
            if element >= elements.end {
                return None;
            }
            let (span, within) = (element / self.span, element % self.span);
            let len = (self.span - within).min(elements.end - element);
            let (mut first, mut rest) = (at * self.time_stride + within, span);
            for &(inside, stride) in self.span_axes.iter().rev() {
                first += rest % inside * stride;
                rest /= inside;
            }
            element += len;
            Some((first, len))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ChunkLayout;

    #[test]
    fn a_chunk_layout_finds_each_step_and_channel() {
        // (time axis, channel strides, start, chunk shape, inside): a whole chunk, a chunk
        // clipped at the array's edge with time inside, time last, no time.
        type Case = (Option<usize>, [usize; 4], [u64; 4], [u64; 4], [u64; 4]);
        let cases: [Case; 4] = [
            (
                Some(0),
                [0, 1, 0, 0],
                [2, 0, 0, 0],
                [2, 3, 4, 5],
                [2, 3, 4, 5],
            ),
            (
                Some(1),
                [5, 0, 1, 0],
                [4, 3, 4, 8],
                [2, 3, 4, 4],
                [1, 3, 2, 1],
            ),
            (
                Some(3),
                [3, 1, 0, 0],
                [0, 2, 0, 0],
                [2, 3, 4, 5],
                [2, 1, 4, 5],
            ),
            (None, [0, 2, 1, 0], [0, 2, 0, 5], [2, 3, 4, 5], [2, 3, 2, 3]),
        ];
        for (time_axis, channel_strides, start, shape, inside) in cases {
            let layout = ChunkLayout::new(time_axis, &channel_strides, 4, &start, &shape, &inside);
            let others: Vec<usize> = (0..4).filter(|&a| Some(a) != time_axis).collect();
            let per_step: u64 = others.iter().map(|&a| inside[a]).product();
            let steps = time_axis.map_or(1, |axis| inside[axis] as usize);
            for at in 0..steps {
                let (mut offsets, mut channels) = (Vec::new(), Vec::new());
                for flat in 0..per_step {
                    let (mut local, mut rest) = ([0u64; 4], flat);
                    for &a in others.iter().rev() {
                        local[a] = rest % inside[a];
                        rest /= inside[a];
                    }
                    if let Some(axis) = time_axis {
                        local[axis] = at as u64;
                    }
                    offsets.push((0..4).fold(0u64, |o, a| o * shape[a] + local[a]) as usize);
                    let channel = (0..4)
                        .filter(|&a| Some(a) != time_axis)
                        .map(|a| (start[a] + local[a]) as usize * channel_strides[a]);
                    channels.push(channel.sum::<usize>());
                }
                // Every range of the step, whichever spans it starts and ends in.
                let per_step = per_step as usize;
                for elements in [0..per_step, 1..per_step, per_step / 3..per_step / 2 + 1] {
                    let pieces: Vec<usize> = layout
                        .pieces(at, elements.clone())
                        .flat_map(|(first, len)| first..first + len)
                        .collect();
                    let what = format!("{time_axis:?} {inside:?} step {at} {elements:?}");
                    assert_eq!(pieces, offsets[elements], "{what}");
                }
                let runs: Vec<usize> = (0..per_step)
                    .map(|i| layout.run_channels[i / layout.run])
                    .collect();
                assert_eq!(runs, channels, "{time_axis:?} {inside:?}");
            }
        }
    }
}
