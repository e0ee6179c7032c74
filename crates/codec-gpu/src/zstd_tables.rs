//! Checking the entropy tables of zstd's compressed blocks on the CPU (RFC 8878, 3.1.1.3): the
//! literals section header, the Huffman tree description, the sequences section header and its
//! FSE table descriptions. nvCOMP's zstd kernel builds its decoding tables from these without
//! checking them (a scrambled Huffman tree makes it write outside its shared memory and poisons
//! the CUDA context), so no frame reaches it with a malformed one. The entropy-coded streams
//! themselves are only bounded, not decoded: decoding them would cost as much as decoding the
//! frame. The checks follow the reference decoder's (`ZSTD_decodeLiteralsBlock`,
//! `HUF_readStats`, `FSE_readNCount`, `ZSTD_decodeSeqHeaders`), with the Huffman code limited
//! to the 11 bits RFC 8878 allows.

use std::ops::Range;

use crate::frame_error::FrameError;

type Result<T> = std::result::Result<T, FrameError>;

/// The most bytes one block decodes to, and so the most literals it regenerates.
pub(crate) const MAX_BLOCK: usize = 128 << 10;
/// The longest Huffman code (Max_Number_of_Bits).
const MAX_HUFFMAN_BITS: u32 = 11;
/// The largest accuracy log of the FSE table that compresses Huffman weights.
const MAX_WEIGHTS_LOG: u32 = 6;
/// Fewer literals cannot be split into four Huffman streams.
const MIN_LITERALS_FOR_4_STREAMS: usize = 6;
/// Every sequence copies a match of at least this many bytes.
const MIN_MATCH: usize = 3;

/// One of the three sequence tables: its name, largest symbol, largest accuracy log and the
/// accuracy log of its predefined distribution.
struct SequenceTable {
    name: &'static str,
    max_symbol: usize,
    max_log: u32,
    predefined_log: u32,
}

/// In the order their descriptions follow the modes byte.
const SEQUENCE_TABLES: [SequenceTable; 3] = [
    SequenceTable {
        name: "literal lengths",
        max_symbol: 35,
        max_log: 9,
        predefined_log: 6,
    },
    SequenceTable {
        name: "offsets",
        max_symbol: 31,
        max_log: 8,
        predefined_log: 5,
    },
    SequenceTable {
        name: "match lengths",
        max_symbol: 52,
        max_log: 9,
        predefined_log: 6,
    },
];

/// What earlier blocks of a frame leave for later ones to repeat.
#[derive(Clone, Debug, Default)]
pub(crate) struct FrameTables {
    /// The last Huffman tree described, which treeless literals reuse.
    huffman: Option<HuffmanTree>,
    /// The accuracy logs of the literal-length, offset and match-length tables, once a block
    /// with sequences has set them (repeat mode reuses them).
    sequences: Option<[u32; 3]>,
}

/// The number of symbols (the weights described plus the implied last) and the shortest and
/// longest codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HuffmanTree {
    pub symbols: usize,
    pub min_bits: u32,
    pub max_bits: u32,
}

/// Where the parts of one compressed block lie, as offsets in the frame; parts a block lacks
/// are empty ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BlockLayout {
    /// The block's content, after its 3-byte block header.
    pub block: Range<usize>,
    pub literals_header: Range<usize>,
    pub huffman_tree: Range<usize>,
    /// Set for a Huffman tree with its weights stored directly (4 bits each).
    pub direct_weights: bool,
    pub jump_table: Range<usize>,
    /// The literal bytes: raw, the repeated byte, or the Huffman streams.
    pub literals: Range<usize>,
    pub literals_type: LiteralsType,
    pub streams: usize,
    pub regenerated: usize,
    pub sequences_header: Range<usize>,
    pub sequences: usize,
    /// The modes and descriptions (FSE table or RLE symbol) of the literal-length, offset and
    /// match-length tables.
    pub modes: [SequenceMode; 3],
    pub tables: [Range<usize>; 3],
    pub bitstream: Range<usize>,
}

