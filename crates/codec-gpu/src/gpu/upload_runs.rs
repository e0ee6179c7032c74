//! The host-to-device copies of a group's upload: the staged bytes and tables from the
//! group's staging buffer, and chunks read into pinned memory from where they were read.
//! Neighbours join into one copy when they keep the same distance on both sides.

use crate::plan::MOST_UPLOAD_GAP;

/// One copy: `len` bytes from host address `src` to offset `dst` of the device input buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Run {
    pub(super) src: usize,
    pub(super) dst: usize,
    pub(super) len: usize,
    from: Source,
}

/// The host memory a run reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    Staging,
    /// A slab of pinned read memory, by its start address.
    Slab(usize),
}

/// A group's copies, in the order of their device offsets.
#[derive(Debug, Default)]
pub(super) struct UploadRuns(Vec<Run>);

impl UploadRuns {
    /// Adds a copy after the others (`dst` past the last one's end).
    pub(super) fn push(&mut self, src: usize, dst: usize, len: usize, from: Source) {
        if len == 0 {
            return;
        }
        if let Some(last) = self.0.last_mut() {
            let last_end = last.dst + last.len;
            let gap = dst.checked_sub(last_end);
            let same_distance = src.wrapping_sub(last.src) == dst.wrapping_sub(last.dst);
            // Any gap inside the staging buffer is its own memory; inside a slab, only a
            // short one, and never across slabs (the bytes between could be unmapped).
            let joins = match (last.from, from) {
                (Source::Staging, Source::Staging) => true,
                (Source::Slab(a), Source::Slab(b)) => {
                    // A gap (padding, or bytes no chunk of this group holds) is copied
                    // along into the input buffer's padding.
                    a == b && gap.is_some_and(|g| g <= MOST_UPLOAD_GAP)
                }
                _ => false,
            };
            if same_distance && joins && gap.is_some() {
                last.len = dst + len - last.dst;
                return;
            }
        }
        self.0.push(Run {
            src,
            dst,
            len,
            from,
        });
    }

    pub(super) fn runs(&self) -> &[Run] {
        &self.0
    }

    /// Bytes copied from the staging buffer (chunks not read into pinned memory, and tables).
    pub(super) fn staged_bytes(&self) -> usize {
        self.0
            .iter()
            .filter(|run| run.from == Source::Staging)
            .map(|run| run.len)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_neighbours_join_across_padding_and_slabs_only_when_close_and_alike() {
        let mut runs = UploadRuns::default();
        let staging = 1_000_000;
        // Two staged uploads with padding between them, then the tables further on.
        runs.push(staging, 0, 10, Source::Staging);
        runs.push(staging + 16, 16, 5, Source::Staging);
        runs.push(staging + 256, 256, 100, Source::Staging);
        assert_eq!(runs.runs().len(), 1);
        assert_eq!(runs.runs()[0].len, 356);
        assert_eq!(runs.staged_bytes(), 356);

        let mut runs = UploadRuns::default();
        let slab = 5_000_000;
        runs.push(slab, 0, 100, Source::Slab(slab));
        runs.push(slab + 128, 128, 50, Source::Slab(slab)); // same distance, short gap: joins
        runs.push(slab + 10_000, 192, 50, Source::Slab(slab)); // another distance
        runs.push(slab + 10_050 + 5000, 192 + 50 + 5000, 8, Source::Slab(slab)); // gap too long
        runs.push(staging + 300, 300 + 5000, 8, Source::Staging); // another kind
        assert_eq!(
            runs.runs()
                .iter()
                .map(|run| (run.dst, run.len))
                .collect::<Vec<_>>(),
            vec![(0, 178), (192, 50), (5242, 8), (5300, 8)]
        );

        // Pieces of two slabs never join, even at the same distance.
        let mut runs = UploadRuns::default();
        runs.push(slab, 0, 64, Source::Slab(slab));
        runs.push(slab + 64, 64, 64, Source::Slab(slab + 64));
        assert_eq!(runs.runs().len(), 2);
    }
}
