//! Split GGUF models, as llama.cpp's `gguf-split` writes them: `NAME-00001-of-0000N.gguf` holds
//! the metadata (with `split.count = N`) and a share of the tensors; each later shard holds
//! `split.no` and its own tensors. All shards sit in the same folder.

use std::path::{Path, PathBuf};

use super::tensors::TensorMap;
use crate::format::gguf::GgufFile;
use crate::{Error, Result};

/// The tensors of the model whose first file is `first` (at `path`): its own, plus those of
/// every other shard when it is a split model.
pub(super) fn load_tensors(first: &GgufFile, path: &Path) -> Result<TensorMap> {
    let count = first.opt_u64("split.count")?.unwrap_or(1);
    let mut tensors = TensorMap::from_gguf(first);
    if count <= 1 {
        return Ok(tensors);
    }
    if first.opt_u64("split.no")?.unwrap_or(0) != 0 {
        return Err(Error::Config(format!(
            "{}: not the first shard of a split model (load the -00001-of-{count:05} file)",
            path.display()
        )));
    }
    let shards = shard_paths(path, count)?;
    for (i, shard_path) in shards.iter().enumerate().skip(1) {
        let shard = GgufFile::open(shard_path).map_err(|e| match e {
            crate::format::gguf::GgufError::Io { .. } => Error::Config(format!(
                "{}: missing shard {} of {count} of this split model ({e})",
                path.display(),
                i + 1
            )),
            e => e.into(),
        })?;
        let (no, n) = (shard.opt_u64("split.no")?, shard.opt_u64("split.count")?);
        if no != Some(i as u64) || n != Some(count) {
            return Err(Error::Config(format!(
                "{}: expected shard {} of {count}, found split.no = {no:?}, split.count = {n:?}",
                shard_path.display(),
                i + 1
            )));
        }
        for (name, t) in TensorMap::from_gguf(&shard).iter() {
            if tensors.contains(name) {
                return Err(Error::Config(format!(
                    "{}: tensor '{name}' is in two shards",
                    shard_path.display()
                )));
            }
            tensors.insert(name, t.clone());
        }
    }
    if let Some(expected) = first.opt_u64("split.tensors.count")?
        && expected != tensors.len() as u64
    {
        return Err(Error::Config(format!(
            "{}: split.tensors.count = {expected} but the shards hold {} tensors",
            path.display(),
            tensors.len()
        )));
    }
    tracing::info!(shards = count, tensors = tensors.len(), "split model");
    Ok(tensors)
}

/// The paths of all `count` shards, from the first shard's path.
fn shard_paths(first: &Path, count: u64) -> Result<Vec<PathBuf>> {
    let name = first.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let want = format!("-00001-of-{count:05}.gguf");
    let Some(prefix) = name.strip_suffix(&want) else {
        return Err(Error::Config(format!(
            "{}: split.count = {count}, but the file is not named NAME{want}, so its shards cannot be found",
            first.display()
        )));
    };
    Ok((1..=count).map(|i| first.with_file_name(format!("{prefix}-{i:05}-of-{count:05}.gguf"))).collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn shard_names() {
        let p = shard_paths(Path::new("/m/x-F16-00001-of-00003.gguf"), 3).unwrap();
        assert_eq!(p[2], PathBuf::from("/m/x-F16-00003-of-00003.gguf"));
        let e = shard_paths(Path::new("/m/x.gguf"), 3).unwrap_err().to_string();
        assert!(e.contains("-00001-of-00003.gguf"), "{e}");
    }
}
