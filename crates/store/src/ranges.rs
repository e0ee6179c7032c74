//! Byte-range reads of sharded arrays: the shard index (read once, cached), the inner chunks
//! a request needs, adjacent ranges merged into one request, and a compact shard holding just
//! those inner chunks (every other entry of its index says "missing"), which the ordinary
//! codec chain decodes: the inner chunks that were not read decode to the fill value, and the
//! collator never looks at them.

use std::borrow::Cow;
use std::num::NonZeroU64;
use std::ops::Range;
use std::sync::Arc;

use object_store::GetRange;
use zarrs::array::codec::{ShardingCodecConfiguration, ShardingIndexLocation};
use zarrs::array::{
    data_type, ArrayBytes, ArrayMetadata, ArrayToBytesCodecTraits, BytesRepresentation, CodecChain,
    CodecError, CodecOptions, FillValue,
};

/// An inner chunk that is not in the shard.
const MISSING: u64 = u64::MAX;

/// How the inner chunks of a sharded array's shards are laid out.
#[derive(Debug)]
pub(crate) struct ShardLayout {
    /// Elements of one inner chunk along each axis.
    inner_shape: Vec<u64>,
    /// Inner chunks per shard along each axis.
    per_shard: Vec<u64>,
    index_codecs: Arc<CodecChain>,
    index_location: ShardingIndexLocation,
    index_shape: Vec<NonZeroU64>,
    index_size: u64,
}

/// A decoded shard index: `(offset, length)` per inner chunk in C order, `None` when missing.
pub(crate) type ShardIndex = Vec<Option<(u64, u64)>>;

impl ShardLayout {
    /// The layout of an array whose only codec is `sharding_indexed` (with any inner codecs),
    /// on a regular grid of shards of `shard_shape`; `None` for anything else, which is then
    /// read a whole chunk at a time.
    pub(crate) fn of(metadata: &ArrayMetadata, shard_shape: &[u64]) -> Option<Self> {
        let ArrayMetadata::V3(metadata) = metadata else {
            return None;
        };
        let [codec] = metadata.codecs.as_slice() else {
            return None;
        };
        if codec.name() != "sharding_indexed" {
            return None;
        }
        let configuration: ShardingCodecConfiguration = codec.to_typed_configuration().ok()?;
        let ShardingCodecConfiguration::V1(configuration) = configuration else {
            return None;
        };
        let inner_shape: Vec<u64> = configuration.chunk_shape.iter().map(|n| n.get()).collect();
        if inner_shape.len() != shard_shape.len()
            || shard_shape
                .iter()
                .zip(&inner_shape)
                .any(|(shard, inner)| shard % inner != 0)
        {
            return None;
        }
        let per_shard: Vec<u64> = shard_shape
            .iter()
            .zip(&inner_shape)
            .map(|(shard, inner)| shard / inner)
            .collect();
        let index_codecs = Arc::new(CodecChain::from_metadata(&configuration.index_codecs).ok()?);
        let mut index_shape: Vec<NonZeroU64> = per_shard
            .iter()
            .map(|&n| NonZeroU64::new(n))
            .collect::<Option<_>>()?;
        index_shape.push(NonZeroU64::new(2)?);
        let index_size = match index_codecs
            .encoded_representation(
                &index_shape,
                &data_type::uint64(),
                &FillValue::from(MISSING),
            )
            .ok()?
        {
            BytesRepresentation::FixedSize(size) => size,
            _ => return None,
        };
        Some(Self {
            inner_shape,
            per_shard,
            index_codecs,
            index_location: configuration.index_location,
            index_shape,
            index_size,
        })
    }

    pub(crate) fn inner_shape(&self) -> &[u64] {
        &self.inner_shape
    }

    /// Inner chunks in one shard.
    pub(crate) fn inner_count(&self) -> u64 {
        self.per_shard.iter().product()
    }

    /// Bytes of one decoded inner chunk of `element_size`-byte elements.
    pub(crate) fn inner_decoded_bytes(&self, element_size: usize) -> u64 {
        self.inner_shape.iter().product::<u64>() * element_size as u64
    }

    /// The inner chunks (C-order numbers within the shard) of the shard starting at
    /// `shard_start` that meet `region`.
    pub(crate) fn inner_chunks_in(
        &self,
        shard_start: &[u64],
        region: &[Range<u64>],
    ) -> impl Iterator<Item = u64> {
        let ranges: Vec<Range<u64>> = region
            .iter()
            .zip(shard_start)
            .zip(self.inner_shape.iter().zip(&self.per_shard))
            .map(|((range, &start), (&inner, &count))| {
                let from = range.start.saturating_sub(start) / inner;
                let to = range.end.saturating_sub(start).div_ceil(inner).min(count);
                if range.start >= range.end || range.end <= start {
                    0..0
                } else {
                    from.min(count)..to
                }
            })
            .collect();
        let total: u64 = ranges.iter().map(|range| range.end - range.start).product();
        let per_shard = self.per_shard.clone();
        (0..total).map(move |flat| {
            nth_in_ranges(flat, &ranges)
                .iter()
                .zip(&per_shard)
                .fold(0, |linear, (&index, &count)| linear * count + index)
        })
    }

