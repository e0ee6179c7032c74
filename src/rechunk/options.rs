//! What `rechunk` is asked for: chunk and shard sizes by dimension name, and the codec.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use zarrs::array::codec::{
    BloscCodec, BloscCompressionLevel, BloscCompressor, BloscShuffleMode, GzipCodec, ZstdCodec,
};
use zarrs::array::BytesToBytesCodecTraits;

use super::RechunkError;

/// The compression of every destination chunk (the bytes-to-bytes stage after `bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// zstd at a level (default 3), no checksum.
    Zstd(i32),
    /// blosc with lz4 at a clevel (default 5), byte shuffle.
    BloscLz4(u8),
    /// blosc with zstd at a clevel (default 5), byte shuffle.
    BloscZstd(u8),
    /// gzip at a level (default 5).
    Gzip(u32),
    /// `bytes` only.
    None,
}

impl Default for Codec {
    fn default() -> Self {
        Self::Zstd(3)
    }
}

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Zstd(level) => write!(f, "zstd:{level}"),
            Self::BloscLz4(level) => write!(f, "blosc-lz4:{level}"),
            Self::BloscZstd(level) => write!(f, "blosc-zstd:{level}"),
            Self::Gzip(level) => write!(f, "gzip:{level}"),
            Self::None => f.write_str("none"),
        }
    }
}

impl FromStr for Codec {
    type Err = RechunkError;

    /// `zstd[:LEVEL]`, `blosc-lz4[:CLEVEL]`, `blosc-zstd[:CLEVEL]`, `gzip[:LEVEL]` or `none`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || RechunkError::Codec {
            text: text.to_string(),
        };
        let (name, level) = match text.split_once(':') {
            Some((name, level)) => (name, Some(level.trim())),
            None => (text, None),
        };
        let level_in = |default: i64, min: i64, max: i64| -> Result<i64, RechunkError> {
            match level {
                None => Ok(default),
                Some(level) => match level.parse::<i64>() {
                    Ok(n) if (min..=max).contains(&n) => Ok(n),
                    _ => Err(bad()),
                },
            }
        };
        Ok(match name.trim() {
            "zstd" => Self::Zstd(level_in(3, -7, 22)? as i32),
            "blosc-lz4" => Self::BloscLz4(level_in(5, 0, 9)? as u8),
            "blosc-zstd" => Self::BloscZstd(level_in(5, 0, 9)? as u8),
            "gzip" => Self::Gzip(level_in(5, 0, 9)? as u32),
            "none" if level.is_none() => Self::None,
            _ => return Err(bad()),
        })
    }
}

impl Codec {
    /// The zarrs codecs for elements of `element_size` bytes (blosc's typesize).
    pub(crate) fn codecs(
        self,
        element_size: usize,
    ) -> Result<Vec<Arc<dyn BytesToBytesCodecTraits>>, RechunkError> {
        let blosc = |cname, clevel: u8| -> Result<Arc<dyn BytesToBytesCodecTraits>, RechunkError> {
            let level =
                BloscCompressionLevel::try_from(clevel).map_err(|_| RechunkError::Codec {
                    text: self.to_string(),
                })?;
            let codec = BloscCodec::new(
                cname,
                level,
                None,
                BloscShuffleMode::Shuffle,
                Some(element_size),
            )
            .map_err(|source| RechunkError::CodecCreate {
                codec: self.to_string(),
                source: Box::new(source),
            })?;
            Ok(Arc::new(codec))
        };
        Ok(match self {
            Self::Zstd(level) => vec![Arc::new(ZstdCodec::new(level, false))],
            Self::BloscLz4(level) => vec![blosc(BloscCompressor::LZ4, level)?],
            Self::BloscZstd(level) => vec![blosc(BloscCompressor::Zstd, level)?],
            Self::Gzip(level) => vec![Arc::new(GzipCodec::new(level).map_err(|source| {
                RechunkError::CodecCreate {
                    codec: self.to_string(),
                    source: Box::new(source),
                }
            })?)],
            Self::None => vec![],
        })
    }
}

/// Sizes by dimension name, as `time=1,latitude=320,longitude=640` gives them.
pub type DimSizes = BTreeMap<String, u64>;

/// Parses `DIM=N,DIM=N,...` (each N at least 1, each DIM once). `flag` names the option in
/// errors (`--chunks`).
pub fn parse_dim_sizes(flag: &str, text: &str) -> Result<DimSizes, RechunkError> {
    let mut sizes = DimSizes::new();
    for part in text
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
    {
        let bad = |reason: &str| RechunkError::DimSize {
            flag: flag.to_string(),
            text: part.to_string(),
            reason: reason.to_string(),
        };
        let (dim, size) = part.split_once('=').ok_or_else(|| bad("expected DIM=N"))?;
        let size: u64 = size
            .trim()
            .parse()
            .map_err(|_| bad("the size is not a whole number"))?;
        if size == 0 {
            return Err(bad("sizes must be at least 1"));
        }
        if sizes.insert(dim.trim().to_string(), size).is_some() {
            return Err(bad("the dimension is named twice"));
        }
    }
    Ok(sizes)
}

/// Options of [`rechunk`](super::rechunk).
#[derive(Clone, Debug)]
pub struct RechunkOptions {
    /// The data variables to rewrite (with every coordinate); empty: every array.
    pub variables: Vec<String>,
    /// Chunk size per dimension (the inner chunk when sharded). A dimension not named keeps
    /// the source's chunk size along it (the inner chunk's for sharded sources).
    pub chunks: DimSizes,
    /// Shard size per dimension, each a multiple of the chunk size along it; a dimension not
    /// named gets one chunk per shard. Empty: no sharding.
    pub shards: DimSizes,
    /// The compression of every destination chunk.
    pub codec: Codec,
    /// Destination chunks (shards) read and written at once; each holds its decoded region in
    /// memory, so memory is about this many shards.
    pub concurrency: usize,
    /// Stop with [`RechunkError::Stopped`] after writing this many destination chunks (a test
    /// hook for interruptions).
    pub stop_after: Option<u64>,
}

impl Default for RechunkOptions {
    fn default() -> Self {
        Self {
            variables: Vec::new(),
            chunks: DimSizes::new(),
            shards: DimSizes::new(),
            codec: Codec::default(),
            concurrency: std::thread::available_parallelism().map_or(2, |n| n.get()),
            stop_after: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codecs_parse() {
        assert_eq!("zstd".parse::<Codec>().unwrap(), Codec::Zstd(3));
        assert_eq!("zstd:9".parse::<Codec>().unwrap(), Codec::Zstd(9));
        assert_eq!("blosc-lz4".parse::<Codec>().unwrap(), Codec::BloscLz4(5));
        assert_eq!("gzip:1".parse::<Codec>().unwrap(), Codec::Gzip(1));
        assert_eq!("none".parse::<Codec>().unwrap(), Codec::None);
        for bad in ["lz5", "zstd:x", "zstd:99", "none:1", "blosc-lz4:10", ""] {
            assert!(bad.parse::<Codec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn dim_sizes_parse() {
        let sizes = parse_dim_sizes("--chunks", "time=1, latitude=320,longitude=640").unwrap();
        assert_eq!(sizes["time"], 1);
        assert_eq!(sizes["latitude"], 320);
        assert_eq!(sizes["longitude"], 640);
        for bad in ["time=0", "time", "time=a", "time=1,time=2", "time=-1"] {
            let error = parse_dim_sizes("--chunks", bad).unwrap_err().to_string();
            assert!(error.contains("--chunks"), "{error}");
        }
    }
}
