//! The operators `ferrolm micro-bench` measures, their command-line sizes, and the cases they
//! make: inputs built once, and a call of the CPU backend to time.

use std::cell::RefCell;

use anyhow::{Context as _, bail};
use ferrolm::GgmlType;
use ferrolm::backend::compare::{rand_vec, random_attention_input, random_weight};
use ferrolm::backend::{AttentionShape, Backend, CpuBackend};
use ferrolm::kv::KvType;
use ferrolm::ops::{RopeParams, RopeStyle};
use rand::SeedableRng as _;
use rand::rngs::StdRng;

use super::{parse_positive_size, parse_size};

/// The operator to measure.
#[derive(clap::Subcommand, Debug)]
pub enum OpArgs {
    /// `out [tokens, rows] = x [tokens, cols] · Wᵀ` on weights of each --type (tokens 1: the
    /// decode step's matrix-vector product; GB/s then counts the weight bytes read).
    Matmul(MatmulArgs),
    /// Causal attention of --tokens queries over a cache of --depth earlier tokens plus their
    /// own (one sequence; a prompt chunk when more than one query).
    Attention(AttentionArgs),
    /// RMSNorm of --rows rows of --width values (times a weight vector).
    Rmsnorm(RmsNormArgs),
    /// Rotating --tokens rows of --heads heads of --head-dim values (the angle table, made once
    /// per batch by the forward pass, is made outside the timing).
    Rope(RopeArgs),
}

/// Sizes of `micro-bench matmul`.
#[derive(clap::Args, Debug)]
pub struct MatmulArgs {
    /// Weight types (comma list): any the CPU multiplies by that ferrolm can quantize to: f32,
    /// f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, mxfp4.
    #[arg(long = "type", value_delimiter = ',', default_value = "q4_0,q8_0")]
    pub types: Vec<String>,
    /// Output features (weight rows), comma list; sizes take a `k` suffix (4k = 4096).
    #[arg(long, value_delimiter = ',', value_parser = parse_positive_size, default_value = "4096")]
    pub rows: Vec<usize>,
    /// Input features (weight columns), comma list; a multiple of the type's block (32, 256 for
    /// q4_k).
    #[arg(long, value_delimiter = ',', value_parser = parse_positive_size, default_value = "4096")]
    pub cols: Vec<usize>,
    /// Tokens per call (comma list): 1 is a decode step, larger is a prompt batch.
    #[arg(short = 'n', long, value_delimiter = ',', value_parser = parse_positive_size, default_value = "1,8,512")]
    pub tokens: Vec<usize>,
}

/// Sizes of `micro-bench attention`.
#[derive(clap::Args, Debug)]
pub struct AttentionArgs {
    /// Query heads.
    #[arg(long, value_parser = parse_positive_size, default_value = "32")]
    pub heads: usize,
    /// Key/value heads (divides --heads).
    #[arg(long = "kv-heads", value_parser = parse_positive_size, default_value = "8")]
    pub kv_heads: usize,
    /// Values per head.
    #[arg(long = "head-dim", value_parser = parse_positive_size, default_value = "128")]
    pub head_dim: usize,
    /// Tokens already in the cache before the queries (comma list).
    #[arg(short = 'd', long, value_delimiter = ',', value_parser = parse_size, default_value = "0,4096")]
    pub depth: Vec<usize>,
    /// Query tokens per call (comma list): 1 is a decode step.
    #[arg(short = 'n', long, value_delimiter = ',', value_parser = parse_positive_size, default_value = "1,512")]
    pub tokens: Vec<usize>,
    /// Storage types of the cached keys and values (comma list): f16, f32, q8_0, q4_0.
    #[arg(long = "kv-type", value_delimiter = ',', value_parser = crate::cache_args::parse_kv_type, default_value = "f16")]
    pub kv_types: Vec<KvType>,
}

