//! # 10: the stages chained by hand, with a decoder of your own
//!
//! `Pipeline::builder` wires five stages: read plans from the batcher, `fetch_batches`,
//! `decode_batches`, `collate_batches` and `prefetch`. This example chains them by hand and
//! puts a decode stage of its own in the middle: any type that implements `BatchDecoder`
//! (here one that decodes each chunk with zarrpipe's per-chunk CPU decoder and counts what it
//! saw). It then checks that its batches are the builder's, bit for bit.
//!
//! What the builder adds travels through the adapters: the fetch stage reads into the memory
//! a decoder asks for (`fetch_batches_into` with `decoder.read_memory()`: a GPU decoder's
//! pinned memory), a decoder that adapts to the consumer (a split decoder under auto) finds
//! its pace recorded through the batches, and `BatchStream` checks every batch against the
//! batcher and device it is given.
//!
//! A decoder of your own can also hand its chunks over in GPU memory: it builds a
//! `DeviceBatch` from a `zarrpipe::cuda::DeviceBuffer` it wrote and the chunks' places in it
//! (`DeviceBatch::new`), and the GPU collator gathers from there (`tests/gpu_pipeline.rs`,
//! `a_decoder_of_ones_own_feeds_the_device_collator`).
//!
//! Run it with `cargo run --release --example 10_own_decoder`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use zarrpipe::batcher::{EpochOptions, Shuffle};
use zarrpipe::codec::{decode_on_cpu, DecodedChunks};
use zarrpipe::prelude::*;
use zarrpipe::sample::ensure_sample;
use zarrpipe::store::EncodedChunk;

/// Decodes a batch's chunks one after the other on a blocking thread, and counts them.
#[derive(Debug, Default)]
struct CountingDecoder {
    chunks: AtomicU64,
}

impl BatchDecoder for CountingDecoder {
    fn decode_chunks(
        self: Arc<Self>,
        chunks: Vec<EncodedChunk>,
    ) -> BoxFuture<'static, zarrpipe::codec::Result<DecodedChunks>> {
        async move {
            self.chunks
                .fetch_add(chunks.len() as u64, Ordering::Relaxed);
            let decoded = tokio::task::spawn_blocking(move || {
                chunks
                    .into_iter()
                    .map(decode_on_cpu)
                    .collect::<Result<Vec<_>, _>>()
            })
            .await
            .expect("the decoding task ran")?;
            Ok(DecodedChunks::Host(decoded))
        }
        .boxed()
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // --- 1. The same description for both pipelines ---
    let url = ensure_sample(|_, _| {})?;
    let builder = || {
        Pipeline::builder(url.clone())
            .variables(["t2m", "z"])
            .window("latitude", 64, 64)
            .window("longitude", 64, 64)
            .batch_size(8)
            .shuffle(Shuffle::Full)
            .seed(7)
    };

    // --- 2. The builder's batches ---
    let reference: Vec<Batch> = builder().build().await?.try_collect().await?;

    // --- 3. The stages by hand, the decoder our own ---
    let decoder = Arc::new(CountingDecoder::default());
    let by_hand = builder().decoder(decoder.clone());
    let dataset = Arc::new(Dataset::open(&url).await?);
    let layout = Arc::new(SampleLayout::new(
        &dataset,
        &["t2m", "z"],
        &WindowSpec::new()
            .window("latitude", 64, 64)
            .window("longitude", 64, 64),
    )?);
    let epoch = EpochOptions {
        shuffle: Shuffle::Full,
        seed: 7,
        ..EpochOptions::default()
    };
    let batcher = Batcher::with_options(layout.clone(), 8, &epoch)?;
    let memory = decoder.read_memory();
    let chain = stream::iter(batcher.read_plans())
        .fetch_batches_into(4, 64, memory)
        .decode_batches(decoder.clone() as Arc<dyn BatchDecoder>)
        .collate_batches(Arc::new(HostCollator::new(layout)))
        .prefetch(2);
    let mut batches = BatchStream::new(chain, dataset, batcher, Device::Cpu);
    let mut ours = Vec::new();
    while let Some(batch) = batches.try_next().await? {
        ours.push(batch);
    }
    println!(
        "by hand: {} batches, {} chunks through our decoder",
        ours.len(),
        decoder.chunks.load(Ordering::Relaxed)
    );

    // --- 4. The same batches, bit for bit ---
    anyhow::ensure!(ours.len() == reference.len(), "batch counts differ");
    for (mine, theirs) in ours.iter().zip(&reference) {
        let same_samples = mine
            .samples
            .iter()
            .map(|s| s.index)
            .eq(theirs.samples.iter().map(|s| s.index));
        let same_values = mine
            .inputs
            .iter()
            .zip(theirs.inputs.iter())
            .all(|(a, b)| a.to_bits() == b.to_bits());
        anyhow::ensure!(same_samples && same_values, "batch {} differs", mine.index);
    }
    println!("every batch equals the builder's, bit for bit");

    // --- 5. The builder takes the same decoder too ---
    let through_builder: Vec<Batch> = by_hand.build().await?.try_collect().await?;
    anyhow::ensure!(through_builder.len() == reference.len());
    println!(
        "and so does the builder with our decoder: {} batches",
        through_builder.len()
    );
    Ok(())
}
