//! Sessions, batches and generation.
