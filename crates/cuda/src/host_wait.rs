//! Events that zarrpipe's own threads wait for on the host: asleep, not spinning.

use cudarc::driver::sys::CUevent_flags;

/// The flags of an event a zarrpipe thread waits for on the host (a batch's collation, a
/// decode group, a tensor's last readers). Its time can still be read.
///
/// With fewer contexts than cores the CUDA driver spins a thread that waits for the GPU
/// (`CU_CTX_SCHED_AUTO`): a core at normal priority for as long as the GPU's work lasts, taken
/// from the CPU decoding threads, which run at a lower one. The context's own flags are left
/// alone: the consumer's framework shares the primary context and chose its own waits.
pub const HOST_WAITED_EVENT: CUevent_flags = CUevent_flags::CU_EVENT_BLOCKING_SYNC;
