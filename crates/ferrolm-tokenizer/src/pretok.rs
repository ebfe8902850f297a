//! BPE pre-tokenizers: split text into words before merging, the way llama.cpp does for each
//! `tokenizer.ggml.pre` value.
//!
//! llama.cpp runs a list of regexes one after the other, each one splitting the pieces the previous
//! one produced. Two regexes (GPT-2's and Llama 3's) have hand-written matchers there; the others
//! run through `std::regex` on a "collapsed" copy of the text in which every non-ASCII codepoint is
//! replaced by one byte standing for its Unicode category, and `\p{..}` classes in the pattern are
//! rewritten to match those bytes (plus the ASCII members of the category). That means `\p{L}`
//! there matches only ASCII letters and "some letter", and ASCII characters keep their own identity.
//! This module reproduces that exactly, with private-use characters in place of the category bytes.

use fancy_regex::Regex;

use super::TokenizerError;
use super::unicode::{CpInfo, Flags};

/// The pre-tokenizer kinds (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*` that ferrolm implements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum PreType {
    Default,
    Llama3,
    DeepseekLlm,
    DeepseekCoder,
    Deepseek3Llm,
    Falcon,
    Starcoder,
    Gpt2,
    Qwen2,
    /// Qwen 3.5: Qwen 2's split with combining marks (`\p{M}`) kept inside words.
    Qwen35,
    /// Gemma 4: SentencePiece-style BPE over whole lines (spaces are `▁` already).
    Gemma4,
    Poro,
    Chatglm4,
    Viking,
    Tekken,
    Gpt4o,
    SeedCoder,
    Bailingmoe,
}

/// Vocabulary flags that come with a pre-tokenizer name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PreInfo {
    pub pre: PreType,
    /// Use a whole word as one token when it is in the vocabulary, before merging.
    pub ignore_merges: bool,
    /// Overrides the default `add_bos` (before the GGUF key is read).
    pub add_bos: Option<bool>,
    /// The BOS id is cleared (chatglm).
    pub no_bos: bool,
}

impl PreType {
    /// Maps a `tokenizer.ggml.pre` value (as llama.cpp does). `None` for names ferrolm lacks.
    pub(crate) fn from_name(name: &str) -> Option<PreInfo> {
        let info = |pre| PreInfo { pre, ignore_merges: false, add_bos: None, no_bos: false };
        Some(match name {
            "" | "default" => info(PreType::Default),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
            | "lfm2" | "jina-v5-nano" => {
                PreInfo { pre: PreType::Llama3, ignore_merges: true, add_bos: Some(true), no_bos: false }
            }
            "dbrx" | "smaug-bpe" => info(PreType::Llama3),
            "deepseek-llm" => info(PreType::DeepseekLlm),
            "deepseek-coder" => info(PreType::DeepseekCoder),
            "deepseek-v3" | "hunyuan-dense" | "joyai-llm" => info(PreType::Deepseek3Llm),
            "falcon" => info(PreType::Falcon),
            "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b"
            | "mellum2" => info(PreType::Starcoder),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
            | "a.x-4.0" | "mellum" | "modern-bert" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe"
            | "mpt" | "olmo" | "jais" | "trillion" | "granite-docling" | "exaone4" => info(PreType::Gpt2),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "stablelm2" | "megrez" | "hunyuan"
            | "solar-open" | "grok-2" => info(PreType::Qwen2),
            "qwen35" => info(PreType::Qwen35),
            "gemma4" | "granite-embed-multi-311m" => {
                PreInfo { pre: PreType::Gemma4, ignore_merges: false, add_bos: Some(true), no_bos: false }
            }
            "poro-chat" | "bloom" | "gpt3-finnish" => info(PreType::Poro),
            "glm4" | "chatglm-bpe" => {
                PreInfo { pre: PreType::Chatglm4, ignore_merges: false, add_bos: None, no_bos: true }
            }
            "viking" => info(PreType::Viking),
            "tekken" => {
                PreInfo { pre: PreType::Tekken, ignore_merges: true, add_bos: Some(true), no_bos: false }
            }
            "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => info(PreType::Gpt4o),
            "seed-coder" => info(PreType::SeedCoder),
            "bailingmoe" | "bailingmoe2" | "llada-moe" => info(PreType::Bailingmoe),
            _ => return None,
        })
    }
}

