//! Which files of a repository make the model: one GGUF (or the shards of a split GGUF) chosen by
//! quantization tag or path, or the files of a safetensors folder.

use super::name::Selector;
use crate::HubError;

/// The files to download, and which one to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// A GGUF model: `files[0]` is the file to load (the first shard of a split model; the
    /// loader finds the other shards beside it).
    Gguf {
        /// Repository paths.
        files: Vec<String>,
    },
    /// A Hugging Face folder (config, tokenizer, safetensors shards): load the snapshot folder.
    Folder {
        /// Repository paths.
        files: Vec<String>,
    },
}

impl Plan {
    /// Every file to fetch.
    pub fn files(&self) -> &[String] {
        match self {
            Plan::Gguf { files } | Plan::Folder { files } => files,
        }
    }
}

/// Tags tried, in order, when a repository has several GGUF models and the name gives no tag
/// (llama.cpp's and Ollama's default is Q4_K_M).
const DEFAULT_TAGS: &[&str] = &["Q4_K_M", "Q4_0", "Q8_0"];

/// Files of a model folder besides the safetensors shards.
const FOLDER_FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    "model.safetensors.index.json",
];

/// `stem-00001-of-00003.gguf` → (`stem`, 1, 3).
pub fn split_parts(path: &str) -> Option<(&str, u32, u32)> {
    let stem = path.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, index) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(index) || !digits(count) {
        return None;
    }
    Some((prefix, index.parse().ok()?, count.parse().ok()?))
}

/// The model a GGUF file belongs to: its path without `.gguf` and without a split suffix.
fn model_stem(path: &str) -> &str {
    match split_parts(path) {
        Some((prefix, _, _)) => prefix,
        None => path.strip_suffix(".gguf").unwrap_or(path),
    }
}

/// The quantization tag a file name shows: what follows the last `-` or `.` of its stem.
fn tag_of(path: &str) -> &str {
    let stem = model_stem(path);
    let base = stem.rsplit('/').next().unwrap_or(stem);
    base.rsplit(['-', '.']).next().unwrap_or(base)
}

fn is_model_gguf(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.ends_with(".gguf") && !lower.rsplit('/').next().unwrap_or(&lower).contains("mmproj")
}

/// Whether `path`'s stem ends with `tag` (case-insensitive) at a `-`, `.`, `_` or `/` boundary.
fn has_tag(path: &str, tag: &str) -> bool {
    let stem = model_stem(path).to_ascii_uppercase();
    let tag = tag.to_ascii_uppercase();
    match stem.strip_suffix(&tag) {
        Some(before) => before.is_empty() || before.ends_with(['-', '.', '_', '/']),
        None => false,
    }
}

/// All files of the model `stem` (one file, or every shard of a split model in order).
fn model_files(files: &[String], first: &str) -> Result<Vec<String>, String> {
    let Some((prefix, _, count)) = split_parts(first) else { return Ok(vec![first.to_owned()]) };
    (1..=count)
        .map(|i| {
            let shard = format!("{prefix}-{i:05}-of-{count:05}.gguf");
            if files.contains(&shard) { Ok(shard) } else { Err(shard) }
        })
        .collect()
}

/// The distinct GGUF models (by stem) among `files`, each as its first file.
fn gguf_models(files: &[String]) -> Vec<&str> {
    let mut models: Vec<&str> = Vec::new();
    for f in files.iter().filter(|f| is_model_gguf(f)) {
        let first_of_split = split_parts(f).is_none_or(|(_, i, _)| i == 1);
        if first_of_split && !models.iter().any(|m| model_stem(m) == model_stem(f)) {
            models.push(f);
        }
    }
    models.sort_unstable();
    models
}

/// Chooses the files of `repo` (whose file list is `files`) that `selector` asks for.
pub fn plan(repo: &str, files: &[String], selector: &Selector) -> Result<Plan, HubError> {
    let models = gguf_models(files);
    let tags = || {
        let mut t: Vec<String> = models.iter().map(|m| tag_of(m).to_owned()).collect();
        t.dedup();
        t
    };
    let gguf = |first: &str| {
        model_files(files, first).map(|files| Plan::Gguf { files }).map_err(|missing| HubError::NotFound {
            repo: repo.to_owned(),
            file: Some(missing),
            detail: "a shard of the split model is missing from the repository".into(),
        })
    };
    match selector {
        Selector::File(f) => {
            if !files.contains(f) {
                return Err(HubError::NotFound {
                    repo: repo.to_owned(),
                    file: Some(f.clone()),
                    detail: "no such file in the repository".into(),
                });
            }
            match split_parts(f) {
                Some((prefix, _, count)) => gguf(&format!("{prefix}-00001-of-{count:05}.gguf")),
                None => Ok(Plan::Gguf { files: vec![f.clone()] }),
            }
        }
        Selector::Tag(tag) => {
            let matching: Vec<&str> = models.iter().copied().filter(|m| has_tag(m, tag)).collect();
            match matching.as_slice() {
                [one] => gguf(one),
                [] => Err(HubError::NoMatchingFile {
                    repo: repo.to_owned(),
                    wanted: format!("a GGUF file tagged {tag}"),
                    available: tags(),
                }),
                many => Err(HubError::NoMatchingFile {
                    repo: repo.to_owned(),
                    wanted: format!(
                        "exactly one GGUF model tagged {tag} (name the file with hf://{repo}/FILE)"
                    ),
                    available: many.iter().map(|m| (*m).to_owned()).collect(),
                }),
            }
        }
        Selector::Auto => match models.as_slice() {
            [] => folder_plan(repo, files),
            [one] => gguf(one),
            _ => match DEFAULT_TAGS.iter().find_map(|t| models.iter().find(|m| has_tag(m, t))) {
                Some(m) => gguf(m),
                None => Err(HubError::NoMatchingFile {
                    repo: repo.to_owned(),
                    wanted: "a tag (org/repo:TAG): the repository has several GGUF models".into(),
                    available: tags(),
                }),
            },
        },
    }
}

