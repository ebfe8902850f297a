//! Tokenizers (filled in by the tokenizer work).

/// Errors building or running a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The vocabulary in the model file is invalid.
    #[error("invalid vocabulary: {0}")]
    InvalidVocab(String),
}