/// Sizes of `micro-bench rmsnorm`.
#[derive(clap::Args, Debug)]
pub struct RmsNormArgs {
    /// Rows (tokens), comma list.
    #[arg(long, value_delimiter = ',', value_parser = parse_positive_size, default_value = "1,512")]
    pub rows: Vec<usize>,
    /// Values per row (comma list).
    #[arg(long, value_delimiter = ',', value_parser = parse_positive_size, default_value = "4096")]
    pub width: Vec<usize>,
}

/// Sizes of `micro-bench rope`.
#[derive(clap::Args, Debug)]
pub struct RopeArgs {
    /// Heads per token.
    #[arg(long, value_parser = parse_positive_size, default_value = "32")]
    pub heads: usize,
    /// Values per head (even; all of them rotate).
    #[arg(long = "head-dim", value_parser = parse_positive_size, default_value = "128")]
    pub head_dim: usize,
    /// Tokens per call (comma list).
    #[arg(short = 'n', long, value_delimiter = ',', value_parser = parse_positive_size, default_value = "1,512")]
    pub tokens: Vec<usize>,
    /// Pairing of the rotated values (comma list): neox (halves) or interleaved (adjacent).
    #[arg(long, value_delimiter = ',', value_parser = parse_style, default_value = "neox,interleaved")]
    pub style: Vec<RopeStyle>,
}

fn parse_style(s: &str) -> Result<RopeStyle, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "neox" => Ok(RopeStyle::Neox),
        "interleaved" | "norm" => Ok(RopeStyle::Interleaved),
        _ => Err(format!("unknown RoPE style '{s}' (use neox or interleaved)")),
    }
}

/// What one call of a case computes, for its throughput.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Work {
    /// Floating-point operations (multiply and add counted apart).
    pub flops: Option<f64>,
    /// Weight bytes read (a matrix-vector product's).
    pub weight_bytes: Option<f64>,
    /// Values produced (element-wise operators).
    pub elements: Option<f64>,
}

