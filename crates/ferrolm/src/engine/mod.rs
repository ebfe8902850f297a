//! Batches and logits: the input and output of every forward pass. Generation on top of them
//! lives in [`crate::session`].

mod batch;

pub use batch::{Batch, BatchEntry, Logits};
