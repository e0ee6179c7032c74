use std::fmt;
use std::str::FromStr;

/// Where a stage runs and where its output lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// Host memory, CPU threads.
    #[default]
    Cpu,
    /// The CUDA device with this ordinal.
    Cuda(usize),
}

/// A device string that is neither `cpu`, `cuda` nor `cuda:N`.
#[derive(Debug, thiserror::Error)]
#[error("unknown device `{0}`: expected `cpu`, `cuda` or `cuda:N`")]
pub struct ParseDeviceError(pub String);

impl FromStr for Device {
    type Err = ParseDeviceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda(0)),
            _ => text
                .strip_prefix("cuda:")
                .and_then(|ordinal| ordinal.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| ParseDeviceError(text.to_string())),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(ordinal) => write!(f, "cuda:{ordinal}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_devices() {
        for text in ["cpu", "cuda:0", "cuda:3"] {
            assert_eq!(text.parse::<Device>().unwrap().to_string(), text);
        }
        assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(0));
        assert!("tpu".parse::<Device>().is_err());
        assert!("cuda:x".parse::<Device>().is_err());
    }
}
