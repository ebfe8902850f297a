//! The safetensors weights of a Hugging Face model folder, possibly sharded.

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::storage::Storage;

use super::{Res, SafetensorsError, SafetensorsFile, StTensor};

/// The single-file name.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The shard index name.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// `model.safetensors.index.json` (its `metadata` is not needed).
#[derive(serde::Deserialize)]
struct Index {
    weight_map: BTreeMap<String, String>,
}

/// All safetensors files of a model folder, each opened (mapped) once, with a name → file lookup.
pub struct SafetensorsSet {
    dir: PathBuf,
    files: Vec<SafetensorsFile>,
    /// Tensor name → index into `files`.
    map: HashMap<String, usize>,
    /// Tensor names, sorted.
    names: Vec<String>,
}

impl std::fmt::Debug for SafetensorsSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsSet")
            .field("dir", &self.dir)
            .field("files", &self.files.iter().map(SafetensorsFile::path).collect::<Vec<_>>())
            .field("tensors", &self.names.len())
            .finish()
    }
}

/// Opens one file, reporting a missing one as a missing shard of `index`.
fn open_shard(dir: &Path, index: &Path, shard: &str) -> Res<SafetensorsFile> {
    let path = dir.join(shard);
    match SafetensorsFile::open(&path) {
        Err(SafetensorsError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Err(SafetensorsError::MissingShard { index: index.to_path_buf(), shard: shard.to_string() })
        }
        other => other,
    }
}

impl SafetensorsSet {
    /// Opens the weights of a folder:
    /// - with `model.safetensors.index.json`, each shard its `weight_map` names is opened once and
    ///   exactly the tensors of the map are exposed (a missing shard, or a tensor its shard lacks,
    ///   is an error);
    /// - else `model.safetensors`;
    /// - else every `*.safetensors` file of the folder, in name order (a tensor name found in two
    ///   files is an error). Note that this also picks up unrelated files such as adapters.
    pub fn open_dir(dir: impl AsRef<Path>) -> Res<SafetensorsSet> {
        let dir = dir.as_ref();
        let index = dir.join(INDEX_FILE);
        if index.is_file() {
            return Self::open_index(dir, &index);
        }
        let single = dir.join(SINGLE_FILE);
        if single.is_file() {
            return Self::from_files(dir, vec![SafetensorsFile::open(&single)?]);
        }
        let io = |source| SafetensorsError::Io { path: dir.to_path_buf(), source };
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path.extension().is_some_and(|e| e == "safetensors") && path.is_file() {
                paths.push(path);
            }
        }
        if paths.is_empty() {
            return Err(SafetensorsError::NoWeights { dir: dir.to_path_buf() });
        }
        paths.sort();
        let files = paths.iter().map(SafetensorsFile::open).collect::<Res<Vec<_>>>()?;
        Self::from_files(dir, files)
    }

    /// A set of whole files; a name in two files is an error.
    fn from_files(dir: &Path, files: Vec<SafetensorsFile>) -> Res<SafetensorsSet> {
        let mut map = HashMap::new();
        for (i, f) in files.iter().enumerate() {
            for name in f.names() {
                if let Some(prev) = map.insert(name.to_string(), i) {
                    return Err(SafetensorsError::DuplicateTensor {
                        name: name.to_string(),
                        first: files[prev].path().to_path_buf(),
                        second: f.path().to_path_buf(),
                    });
                }
            }
        }
        let mut names: Vec<String> = map.keys().cloned().collect();
        names.sort();
        Ok(SafetensorsSet { dir: dir.to_path_buf(), files, map, names })
    }

    fn open_index(dir: &Path, index_path: &Path) -> Res<SafetensorsSet> {
        let invalid =
            |reason: String| SafetensorsError::InvalidIndex { path: index_path.to_path_buf(), reason };
        let text = std::fs::read(index_path)
            .map_err(|source| SafetensorsError::Io { path: index_path.to_path_buf(), source })?;
        let index: Index = serde_json::from_slice(&text).map_err(|e| invalid(e.to_string()))?;
        if index.weight_map.is_empty() {
            return Err(invalid("weight_map is empty".into()));
        }
        // Shard → its tensors; shard names must stay inside the folder.
        let mut shards: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (name, shard) in &index.weight_map {
            let p = Path::new(shard);
            if shard.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
                return Err(invalid(format!(
                    "tensor '{name}' names shard '{shard}', which is not a file name"
                )));
            }
            shards.entry(shard.as_str()).or_default().push(name.as_str());
        }
        let mut files = Vec::with_capacity(shards.len());
        let mut map = HashMap::with_capacity(index.weight_map.len());
        for (shard, names) in shards {
            let file = open_shard(dir, index_path, shard)?;
            for name in names {
                if file.tensor(name).is_none() {
                    return Err(SafetensorsError::TensorNotInShard {
                        shard: file.path().to_path_buf(),
                        name: name.to_string(),
                    });
                }
                map.insert(name.to_string(), files.len());
            }
            let unlisted = file.names().filter(|n| !map.contains_key(*n)).count();
            if unlisted > 0 {
                tracing::debug!(
                    shard = %file.path().display(),
                    unlisted,
                    "tensors not in the index are ignored"
                );
            }
            files.push(file);
        }
        let names = index.weight_map.into_keys().collect();
        Ok(SafetensorsSet { dir: dir.to_path_buf(), files, map, names })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The files, in the order they were opened (shard name order).
    pub fn files(&self) -> &[SafetensorsFile] {
        &self.files
    }

    /// A tensor and the storage its range indexes.
    pub fn tensor(&self, name: &str) -> Option<(&Arc<Storage>, &StTensor)> {
        let file = self.file_of(name)?;
        Some((file.storage(), file.tensor(name)?))
    }

    /// The file holding a tensor.
    pub fn file_of(&self, name: &str) -> Option<&SafetensorsFile> {
        self.map.get(name).map(|&i| &self.files[i])
    }

    /// A tensor's bytes.
    pub fn data(&self, name: &str) -> Option<&[u8]> {
        let file = self.file_of(name)?;
        Some(file.data(file.tensor(name)?))
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.names.iter().map(String::as_str)
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}
