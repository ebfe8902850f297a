//! Unicode helpers shared by the tokenizers: per-codepoint category flags (the classes llama.cpp's
//! pre-tokenizers test: letter, number, punctuation, …), and GPT-2's byte ↔ character mapping.

use std::sync::OnceLock;

use regex_syntax::hir::{Class, HirKind};

/// Number of Unicode codepoints.
const N_CODEPOINTS: usize = 0x11_0000;

/// Category flags of one codepoint (one category bit plus the whitespace bit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Flags(u8);

impl Flags {
    /// Unassigned codepoint (`Cn`).
    pub const UNDEFINED: u8 = 0x01;
    /// `\p{N}`.
    pub const NUMBER: u8 = 0x02;
    /// `\p{L}`.
    pub const LETTER: u8 = 0x04;
    /// `\p{Z}`.
    pub const SEPARATOR: u8 = 0x08;
    /// `\p{M}`.
    pub const MARK: u8 = 0x10;
    /// `\p{P}`.
    pub const PUNCTUATION: u8 = 0x20;
    /// `\p{S}`.
    pub const SYMBOL: u8 = 0x40;
    /// `\p{C}` without `Cn`.
    pub const CONTROL: u8 = 0x80;

    /// No flags at all: what a position outside the current text reads as.
    pub const NONE: Flags = Flags(0);

    pub fn is_letter(self) -> bool {
        self.0 & Self::LETTER != 0
    }
    pub fn is_number(self) -> bool {
        self.0 & Self::NUMBER != 0
    }
    /// Whether the codepoint exists at all (false only for positions past the text).
    pub fn is_some(self) -> bool {
        self.0 != 0
    }
    /// The category bits.
    pub fn category(self) -> u8 {
        self.0
    }
}

/// Flag table: one byte per codepoint, the low 7 bits the category, bit 7 … see [`Table`].
struct Table {
    categories: Vec<u8>,
    whitespace: Vec<u32>,
}

fn ranges_of(pattern: &str) -> Vec<(u32, u32)> {
    let Ok(hir) = regex_syntax::parse(pattern) else {
        return Vec::new();
    };
    match hir.kind() {
        HirKind::Class(Class::Unicode(cls)) => {
            cls.ranges().iter().map(|r| (r.start() as u32, r.end() as u32)).collect()
        }
        _ => Vec::new(),
    }
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut categories = vec![Flags::UNDEFINED; N_CODEPOINTS];
        let classes: [(&str, u8); 7] = [
            (r"\p{N}", Flags::NUMBER),
            (r"\p{L}", Flags::LETTER),
            (r"\p{Z}", Flags::SEPARATOR),
            (r"\p{M}", Flags::MARK),
            (r"\p{P}", Flags::PUNCTUATION),
            (r"\p{S}", Flags::SYMBOL),
            (r"[\p{Cc}\p{Cf}\p{Co}]", Flags::CONTROL),
        ];
        for (pattern, flag) in classes {
            for (lo, hi) in ranges_of(pattern) {
                for slot in &mut categories[lo as usize..=hi as usize] {
                    *slot = flag;
                }
            }
        }
        // Surrogates are category Cs (control in llama.cpp's tables); Rust chars never hold them,
        // but keep the table faithful.
        for slot in &mut categories[0xD800..=0xDFFF] {
            *slot = Flags::CONTROL;
        }
        let mut whitespace: Vec<u32> = Vec::new();
        for (lo, hi) in ranges_of(r"\p{White_Space}") {
            whitespace.extend(lo..=hi);
        }
        Table { categories, whitespace }
    })
}

/// Category flags of a codepoint.
pub(crate) fn flags(cp: u32) -> Flags {
    table().categories.get(cp as usize).map_or(Flags(Flags::UNDEFINED), |&c| Flags(c))
}

/// Whether a codepoint is Unicode whitespace (llama.cpp's whitespace set).
pub(crate) fn is_whitespace(cp: u32) -> bool {
    if cp < 0x80 {
        return matches!(cp, 0x09..=0x0D | 0x20);
    }
    table().whitespace.binary_search(&cp).is_ok()
}

/// Full description of a codepoint as the pre-tokenizers need it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpInfo {
    pub flags: Flags,
    pub whitespace: bool,
}

impl CpInfo {
    /// Information for a codepoint.
    pub fn of(cp: u32) -> CpInfo {
        CpInfo { flags: flags(cp), whitespace: is_whitespace(cp) }
    }
    /// What llama.cpp reads for a position past the end of the text.
    pub const OUTSIDE: CpInfo = CpInfo { flags: Flags::NONE, whitespace: false };
    pub fn is_letter(self) -> bool {
        self.flags.is_letter()
    }
    pub fn is_number(self) -> bool {
        self.flags.is_number()
    }
    pub fn is_some(self) -> bool {
        self.flags.is_some()
    }
}

/// GPT-2's byte → character mapping (printable bytes map to themselves, the rest to 256+n).
pub(crate) fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut assigned = [false; 256];
    for b in (0x21u32..=0x7E).chain(0xA1..=0xAC).chain(0xAE..=0xFF) {
        table[b as usize] = char::from_u32(b).unwrap_or('\0');
        assigned[b as usize] = true;
    }
    let mut n = 0u32;
    for b in 0..256usize {
        if !assigned[b] {
            table[b] = char::from_u32(256 + n).unwrap_or('\0');
            n += 1;
        }
    }
    table
}

/// The inverse of [`byte_to_char_table`], as a lookup by codepoint (`None` for other codepoints).
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    static INVERSE: OnceLock<Vec<i16>> = OnceLock::new();
    let inv = INVERSE.get_or_init(|| {
        let mut v = vec![-1i16; 512];
        for (b, c) in byte_to_char_table().iter().enumerate() {
            v[*c as usize] = b as i16;
        }
        v
    });
    inv.get(c as usize).and_then(|&b| u8::try_from(b).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories() {
        assert!(flags('a' as u32).is_letter());
        assert!(flags('Ä' as u32).is_letter());
        assert!(flags('3' as u32).is_number());
        assert!(flags('½' as u32).is_number());
        assert_eq!(flags(' ' as u32).category(), Flags::SEPARATOR);
        assert_eq!(flags('!' as u32).category(), Flags::PUNCTUATION);
        assert_eq!(flags('$' as u32).category(), Flags::SYMBOL);
        assert_eq!(flags(0).category(), Flags::CONTROL);
        assert_eq!(flags(0x0378).category(), Flags::UNDEFINED);
        assert!(is_whitespace(0x3000) && is_whitespace('\n' as u32) && !is_whitespace('a' as u32));
    }

    #[test]
    fn gpt2_bytes_roundtrip() {
        let t = byte_to_char_table();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize]), Some(b));
        }
    }
}