/// One measured configuration: its description, sizes, work, and the call to time.
pub struct Case {
    /// `matmul`, `attention`, `rmsnorm` or `rope`.
    pub op: &'static str,
    /// The data type: the weight type, the cache type, or `f32`.
    pub dtype: String,
    /// The sizes, for people (`4096 x 4096, 8 tokens`).
    pub label: String,
    /// The sizes, by field name.
    pub dims: Vec<(&'static str, serde_json::Value)>,
    /// What one call computes.
    pub work: Work,
    /// Makes one call.
    pub runner: RefCell<Box<dyn FnMut() -> anyhow::Result<()>>>,
}

impl OpArgs {
    /// Every case of the command line, inputs made from `seed`.
    pub fn cases(&self, seed: u64) -> anyhow::Result<Vec<Case>> {
        let mut rng = StdRng::seed_from_u64(seed);
        match self {
            OpArgs::Matmul(a) => matmul_cases(a, &mut rng),
            OpArgs::Attention(a) => attention_cases(a, &mut rng),
            OpArgs::Rmsnorm(a) => Ok(rms_norm_cases(a, &mut rng)),
            OpArgs::Rope(a) => rope_cases(a, &mut rng),
        }
    }
}

/// A weight type of `--type`, one the CPU multiplies by.
fn weight_type(name: &str) -> anyhow::Result<GgmlType> {
    match GgmlType::from_name(name.trim()) {
        Some(t) if CpuBackend.supports_weight(t) => Ok(t),
        _ => bail!("--type {name}: not a weight type the CPU multiplies by"),
    }
}

fn matmul_cases(a: &MatmulArgs, rng: &mut StdRng) -> anyhow::Result<Vec<Case>> {
    let mut cases = Vec::new();
    for name in &a.types {
        let ty = weight_type(name)?;
        for (&rows, &cols) in a.rows.iter().flat_map(|r| a.cols.iter().map(move |c| (r, c))) {
            if !cols.is_multiple_of(ty.block_size()) {
                bail!("--cols {cols}: {ty} weights need a multiple of {} columns", ty.block_size());
            }
            let w = random_weight(rng, ty, rows, cols).with_context(|| {
                format!("ferrolm has no quantizer for {ty}, so it cannot make random {ty} weights")
            })?;
            // The row-interleaved copy a model's weights get when placed on the CPU.
            CpuBackend.prepare_weights(&[&w]);
            let w = std::sync::Arc::new(w);
            for &n in &a.tokens {
                let x = rand_vec(rng, n * cols, 1.0);
                let mut out = vec![0f32; n * rows];
                let w = w.clone();
                let bytes = w.data().len() as f64;
                cases.push(Case {
                    op: "matmul",
                    dtype: ty.name().to_ascii_lowercase(),
                    label: format!("{rows} x {cols}, {n} tok"),
                    dims: vec![("rows", rows.into()), ("cols", cols.into()), ("n_tokens", n.into())],
                    work: Work {
                        flops: Some(2.0 * (rows * cols * n) as f64),
                        weight_bytes: (n == 1).then_some(bytes),
                        elements: None,
                    },
                    runner: RefCell::new(Box::new(move || Ok(CpuBackend.matmul(&w, &x, n, &mut out)?))),
                });
            }
        }
    }
    Ok(cases)
}

/// Multiply-adds of causal attention: each query `i` of a chunk after `depth` cached tokens
/// reads `depth + i + 1` keys and values, twice `head_dim` multiply-adds per key and head.
pub fn attention_flops(heads: usize, head_dim: usize, depth: usize, tokens: usize) -> f64 {
    let keys: f64 = (0..tokens).map(|i| (depth + i + 1) as f64).sum();
    4.0 * (heads * head_dim) as f64 * keys
}

fn attention_cases(a: &AttentionArgs, rng: &mut StdRng) -> anyhow::Result<Vec<Case>> {
    if !a.heads.is_multiple_of(a.kv_heads) {
        bail!("--kv-heads {} does not divide --heads {}", a.kv_heads, a.heads);
    }
    let shape = AttentionShape {
        n_head: a.heads,
        n_head_kv: a.kv_heads,
        head_dim: a.head_dim,
        scale: 1.0 / (a.head_dim as f32).sqrt(),
        window: None,
        softcap: None,
        sinks: None,
    };
    let mut cases = Vec::new();
    for &ty in &a.kv_types {
        ty.check_width(a.head_dim).context("--head-dim")?;
        for (&depth, &n) in a.depth.iter().flat_map(|d| a.tokens.iter().map(move |t| (d, t))) {
            let (kv, batch) = random_attention_input(rng, a.kv_heads * a.head_dim, depth + n, n, 1, ty)?;
            let q = rand_vec(rng, n * a.heads * a.head_dim, 1.0);
            let mut out = vec![0f32; q.len()];
            cases.push(Case {
                op: "attention",
                dtype: ty.name().to_string(),
                label: format!("{}/{} heads x {}, depth {depth}, {n} tok", a.heads, a.kv_heads, a.head_dim),
                dims: vec![
                    ("n_head", a.heads.into()),
                    ("n_head_kv", a.kv_heads.into()),
                    ("head_dim", a.head_dim.into()),
                    ("n_depth", depth.into()),
                    ("n_tokens", n.into()),
                ],
                work: Work { flops: Some(attention_flops(a.heads, a.head_dim, depth, n)), ..Work::default() },
                runner: RefCell::new(Box::new(move || {
                    let (entries, chunks) = (batch.entries(), batch.prompt_chunks());
                    Ok(CpuBackend.attention(shape, entries, chunks, &kv, 0, &q, &mut out)?)
                })),
            });
        }
    }
    Ok(cases)
}

fn rms_norm_cases(a: &RmsNormArgs, rng: &mut StdRng) -> Vec<Case> {
    let mut cases = Vec::new();
    for (&rows, &width) in a.rows.iter().flat_map(|r| a.width.iter().map(move |w| (r, w))) {
        let x = rand_vec(rng, rows * width, 3.0);
        let w = rand_vec(rng, width, 1.5);
        let mut out = vec![0f32; x.len()];
        cases.push(Case {
            op: "rmsnorm",
            dtype: "f32".into(),
            label: format!("{rows} x {width}"),
            dims: vec![("rows", rows.into()), ("width", width.into())],
            work: Work { elements: Some((rows * width) as f64), ..Work::default() },
            runner: RefCell::new(Box::new(move || Ok(CpuBackend.rms_norm(&x, &w, 1e-6, &mut out)?))),
        });
    }
    cases
}

fn rope_cases(a: &RopeArgs, rng: &mut StdRng) -> anyhow::Result<Vec<Case>> {
    if !a.head_dim.is_multiple_of(2) {
        bail!("--head-dim {} is odd: RoPE rotates pairs of values", a.head_dim);
    }
    let mut cases = Vec::new();
    for (&style, &n) in a.style.iter().flat_map(|s| a.tokens.iter().map(move |t| (s, t))) {
        let mut x = rand_vec(rng, n * a.heads * a.head_dim, 2.0);
        let positions: Vec<u32> = (0..n as u32).collect();
        let mut cs = vec![(0f32, 0f32); n * a.head_dim / 2];
        CpuBackend.rope_cos_sin(&positions, a.head_dim, &RopeParams::plain(10000.0), None, &mut cs)?;
        let hd = a.head_dim;
        let name = match style {
            RopeStyle::Neox => "neox",
            RopeStyle::Interleaved => "interleaved",
        };
        cases.push(Case {
            op: "rope",
            dtype: "f32".into(),
            label: format!("{name}, {} heads x {hd}, {n} tok", a.heads),
            dims: vec![
                ("n_head", a.heads.into()),
                ("head_dim", hd.into()),
                ("n_tokens", n.into()),
                ("style", name.into()),
            ],
            work: Work { elements: Some(x.len() as f64), ..Work::default() },
            runner: RefCell::new(Box::new(move || Ok(CpuBackend.rope(&mut x, n, hd, &cs, style)?))),
        });
    }
    Ok(cases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_counts_the_keys_each_query_sees() {
        // One query after 9 cached tokens sees 10 keys: 4 * 2 heads * 8 dims * 10.
        assert_eq!(attention_flops(2, 8, 9, 1), 640.0);
        // Three queries of a prompt see 1, 2 and 3 keys.
        assert_eq!(attention_flops(1, 1, 0, 3), 24.0);
    }

    #[test]
    fn styles_parse() {
        assert_eq!(parse_style("NeoX"), Ok(RopeStyle::Neox));
        assert_eq!(parse_style("interleaved"), Ok(RopeStyle::Interleaved));
        assert!(parse_style("gptj").is_err());
    }

    #[test]
    fn every_case_runs_once() {
        let mm = OpArgs::Matmul(MatmulArgs {
            types: vec!["q4_0".into(), "F16".into()],
            rows: vec![8],
            cols: vec![64],
            tokens: vec![1, 3],
        });
        let cases = mm.cases(1).expect("cases");
        assert_eq!(cases.len(), 4);
        assert_eq!(cases[0].work.weight_bytes, Some(8.0 * 2.0 * 18.0));
        assert_eq!(cases[1].work.weight_bytes, None);
        assert_eq!(cases[3].dtype, "f16");
        for c in &cases {
            (c.runner.borrow_mut())().expect("runs");
        }
        let bad = |types: &str, cols: usize| {
            OpArgs::Matmul(MatmulArgs {
                types: vec![types.into()],
                rows: vec![4],
                cols: vec![cols],
                tokens: vec![1],
            })
            .cases(1)
            .err()
            .map(|e| e.to_string())
        };
        assert!(bad("q6_k", 256).is_some_and(|e| e.contains("no quantizer")), "{:?}", bad("q6_k", 256));
        assert!(bad("q4_k", 64).is_some_and(|e| e.contains("multiple of 256")));
        assert!(bad("q9", 64).is_some_and(|e| e.contains("not a weight type")));
    }
}
