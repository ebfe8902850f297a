//! `ferrolm test-backend`: runs every operator on the CPU and on a GPU backend (OpenCL, CUDA) with
//! random inputs over several shapes, and reports each one's largest error relative to the CPU.

use anyhow::Context as _;
use ferrolm::backend::compare::compare_with_cpu;

/// Arguments of `ferrolm test-backend`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Largest relative error (max |other - cpu| / max |cpu|) an operator may show.
    #[arg(long, default_value_t = 1e-3)]
    pub tolerance: f32,
    /// Print one JSON object per case instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The backend to compare with the CPU: opencl or cuda.
    #[arg(long, default_value = "opencl", value_parser = ["opencl", "cuda"])]
    pub backend: String,
}

/// Runs the command; an error when any operator is off by more than the tolerance.
pub fn run(args: Args) -> anyhow::Result<()> {
    let other = match args.backend.as_str() {
        "cuda" => ferrolm::backend::cuda().context("test-backend compares the CUDA backend with the CPU")?,
        _ => ferrolm::backend::opencl().context("test-backend compares the OpenCL backend with the CPU")?,
    };
    if !args.json {
        println!("backend: {}", other.description());
        println!("| op | case | max rel err | µs | |");
        println!("| --- | --- | ---: | ---: | --- |");
    }
    let reports = compare_with_cpu(other.as_ref(), args.seed).context("running the operators")?;
    let mut failed = 0;
    for r in &reports {
        let ok = r.max_rel_err <= args.tolerance;
        failed += usize::from(!ok);
        if args.json {
            let v = serde_json::json!({
                "op": r.op, "case": r.case, "max_rel_err": r.max_rel_err, "us": r.us, "ok": ok,
            });
            println!("{v}");
        } else {
            let mark = if ok { "ok" } else { "FAIL" };
            println!("| {} | {} | {:.2e} | {:.0} | {mark} |", r.op, r.case, r.max_rel_err, r.us);
        }
    }
    if !args.json {
        println!(
            "\n{} cases, {} within {:.0e}, {failed} over",
            reports.len(),
            reports.len() - failed,
            args.tolerance
        );
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} cases are off by more than {:.0e}", reports.len(), args.tolerance);
    }
    Ok(())
}
