//! Compute backends. The CPU backend is the reference and, for now, the only one.

pub mod cpu;
