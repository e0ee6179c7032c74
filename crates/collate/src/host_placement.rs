//! A host batch's tensors as the place its pending chunks decode into
//! ([`ChunkPlacement`]): a chunk whose one piece is the whole chunk, float32 as stored, in one
//! run of the tensor is decoded straight there; any other chunk's pieces are copied from the
//! decoding thread's scratch memory, CF-decoded and converted as the GPU kernel does.
//!
//! Decoding threads write into the tensors at once. That is sound because the pieces of a
//! [`GatherPlan`] never overlap: each tensor element is one element of one variable's array,
//! which lies in one chunk.

use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};

use zarrpipe_codec_gpu::ChunkPlacement;
use zarrpipe_core::{decode_to_f32, CfDecoding, DType};

use crate::{GatherPlan, Piece};
use zarrpipe_core::streaming_stores::{copy_streaming, store_fence, LEAST_STREAMED_BYTES};

/// The tensors of one batch (inputs, and targets with forecasting pairs), filled through raw
/// pointers from several threads.
pub(crate) struct TensorPlacement<'a> {
    tensors: Vec<RawTensor>,
    decodings: &'a [Option<CfDecoding>],
    /// Each chunk's pieces, as (tensor, piece).
    pieces: Vec<Vec<(usize, &'a Piece)>>,
    /// Whether each chunk's one piece was handed out whole already.
    taken: Vec<AtomicBool>,
    _tensors: PhantomData<&'a mut [MaybeUninit<f32>]>,
}

#[derive(Clone, Copy)]
struct RawTensor {
    start: *mut f32,
    len: usize,
}

// SAFETY: the pointers are only written at elements of disjoint pieces (see the module's
// doc), and the tensors outlive the placement (its lifetime borrows them mutably).
unsafe impl Sync for TensorPlacement<'_> {}

impl<'a> TensorPlacement<'a> {
    /// Places the `chunks` chunks of `plan` (pieces naming a later position are left out:
    /// static fields) in `inputs` and `targets`.
    pub fn new(
        plan: &'a GatherPlan,
        chunks: usize,
        inputs: &'a mut [MaybeUninit<f32>],
        targets: Option<&'a mut [MaybeUninit<f32>]>,
    ) -> Self {
        let mut pieces = vec![Vec::new(); chunks];
        for (tensor, list) in tensor_pieces(plan) {
            for piece in list.iter().filter(|piece| piece.chunk < chunks) {
                pieces[piece.chunk].push((tensor, piece));
            }
        }
        let raw = |tensor: &mut [MaybeUninit<f32>]| RawTensor {
            start: tensor.as_mut_ptr().cast::<f32>(),
            len: tensor.len(),
        };
        let mut tensors = vec![raw(inputs)];
        tensors.extend(targets.map(raw));
        Self {
            tensors,
            decodings: &plan.decodings,
            pieces,
            taken: (0..chunks).map(|_| AtomicBool::new(false)).collect(),
            _tensors: PhantomData,
        }
    }

    /// Copies `piece` from `bytes` (its chunk's, or a static field's) into its tensor.
    fn write(&self, tensor: usize, piece: &Piece, bytes: &[u8]) {
        let cf = self.decodings.get(piece.variable).and_then(Option::as_ref);
        let tensor = self.tensors[tensor];
        let last_piece_element = piece.offsets(piece.len().saturating_sub(1)).1 as usize;
        assert!(
            piece.is_empty() || last_piece_element < tensor.len,
            "a piece beyond its tensor"
        );
        // SAFETY: every element the piece writes lies in the tensor (checked above: the last
        // one has the largest offset, strides being positive), and no other piece writes it.
        unsafe { write_piece(piece, cf, bytes, tensor.start) }
    }

    /// Writes the pieces that name position `chunk` (a static field's) from `bytes`.
    pub fn put_static(&self, plan: &GatherPlan, chunk: usize, bytes: &[u8]) {
        for (tensor, list) in tensor_pieces(plan) {
            for piece in list.iter().filter(|piece| piece.chunk == chunk) {
                self.write(tensor, piece, bytes);
            }
        }
    }
}

