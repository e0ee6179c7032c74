//! Shared types of zarrpipe: element types ([`DType`]), devices ([`Device`]), the conversion of
//! decoded chunk bytes to `f32` with CF decoding ([`CfDecoding`]), the envelope a batch travels in between stages ([`Staged`],
//! with what each stage cost in [`BatchStats`]), the ordered-concurrency stream the stage
//! adapters are built on ([`InFlight`], [`StageStream`]), the consumer's [`Pace`], which
//! adaptive stages read, and the [`TicketOrder`] in which batches take shared resources.
//!
//! ```
//! use zarrpipe_core::{DType, Device};
//! assert_eq!(DType::from_zarr_name("float32"), Some(DType::Float32));
//! assert_eq!("cuda:1".parse::<Device>().unwrap(), Device::Cuda(1));
//! ```
//!
//! This crate has no GPU code; the `cuda` features live in the stage crates.

#![warn(missing_docs)]

mod cf;
mod device;
mod dtype;
mod in_flight;
mod pace;
mod panic_message;
mod retaining_allocator;
mod stage_stream;
mod staged;
pub mod streaming_stores;
mod ticket_order;

pub use cf::{decode_to_f32, decoded_values_f64, CfDecoding};
pub use device::{Device, ParseDeviceError};
pub use dtype::{convert_to_f32, values_f64, DType};
pub use in_flight::InFlight;
pub use pace::{Pace, PaceDelta, PeerWaits};
pub use panic_message::panic_message;
pub use retaining_allocator::RetainingAllocator;
pub use stage_stream::StageStream;
pub use staged::{BatchStats, Staged};
pub use ticket_order::TicketOrder;