/// GPT-2's pattern; llama.cpp matches it with a hand-written splitter.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const CJK: &str = "[一-龥ࠀ-一가-퟿]+";
const PORO: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";
// A few members are escaped: they have canonical equivalents, and text tools that normalize
// would silently change them (breaking the ranges).
const DEEPSEEK_LETTERS: &str = "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u{1F7D}ᾀ-ᾴᾶ-ᾼ\u{1FBE}ῂ-ῄῆ-ῌῐ-\u{1FD3}ῖ-\u{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u{2126}ℨ\u{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
const DEEPSEEK_PUNCT: &str = "\\s?[!-/:-~！-／：-～‘-‟　-。]+";
const DEEPSEEK3_MAIN: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const SEED_CODER: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+";
const BAILINGMOE: &str = r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";

/// One splitting pass.
#[derive(Clone)]
enum Step {
    /// llama.cpp's hand-written GPT-2 splitter.
    Gpt2,
    /// llama.cpp's hand-written Llama 3 splitter.
    Llama3,
    /// A regex run on the collapsed text (the pattern used `\p{..}`).
    Collapsed(Regex),
    /// A regex run on the text itself (non-ASCII whitespace replaced by `\x0B`).
    Plain(Regex),
}

/// A compiled pre-tokenizer.
#[derive(Clone)]
pub(crate) struct PreTokenizer {
    steps: Vec<Step>,
}

/// Stand-in characters for the collapsed categories (llama.cpp uses bytes 0xD0..=0xD5).
const COLLAPSED_OTHER: char = '\u{E0D0}';
const COLLAPSED_NUMBER: char = '\u{E0D1}';
const COLLAPSED_LETTER: char = '\u{E0D2}';
const COLLAPSED_PUNCT: char = '\u{E0D3}';
const COLLAPSED_MARK: char = '\u{E0D4}';
const COLLAPSED_SYMBOL: char = '\u{E0D5}';

/// The class body a `\p{..}` becomes in the collapsed pattern.
fn category_class(name: &str) -> Option<String> {
    let (c, ascii) = match name {
        "N" => (COLLAPSED_NUMBER, "0-9"),
        "L" | "Lu" | "Ll" | "Lt" | "Lm" | "Lo" => (COLLAPSED_LETTER, "A-Za-z"),
        "P" => (COLLAPSED_PUNCT, r"!-#%-*,-/:-;?-@\[-\]_\{\}"),
        "M" => (COLLAPSED_MARK, ""),
        "S" => (COLLAPSED_SYMBOL, r"\$\+<->\^`\|"),
        _ => return None,
    };
    Some(format!("{c}{ascii}"))
}

/// Whether a pattern uses one of the categories llama.cpp collapses.
fn uses_categories(pattern: &str) -> bool {
    ["N", "L", "P", "M", "S", "Lu", "Ll", "Lt", "Lm", "Lo"]
        .iter()
        .any(|c| pattern.contains(&format!("\\p{{{c}}}")))
}

/// Rewrites `\p{..}` classes of a pattern for the collapsed text (llama.cpp's rules).
fn collapse_pattern(pattern: &str) -> Result<String, TokenizerError> {
    if !pattern.is_ascii() {
        return Err(TokenizerError::Regex(format!(
            "pattern mixes Unicode categories and non-ASCII characters: {pattern}"
        )));
    }
    let b = pattern.as_bytes();
    let mut out = String::with_capacity(pattern.len() * 2);
    let mut inside = false;
    let mut i = 0;
    while i < b.len() {
        let ch = b[i];
        if ch == b'[' && (i == 0 || b[i - 1] != b'\\') {
            out.push('[');
            inside = true;
            i += 1;
            continue;
        }
        if inside && ch == b']' && b[i - 1] != b'\\' {
            out.push(']');
            inside = false;
            i += 1;
            continue;
        }
        if ch == b'\\'
            && i + 3 < b.len()
            && b[i + 1] == b'p'
            && b[i + 2] == b'{'
            && let Some(close) = pattern[i + 3..].find('}').map(|p| p + i + 3)
            && close <= i + 10
            && let Some(class) = category_class(&pattern[i + 3..close])
        {
            if !inside {
                out.push('[');
            }
            out.push_str(&class);
            if !inside {
                out.push(']');
            }
            i = close + 1;
            continue;
        }
        out.push(ch as char);
        i += 1;
    }
    Ok(out)
}

fn compile(pattern: &str) -> Result<Step, TokenizerError> {
    let build = |p: &str| Regex::new(p).map_err(|e| TokenizerError::Regex(format!("{p}: {e}")));
    if pattern == GPT2 {
        return Ok(Step::Gpt2);
    }
    if uses_categories(pattern) {
        Ok(Step::Collapsed(build(&collapse_pattern(pattern)?)?))
    } else {
        Ok(Step::Plain(build(pattern)?))
    }
}

