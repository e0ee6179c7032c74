//! Static variables (no iterated dimension: a land-sea mask, orography), read once, whole,
//! and cut to each sample's window by the collators: on the host from these bytes, on the GPU
//! from one upload kept by the `DeviceCollator` (see
//! [`SampleLayout::is_static`](zarrpipe_batcher::SampleLayout::is_static)).

use std::sync::Arc;

use zarrpipe_batcher::SampleLayout;
use zarrpipe_codec_gpu::{read_array, CpuDecoder};
use zarrpipe_core::DType;

use crate::{Error, Result};

/// One static variable's whole array: decoded, C order, native-endian bytes of its type (as a
/// decoded chunk holds them, so it is converted to float32 as chunks are).
#[derive(Clone, Debug, PartialEq)]
pub struct StaticField {
    /// The variable's name.
    pub variable: String,
    /// Its element type.
    pub dtype: DType,
    /// Its shape.
    pub shape: Vec<u64>,
    /// The decoded array.
    pub bytes: Vec<u8>,
}

/// The static variables of a layout, in the order of
/// [`SampleLayout::static_variables`](zarrpipe_batcher::SampleLayout::static_variables).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StaticFields {
    fields: Vec<StaticField>,
}

impl StaticFields {
    /// Reads every static variable of `layout`, whole (`concurrency` chunk reads at once);
    /// no static variable, no read.
    pub async fn read(layout: &SampleLayout, concurrency: usize) -> Result<Self> {
        let decoder = Arc::new(CpuDecoder::new());
        let mut fields = Vec::new();
        for number in layout.static_variables() {
            let variable = &layout.variables()[number];
            let bytes = read_array(variable, decoder.clone(), concurrency.max(1)).await?;
            fields.push(StaticField {
                variable: variable.name().to_string(),
                dtype: variable.dtype(),
                shape: variable.shape().to_vec(),
                bytes,
            });
        }
        Ok(Self { fields })
    }

    /// The fields, in the order of the layout's static variables.
    pub fn fields(&self) -> &[StaticField] {
        &self.fields
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.fields.iter().map(|field| field.bytes.len()).sum()
    }

    /// The field of variable number `number` of `layout`, and its position among the fields.
    pub(crate) fn field_of(&self, layout: &SampleLayout, number: usize) -> Option<usize> {
        let name = layout.variables()[number].name();
        self.fields.iter().position(|field| field.variable == name)
    }

    /// Checks that these are `layout`'s static variables, whole.
    pub(crate) fn check(&self, layout: &SampleLayout) -> Result<()> {
        let wanted = layout.static_variables();
        let bad = |reason: String| Err(Error::BadOptions { reason });
        if wanted.len() != self.fields.len() {
            return bad(format!(
                "{} static fields for the layout's {} static variables",
                self.fields.len(),
                wanted.len()
            ));
        }
        for (number, field) in wanted.into_iter().zip(&self.fields) {
            let variable = &layout.variables()[number];
            let len = field.shape.iter().product::<u64>() * field.dtype.size() as u64;
            if field.variable != variable.name()
                || field.dtype != variable.dtype()
                || field.shape != variable.shape()
                || field.bytes.len() as u64 != len
            {
                return bad(format!(
                    "static field `{}` ({:?}, shape {:?}, {} bytes) is not the whole of variable `{}` ({:?}, shape {:?})",
                    field.variable,
                    field.dtype,
                    field.shape,
                    field.bytes.len(),
                    variable.name(),
                    variable.dtype(),
                    variable.shape()
                ));
            }
        }
        Ok(())
    }
}
