//! Read bandwidth against working-set size: how large a set of weights and KV cache the
//! machine's last-level cache really keeps between forward passes.
//!
//! A forward pass reads the same buffers in the same order every step, so this reads a buffer of
//! each size from start to end, over and over, on `threads` threads (each its own half, as the
//! matmul's decode split does), and reports the sum of the threads' rates (each the median of its passes after the first). Where
//! the curve falls is the cache a model's weights (plus, with several sequences, their KV caches)
//! can live in; a virtual machine's reported L3 size need not be that.
//!
//! ```sh
//! cargo run --release -p ferrolm-kernels --example mem_sweep -- [threads] [MiB ...]
//! ```

use std::hint::black_box;
use std::time::Instant;

/// Working-set sizes tried when none are given, in MiB.
const DEFAULT_MIB: [usize; 12] = [8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256];

fn main() {
    let mut args = std::env::args().skip(1);
    let threads = match args.next().map(|a| a.parse::<usize>()) {
        None => 2,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: mem_sweep [threads] [MiB ...]");
            std::process::exit(2);
        }
    };
    let mut sizes = Vec::new();
    for a in args {
        match a.parse::<usize>() {
            Ok(m) if m > 0 => sizes.push(m),
            _ => {
                eprintln!("not a size in MiB: {a}");
                std::process::exit(2);
            }
        }
    }
    if sizes.is_empty() {
        sizes.extend(DEFAULT_MIB);
    }
    println!("threads: {threads}");
    for mib in sizes {
        let words = (mib << 20) / 8;
        let data: Vec<u64> = (0..words as u64).collect();
        // More passes over small sets, so that every size takes roughly the same time.
        let passes = 5 + 4096 / mib;
        let chunk = words.div_ceil(threads);
        let start = std::sync::Barrier::new(data.chunks(chunk).len());
        // Each thread times its own passes over its part; all run at the same time, so the sum
        // of their rates is the machine's rate for the whole set.
        let rates: Vec<f64> = std::thread::scope(|s| {
            let handles: Vec<_> = data
                .chunks(chunk)
                .map(|part| {
                    let start = &start;
                    s.spawn(move || {
                        start.wait();
                        let mut secs = Vec::with_capacity(passes);
                        for _ in 0..passes {
                            let t0 = Instant::now();
                            black_box(sum(part));
                            secs.push(t0.elapsed().as_secs_f64());
                        }
                        // The first pass warms the caches up: the median of the others.
                        let mut rest = secs.split_off(1);
                        rest.sort_by(f64::total_cmp);
                        (part.len() * 8) as f64 / rest[rest.len() / 2]
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0.0)).collect()
        });
        println!("{mib:5} MiB: {:6.1} GB/s", rates.iter().sum::<f64>() / 1e9);
    }
}

/// Wrapping sum of `xs` in eight independent lanes (the compiler vectorises it): one pass of
/// plain loads over the slice.
fn sum(xs: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = xs.chunks_exact(8);
    let tail: u64 = chunks.remainder().iter().fold(0, |a, &x| a.wrapping_add(x));
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(x);
        }
    }
    acc.iter().fold(tail, |a, &x| a.wrapping_add(x))
}
