//! Model catalog and downloads (filled in by the pull work).

/// Errors locating or downloading a model.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// Placeholder until the catalog lands.
    #[error("unknown model '{0}'")]
    UnknownModel(String),
}