    /// Where the index sits in a shard.
    pub(crate) fn index_range(&self) -> GetRange {
        match self.index_location {
            ShardingIndexLocation::Start => GetRange::Bounded(0..self.index_size),
            ShardingIndexLocation::End => GetRange::Suffix(self.index_size),
        }
    }

    pub(crate) fn decode_index(&self, encoded: &[u8]) -> Result<ShardIndex, CodecError> {
        if encoded.len() as u64 != self.index_size {
            return Err(CodecError::Other(format!(
                "shard index of {} bytes, expected {}",
                encoded.len(),
                self.index_size
            )));
        }
        let decoded = self
            .index_codecs
            .decode(
                Cow::Borrowed(encoded),
                &self.index_shape,
                &data_type::uint64(),
                &FillValue::from(MISSING),
                &CodecOptions::default(),
            )?
            .into_fixed()?;
        let values: Vec<u64> = decoded
            .chunks_exact(8)
            .map(|value| u64::from_ne_bytes(value.try_into().expect("8 bytes")))
            .collect();
        values
            .chunks_exact(2)
            .enumerate()
            .map(|(inner, entry)| match (entry[0], entry[1]) {
                (MISSING, MISSING) => Ok(None),
                // Offsets come from storage: one whose end overflows is corrupt, not a range.
                (offset, length) if offset.checked_add(length).is_none() => {
                    Err(CodecError::Other(format!(
                        "inner chunk {inner} at offset {offset} of {length} bytes ends past 2^64"
                    )))
                }
                (offset, length) => Ok(Some((offset, length))),
            })
            .collect()
    }

    /// A shard holding `pieces` (inner chunk number, stored bytes) and nothing else.
    pub(crate) fn assemble(&self, pieces: &[(u64, bytes::Bytes)]) -> Result<Vec<u8>, CodecError> {
        let payload: u64 = pieces.iter().map(|(_, bytes)| bytes.len() as u64).sum();
        let mut index = vec![MISSING; 2 * self.inner_count() as usize];
        let mut offset = match self.index_location {
            ShardingIndexLocation::Start => self.index_size,
            ShardingIndexLocation::End => 0,
        };
        for (inner, bytes) in pieces {
            index[2 * *inner as usize] = offset;
            index[2 * *inner as usize + 1] = bytes.len() as u64;
            offset += bytes.len() as u64;
        }
        let index_bytes: Vec<u8> = index.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let encoded_index = self.index_codecs.encode(
            ArrayBytes::new_flen(index_bytes),
            &self.index_shape,
            &data_type::uint64(),
            &FillValue::from(MISSING),
            &CodecOptions::default(),
        )?;
        let mut shard = Vec::with_capacity((payload + self.index_size) as usize);
        if self.index_location == ShardingIndexLocation::Start {
            shard.extend_from_slice(&encoded_index);
        }
        for (_, bytes) in pieces {
            shard.extend_from_slice(bytes);
        }
        if self.index_location == ShardingIndexLocation::End {
            shard.extend_from_slice(&encoded_index);
        }
        Ok(shard)
    }
}

/// Sorted, disjoint ranges merged where they touch or lie at most `gap` bytes apart.
pub(crate) fn merge_ranges(mut ranges: Vec<Range<u64>>, gap: u64) -> Vec<Range<u64>> {
    ranges.sort_by_key(|range| range.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if range.start <= last.end.saturating_add(gap) => {
                last.end = last.end.max(range.end)
            }
            _ => merged.push(range),
        }
    }
    merged
}

/// The `flat`-th multi-index, in C order, of the box spanned by `ranges`.
pub(crate) fn nth_in_ranges(flat: u64, ranges: &[Range<u64>]) -> Vec<u64> {
    let mut rest = flat;
    let mut indices = vec![0; ranges.len()];
    for (axis, range) in ranges.iter().enumerate().rev() {
        let span = range.end - range.start;
        indices[axis] = range.start + rest % span;
        rest /= span;
    }
    indices
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_ranges_merge_and_gaps_stay() {
        assert_eq!(
            merge_ranges(vec![10..20, 0..10, 25..30, 30..31], 0),
            vec![0..20, 25..31]
        );
        assert_eq!(merge_ranges(vec![0..10, 15..20], 5), vec![0..20]);
        assert_eq!(merge_ranges(vec![0..10, 16..20], 5), vec![0..10, 16..20]);
        assert!(merge_ranges(vec![], 0).is_empty());
    }
}
