//! Reading compressed frames on the CPU before anything reaches the GPU: nvCOMP documents
//! undefined behaviour on corrupt input, so every header, declared size and offset is checked
//! here against the chunk's expected decoded size and the bytes actually present.

use std::cell::Cell;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

pub use crate::frame_error::FrameError;
use crate::zstd_tables::{self, BlockLayout, FrameTables, MAX_BLOCK};

type Result<T> = std::result::Result<T, FrameError>;

fn need(what: &'static str, bytes: &[u8], needed: usize) -> Result<()> {
    if bytes.len() < needed {
        return Err(FrameError::Truncated {
            what,
            len: bytes.len(),
            needed,
        });
    }
    Ok(())
}

fn u32_le(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_le(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn declared(what: &'static str, declared: u64, expected: usize) -> Result<()> {
    if declared != expected as u64 {
        return Err(FrameError::DeclaredSize {
            what,
            declared,
            expected: expected as u64,
        });
    }
    Ok(())
}

/// Strips a `crc32c` codec's 4-byte trailer after checking it.
pub(crate) fn strip_crc32c(bytes: &[u8]) -> Result<Range<usize>> {
    need("crc32c", bytes, 4)?;
    let body = bytes.len() - 4;
    check_crc32c("crc32c", &bytes[..body], u32_le(bytes, body))?;
    Ok(0..body)
}

fn check_crc32c(what: &'static str, body: &[u8], stored: u32) -> Result<()> {
    let computed = crc32c::crc32c(body);
    if computed != stored {
        return Err(FrameError::Checksum {
            what,
            stored,
            computed,
        });
    }
    Ok(())
}

/// Whether zstd frames' entropy tables are checked (see [`enable_zstd_table_checks`]).
static ZSTD_TABLE_CHECKS: AtomicBool = AtomicBool::new(cfg!(test));

thread_local! {
    /// Overrides the process setting on this thread: batch planning checks tables in a
    /// parallel pass first, then plans the frames that passed without checking them again.
    static TABLE_CHECKS_HERE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Turns on the checks of compressed zstd blocks' entropy tables for this process (a
/// [`crate::GpuDecoder`] does, unless `GpuOptions::check_zstd_tables` is off). They run at
/// about 17 GB/s of W1's stored bytes per core (H100, 2026-11-25), on every core while a batch
/// is planned (docs/benchmarks.md, "GPU decoding per codec and chunk size").
pub fn enable_zstd_table_checks() {
    ZSTD_TABLE_CHECKS.store(true, Ordering::Relaxed);
}

pub(crate) fn zstd_table_checks() -> bool {
    TABLE_CHECKS_HERE
        .get()
        .unwrap_or_else(|| ZSTD_TABLE_CHECKS.load(Ordering::Relaxed))
}

/// Runs `f` with the entropy-table checks on or off on this thread.
pub(crate) fn with_table_checks<T>(on: bool, f: impl FnOnce() -> T) -> T {
    let before = TABLE_CHECKS_HERE.replace(Some(on));
    let result = f();
    TABLE_CHECKS_HERE.set(before);
    result
}

/// Checks a zstd frame: its header (a declared content size must equal `expected`), its
/// blocks, and (when enabled) the entropy tables of its compressed blocks.
pub(crate) fn check_zstd(bytes: &[u8], expected: usize) -> Result<()> {
    walk_zstd(bytes, expected, |_| {})
}

/// Where the parts of each compressed block of a valid zstd frame lie.
#[cfg(test)]
pub(crate) fn zstd_layout(bytes: &[u8], expected: usize) -> Result<Vec<BlockLayout>> {
    let mut layouts = Vec::new();
    walk_zstd(bytes, expected, |layout| layouts.push(layout))?;
    Ok(layouts)
}

/// Checks a zstd frame, handing `on_block` the layout of each compressed block.
fn walk_zstd(bytes: &[u8], expected: usize, on_block: impl FnMut(BlockLayout)) -> Result<()> {
    const WHAT: &str = "zstd frame";
    need(WHAT, bytes, 6)?;
    if u32_le(bytes, 0) != 0xFD2F_B528 {
        return Err(FrameError::BadHeader {
            what: WHAT,
            detail: format!("magic {:#010x}", u32_le(bytes, 0)),
        });
    }
    let descriptor = bytes[4];
    if descriptor & 0x08 != 0 {
        return Err(FrameError::BadHeader {
            what: WHAT,
            detail: "reserved bit set".into(),
        });
    }
    let single_segment = descriptor & 0x20 != 0;
    let dictionary_bytes = [0, 1, 2, 4][(descriptor & 3) as usize];
    let content_size_bytes = match descriptor >> 6 {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let mut at = 5 + usize::from(!single_segment);
    at += dictionary_bytes;
    need(WHAT, bytes, at + content_size_bytes)?;
    let field = &bytes[at..at + content_size_bytes];
    let mut size = [0u8; 8];
    size[..content_size_bytes].copy_from_slice(field);
    let size = u64::from_le_bytes(size);
    // The declared size is checked even for frames left to the CPU: zarrs' zstd codec
    // allocates what a frame declares, and a failed allocation aborts the process.
    match content_size_bytes {
        0 => {} // not declared: the output capacity bounds it
        2 => declared(WHAT, size + 256, expected)?,
        _ => declared(WHAT, size, expected)?,
    }
    if dictionary_bytes > 0 {
        return Err(FrameError::NeedsCpu("zstd frame with a dictionary".into()));
    }
    check_zstd_blocks(
        bytes,
        at + content_size_bytes,
        descriptor & 0x04 != 0,
        expected,
        on_block,
    )
}

/// Walks a zstd frame's blocks: each must lie inside the frame, declare at most 128 KiB,
/// and the blocks may not decode past `expected` (raw and RLE blocks their size, compressed
/// ones at least their literals and a minimal match per sequence); the frame must end after
/// its last block (and checksum). This catches truncated and spliced frames before nvCOMP.
/// Compressed blocks' entropy tables are checked by [`zstd_tables`].
fn check_zstd_blocks(
    bytes: &[u8],
    mut at: usize,
    checksum: bool,
    expected: usize,
    mut on_block: impl FnMut(BlockLayout),
) -> Result<()> {
    const WHAT: &str = "zstd block";
    let mut decoded = 0usize;
    let mut tables = FrameTables::default();
    loop {
        if at + 3 > bytes.len() {
            return Err(FrameError::Truncated {
                what: WHAT,
                len: bytes.len(),
                needed: at + 3,
            });
        }
        let header =
            u32::from(bytes[at]) | u32::from(bytes[at + 1]) << 8 | u32::from(bytes[at + 2]) << 16;
        at += 3;
        let (last, kind, size) = (header & 1 == 1, (header >> 1) & 3, (header >> 3) as usize);
        let stored = match kind {
            0 => size, // raw
            1 => 1,    // RLE: one byte repeated
            2 => size, // compressed
            _ => {
                return Err(FrameError::BadHeader {
                    what: WHAT,
                    detail: "reserved block type".into(),
                })
            }
        };
        if size > MAX_BLOCK {
            return Err(FrameError::BadHeader {
                what: WHAT,
                detail: format!("block of {size} bytes"),
            });
        }
        if at + stored > bytes.len() {
            return Err(FrameError::Truncated {
                what: WHAT,
                len: bytes.len(),
                needed: at + stored,
            });
        }
        decoded += if kind == 2 && !zstd_table_checks() {
            0 // size unknown without reading the block
        } else if kind == 2 {
            let layout = zstd_tables::check_compressed_block(bytes, at..at + size, &mut tables)?;
            let min_decoded = layout.min_decoded();
            on_block(layout);
            min_decoded
        } else {
            size
        };
        if decoded > expected {
            return Err(FrameError::DeclaredSize {
                what: WHAT,
                declared: decoded as u64,
                expected: expected as u64,
            });
        }
        at += stored;
        if last {
            break;
        }
    }
    let end = at + if checksum { 4 } else { 0 };
    if end != bytes.len() {
        return Err(FrameError::BadHeader {
            what: "zstd frame",
            detail: format!("ends at byte {end} of {}", bytes.len()),
        });
    }
    Ok(())
}

/// The raw deflate stream of a gzip member, after checking its header and its size trailer.
pub(crate) fn gzip_payload(bytes: &[u8], expected: usize) -> Result<Range<usize>> {
    const WHAT: &str = "gzip member";
    need(WHAT, bytes, 18)?;
    if bytes[0] != 0x1f || bytes[1] != 0x8b || bytes[2] != 8 {
        return Err(FrameError::BadHeader {
            what: WHAT,
            detail: format!("starts {:02x} {:02x} {:02x}", bytes[0], bytes[1], bytes[2]),
        });
    }
    let flags = bytes[3];
    if flags & 0xe0 != 0 {
        return Err(FrameError::BadHeader {
            what: WHAT,
            detail: format!("reserved flags {flags:#04x}"),
        });
    }
    let mut at = 10;
    let end = bytes.len() - 8;
    let past = |at: usize| -> Result<usize> {
        if at > end {
            return Err(FrameError::Truncated {
                what: WHAT,
                len: bytes.len(),
                needed: at + 8,
            });
        }
        Ok(at)
    };
    if flags & 0x04 != 0 {
        at = past(at + 2)?;
        at = past(at + u16::from_le_bytes([bytes[at - 2], bytes[at - 1]]) as usize)?;
    }
    for flag in [0x08, 0x10] {
        if flags & flag != 0 {
            let zero = bytes[at..end].iter().position(|&b| b == 0);
            at = past(
                at + zero.ok_or(FrameError::Truncated {
                    what: WHAT,
                    len: bytes.len(),
                    needed: bytes.len() + 1,
                })? + 1,
            )?;
        }
    }
    if flags & 0x02 != 0 {
        at = past(at + 2)?;
    }
    // ISIZE is the decoded size modulo 2^32.
    declared(
        WHAT,
        u64::from(u32_le(bytes, end + 4)),
        expected % (1 << 32),
    )?;
    Ok(at..end)
}

/// The raw deflate stream of a zlib stream, after checking its header.
pub(crate) fn zlib_payload(bytes: &[u8]) -> Result<Range<usize>> {
    const WHAT: &str = "zlib stream";
    need(WHAT, bytes, 6)?;
    let (method, flags) = (bytes[0], bytes[1]);
    if method & 0x0f != 8
        || method >> 4 > 7
        || (u16::from(method) << 8 | u16::from(flags)) % 31 != 0
    {
        return Err(FrameError::BadHeader {
            what: WHAT,
            detail: format!("starts {method:02x} {flags:02x}"),
        });
    }
    if flags & 0x20 != 0 {
        return Err(FrameError::NeedsCpu(
            "zlib stream with a preset dictionary".into(),
        ));
    }
    Ok(2..bytes.len() - 4)
}

/// The LZ4 block of a numcodecs `lz4` chunk, after checking its declared size.
pub(crate) fn lz4_payload(bytes: &[u8], expected: usize) -> Result<Range<usize>> {
    const WHAT: &str = "numcodecs lz4 chunk";
    need(WHAT, bytes, 5)?;
    declared(WHAT, u64::from(u32_le(bytes, 0)), expected)?;
    Ok(4..bytes.len())
}

/// The inner codec of a blosc frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BloscCodec {
    Lz4,
    Snappy,
    Zlib,
    Zstd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BloscShuffle {
    None,
    Byte,
    Bit,
}

/// One block of a blosc frame: `len` decoded bytes at `offset`, stored as `splits` streams of
/// `len / splits.len()` bytes each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BloscBlock {
    pub offset: usize,
    pub len: usize,
    pub splits: Vec<BloscSplit>,
    pub shuffle: BloscShuffle,
}

/// One compressed stream of a block; `raw` when stored uncompressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BloscSplit {
    pub bytes: Range<usize>,
    pub raw: bool,
}

/// A blosc 1 frame, read and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BloscFrame {
    pub type_size: usize,
    pub codec: BloscCodec,
    /// The frame stores the chunk uncompressed after its header.
    pub memcpyed: Option<Range<usize>>,
    pub blocks: Vec<BloscBlock>,
}

const BLOSC_HEADER: usize = 16;
const BLOSC_MAX_SPLITS: usize = 16;
const BLOSC_MIN_BUFFERSIZE: usize = 128;

impl BloscFrame {
    /// Reads a frame that must decode to `expected` bytes.
    pub fn parse(bytes: &[u8], expected: usize) -> Result<Self> {
        const WHAT: &str = "blosc frame";
        need(WHAT, bytes, BLOSC_HEADER)?;
        let (version, flags, type_size) = (bytes[0], bytes[2], bytes[3] as usize);
        let nbytes = u32_le(bytes, 4) as usize;
        let block_size = u32_le(bytes, 8) as usize;
        let cbytes = u32_le(bytes, 12) as usize;
        if version == 0 || version > 2 || type_size == 0 {
            return Err(FrameError::BadHeader {
                what: WHAT,
                detail: format!("version {version}, type size {type_size}"),
            });
        }
        declared(WHAT, nbytes as u64, expected)?;
        if cbytes != bytes.len() {
            return Err(FrameError::BadHeader {
                what: WHAT,
                detail: format!(
                    "{cbytes} compressed bytes declared, {} present",
                    bytes.len()
                ),
            });
        }
        let codec = match flags >> 5 {
            0 => {
                return Err(FrameError::NeedsCpu(
                    "blosc frame compressed with blosclz".into(),
                ))
            }
            1 => BloscCodec::Lz4,
            2 => BloscCodec::Snappy,
            3 => BloscCodec::Zlib,
            4 => BloscCodec::Zstd,
            other => {
                return Err(FrameError::BadHeader {
                    what: WHAT,
                    detail: format!("compressor code {other}"),
                })
            }
        };
        let mut frame = Self {
            type_size,
            codec,
            memcpyed: None,
            blocks: Vec::new(),
        };
        if flags & 0x02 != 0 {
            if cbytes != nbytes + BLOSC_HEADER {
                return Err(FrameError::BadHeader {
                    what: WHAT,
                    detail: format!("copied frame of {cbytes} bytes for {nbytes}"),
                });
            }
            frame.memcpyed = Some(BLOSC_HEADER..cbytes);
            return Ok(frame);
        }
        if nbytes == 0 {
            return Ok(frame);
        }
        if block_size == 0 {
            return Err(FrameError::BadHeader {
                what: WHAT,
                detail: "block size 0".into(),
            });
        }
        let blocks = nbytes.div_ceil(block_size);
        let starts_end = BLOSC_HEADER + 4 * blocks;
        need(WHAT, bytes, starts_end)?;
        let dont_split = flags & 0x10 != 0;
        for block in 0..blocks {
            let offset = block * block_size;
            let len = block_size.min(nbytes - offset);
            let leftover = len < block_size;
            let splits = if !dont_split
                && type_size <= BLOSC_MAX_SPLITS
                && block_size / type_size >= BLOSC_MIN_BUFFERSIZE
                && !leftover
            {
                type_size
            } else {
                1
            };
            let split_len = len / splits;
            let mut at = u32_le(bytes, BLOSC_HEADER + 4 * block) as usize;
            let mut block_splits = Vec::with_capacity(splits);
            for _ in 0..splits {
                if at < starts_end || at + 4 > cbytes {
                    return Err(FrameError::OutOfBounds {
                        what: WHAT,
                        offset: at as u64,
                        len: 4,
                        available: cbytes,
                    });
                }
                let stream = u32_le(bytes, at) as usize;
                at += 4;
                if stream == 0 || stream > cbytes - at {
                    return Err(FrameError::OutOfBounds {
                        what: WHAT,
                        offset: at as u64,
                        len: stream as u64,
                        available: cbytes,
                    });
                }
                block_splits.push(BloscSplit {
                    bytes: at..at + stream,
                    raw: stream == split_len,
                });
                at += stream;
            }
            let shuffle = if flags & 0x01 != 0 && type_size > 1 {
                BloscShuffle::Byte
            } else if flags & 0x04 != 0 && len >= type_size {
                BloscShuffle::Bit
            } else {
                BloscShuffle::None
            };
            frame.blocks.push(BloscBlock {
                offset,
                len,
                splits: block_splits,
                shuffle,
            });
        }
        Ok(frame)
    }

    /// What the frame's codec reads of `stream`, a compressed split of `split_len` decoded
    /// bytes, after checking its header.
    pub fn payload(&self, stream: &[u8], split_len: usize) -> Result<Range<usize>> {
        match self.codec {
            BloscCodec::Zlib => zlib_payload(stream),
            BloscCodec::Zstd => check_zstd(stream, split_len).map(|()| 0..stream.len()),
            BloscCodec::Lz4 | BloscCodec::Snappy => Ok(0..stream.len()),
        }
    }
}

/// Where one inner chunk of a shard is stored; `None` when it is missing (the fill value).
pub(crate) type InnerChunk = Option<Range<usize>>;

/// Reads a shard's index: one entry per inner chunk, in C order.
pub(crate) fn shard_index(
    bytes: &[u8],
    inner_chunks: usize,
    crc32c: bool,
    at_end: bool,
) -> Result<Vec<InnerChunk>> {
    const WHAT: &str = "shard index";
    let index_len = inner_chunks * 16 + if crc32c { 4 } else { 0 };
    need(WHAT, bytes, index_len)?;
    let start = if at_end { bytes.len() - index_len } else { 0 };
    let index = &bytes[start..start + index_len];
    if crc32c {
        check_crc32c(WHAT, &index[..index_len - 4], u32_le(index, index_len - 4))?;
    }
    (0..inner_chunks)
        .map(|chunk| {
            let (offset, len) = (u64_le(index, 16 * chunk), u64_le(index, 16 * chunk + 8));
            if offset == u64::MAX && len == u64::MAX {
                return Ok(None);
            }
            match offset.checked_add(len) {
                Some(end) if end <= bytes.len() as u64 => Ok(Some(offset as usize..end as usize)),
                _ => Err(FrameError::OutOfBounds {
                    what: "shard inner chunk",
                    offset,
                    len,
                    available: bytes.len(),
                }),
            }
        })
        .collect()
}

#[cfg(test)]
#[path = "frames_fuzz.rs"]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zstd_headers_declare_their_size() {
        let data = vec![7u8; 1000];
        let frame = zstd::bulk::compress(&data, 3).unwrap();
        check_zstd(&frame, 1000).unwrap();
        assert!(matches!(
            check_zstd(&frame, 999),
            Err(FrameError::DeclaredSize { declared: 1000, .. })
        ));
        let mut bad = frame.clone();
        bad[0] ^= 1;
        assert!(matches!(
            check_zstd(&bad, 1000),
            Err(FrameError::BadHeader { .. })
        ));
        assert!(matches!(
            check_zstd(&frame[..3], 1000),
            Err(FrameError::Truncated { .. })
        ));
    }

    #[test]
    fn gzip_and_zlib_payloads_are_raw_deflate() {
        use std::io::{Read, Write};
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(5));
        gz.write_all(&data).unwrap();
        let gz = gz.finish().unwrap();
        let payload = gzip_payload(&gz, data.len()).unwrap();
        let mut out = Vec::new();
        flate2::read::DeflateDecoder::new(&gz[payload])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, data);
        assert!(gzip_payload(&gz, data.len() + 1).is_err());

        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(4));
        z.write_all(&data).unwrap();
        let z = z.finish().unwrap();
        let mut out = Vec::new();
        flate2::read::DeflateDecoder::new(&z[zlib_payload(&z).unwrap()])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, data);
        assert!(zlib_payload(&[0x78, 0x00, 1, 2, 3, 4]).is_err());
    }

    #[test]
    fn crc32c_trailers_are_checked() {
        let mut bytes = b"hello".to_vec();
        bytes.extend(crc32c::crc32c(b"hello").to_le_bytes());
        assert_eq!(strip_crc32c(&bytes).unwrap(), 0..5);
        bytes[0] = b'j';
        assert!(matches!(
            strip_crc32c(&bytes),
            Err(FrameError::Checksum { .. })
        ));
    }

    #[test]
    fn blosc_frames_reject_lies() {
        let mut header = vec![2, 1, 0x01 | (1 << 5), 4];
        header.extend(1000u32.to_le_bytes());
        header.extend(256u32.to_le_bytes());
        header.extend(16u32.to_le_bytes());
        // Claims 1000 bytes and 4 blocks but holds no block table.
        assert!(matches!(
            BloscFrame::parse(&header, 1000),
            Err(FrameError::Truncated { .. })
        ));
        assert!(matches!(
            BloscFrame::parse(&header, 1004),
            Err(FrameError::DeclaredSize { .. })
        ));
        header[2] = 0x01; // blosclz
        assert!(BloscFrame::parse(&header, 1000).unwrap_err().needs_cpu());
    }

    #[test]
    fn shard_indexes_are_bounded() {
        let mut shard = vec![0u8; 10];
        for (offset, len) in [(0u64, 10u64), (u64::MAX, u64::MAX)] {
            shard.extend(offset.to_le_bytes());
            shard.extend(len.to_le_bytes());
        }
        let crc = crc32c::crc32c(&shard[10..]);
        shard.extend(crc.to_le_bytes());
        assert_eq!(
            shard_index(&shard, 2, true, true).unwrap(),
            [Some(0..10), None]
        );
        shard[18] = 1; // the first entry's length becomes 2^56 + 10
        assert!(shard_index(&shard, 2, true, true).is_err());
    }
}
