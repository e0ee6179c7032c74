//! Where a group's staged bytes go in its pinned staging buffer: the uploads not read into
//! pinned memory, packed in the input buffer's order, then the descriptor tables. A chunk read
//! into pinned memory uploads from where it was read and takes no room here. (The staging
//! buffer used to mirror the whole input buffer: W1's were 317 MB of pinned memory for 5.5 KB
//! of tables, allocated whenever a slot came into use, which held a batch's staging for
//! 100-330 ms.)

use crate::plan::MOST_UPLOAD_GAP;

/// Where one upload is copied from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Placed {
    /// At this offset of the staging buffer.
    Staged(usize),
    /// From where it was read, in the slab of pinned read memory starting at this address.
    Slab(usize),
}

/// The staging buffer of one group.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct StagingLayout {
    /// Per upload of the plan, in its order.
    pub(super) uploads: Vec<Placed>,
    /// Offset of the tables (256-aligned, as in the input buffer).
    pub(super) tables: usize,
    /// Bytes the buffer needs.
    pub(super) len: usize,
}

impl StagingLayout {
    /// Lays out `uploads` (bytes and input-buffer offset, in increasing offsets) and
    /// `tables_len` bytes of tables; `slab_of` says which uploads sit in pinned read memory.
    /// Staged neighbours keep the gap between them when it is short, so they stay one copy.
    pub(super) fn new<'a>(
        uploads: impl IntoIterator<Item = (&'a [u8], usize)>,
        tables_len: usize,
        slab_of: impl Fn(&[u8]) -> Option<usize>,
    ) -> Self {
        let mut placed = Vec::new();
        let mut end = 0;
        // The input-buffer end of the upload before, when it was staged.
        let mut staged_before: Option<usize> = None;
        for (bytes, offset) in uploads {
            if let Some(slab) = slab_of(bytes) {
                placed.push(Placed::Slab(slab));
                staged_before = None;
                continue;
            }
            let gap = staged_before.map_or(0, |before| offset.saturating_sub(before));
            let at = end + gap.min(MOST_UPLOAD_GAP);
            placed.push(Placed::Staged(at));
            end = at + bytes.len();
            staged_before = Some(offset + bytes.len());
        }
        let tables = end.next_multiple_of(256);
        Self {
            uploads: placed,
            tables,
            len: tables + tables_len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_staged_uploads_and_tables_take_room() {
        let data = vec![0u8; 10_000];
        let (a, b, c, d) = (
            &data[..100],
            &data[100..300],
            &data[300..400],
            &data[400..9000],
        );
        // b and d sit in a slab; a and c are staged, c after a short gap.
        let in_slab = |bytes: &[u8]| {
            let at = bytes.as_ptr() as usize - data.as_ptr() as usize;
            (at == 100 || at == 400).then_some(7)
        };
        let uploads = [(a, 0), (b, 128), (c, 400), (d, 512)];
        let layout = StagingLayout::new(uploads, 64, in_slab);
        assert_eq!(
            layout.uploads,
            [
                Placed::Staged(0),
                Placed::Slab(7),
                Placed::Staged(100),
                Placed::Slab(7)
            ]
        );
        assert_eq!((layout.tables, layout.len), (256, 320));
        // Staged neighbours keep a short gap (one copy), and close up a long one.
        let staged = [(a, 0), (c, 116), (b, 116 + 100 + MOST_UPLOAD_GAP + 1)];
        let layout = StagingLayout::new(staged, 0, |_| None);
        assert_eq!(
            layout.uploads,
            [
                Placed::Staged(0),
                Placed::Staged(116),
                Placed::Staged(216 + MOST_UPLOAD_GAP)
            ]
        );
        assert_eq!(layout.len, (416 + MOST_UPLOAD_GAP).next_multiple_of(256));
        assert_eq!(StagingLayout::new([], 0, |_| None).len, 0);
    }
}
