//! `ferrolm convert`: write a GGUF file from a Hugging Face model folder.

use std::path::PathBuf;

use anyhow::{Context, bail};
use ferrolm::model::GgmlType;
use ferrolm::model::convert::{CONVERT_TYPES, convert_hf_to_gguf};
use ferrolm::model::quantize::LOAD_QUANT_TYPES;
use indicatif::{ProgressBar, ProgressStyle};

/// Arguments of `ferrolm convert`.
#[derive(clap::Args)]
pub struct Args {
    /// Hugging Face model folder (config.json, tokenizer.json, *.safetensors).
    input: PathBuf,
    /// Output GGUF file (default: <folder>-<type>.gguf beside the folder).
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Weight type: f32, f16, bf16, q8_0, q4_0 or q4_k. A matrix whose rows do not fit the
    /// type's blocks gets the nearest type that fits, as llama.cpp does: q4_k needs rows that are
    /// a multiple of 256 elements (else q5_0, q8_0, then f16), q8_0 and q4_0 a multiple of 32
    /// (else f16). The types used, and how many matrices fell back, are printed at the end.
    #[arg(long = "outtype", default_value = "f16", value_parser = parse_out_type)]
    outtype: GgmlType,
}

fn parse_type(s: &str, allowed: &[GgmlType]) -> Result<GgmlType, String> {
    let names: Vec<String> = allowed.iter().map(|t| t.name().to_ascii_lowercase()).collect();
    allowed
        .iter()
        .copied()
        .find(|t| t.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("unknown type '{s}' (choose {})", names.join(", ")))
}

fn parse_out_type(s: &str) -> Result<GgmlType, String> {
    parse_type(s, &CONVERT_TYPES)
}

/// Parses a `--quantize` value for loading.
pub fn parse_load_quant(s: &str) -> Result<GgmlType, String> {
    parse_type(s, &LOAD_QUANT_TYPES)
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    if !args.input.join("config.json").is_file() {
        bail!("{} is not a Hugging Face model folder (no config.json)", args.input.display());
    }
    let out = match args.output {
        Some(o) => o,
        None => {
            let name =
                args.input.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or("model".into());
            let parent = args.input.parent().map(PathBuf::from).unwrap_or_default();
            parent.join(format!("{name}-{}.gguf", args.outtype.name().to_ascii_lowercase()))
        }
    };
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("converting {bar:30} {pos}/{len} tensors {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t0 = std::time::Instant::now();
    let report = convert_hf_to_gguf(&args.input, &out, args.outtype, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })
    .with_context(|| format!("converting {}", args.input.display()))?;
    bar.finish_and_clear();
    if report.matrices.n_fallback > 0 {
        tracing::warn!(
            "--outtype {}: {}",
            args.outtype.name().to_ascii_lowercase(),
            report.matrices.describe()
        );
    }
    let types: Vec<String> = report.types.iter().map(|(t, n)| format!("{n} {}", t.name())).collect();
    eprintln!(
        "wrote {} ({:.1} MB, {} tensors: {}) in {:.1} s",
        out.display(),
        report.bytes as f64 / 1e6,
        report.n_tensors,
        types.join(", "),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