impl BlockLayout {
    /// The fewest bytes the block decodes to: its literals and a minimal match per sequence.
    pub fn min_decoded(&self) -> usize {
        self.regenerated + MIN_MATCH * self.sequences
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum LiteralsType {
    #[default]
    Raw,
    Rle,
    Compressed,
    Treeless,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum SequenceMode {
    #[default]
    Predefined,
    Rle,
    Compressed,
    Repeat,
}

fn bad(what: &'static str, at: usize, detail: std::fmt::Arguments) -> FrameError {
    FrameError::BadHeader {
        what,
        detail: format!("{detail}, at byte {at}"),
    }
}

/// Little-endian value of `frame[at..at + len]` (`len` ≤ 8).
fn le(frame: &[u8], at: usize, len: usize) -> u64 {
    frame[at..at + len]
        .iter()
        .rev()
        .fold(0, |value, &byte| value << 8 | u64::from(byte))
}

/// Checks the compressed block whose content is `frame[block]` and returns where its parts lie.
pub(crate) fn check_compressed_block(
    frame: &[u8],
    block: Range<usize>,
    tables: &mut FrameTables,
) -> Result<BlockLayout> {
    let mut layout = BlockLayout {
        block: block.clone(),
        ..BlockLayout::default()
    };
    let at = literals_section(frame, block.clone(), tables, &mut layout)?;
    sequences_section(frame, at..block.end, tables, &mut layout)?;
    if layout.min_decoded() > MAX_BLOCK {
        return Err(bad(
            "zstd sequences section",
            layout.sequences_header.start,
            format_args!(
                "{} literals and {} sequences decode past the {MAX_BLOCK}-byte block maximum",
                layout.regenerated, layout.sequences
            ),
        ));
    }
    Ok(layout)
}

/// Checks the literals section at the start of `block`; returns where the sequences start.
fn literals_section(
    frame: &[u8],
    block: Range<usize>,
    tables: &mut FrameTables,
    layout: &mut BlockLayout,
) -> Result<usize> {
    const WHAT: &str = "zstd literals section";
    let (at, end) = (block.start, block.end);
    if at >= end {
        return Err(bad(WHAT, at, format_args!("empty compressed block")));
    }
    let (kind, format) = (frame[at] & 3, usize::from((frame[at] >> 2) & 3));
    let header_len = if kind < 2 {
        [1, 2, 1, 3][format]
    } else {
        [3, 3, 4, 5][format]
    };
    if at + header_len > end {
        return Err(bad(
            WHAT,
            at,
            format_args!("{header_len}-byte header in a {}-byte block", end - at),
        ));
    }
    let header = le(frame, at, header_len);
    layout.literals_header = at..at + header_len;
    let body = at + header_len;
    if kind < 2 {
        // Raw or RLE: 5, 12 or 20 bits of size after the type and size format.
        let regenerated = (header >> if format % 2 == 0 { 3 } else { 4 }) as usize;
        layout.literals_type = [LiteralsType::Raw, LiteralsType::Rle][usize::from(kind)];
        layout.regenerated = regenerated;
        check_regenerated(at, regenerated)?;
        let stored = if kind == 0 { regenerated } else { 1 };
        if body + stored > end {
            return Err(bad(
                WHAT,
                at,
                format_args!(
                    "{stored} literal bytes from byte {body} pass the block's end at {end}"
                ),
            ));
        }
        layout.literals = body..body + stored;
        return Ok(body + stored);
    }
    // Huffman-coded: two sizes of 10, 14 or 18 bits, in one stream or four.
    let (streams, bits) = [(1, 10), (4, 10), (4, 14), (4, 18)][format];
    let mask = (1u64 << bits) - 1;
    let regenerated = ((header >> 4) & mask) as usize;
    let compressed = ((header >> (4 + bits)) & mask) as usize;
    layout.literals_type =
        [LiteralsType::Compressed, LiteralsType::Treeless][usize::from(kind) - 2];
    layout.streams = streams;
    layout.regenerated = regenerated;
    check_regenerated(at, regenerated)?;
    if regenerated == 0 || (streams == 4 && regenerated < MIN_LITERALS_FOR_4_STREAMS) {
        return Err(bad(
            WHAT,
            at,
            format_args!("{regenerated} Huffman-coded literals in {streams} streams"),
        ));
    }
    let literals_end = body + compressed;
    if literals_end > end {
        return Err(bad(
            WHAT,
            at,
            format_args!(
                "{compressed} compressed literal bytes from byte {body} pass the block's end at \
                 {end}"
            ),
        ));
    }
    let tree = if kind == 2 {
        let (tree, range) = huffman_tree(frame, body..literals_end, &mut layout.direct_weights)?;
        layout.huffman_tree = range;
        tables.huffman = Some(tree);
        tree
    } else {
        tables.huffman.ok_or_else(|| {
            bad(
                WHAT,
                at,
                format_args!("treeless literals before any Huffman tree in the frame"),
            )
        })?
    };
    let streams_at = body + layout.huffman_tree.len();
    let mut starts = [streams_at; 5];
    starts[4] = literals_end;
    if streams == 4 {
        if streams_at + 6 > literals_end {
            return Err(bad(
                WHAT,
                streams_at,
                format_args!("no room for the jump table of 4 Huffman streams"),
            ));
        }
        layout.jump_table = streams_at..streams_at + 6;
        starts[0] = streams_at + 6;
        for stream in 1..4 {
            starts[stream] =
                starts[stream - 1] + le(frame, streams_at + 2 * stream - 2, 2) as usize;
        }
    } else {
        starts[1] = literals_end;
    }
    layout.literals = starts[0]..literals_end;
    // Every symbol has a code of `min_bits` to `max_bits` bits, and a stream ends exactly after
    // its last code: the bits a stream holds bound the symbols it decodes.
    let (min_bits, max_bits) = (i64::from(tree.min_bits), i64::from(tree.max_bits));
    let segment = regenerated.div_ceil(4);
    for stream in 0..streams {
        let symbols = match (streams, stream) {
            (1, _) => regenerated,
            (_, 3) => regenerated.saturating_sub(3 * segment),
            _ => segment,
        };
        let range = starts[stream]..starts[stream + 1];
        if range.start >= range.end || range.end > literals_end {
            return Err(bad(
                WHAT,
                streams_at,
                format_args!(
                    "Huffman stream {} of {streams} at bytes {range:?}, outside the literals' \
                     {}..{literals_end}",
                    stream + 1,
                    starts[0]
                ),
            ));
        }
        let held = BackwardBits::new(&frame[range.clone()]).map(|bits| bits.left);
        match held {
            None => {
                return Err(bad(
                    WHAT,
                    range.end - 1,
                    format_args!("Huffman stream {} lacks its end mark", stream + 1),
                ))
            }
            Some(held) if held < symbols as i64 * min_bits || held > symbols as i64 * max_bits => {
                return Err(bad(
                    WHAT,
                    range.start,
                    format_args!(
                        "Huffman stream {} of {held} bits cannot code {symbols} literals in \
                         codes of {min_bits} to {max_bits} bits",
                        stream + 1
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(literals_end)
}

fn check_regenerated(at: usize, regenerated: usize) -> Result<()> {
    if regenerated > MAX_BLOCK {
        return Err(bad(
            "zstd literals section",
            at,
            format_args!(
                "{regenerated} literals, more than the {MAX_BLOCK}-byte block maximum decodes"
            ),
        ));
    }
    Ok(())
}

/// Checks the Huffman tree description at the start of `frame[range]`; returns the tree and
/// where its description lies.
fn huffman_tree(
    frame: &[u8],
    range: Range<usize>,
    direct: &mut bool,
) -> Result<(HuffmanTree, Range<usize>)> {
    const WHAT: &str = "zstd Huffman tree";
    let at = range.start;
    if at >= range.end {
        return Err(bad(WHAT, at, format_args!("no tree in empty literals")));
    }
    let header = usize::from(frame[at]);
    let mut weights = [0u8; 256];
    let (len, count) = if header >= 128 {
        let count = header - 127;
        (1 + count.div_ceil(2), count)
    } else {
        (1 + header, 0)
    };
    if at + len >= range.end {
        return Err(bad(
            WHAT,
            at,
            format_args!(
                "a {len}-byte description leaves no Huffman stream in the {} literal bytes",
                range.end - at
            ),
        ));
    }
    let count = if header >= 128 {
        *direct = true;
        for (n, weight) in weights[..count].iter_mut().enumerate() {
            let byte = frame[at + 1 + n / 2];
            *weight = if n % 2 == 0 { byte >> 4 } else { byte & 15 };
        }
        count
    } else {
        *direct = false;
        fse_weights(frame, at + 1..at + len, &mut weights)?
    };
    let tree = check_weights(&weights[..count])
        .map_err(|detail| bad(WHAT, at, format_args!("{detail}")))?;
    Ok((tree, at..at + len))
}

/// Checks the Huffman weights of every symbol but the last (whose weight they imply), as
/// `HUF_readStats` does; returns the tree they describe.
pub(crate) fn check_weights(weights: &[u8]) -> std::result::Result<HuffmanTree, String> {
    let mut ones = 0;
    let mut total = 0u32;
    let mut heaviest = 0;
    for (symbol, &weight) in weights.iter().enumerate() {
        if u32::from(weight) > MAX_HUFFMAN_BITS {
            return Err(format!(
                "symbol {symbol} has weight {weight}, above {MAX_HUFFMAN_BITS}"
            ));
        }
        ones += usize::from(weight == 1);
        heaviest = heaviest.max(u32::from(weight));
        total += (1 << weight) >> 1;
    }
    if total == 0 {
        return Err(format!("all {} weights are zero", weights.len()));
    }
    let max_bits = total.ilog2() + 1;
    if max_bits > MAX_HUFFMAN_BITS {
        return Err(format!(
            "weights sum to {total}, a code of {max_bits} bits (at most {MAX_HUFFMAN_BITS})"
        ));
    }
    let rest = (1 << max_bits) - total;
    if !rest.is_power_of_two() {
        return Err(format!(
            "weights sum to {total}, leaving {rest} of {}: not a power of two for the last symbol",
            1 << max_bits
        ));
    }
    ones += usize::from(rest == 1);
    // The last symbol's weight is log2(rest) + 1; a symbol of weight w has a code of
    // max_bits + 1 - w bits.
    heaviest = heaviest.max(rest.ilog2() + 1);
    if ones < 2 || ones % 2 == 1 {
        return Err(format!(
            "{ones} symbols of weight 1 (the tree needs an even number, at least 2)"
        ));
    }
    Ok(HuffmanTree {
        symbols: weights.len() + 1,
        min_bits: max_bits + 1 - heaviest,
        max_bits,
    })
}

/// Decodes the FSE-compressed Huffman weights in `frame[range]` into `weights`; returns how
/// many (at most 255: the last symbol's weight is implied).
fn fse_weights(frame: &[u8], range: Range<usize>, weights: &mut [u8; 256]) -> Result<usize> {
    const WHAT: &str = "zstd Huffman weights";
    let (at, end) = (range.start, range.end);
    let ncount = read_ncount(&frame[range], at, WHAT, 255, MAX_WEIGHTS_LOG)?;
    let table = FseDecodeTable::new(&ncount);
    let stream_at = at + ncount.len;
    if stream_at >= end {
        return Err(bad(
            WHAT,
            stream_at,
            format_args!("no weights after the FSE table description"),
        ));
    }
    let mut bits = BackwardBits::new(&frame[stream_at..end]).ok_or_else(|| {
        bad(
            WHAT,
            end - 1,
            format_args!("weights stream lacks its end mark"),
        )
    })?;
    let log = ncount.log;
    let mut states = [bits.read(log) as usize, bits.read(log) as usize];
    // As FSE_decompress: the states take turns; once a state's update reads past the start of
    // the stream, the other state gives the last weight.
    let mut count = 0;
    let mut turn = 0;
    loop {
        if count > 253 {
            return Err(bad(WHAT, stream_at, format_args!("more than 255 weights")));
        }
        let cell = table.cells[states[turn]];
        weights[count] = cell.symbol;
        count += 1;
        states[turn] = usize::from(cell.base) + bits.read(u32::from(cell.bits)) as usize;
        turn ^= 1;
        if bits.overflowed() {
            weights[count] = table.cells[states[turn]].symbol;
            return Ok(count + 1);
        }
    }
}

/// A normalised FSE distribution read from a table description.
struct NormalisedCounts {
    /// Probabilities of the symbols `0..symbols`; -1 marks a "less than 1" probability.
    counts: [i16; 256],
    symbols: usize,
    log: u32,
    /// Bytes the description takes.
    len: usize,
}

/// Reads the FSE table description at the start of `bytes` (at byte `at` of the frame), as
/// `FSE_readNCount` does: accuracy log at most `max_log`, probabilities summing exactly to
/// `1 << log`, no symbol above `max_symbol`, and the description inside `bytes`.
fn read_ncount(
    bytes: &[u8],
    at: usize,
    what: &'static str,
    max_symbol: usize,
    max_log: u32,
) -> Result<NormalisedCounts> {
    let mut bits = ForwardBits { bytes, bit: 0 };
    let log = bits.read(4) + 5;
    if log > max_log {
        return Err(bad(
            what,
            at,
            format_args!("FSE accuracy log {log}, above {max_log}"),
        ));
    }
    let mut ncount = NormalisedCounts {
        counts: [0; 256],
        symbols: 0,
        log,
        len: 0,
    };
    let mut remaining = (1i32 << log) + 1;
    let mut threshold = 1i32 << log;
    let mut nb_bits = log + 1;
    let mut symbol = 0usize;
    let mut previous_zero = false;
    loop {
        if previous_zero {
            loop {
                let repeat = bits.read(2) as usize;
                symbol += repeat;
                if repeat != 3 || symbol > max_symbol {
                    break;
                }
            }
            if symbol > max_symbol {
                return Err(bad(
                    what,
                    at,
                    format_args!("FSE zero run past symbol {max_symbol}"),
                ));
            }
        }
        let max = 2 * threshold - 1 - remaining;
        let low = bits.peek(nb_bits - 1) as i32;
        let value = if low < max {
            bits.skip(nb_bits - 1);
            low
        } else {
            let value = bits.peek(nb_bits) as i32;
            bits.skip(nb_bits);
            if value >= threshold {
                value - max
            } else {
                value
            }
        };
        let probability = value - 1;
        remaining -= probability.abs();
        ncount.counts[symbol] = probability as i16;
        symbol += 1;
        previous_zero = probability == 0;
        if remaining < threshold {
            if remaining <= 1 {
                break;
            }
            nb_bits = remaining.ilog2() + 1;
            threshold = 1 << (nb_bits - 1);
        }
        if symbol > max_symbol {
            return Err(bad(
                what,
                at,
                format_args!(
                    "FSE probabilities of symbols 0..={max_symbol} leave {} of {} unassigned",
                    remaining - 1,
                    1 << log
                ),
            ));
        }
    }
    ncount.symbols = symbol;
    ncount.len = bits.bit.div_ceil(8);
    if ncount.len > bytes.len() {
        return Err(bad(
            what,
            at,
            format_args!(
                "FSE table description of {} bytes, {} present",
                ncount.len,
                bytes.len()
            ),
        ));
    }
    Ok(ncount)
}

#[derive(Clone, Copy, Default)]
struct FseCell {
    symbol: u8,
    bits: u8,
    base: u16,
}

/// An FSE decoding table of at most 64 cells (the Huffman weights' accuracy log is at most 6).
struct FseDecodeTable {
    cells: [FseCell; 1 << MAX_WEIGHTS_LOG],
}

impl FseDecodeTable {
    /// Spreads the symbols over the cells as RFC 8878 4.1.1 describes.
    fn new(ncount: &NormalisedCounts) -> Self {
        let size = 1usize << ncount.log;
        let mut cells = [FseCell::default(); 1 << MAX_WEIGHTS_LOG];
        let mut next = [0u16; 256];
        let mut high = size - 1;
        let counts = &ncount.counts[..ncount.symbols];
        for (symbol, &count) in counts.iter().enumerate() {
            if count == -1 {
                cells[high].symbol = symbol as u8;
                high = high.wrapping_sub(1);
                next[symbol] = 1;
            } else {
                next[symbol] = count.max(0) as u16;
            }
        }
        let step = (size >> 1) + (size >> 3) + 3;
        let mut position = 0;
        for (symbol, &count) in counts.iter().enumerate() {
            for _ in 0..count.max(0) {
                cells[position].symbol = symbol as u8;
                position = (position + step) & (size - 1);
                while position > high {
                    position = (position + step) & (size - 1);
                }
            }
        }
        for cell in &mut cells[..size] {
            let state = &mut next[usize::from(cell.symbol)];
            let bits = ncount.log - u32::from(*state).ilog2();
            cell.bits = bits as u8;
            cell.base = ((u32::from(*state) << bits) - size as u32) as u16;
            *state += 1;
        }
        Self { cells }
    }
}

/// Reads a table description's bits from the first byte's lowest bit on; past the end reads
/// zeros (the caller checks how far it read).
struct ForwardBits<'a> {
    bytes: &'a [u8],
    bit: usize,
}

impl ForwardBits<'_> {
    fn peek(&self, count: u32) -> u32 {
        let byte = self.bit / 8;
        let word = (0..4).fold(0u64, |word, i| {
            word | u64::from(self.bytes.get(byte + i).copied().unwrap_or(0)) << (8 * i)
        });
        ((word >> (self.bit % 8)) & ((1 << count) - 1)) as u32
    }

    fn skip(&mut self, count: u32) {
        self.bit += count as usize;
    }

    fn read(&mut self, count: u32) -> u32 {
        let value = self.peek(count);
        self.skip(count);
        value
    }
}

/// Reads an FSE or Huffman bitstream backwards, from just below the end mark (the highest set
/// bit of the last byte) towards the first byte; past the first byte reads zeros and records
/// the overflow.
struct BackwardBits<'a> {
    bytes: &'a [u8],
    /// Bits not yet read.
    left: i64,
}

impl<'a> BackwardBits<'a> {
    /// `None` when the stream is empty or its last byte (holding the end mark) is zero.
    fn new(bytes: &'a [u8]) -> Option<Self> {
        let last = *bytes.last()?;
        (last != 0).then(|| Self {
            bytes,
            left: 8 * (bytes.len() as i64 - 1) + i64::from(last.ilog2()),
        })
    }

    fn read(&mut self, count: u32) -> u32 {
        let mut value = 0;
        for _ in 0..count {
            self.left -= 1;
            let bit = if self.left >= 0 {
                let at = self.left as usize;
                (self.bytes[at / 8] >> (at % 8)) & 1
            } else {
                0
            };
            value = value << 1 | u32::from(bit);
        }
        value
    }

    fn overflowed(&self) -> bool {
        self.left < 0
    }
}

/// Checks the sequences section in `frame[range]` (the rest of the block).
fn sequences_section(
    frame: &[u8],
    range: Range<usize>,
    tables: &mut FrameTables,
    layout: &mut BlockLayout,
) -> Result<()> {
    const WHAT: &str = "zstd sequences section";
    let (start, end) = (range.start, range.end);
    if start >= end {
        return Err(bad(
            WHAT,
            start,
            format_args!("missing: the literals fill the block"),
        ));
    }
    let first = usize::from(frame[start]);
    let (count_len, sequences) = match first {
        0..128 => (1, first),
        128..255 if start + 2 <= end => (2, ((first - 128) << 8) + usize::from(frame[start + 1])),
        255 if start + 3 <= end => (3, le(frame, start + 1, 2) as usize + 0x7F00),
        _ => {
            return Err(bad(
                WHAT,
                start,
                format_args!("number of sequences cut by the block's end"),
            ))
        }
    };
    layout.sequences = sequences;
    let mut at = start + count_len;
    if sequences == 0 {
        layout.sequences_header = start..at;
        if at != end {
            return Err(bad(
                WHAT,
                at,
                format_args!("{} bytes after an empty sequences section", end - at),
            ));
        }
        return Ok(());
    }
    if at >= end {
        return Err(bad(
            WHAT,
            at,
            format_args!("{sequences} sequences without compression modes"),
        ));
    }
    let modes = frame[at];
    if modes & 3 != 0 {
        return Err(bad(
            WHAT,
            at,
            format_args!("reserved bits set in compression modes {modes:#04x}"),
        ));
    }
    at += 1;
    layout.sequences_header = start..at;
    let mut logs = [0; 3];
    for (index, table) in SEQUENCE_TABLES.iter().enumerate() {
        let mode = (modes >> (6 - 2 * index)) & 3;
        let description = at;
        logs[index] = match mode {
            0 => {
                layout.modes[index] = SequenceMode::Predefined;
                table.predefined_log
            }
            1 => {
                layout.modes[index] = SequenceMode::Rle;
                if at >= end {
                    return Err(bad(
                        WHAT,
                        at,
                        format_args!("{} RLE symbol past the block's end", table.name),
                    ));
                }
                let symbol = frame[at];
                if usize::from(symbol) > table.max_symbol {
                    return Err(bad(
                        WHAT,
                        at,
                        format_args!(
                            "{} RLE symbol {symbol}, above {}",
                            table.name, table.max_symbol
                        ),
                    ));
                }
                at += 1;
                0
            }
            2 => {
                layout.modes[index] = SequenceMode::Compressed;
                let ncount = read_ncount(
                    &frame[at..end],
                    at,
                    "zstd sequences FSE table",
                    table.max_symbol,
                    table.max_log,
                )?;
                at += ncount.len;
                ncount.log
            }
            _ => {
                layout.modes[index] = SequenceMode::Repeat;
                let previous = tables.sequences.ok_or_else(|| {
                    bad(
                        WHAT,
                        start + count_len,
                        format_args!(
                            "{} table repeated before any block of the frame had one",
                            table.name
                        ),
                    )
                })?;
                previous[index]
            }
        };
        layout.tables[index] = description..at;
    }
    layout.bitstream = at..end;
    let bits = BackwardBits::new(&frame[at..end]).ok_or_else(|| {
        bad(
            WHAT,
            end.saturating_sub(1).max(at),
            format_args!("sequences bitstream empty or lacking its end mark"),
        )
    })?;
    let states: u32 = logs.iter().sum();
    if bits.left < i64::from(states) {
        return Err(bad(
            WHAT,
            at,
            format_args!(
                "sequences bitstream of {} bits, shorter than its {states} bits of initial states",
                bits.left
            ),
        ));
    }
    tables.sequences = Some(logs);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::frames::{check_zstd, zstd_layout};

    /// xorshift64*: deterministic data, so a failure reproduces from its seed.
    struct Rng(u64);

    impl Rng {
        fn new(seed: u64) -> Self {
            Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        }

        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Data {
        Random,
        SmoothFloats,
        Text,
        Repetitive,
        SmallAlphabet,
        Sparse,
        Mixed,
    }

    const KINDS: [Data; 7] = [
        Data::Random,
        Data::SmoothFloats,
        Data::Text,
        Data::Repetitive,
        Data::SmallAlphabet,
        Data::Sparse,
        Data::Mixed,
    ];

    fn data(kind: Data, len: usize, seed: u64) -> Vec<u8> {
        const WORDS: [&str; 24] = [
            "the",
            "zarr",
            "chunk",
            "decodes",
            "on",
            "a",
            "GPU",
            "with",
            "nvCOMP",
            "and",
            "every",
            "frame",
            "is",
            "checked",
            "first,",
            "so",
            "corrupt",
            "input",
            "never",
            "reaches",
            "kernel.",
            "Temperature",
            "pressure",
            "of",
        ];
        let mut rng = Rng::new(seed);
        let mut out = Vec::with_capacity(len + 64);
        match kind {
            Data::Random => out.extend((0..len).map(|_| rng.next() as u8)),
            Data::SmoothFloats => {
                let (phase, scale) = (rng.below(1000) as f32, 1.0 + rng.below(300) as f32);
                for i in 0..len.div_ceil(4) {
                    let x = i as f32 * 0.002 + phase;
                    let noise = (rng.below(1000) as f32 - 500.0) * 1e-4;
                    out.extend((scale * x.sin() + 0.3 * (7.0 * x).cos() + noise).to_le_bytes());
                }
            }
            Data::Text => {
                while out.len() < len {
                    out.extend(WORDS[rng.below(WORDS.len())].as_bytes());
                    out.push(if rng.below(12) == 0 { b'\n' } else { b' ' });
                }
            }
            Data::Repetitive => {
                let pattern: Vec<u8> = (0..1 + rng.below(64)).map(|_| rng.next() as u8).collect();
                while out.len() < len {
                    out.extend(&pattern);
                    if rng.below(40) == 0 {
                        let at = out.len() - 1;
                        out[at] = rng.next() as u8;
                    }
                }
            }
            Data::SmallAlphabet => {
                let symbols = 2 + rng.below(14);
                out.extend((0..len).map(|_| rng.below(symbols).min(rng.below(symbols)) as u8));
            }
            Data::Sparse => {
                // Zeros with a lone 0xff here and there: the literals are all 0xff (RLE).
                out.resize(len, 0);
                let mut at = rng.below(300);
                while at < len {
                    out[at] = 0xff;
                    at += 1 + rng.below(300);
                }
            }
            Data::Mixed => {
                while out.len() < len {
                    let kind = KINDS[rng.below(KINDS.len() - 1)];
                    let piece = 1 + rng.below(40_000);
                    out.extend(data(kind, piece, rng.next()));
                }
            }
        }
        out.truncate(len);
        out
    }

    /// Compresses `data` as zarr's zstd codec does (content size declared), or, for `streamed`,
    /// through the streaming encoder (no content size, a window descriptor and a checksum).
    fn compress(data: &[u8], level: i32, streamed: bool) -> Vec<u8> {
        if !streamed {
            return zstd::bulk::compress(data, level).unwrap();
        }
        let mut encoder = zstd::stream::Encoder::new(Vec::new(), level).unwrap();
        encoder.include_checksum(true).unwrap();
        std::io::copy(&mut &data[..], &mut encoder).unwrap();
        encoder.finish().unwrap()
    }

    struct Case {
        label: String,
        data: Vec<u8>,
        frame: Vec<u8>,
    }

    /// Valid frames of every kind of data, size and level, built once for all the tests.
    fn corpus() -> &'static [Case] {
        static CORPUS: std::sync::OnceLock<Vec<Case>> = std::sync::OnceLock::new();
        CORPUS.get_or_init(build_corpus)
    }

    fn build_corpus() -> Vec<Case> {
        const SIZES: [usize; 12] = [
            0,
            1,
            5,
            37,
            300,
            1000,
            4096,
            20_000,
            131_072,
            131_073,
            300_000,
            1 << 20,
        ];
        let mut cases = Vec::new();
        for (k, kind) in KINDS.into_iter().enumerate() {
            for (s, len) in SIZES.into_iter().enumerate() {
                for level in [-7, -1, 1, 3, 19] {
                    if level == 19 && len > 300_000 && !matches!(kind, Data::Text | Data::Mixed) {
                        continue; // slow, and the mixed and text cases cover it
                    }
                    let streamed = (k + s) % 4 == 0;
                    let data = data(kind, len, (k * 100 + s) as u64);
                    let frame = compress(&data, level, streamed);
                    let label =
                        format!("{kind:?}, {len} bytes, level {level}, streamed {streamed}");
                    cases.push(Case { label, data, frame });
                }
            }
        }
        // libzstd writes RLE literals only for a block whose literals are all one byte, which
        // none of the data above gives: hand-built frames, checked with the reference decoder.
        for (byte, len) in [(0x41, 20), (0, 3000)] {
            let data = vec![byte; len];
            let frame = rle_literals_frame(byte, len);
            assert_eq!(zstd::bulk::decompress(&frame, len).unwrap(), data);
            let label = format!("hand-built RLE literals, {len} bytes");
            cases.push(Case { label, data, frame });
        }
        cases
    }

    /// A frame of one compressed block: `len` (< 4096) RLE literals `byte` and no sequences.
    fn rle_literals_frame(byte: u8, len: usize) -> Vec<u8> {
        let mut frame = 0xFD2F_B528u32.to_le_bytes().to_vec();
        frame.push(0xa0); // single segment, 4-byte content size
        frame.extend((len as u32).to_le_bytes());
        frame.extend([1 | 2 << 1 | 4 << 3, 0, 0]); // last, compressed, 4 bytes
        frame.extend([
            1 | 1 << 2 | (len as u8 & 15) << 4,
            (len >> 4) as u8,
            byte,
            0,
        ]);
        frame
    }

    /// Which features of the format a set of valid frames used.
    #[derive(Debug, Default)]
    struct Coverage(BTreeMap<&'static str, usize>);

    impl Coverage {
        fn add(&mut self, layouts: &[BlockLayout]) {
            let mut count = |feature| *self.0.entry(feature).or_default() += 1;
            if layouts.len() > 1 {
                count("frames of several compressed blocks");
            }
            for layout in layouts {
                count(match (layout.literals_type, layout.streams) {
                    (LiteralsType::Raw, _) => "raw literals",
                    (LiteralsType::Rle, _) => "RLE literals",
                    (LiteralsType::Compressed, 1) => "Huffman literals, 1 stream",
                    (LiteralsType::Compressed, _) => "Huffman literals, 4 streams",
                    (LiteralsType::Treeless, 1) => "treeless literals, 1 stream",
                    (LiteralsType::Treeless, _) => "treeless literals, 4 streams",
                });
                if layout.literals_type == LiteralsType::Compressed {
                    count(if layout.direct_weights {
                        "Huffman weights stored directly"
                    } else {
                        "Huffman weights FSE-compressed"
                    });
                }
                if layout.sequences == 0 {
                    count("blocks without sequences");
                    continue;
                }
                for mode in layout.modes {
                    count(match mode {
                        SequenceMode::Predefined => "predefined sequence tables",
                        SequenceMode::Rle => "RLE sequence tables",
                        SequenceMode::Compressed => "FSE sequence tables",
                        SequenceMode::Repeat => "repeated sequence tables",
                    });
                }
            }
        }
    }

    #[test]
    fn valid_frames_pass_and_cover_every_table_kind() {
        let mut coverage = Coverage::default();
        let cases = corpus();
        for case in cases {
            let layouts = zstd_layout(&case.frame, case.data.len())
                .unwrap_or_else(|error| panic!("{}: {error}", case.label));
            coverage.add(&layouts);
        }
        println!("{} valid frames: {:#?}", cases.len(), coverage.0);
        let missing: Vec<_> = [
            "frames of several compressed blocks",
            "raw literals",
            "RLE literals",
            "Huffman literals, 1 stream",
            "Huffman literals, 4 streams",
            "treeless literals, 1 stream",
            "treeless literals, 4 streams",
            "Huffman weights stored directly",
            "Huffman weights FSE-compressed",
            "blocks without sequences",
            "predefined sequence tables",
            "RLE sequence tables",
            "FSE sequence tables",
            "repeated sequence tables",
        ]
        .into_iter()
        .filter(|feature| !coverage.0.contains_key(feature))
        .collect();
        assert!(missing.is_empty(), "no valid frame used {missing:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn random_valid_frames_pass(
            kind in 0..KINDS.len(),
            len in prop_oneof![0..2_000usize, 0..300_000usize],
            seed: u64,
            level in -10..=19i32,
            streamed: bool,
        ) {
            let data = data(KINDS[kind], len, seed);
            let frame = compress(&data, level.min(if len > 100_000 { 9 } else { 19 }), streamed);
            prop_assert_eq!(check_zstd(&frame, data.len()), Ok(()));
        }
    }

    /// The frame of each case with its compressed blocks, for the corruption tests.
    fn laid_out<'a>(cases: impl Iterator<Item = &'a Case>) -> Vec<(&'a Case, Vec<BlockLayout>)> {
        cases
            .map(|case| (case, zstd_layout(&case.frame, case.data.len()).unwrap()))
            .filter(|(_, layouts)| !layouts.is_empty())
            .collect()
    }

    /// Corrupts up to 20 blocks that `select` picks (given the block and the blocks before it
    /// in its frame) with `corrupt`, and checks each is rejected with an error saying `says`.
    fn rejects(
        frames: &[(&Case, Vec<BlockLayout>)],
        says: &str,
        select: impl Fn(&BlockLayout, &[BlockLayout]) -> bool,
        corrupt: impl Fn(&mut [u8], &BlockLayout),
    ) {
        let mut tried = 0;
        for (case, layouts) in frames {
            for (index, layout) in layouts.iter().enumerate() {
                if tried == 20 || !select(layout, &layouts[..index]) {
                    continue;
                }
                let mut frame = case.frame.clone();
                corrupt(&mut frame, layout);
                assert_ne!(frame, case.frame, "{}: no change", case.label);
                match check_zstd(&frame, case.data.len()) {
                    Err(error) if error.to_string().contains(says) => {}
                    other => panic!(
                        "{}, block at {:?}: expected an error saying {says:?}, got {other:?}",
                        case.label, layout.block
                    ),
                }
                tried += 1;
            }
        }
        assert!(tried > 0, "no valid block to corrupt for {says:?}");
        println!("{tried} corruptions rejected: {says}");
    }

    fn compressed_literals(layout: &BlockLayout) -> bool {
        layout.literals_type == LiteralsType::Compressed
    }

    #[test]
    fn corrupt_tables_are_rejected() {
        let frames = laid_out(corpus().iter());
        let frames = &frames[..];
        // Huffman tree descriptions.
        rejects(
            frames,
            "symbol 0 has weight",
            |layout, _| compressed_literals(layout) && layout.direct_weights,
            |frame, layout| frame[layout.huffman_tree.start + 1] |= 0xc0,
        );
        rejects(
            frames,
            "weights are zero",
            |layout, _| compressed_literals(layout) && layout.direct_weights,
            |frame, layout| frame[layout.huffman_tree.start + 1..layout.huffman_tree.end].fill(0),
        );
        rejects(
            frames,
            "FSE accuracy log 20, above 6",
            |layout, _| compressed_literals(layout) && !layout.direct_weights,
            |frame, layout| frame[layout.huffman_tree.start + 1] |= 0x0f,
        );
        // Literals section.
        rejects(
            frames,
            "treeless literals before any Huffman tree",
            |layout, before| compressed_literals(layout) && !before.iter().any(compressed_literals),
            |frame, layout| frame[layout.literals_header.start] |= 3,
        );
        rejects(
            frames,
            "more than the 131072-byte block maximum",
            |layout, _| layout.streams == 4 && layout.literals_header.len() == 5,
            |frame, layout| {
                frame[layout.literals_header.start] |= 0xf0;
                frame[layout.literals_header.start + 1] = 0xff;
                frame[layout.literals_header.start + 2] |= 0x3f;
            },
        );
        rejects(
            frames,
            "outside the literals",
            |layout, _| layout.streams == 4 && layout.literals.len() < 60_000,
            |frame, layout| frame[layout.jump_table.start + 1] = 0xff,
        );
        rejects(
            frames,
            "lacks its end mark",
            |layout, _| layout.streams > 0,
            |frame, layout| frame[layout.literals.end - 1] = 0,
        );
        rejects(
            frames,
            "cannot code 1023 literals",
            |layout, _| layout.streams == 1 && layout.literals.len() < 100,
            |frame, layout| {
                // Regenerated size: the 10 bits above the type and size format.
                frame[layout.literals_header.start] |= 0xf0;
                frame[layout.literals_header.start + 1] |= 0x3f;
            },
        );
        // Sequences section.
        rejects(
            frames,
            "reserved bits set in compression modes",
            |layout, _| layout.sequences > 0,
            |frame, layout| frame[layout.sequences_header.end - 1] |= 1,
        );
        rejects(
            frames,
            "literal lengths table repeated before any block of the frame had one",
            |layout, before| layout.sequences > 0 && !before.iter().any(|b| b.sequences > 0),
            |frame, layout| frame[layout.sequences_header.end - 1] |= 0xc0,
        );
        for (index, table) in SEQUENCE_TABLES.iter().enumerate() {
            rejects(
                frames,
                &format!("FSE accuracy log 20, above {}", table.max_log),
                |layout, _| layout.modes[index] == SequenceMode::Compressed,
                |frame, layout| frame[layout.tables[index].start] |= 0x0f,
            );
            rejects(
                frames,
                &format!("{} RLE symbol 200", table.name),
                |layout, _| layout.modes[index] == SequenceMode::Rle,
                |frame, layout| frame[layout.tables[index].start] = 200,
            );
        }
        rejects(
            frames,
            "sequences bitstream empty or lacking its end mark",
            |layout, _| layout.sequences > 0,
            |frame, layout| frame[layout.bitstream.end - 1] = 0,
        );
    }

    /// The part of a compressed block that byte `at` of the frame belongs to.
    fn region(layout: &BlockLayout, at: usize) -> &'static str {
        let inside = |range: &Range<usize>| range.contains(&at);
        if inside(&layout.literals_header) {
            "literals header"
        } else if inside(&layout.huffman_tree) {
            "Huffman tree description"
        } else if inside(&layout.jump_table) {
            "jump table"
        } else if inside(&layout.literals) && layout.streams > 0 {
            "Huffman streams"
        } else if inside(&layout.literals) {
            "raw or RLE literals"
        } else if inside(&layout.sequences_header) {
            "sequences header"
        } else if layout.tables.iter().any(inside) {
            "FSE table descriptions, RLE symbols"
        } else {
            "sequences bitstream"
        }
    }

    /// What came of one corruption.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum Outcome {
        Rejected,
        /// Passed the validator, and the reference decoder decodes it to the right bytes.
        Harmless,
        /// Passed the validator, and the reference decoder decodes it to the right length but
        /// wrong bytes (or finds only the checksum wrong).
        WrongBytes,
        /// Passed the validator, but the reference decoder fails: it slipped through.
        Slipped,
    }

    fn outcome(frame: &[u8], data: &[u8]) -> Outcome {
        if check_zstd(frame, data.len()).is_err() {
            return Outcome::Rejected;
        }
        match zstd::stream::decode_all(frame) {
            Ok(decoded) if decoded == data => Outcome::Harmless,
            Ok(decoded) if decoded.len() == data.len() => Outcome::WrongBytes,
            Err(error) if error.to_string().contains("checksum") => Outcome::WrongBytes,
            _ => Outcome::Slipped,
        }
    }

    type Tally = BTreeMap<&'static str, BTreeMap<Outcome, usize>>;

    fn print_tally(title: &str, tally: &Tally) {
        println!("{title}");
        println!(
            "  {:<38} {:>7} {:>9} {:>9} {:>11} {:>8}",
            "region", "trials", "rejected", "harmless", "wrong bytes", "slipped"
        );
        for (region, outcomes) in tally {
            let get = |outcome| outcomes.get(&outcome).copied().unwrap_or(0);
            println!(
                "  {region:<38} {:>7} {:>9} {:>9} {:>11} {:>8}",
                outcomes.values().sum::<usize>(),
                get(Outcome::Rejected),
                get(Outcome::Harmless),
                get(Outcome::WrongBytes),
                get(Outcome::Slipped)
            );
        }
    }

    fn slips(tally: &Tally, region: &str) -> (usize, usize) {
        let outcomes = &tally[region];
        let slipped = outcomes.get(&Outcome::Slipped).copied().unwrap_or(0);
        (slipped, outcomes.values().sum())
    }

    /// Every single-bit flip of every table description (Huffman trees, FSE tables, RLE
    /// symbols) and header of the smaller frames.
    #[test]
    fn flipped_table_bits_are_rejected_or_decode() {
        let small = corpus().iter().filter(|case| case.data.len() <= 300_000);
        let mut tally = Tally::new();
        for (case, layouts) in laid_out(small) {
            let mut frame = case.frame.clone();
            for layout in &layouts {
                let ranges = [
                    &layout.literals_header,
                    &layout.huffman_tree,
                    &layout.jump_table,
                    &layout.sequences_header,
                ]
                .into_iter()
                .chain(&layout.tables);
                for at in ranges.flat_map(Clone::clone) {
                    for bit in 0..8 {
                        frame[at] ^= 1 << bit;
                        let outcome = outcome(&frame, &case.data);
                        frame[at] ^= 1 << bit;
                        *tally
                            .entry(region(layout, at))
                            .or_default()
                            .entry(outcome)
                            .or_default() += 1;
                    }
                }
            }
        }
        print_tally("single-bit flips of headers and table descriptions", &tally);
        // A Huffman tree has redundancy (its weights must sum to a power of two, and the
        // streams' sizes must fit its code lengths): nearly every flip is caught, and those
        // that pass describe another well-formed tree. FSE table descriptions have almost
        // none (any bits read until the probabilities run out describe a distribution), so a
        // flip there mostly gives another valid table and garbage sequences, which only
        // decoding finds: no bound is asserted for them.
        let tree = &tally["Huffman tree description"];
        let trials: usize = tree.values().sum();
        let (rejected, slipped) = (
            tree[&Outcome::Rejected],
            slips(&tally, "Huffman tree description").0,
        );
        assert!(
            rejected * 100 >= trials * 80 && slipped * 100 <= trials * 3,
            "Huffman trees: {rejected} of {trials} flips rejected, {slipped} slipped through"
        );
    }

    /// Random single-byte corruptions anywhere in compressed blocks: each is rejected, or the
    /// reference decoder still decodes the frame (to the right length). Those the decoder
    /// fails on slipped through; the test reports how many, and where.
    #[test]
    fn scrambled_blocks_are_rejected_or_decode() {
        let small = corpus().iter().filter(|case| case.data.len() <= 300_000);
        let mut frames: Vec<_> = laid_out(small)
            .into_iter()
            .map(|(case, layouts)| (case, layouts, case.frame.clone()))
            .collect();
        let mut rng = Rng::new(8878);
        let mut tally = Tally::new();
        for _ in 0..20_000 {
            let choice = rng.below(frames.len());
            let (case, layouts, frame) = &mut frames[choice];
            let layout = &layouts[rng.below(layouts.len())];
            let at = layout.block.start + rng.below(layout.block.len());
            let flip = 1 + rng.below(255) as u8;
            frame[at] ^= flip;
            *tally
                .entry(region(layout, at))
                .or_default()
                .entry(outcome(frame, &case.data))
                .or_default() += 1;
            frame[at] ^= flip;
        }
        print_tally(
            "random single-byte corruptions in compressed blocks",
            &tally,
        );
        let (slipped, trials) = tally.values().flat_map(|outcomes| outcomes.iter()).fold(
            (0, 0),
            |(slipped, trials), (outcome, count)| {
                let slip = if *outcome == Outcome::Slipped {
                    *count
                } else {
                    0
                };
                (slipped + slip, trials + count)
            },
        );
        println!("slipped through: {slipped} of {trials}");
        // Corrupt Huffman and sequence bitstreams pass (only decoding finds them), and so do
        // most FSE table descriptions (see `flipped_table_bits_are_rejected_or_decode`); the
        // headers and Huffman trees are caught. The corruptions are seeded: no flakiness.
        for (region, percent) in [
            ("Huffman tree description", 12),
            ("literals header", 12),
            ("jump table", 20),
            ("sequences header", 25),
        ] {
            let (slipped, trials) = slips(&tally, region);
            assert!(
                slipped * 100 <= trials * percent,
                "{region}: {slipped} of {trials} corruptions slipped through"
            );
        }
    }

    #[test]
    #[ignore = "a timing, not a check: cargo test -p zarrpipe-codec-gpu --lib --release -- \
                --ignored --nocapture validator_throughput"]
    fn validator_throughput() {
        use std::time::{Duration, Instant};
        let chunks: Vec<_> = (0..8)
            .map(|seed| {
                let data = data(Data::SmoothFloats, 1 << 20, seed);
                (zstd::bulk::compress(&data, 3).unwrap(), data.len())
            })
            .collect();
        let compressed: usize = chunks.iter().map(|(frame, _)| frame.len()).sum();
        let blocks: usize = chunks
            .iter()
            .map(|(frame, len)| zstd_layout(frame, *len).unwrap().len())
            .sum();
        let start = Instant::now();
        let mut rounds = 0;
        while start.elapsed() < Duration::from_secs(2) {
            for (frame, len) in &chunks {
                check_zstd(std::hint::black_box(frame), *len).unwrap();
            }
            rounds += 1;
        }
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "zstd validator, 1 MiB float32 chunks at level 3 ({:.2} compressed bytes per byte, \
             {} compressed blocks per chunk): {:.0} MB/s compressed, {:.0} MB/s decoded, {:.2} µs \
             per chunk, one core",
            compressed as f64 / (8 << 20) as f64,
            blocks / 8,
            (rounds * compressed) as f64 / seconds / 1e6,
            (rounds * (8 << 20)) as f64 / seconds / 1e6,
            seconds / (rounds * 8) as f64 * 1e6,
        );
    }
}
