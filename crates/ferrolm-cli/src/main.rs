//! The `ferrolm` command-line tool.

fn main() {}
