//! Model configuration, weights and architectures.