impl PreTokenizer {
    /// Builds the pre-tokenizer for a kind.
    pub(crate) fn new(pre: PreType) -> Result<PreTokenizer, TokenizerError> {
        let patterns: Vec<&str> = match pre {
            PreType::Llama3 | PreType::Chatglm4 => {
                return Ok(PreTokenizer { steps: vec![Step::Llama3] });
            }
            PreType::Default => vec![r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
            PreType::DeepseekLlm => {
                vec!["[\r\n]", DEEPSEEK_LETTERS, DEEPSEEK_PUNCT, r"\s+$", CJK, r"\p{N}+"]
            }
            PreType::DeepseekCoder => vec!["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK, r"\p{N}"],
            PreType::Deepseek3Llm => vec![r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", DEEPSEEK3_MAIN],
            PreType::Falcon => vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
            PreType::Starcoder => vec![r"\p{N}", GPT2],
            PreType::Gpt2 => vec![GPT2],
            PreType::Qwen2 => vec![QWEN2],
            PreType::Qwen35 => vec![QWEN35],
            PreType::Gemma4 => vec![r"[^\n]+|[\n]+"],
            PreType::Poro => vec![PORO],
            PreType::Viking => vec![PORO, r"\p{N}"],
            PreType::Tekken => vec![TEKKEN],
            PreType::Gpt4o => vec![GPT4O],
            PreType::SeedCoder => vec![SEED_CODER],
            PreType::Bailingmoe => vec![BAILINGMOE],
        };
        let steps = patterns.into_iter().map(compile).collect::<Result<Vec<_>, _>>()?;
        Ok(PreTokenizer { steps })
    }

    /// Splits `text` into words (as strings of the original text; no byte mapping yet).
    pub(crate) fn split<'t>(&self, text: &'t str) -> Result<Vec<&'t str>, TokenizerError> {
        let cps: Vec<char> = text.chars().collect();
        let infos: Vec<CpInfo> = cps.iter().map(|&c| CpInfo::of(c as u32)).collect();
        let mut lens: Vec<usize> = if cps.is_empty() { Vec::new() } else { vec![cps.len()] };
        let mut collapsed: Option<String> = None;
        let mut plain: Option<String> = None;
        for step in &self.steps {
            lens = match step {
                Step::Gpt2 => split_custom(&cps, &infos, &lens, gpt2_segment),
                Step::Llama3 => split_custom(&cps, &infos, &lens, llama3_segment),
                Step::Collapsed(re) => {
                    let s = collapsed.get_or_insert_with(|| collapse_text(&cps, &infos));
                    split_regex(re, s, &lens)?
                }
                Step::Plain(re) => {
                    let s = plain.get_or_insert_with(|| {
                        cps.iter()
                            .zip(&infos)
                            .map(|(&c, i)| if (c as u32) > 0x7F && i.whitespace { '\x0B' } else { c })
                            .collect()
                    });
                    split_regex(re, s, &lens)?
                }
            };
        }
        // Codepoint lengths back to byte slices of the text.
        let mut words = Vec::with_capacity(lens.len());
        let mut byte = 0usize;
        let mut cp = 0usize;
        for len in lens {
            let start = byte;
            for c in &cps[cp..cp + len] {
                byte += c.len_utf8();
            }
            cp += len;
            words.push(&text[start..byte]);
        }
        Ok(words)
    }
}

/// The collapsed text: ASCII kept, other codepoints replaced by their category stand-in.
fn collapse_text(cps: &[char], infos: &[CpInfo]) -> String {
    cps.iter()
        .zip(infos)
        .map(|(&c, info)| {
            if (c as u32) < 0x80 {
                c
            } else if info.whitespace {
                '\x0B'
            } else {
                match info.flags.category() {
                    Flags::NUMBER => COLLAPSED_NUMBER,
                    Flags::LETTER => COLLAPSED_LETTER,
                    Flags::PUNCTUATION => COLLAPSED_PUNCT,
                    Flags::MARK => COLLAPSED_MARK,
                    Flags::SYMBOL => COLLAPSED_SYMBOL,
                    _ => COLLAPSED_OTHER,
                }
            }
        })
        .collect()
}

/// Runs a regex over each segment (given as codepoint lengths) of `text`; unmatched stretches
/// become pieces of their own.
fn split_regex(re: &Regex, text: &str, lens: &[usize]) -> Result<Vec<usize>, TokenizerError> {
    // Byte offset of every codepoint, plus the end.
    let offsets: Vec<usize> =
        text.char_indices().map(|(i, _)| i).chain(std::iter::once(text.len())).collect();
    let cp_of = |byte: usize| offsets.partition_point(|&o| o < byte);
    let mut out = Vec::with_capacity(lens.len());
    let mut seg_cp = 0usize;
    for &len in lens {
        let (Some(&b0), Some(&b1)) = (offsets.get(seg_cp), offsets.get(seg_cp + len)) else {
            break;
        };
        let seg = &text[b0..b1];
        let mut last = seg_cp;
        for m in re.find_iter(seg) {
            let m = m.map_err(|e| TokenizerError::Regex(e.to_string()))?;
            if m.start() == m.end() {
                continue;
            }
            let start = cp_of(b0 + m.start());
            let end = cp_of(b0 + m.end());
            if start > last {
                out.push(start - last);
            }
            out.push(end - start);
            last = end;
        }
        if last < seg_cp + len {
            out.push(seg_cp + len - last);
        }
        seg_cp += len;
    }
    Ok(out)
}

/// Runs a hand-written splitter over each segment.
fn split_custom(
    cps: &[char],
    infos: &[CpInfo],
    lens: &[usize],
    f: fn(&Segment<'_>, &mut Vec<usize>),
) -> Vec<usize> {
    let mut out = Vec::with_capacity(lens.len());
    let mut start = 0;
    for &len in lens {
        let seg = Segment { cps: &cps[start..start + len], infos: &infos[start..start + len] };
        f(&seg, &mut out);
        start += len;
    }
    out
}

/// One segment for the hand-written splitters; positions outside read as "nothing".
struct Segment<'a> {
    cps: &'a [char],
    infos: &'a [CpInfo],
}

/// Marker codepoint for positions past the segment.
const OUTSIDE: u32 = u32::MAX;

impl Segment<'_> {
    fn len(&self) -> usize {
        self.cps.len()
    }
    fn cp(&self, pos: usize) -> u32 {
        self.cps.get(pos).map_or(OUTSIDE, |&c| c as u32)
    }
    fn info(&self, pos: usize) -> CpInfo {
        self.infos.get(pos).copied().unwrap_or(CpInfo::OUTSIDE)
    }
}

