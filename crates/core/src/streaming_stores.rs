//! Copies into a batch with non-temporal (streaming) stores: the host collator's rows cut from
//! chunks, and the CPU decoder's compressed chunks, decoded into scratch memory and copied
//! whole. A batch is far larger than the caches and is read only once it is whole, so what a
//! decoding thread copies into it from its scratch memory need not pass through the caches:
//! streaming stores write whole lines to memory without reading them first, and leave the
//! thread's scratch memory and the codec's state in the cache. On w1-small's host path
//! (2026-11-30) the streaming stores delivered 7.22 GB/s against 6.71 with ordinary stores on an
//! H200 host's 16 cores (medians of six interleaved rounds, faster in each), and 1.52-1.54
//! against 1.42-1.43 on the 2-core development machine (`docs/benchmarks.md`, "Cut rows with
//! streaming stores"); whole chunks, "Chunks through scratch memory" there.

/// Runs shorter than this are copied with ordinary stores: a streaming store that fills part of
/// a line costs more than it saves.
pub const LEAST_STREAMED_BYTES: usize = 1024;

/// Copies `src` to `dst` with streaming stores where the target has them (x86-64), ordinary
/// stores elsewhere.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes and not overlap `src`, and the calling
/// thread must call [`store_fence`] before the bytes at `dst` are read or written again by any
/// thread.
pub unsafe fn copy_streaming(src: &[u8], dst: *mut u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's promise; SSE2 is part of x86-64.
    unsafe {
        copy_streaming_sse2(src, dst)
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's promise.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len())
    }
}

/// Makes the calling thread's streaming stores visible to every thread before its later
/// stores (such as the one that tells another thread its batch is decoded).
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no operands; SSE is part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
}

#[cfg(target_arch = "x86_64")]
unsafe fn copy_streaming_sse2(src: &[u8], dst: *mut u8) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    const LANE: usize = std::mem::size_of::<__m128i>();
    let len = src.len();
    // Ordinary stores up to the first 16-byte boundary of `dst` and after the last one.
    let head = dst.align_offset(LANE).min(len);
    let body = (len - head) / LANE * LANE;
    // SAFETY (all below): every offset lies within `src` and the `len` bytes at `dst` (the
    // caller's promise); the streamed addresses are 16-byte aligned (`head`).
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
        for at in (head..head + body).step_by(LANE) {
            let lane = _mm_loadu_si128(src.as_ptr().add(at).cast());
            _mm_stream_si128(dst.add(at).cast(), lane);
        }
        let tail = head + body;
        std::ptr::copy_nonoverlapping(src.as_ptr().add(tail), dst.add(tail), len - tail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_length_and_alignment_and_nothing_beside() {
        let src: Vec<u8> = (0..2200u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in (0..80).chain([1023, 1024, 1025, 2047, 2100]) {
            for src_offset in 0..17 {
                for dst_offset in 0..17 {
                    let mut dst = vec![0xEEu8; len + 64];
                    let from = &src[src_offset..src_offset + len];
                    // SAFETY: `dst` holds `dst_offset + len` bytes and more; fenced below.
                    unsafe { copy_streaming(from, dst.as_mut_ptr().add(dst_offset)) };
                    store_fence();
                    assert_eq!(
                        &dst[dst_offset..dst_offset + len],
                        from,
                        "{len} {src_offset} {dst_offset}"
                    );
                    assert!(dst[..dst_offset].iter().all(|&b| b == 0xEE));
                    assert!(dst[dst_offset + len..].iter().all(|&b| b == 0xEE));
                }
            }
        }
    }
}
