//! The element types of batch tensors.

/// Element type of a batch tensor. The host collator delivers float32 only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TensorDType {
    /// IEEE 754 single precision.
    #[default]
    F32,
    /// bfloat16.
    BF16,
    /// IEEE 754 half precision.
    F16,
    /// Masks only.
    U8,
}

impl TensorDType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            TensorDType::F32 => 4,
            TensorDType::BF16 | TensorDType::F16 => 2,
            TensorDType::U8 => 1,
        }
    }
}

impl std::str::FromStr for TensorDType {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "f32" | "float32" => Ok(TensorDType::F32),
            "bf16" | "bfloat16" => Ok(TensorDType::BF16),
            "f16" | "float16" => Ok(TensorDType::F16),
            _ => Err(format!(
                "unknown tensor type `{text}`: expected f32, bf16 or f16"
            )),
        }
    }
}