impl ChunkPlacement for TensorPlacement<'_> {
    fn whole(&self, index: usize, len: usize) -> Option<&mut [u8]> {
        let [(tensor, piece)] = self.pieces[index].as_slice() else {
            return None;
        };
        let in_one_run = piece.src_start == 0
            && piece.src_strides.iter().all(|&s| s == 1)
            && piece.dst_strides.iter().all(|&s| s == 1)
            && piece.extent.len() <= 1;
        let as_stored = piece.dtype == DType::Float32
            && self
                .decodings
                .get(piece.variable)
                .is_none_or(Option::is_none);
        let elements = piece.len() as usize;
        if !(in_one_run && as_stored && elements * 4 == len) {
            return None;
        }
        if self.taken[index].swap(true, Ordering::Relaxed) {
            return None;
        }
        let tensor = self.tensors[*tensor];
        let start = piece.dst_start as usize;
        assert!(start + elements <= tensor.len, "a piece beyond its tensor");
        // SAFETY: the run lies in the tensor (checked), only this chunk's one piece covers
        // it, and it is handed out once (`taken`). The bytes may not be initialised yet: the
        // decoder only writes them (every one of them, or the batch fails and its tensor is
        // dropped unread).
        Some(unsafe { std::slice::from_raw_parts_mut(tensor.start.add(start).cast::<u8>(), len) })
    }

    fn put(&self, index: usize, decoded: &[u8]) {
        for &(tensor, piece) in &self.pieces[index] {
            self.write(tensor, piece, decoded);
        }
    }
}

/// Each tensor's pieces, numbered as the placement numbers its tensors (inputs 0, targets 1).
fn tensor_pieces(plan: &GatherPlan) -> impl Iterator<Item = (usize, &Vec<Piece>)> {
    let targets = plan.targets.iter().map(|(pieces, _)| pieces);
    std::iter::once(&plan.inputs).chain(targets).enumerate()
}

/// Copies the box `piece` of the chunk bytes `bytes` into the tensor at `out`, CF-decoding
/// with `cf`, one run of the last axis at a time.
///
/// # Safety
/// Every element the piece writes (`piece.offsets`) must lie in the tensor at `out`, and no
/// other thread may access them meanwhile.
unsafe fn write_piece(piece: &Piece, cf: Option<&CfDecoding>, bytes: &[u8], out: *mut f32) {
    let size = piece.dtype.size();
    let rank = piece.extent.len();
    let (run, src_step, dst_step) = match rank {
        0 => (1, 1, 1),
        _ => (
            piece.extent[rank - 1],
            piece.src_strides[rank - 1],
            piece.dst_strides[rank - 1],
        ),
    };
    let runs = piece.len() / run.max(1);
    // Long runs of float32 as stored bypass the caches (`zarrpipe_core::streaming_stores`).
    let streams = cf.is_none()
        && piece.dtype == DType::Float32
        && src_step == 1
        && dst_step == 1
        && run as usize * size >= LEAST_STREAMED_BYTES;
    for first in (0..runs).map(|r| r * run) {
        let (src, dst) = piece.offsets(first);
        let (src, dst, run) = (src as usize, dst as usize, run as usize);
        if src_step == 1 && dst_step == 1 {
            let values = &bytes[src * size..(src + run) * size];
            if streams {
                // SAFETY: the run's elements are the piece's (the caller's promise), and the
                // fence below comes before anything reads them.
                unsafe { copy_streaming(values, out.add(dst).cast()) };
            } else {
                // SAFETY: the run's elements are the piece's (the caller's promise).
                let target = unsafe { std::slice::from_raw_parts_mut(out.add(dst), run) };
                decode_to_f32(piece.dtype, cf, values, target, 1);
            }
            continue;
        }
        for element in 0..run {
            let at = src + element * src_step as usize;
            let mut value = [0f32];
            decode_to_f32(
                piece.dtype,
                cf,
                &bytes[at * size..(at + 1) * size],
                &mut value,
                1,
            );
            // SAFETY: as above.
            unsafe { out.add(dst + element * dst_step as usize).write(value[0]) };
        }
    }
    if streams {
        store_fence();
    }
}