/// A safetensors folder: the config, tokenizer files and top-level safetensors shards.
fn folder_plan(repo: &str, files: &[String]) -> Result<Plan, HubError> {
    let has_config = files.iter().any(|f| f == "config.json");
    let has_weights = files.iter().any(|f| !f.contains('/') && f.ends_with(".safetensors"));
    if !has_config || !has_weights {
        return Err(HubError::NoMatchingFile {
            repo: repo.to_owned(),
            wanted: "a GGUF file, or config.json with safetensors weights".into(),
            available: files.to_vec(),
        });
    }
    let files = files
        .iter()
        .filter(|f| FOLDER_FILES.contains(&f.as_str()) || (!f.contains('/') && f.ends_with(".safetensors")))
        .cloned()
        .collect();
    Ok(Plan::Folder { files })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn files(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn gguf(names: &[&str]) -> Plan {
        Plan::Gguf { files: files(names) }
    }

    const REPO: &[&str] = &[
        ".gitattributes",
        "README.md",
        "Model-7B-Q4_K_M.gguf",
        "Model-7B-IQ4_K_M.gguf",
        "Model-7B-Q8_0.gguf",
        "mmproj-Model-7B-f16.gguf",
        "Model-7B-F16-00001-of-00002.gguf",
        "Model-7B-F16-00002-of-00002.gguf",
    ];

    #[test]
    fn split_names() {
        assert_eq!(split_parts("a/m-F16-00002-of-00003.gguf"), Some(("a/m-F16", 2, 3)));
        assert_eq!(split_parts("m-F16-2-of-3.gguf"), None);
        assert_eq!(split_parts("m.gguf"), None);
    }

    #[test]
    fn by_tag() {
        let f = files(REPO);
        assert_eq!(
            plan("o/r", &f, &Selector::Tag("q4_k_m".into())).unwrap(),
            gguf(&["Model-7B-Q4_K_M.gguf"])
        );
        assert_eq!(plan("o/r", &f, &Selector::Tag("Q8_0".into())).unwrap(), gguf(&["Model-7B-Q8_0.gguf"]));
        assert_eq!(
            plan("o/r", &f, &Selector::Tag("F16".into())).unwrap(),
            gguf(&["Model-7B-F16-00001-of-00002.gguf", "Model-7B-F16-00002-of-00002.gguf"])
        );
        let e = plan("o/r", &f, &Selector::Tag("Q2_K".into())).unwrap_err().to_string();
        assert!(e.contains("Q2_K") && e.contains("Q8_0") && e.contains("IQ4_K_M"), "{e}");
    }

    #[test]
    fn auto_prefers_q4_k_m_and_a_single_model() {
        assert_eq!(plan("o/r", &files(REPO), &Selector::Auto).unwrap(), gguf(&["Model-7B-Q4_K_M.gguf"]));
        let one = files(&["x-Q5_K_S.gguf", "mmproj-x-f16.gguf"]);
        assert_eq!(plan("o/r", &one, &Selector::Auto).unwrap(), gguf(&["x-Q5_K_S.gguf"]));
        let none_default = files(&["x-Q5_K_S.gguf", "x-Q6_K.gguf"]);
        let e = plan("o/r", &none_default, &Selector::Auto).unwrap_err().to_string();
        assert!(e.contains("Q5_K_S") && e.contains("Q6_K"), "{e}");
    }

    #[test]
    fn by_file_brings_every_shard() {
        let f = files(REPO);
        assert_eq!(
            plan("o/r", &f, &Selector::File("Model-7B-F16-00002-of-00002.gguf".into())).unwrap(),
            gguf(&["Model-7B-F16-00001-of-00002.gguf", "Model-7B-F16-00002-of-00002.gguf"])
        );
        assert!(matches!(
            plan("o/r", &f, &Selector::File("nope.gguf".into())),
            Err(HubError::NotFound { file: Some(_), .. })
        ));
        let broken = files(&["m-00001-of-00003.gguf", "m-00003-of-00003.gguf"]);
        let e = plan("o/r", &broken, &Selector::Auto).unwrap_err().to_string();
        assert!(e.contains("m-00002-of-00003.gguf"), "{e}");
    }

    #[test]
    fn safetensors_folder() {
        let f = files(&[
            "README.md",
            "config.json",
            "tokenizer.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "onnx/model.onnx",
            "pytorch_model.bin",
        ]);
        let Plan::Folder { files } = plan("o/r", &f, &Selector::Auto).unwrap() else { panic!() };
        assert_eq!(files.len(), 5, "{files:?}");
        assert!(!files.iter().any(|f| f.ends_with(".bin") || f.ends_with(".onnx") || f == "README.md"));
        let e = plan("o/r", &f, &Selector::Tag("Q4_0".into())).unwrap_err().to_string();
        assert!(e.contains("tagged Q4_0"), "{e}");
        assert!(plan("o/r", &["README.md".to_string()], &Selector::Auto).is_err());
    }
}