/// Emits pieces as positions advance.
struct Emitter<'o> {
    out: &'o mut Vec<usize>,
    prev_end: usize,
}

impl Emitter<'_> {
    fn add(&mut self, end: usize) -> usize {
        let len = end - self.prev_end;
        if len > 0 {
            self.out.push(len);
        }
        self.prev_end = end;
        len
    }
}

/// Where the last alternatives of the GPT-2 and Llama 3 patterns, `\s+(?!\S)|\s+|.`, end for a
/// match starting at `pos` that begins with `n_ws` whitespace code points: a run of several
/// spaces before a non-space leaves its last space to the next word.
fn whitespace_run_end(s: &Segment<'_>, pos: usize, n_ws: usize) -> usize {
    if n_ws > 1 && s.cp(pos + n_ws) != OUTSIDE {
        pos + n_ws - 1
    } else if n_ws > 0 {
        pos + n_ws
    } else {
        pos + 1
    }
}

fn is_contraction_letter(c: u32) -> bool {
    c == 's' as u32 || c == 't' as u32 || c == 'm' as u32 || c == 'd' as u32
}

fn is_contraction_pair(a: u32, b: u32) -> bool {
    let pair = |x: char, y: char| a == x as u32 && b == y as u32;
    pair('r', 'e') || pair('v', 'e') || pair('l', 'l')
}

fn ascii_lower(c: u32) -> u32 {
    if (b'A' as u32..=b'Z' as u32).contains(&c) { c + 32 } else { c }
}

/// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
fn gpt2_segment(s: &Segment<'_>, out: &mut Vec<usize>) {
    let end = s.len();
    let mut em = Emitter { out, prev_end: 0 };
    let mut pos = 0;
    while pos < end {
        let cp = s.cp(pos);
        let info = s.info(pos);
        if cp == '\'' as u32 && pos + 1 < end {
            let next = s.cp(pos + 1);
            if is_contraction_letter(next) {
                pos += em.add(pos + 2);
                continue;
            }
            if pos + 2 < end && is_contraction_pair(next, s.cp(pos + 2)) {
                pos += em.add(pos + 3);
                continue;
            }
        }
        let space = cp == ' ' as u32;
        let mut f2 = if space { s.info(pos + 1) } else { info };
        if f2.is_letter() {
            pos += space as usize;
            while f2.is_letter() {
                pos += 1;
                f2 = s.info(pos);
            }
            em.add(pos);
            continue;
        }
        if f2.is_number() {
            pos += space as usize;
            while f2.is_number() {
                pos += 1;
                f2 = s.info(pos);
            }
            em.add(pos);
            continue;
        }
        let other = |f: CpInfo| !(f.whitespace || f.is_letter() || f.is_number()) && f.is_some();
        if other(f2) {
            pos += space as usize;
            while other(f2) {
                pos += 1;
                f2 = s.info(pos);
            }
            em.add(pos);
            continue;
        }
        let mut n_ws = 0;
        while s.info(pos + n_ws).whitespace {
            n_ws += 1;
        }
        pos = whitespace_run_end(s, pos, n_ws);
        em.add(pos);
    }
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
fn llama3_segment(s: &Segment<'_>, out: &mut Vec<usize>) {
    let end = s.len();
    let mut em = Emitter { out, prev_end: 0 };
    let is_crlf = |c: u32| c == '\r' as u32 || c == '\n' as u32;
    let mut pos = 0;
    while pos < end {
        let cp = s.cp(pos);
        let info = s.info(pos);
        if cp == '\'' as u32 && pos + 1 < end {
            let next = ascii_lower(s.cp(pos + 1));
            if is_contraction_letter(next) {
                pos += em.add(pos + 2);
                continue;
            }
            if pos + 2 < end && is_contraction_pair(next, ascii_lower(s.cp(pos + 2))) {
                pos += em.add(pos + 3);
                continue;
            }
        }
        if !(is_crlf(cp) || info.is_number()) && (info.is_letter() || s.info(pos + 1).is_letter()) {
            pos += 1;
            while s.info(pos).is_letter() {
                pos += 1;
            }
            em.add(pos);
            continue;
        }
        if info.is_number() {
            let mut ini = pos;
            while s.info(pos).is_number() {
                pos += 1;
                if pos - ini >= 3 {
                    em.add(pos);
                    ini = pos;
                }
            }
            em.add(pos);
            continue;
        }
        let space = cp == ' ' as u32;
        let mut f2 = if space { s.info(pos + 1) } else { info };
        let other = |f: CpInfo| !(f.whitespace || f.is_letter() || f.is_number());
        if other(f2) && info.is_some() {
            pos += space as usize;
            while other(f2) && f2.is_some() {
                pos += 1;
                f2 = s.info(pos);
            }
            while is_crlf(s.cp(pos)) {
                pos += 1;
            }
            em.add(pos);
            continue;
        }
        let mut n_ws = 0;
        let mut last_crlf_end = 0;
        while s.info(pos + n_ws).whitespace {
            if is_crlf(s.cp(pos + n_ws)) {
                last_crlf_end = pos + n_ws + 1;
            }
            n_ws += 1;
        }
        if last_crlf_end > 0 {
            pos = last_crlf_end;
            em.add(pos);
            continue;
        }
        pos = whitespace_run_end(s, pos, n_ws);
        em.add(pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: PreType, text: &str) -> Vec<String> {
        let p = PreTokenizer::new(pre).expect("pre-tokenizer builds");
        p.split(text).expect("split").into_iter().map(str::to_string).collect()
    }

    #[test]
    fn gpt2_split() {
        assert_eq!(words(PreType::Gpt2, "Hello world  it's"), ["Hello", " world", " ", " it", "'s"]);
    }

    #[test]
    fn llama3_split() {
        assert_eq!(words(PreType::Llama3, "12345 ab\n\n x"), ["123", "45", " ab", "\n\n", " x"]);
    }

    #[test]
    fn collapsed_pattern() {
        assert_eq!(collapse_pattern(r"\p{N}").ok(), Some(format!("[{COLLAPSED_NUMBER}0-9]")));
        assert_eq!(words(PreType::Qwen2, "ab12 ü"), ["ab", "1", "2", " ü"]);
    }

    #[test]
    fn all_kinds_compile() {
        for pre in [
            PreType::Default,
            PreType::Llama3,
            PreType::DeepseekLlm,
            PreType::DeepseekCoder,
            PreType::Deepseek3Llm,
            PreType::Falcon,
            PreType::Starcoder,
            PreType::Gpt2,
            PreType::Qwen2,
            PreType::Poro,
            PreType::Chatglm4,
            PreType::Viking,
            PreType::Tekken,
            PreType::Gpt4o,
            PreType::SeedCoder,
            PreType::Bailingmoe,
        ] {
            assert!(PreTokenizer::new(pre).is_ok(), "{pre:?}");
        }
    }
}
