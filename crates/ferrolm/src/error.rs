//! The library's error type.

use crate::chat::ChatTemplateError;
use crate::constrain::ConstrainError;
use crate::format::gguf::GgufError;
use crate::format::safetensors::SafetensorsError;
use crate::hub::HubError;
use crate::tokenizer::TokenizerError;

/// Every error the ferrolm library reports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A GGUF file could not be read.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// A safetensors file or folder could not be read.
    #[error(transparent)]
    Safetensors(#[from] SafetensorsError),
    /// The tokenizer could not be built or could not encode/decode.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// A chat template could not be compiled or rendered.
    #[error(transparent)]
    Chat(#[from] ChatTemplateError),
    /// Constrained output: a bad schema/grammar or a token the grammar forbids.
    #[error(transparent)]
    Constrain(#[from] ConstrainError),
    /// Downloading or locating a model failed.
    #[error(transparent)]
    Hub(#[from] HubError),
    /// A compute backend failed or cannot run this model.
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    /// The model's architecture is not one ferrolm implements.
    #[error("unsupported model architecture '{0}'")]
    UnsupportedArchitecture(String),
    /// A tensor uses a type the kernels cannot compute with.
    #[error("tensor '{name}' has type {ty}, which ferrolm does not support yet")]
    UnsupportedTensorType {
        /// Tensor name.
        name: String,
        /// Its GGML type name.
        ty: String,
    },
    /// A tensor the architecture needs is missing from the file.
    #[error("model is missing tensor '{0}'")]
    MissingTensor(String),
    /// A tensor has a shape the architecture does not expect.
    #[error("tensor '{name}' has shape {actual:?}, expected {expected:?}")]
    TensorShape {
        /// Tensor name.
        name: String,
        /// Shape found in the file (GGUF order: innermost first).
        actual: Vec<u64>,
        /// Shape the configuration implies.
        expected: Vec<u64>,
    },
    /// A metadata value the architecture needs is missing or invalid.
    #[error("model metadata: {0}")]
    Config(String),
    /// The request does not fit the context or the batch is malformed.
    #[error("{0}")]
    InvalidInput(String),
    /// An I/O error with the path involved.
    #[error("{path}")]
    Io {
        /// The file or folder.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// `Result` with the library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
