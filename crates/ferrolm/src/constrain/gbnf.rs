//! GBNF, llama.cpp's grammar format, translated to llguidance's Lark dialect.
//!
//! GBNF is a context-free grammar over characters: rules `name ::= alternatives`, literals
//! `"…"`, character classes `[a-z]` / `[^…]`, any character `.`, groups `( … )`, the
//! repetitions `*` `+` `?` `{m}` `{m,}` `{m,n}`, rule references, comments `#`, and special
//! tokens `<…>`. The start rule is `root`. The parser accepts what llama.cpp's
//! `llama_grammar_parser` accepts (the same escapes `\x.. \u.... \U........ \t \n \r \\ \" \[ \]
//! \-`, newlines allowed inside groups and after `|`, a later definition of a rule replacing an
//! earlier one, a repetition count over 2000 refused and a maximum over 2000 unbounded).
//!
//! The translation keeps GBNF's meaning: every rule becomes a grammar rule (lowercase, renamed
//! so that no two collide), and every terminal is **one character** (a literal `"ab"` becomes
//! the two terminals `/\x{61}/ /\x{62}/`). llguidance lexes its terminals greedily; with
//! multi-character terminals a greedy lexer could miss a split GBNF allows (`("a" | "ab") "bc"`
//! on `abc`), while one-character terminals leave every split to the Earley parser. Special
//! tokens `<name>` / `<[id]>` become llguidance's token references, and the inverse `!<[id]>`
//! (any one token but `id` and the end-of-generation tokens) llguidance's `<[^id,eog…]>`;
//! `!<name>` is refused (give the token id).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::ConstrainError;

/// llama.cpp's limit on a repetition count (`MAX_REPETITION_THRESHOLD`).
const MAX_REPETITION: u64 = 2000;

/// One element of a sequence.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    /// A literal: its characters in order (empty for `""`).
    Literal(Vec<char>),
    /// A character class: negated or not, inclusive ranges.
    Class { negated: bool, ranges: Vec<(char, char)> },
    /// `.`: any character.
    Any,
    /// A rule reference (by its GBNF name).
    Rule(String),
    /// A group of alternatives.
    Group(Vec<Vec<Term>>),
    /// A special token, `<…>` in llguidance's form.
    Token(String),
    /// `!<[id]>`: any one token but this one (or an end-of-generation token).
    NotToken(u32),
}

/// An item with its repetition bounds (`max: None` = unbounded).
#[derive(Debug, Clone, PartialEq)]
struct Term {
    item: Item,
    min: u64,
    max: Option<u64>,
}

/// A parsed grammar: each rule's alternatives, in definition order of first appearance.
#[derive(Debug, Default)]
struct Grammar {
    rules: Vec<(String, Vec<Vec<Term>>)>,
}

/// Translates a GBNF grammar to llguidance's Lark (start rule `start`, which is GBNF's `root`).
/// `eog` are the vocabulary's end-of-generation tokens, which `!<[id]>` does not match (in
/// llama.cpp they end the text and are never matched by a grammar element).
pub fn to_lark(src: &str, eog: &[u32]) -> Result<String, ConstrainError> {
    let g = Parser::new(src).grammar()?;
    let names = mangled_names(&g);
    if !names.contains_key("root") {
        return Err(gbnf_err("the grammar has no `root` rule".into()));
    }
    for (_, alts) in &g.rules {
        check_refs(alts, &names)?;
    }
    let mut out = format!("start: {}\n", names["root"]);
    for (name, alts) in &g.rules {
        let _ = writeln!(out, "{}: {}", names[name.as_str()], lark_alts(alts, &names, eog));
    }
    Ok(out)
}

fn gbnf_err(msg: String) -> ConstrainError {
    ConstrainError::Grammar(format!("GBNF: {msg}"))
}

/// Every rule's Lark name: lowercase letters, digits and `_`, prefixed `g_`, numbered on a
/// collision (`Foo` and `foo`, `a-b` and `a_b`).
fn mangled_names(g: &Grammar) -> BTreeMap<&str, String> {
    let mut names = BTreeMap::new();
    let mut used = std::collections::BTreeSet::new();
    for (name, _) in &g.rules {
        let base = format!("g_{}", name.to_ascii_lowercase().replace('-', "_"));
        let mut m = base.clone();
        let mut k = 1;
        while !used.insert(m.clone()) {
            m = format!("{base}_{k}");
            k += 1;
        }
        names.insert(name.as_str(), m);
    }
    names
}

fn check_refs(alts: &[Vec<Term>], names: &BTreeMap<&str, String>) -> Result<(), ConstrainError> {
    for t in alts.iter().flatten() {
        match &t.item {
            Item::Rule(r) if !names.contains_key(r.as_str()) => {
                return Err(gbnf_err(format!("undefined rule `{r}`")));
            }
            Item::Group(inner) => check_refs(inner, names)?,
            _ => {}
        }
    }
    Ok(())
}

fn lark_alts(alts: &[Vec<Term>], names: &BTreeMap<&str, String>, eog: &[u32]) -> String {
    let seqs: Vec<String> = alts
        .iter()
        .map(|seq| {
            let parts: Vec<String> = seq.iter().map(|t| lark_term(t, names, eog)).collect();
            if parts.is_empty() { "\"\"".to_string() } else { parts.join(" ") }
        })
        .collect();
    seqs.join(" | ")
}

fn lark_term(t: &Term, names: &BTreeMap<&str, String>, eog: &[u32]) -> String {
    let item = match &t.item {
        Item::Literal(chars) if chars.is_empty() => "\"\"".to_string(),
        Item::Literal(chars) if chars.len() == 1 => char_terminal(chars[0]),
        Item::Literal(chars) => {
            format!("({})", chars.iter().map(|&c| char_terminal(c)).collect::<Vec<_>>().join(" "))
        }
        Item::Class { negated, ranges } => class_terminal(*negated, ranges),
        Item::Any => "/(?s:.)/".to_string(),
        Item::Rule(r) => names[r.as_str()].clone(),
        Item::Group(alts) => format!("({})", lark_alts(alts, names, eog)),
        Item::Token(tok) => tok.clone(),
        Item::NotToken(id) => {
            let ids: Vec<String> = std::iter::once(id).chain(eog).map(u32::to_string).collect();
            format!("<[^{}]>", ids.join(","))
        }
    };
    match (t.min, t.max) {
        (1, Some(1)) => item,
        (0, None) => format!("{item}*"),
        (1, None) => format!("{item}+"),
        (0, Some(1)) => format!("{item}?"),
        (m, None) => format!("{item}{{{m},}}"),
        (m, Some(n)) if m == n => format!("{item}{{{m}}}"),
        (m, Some(n)) => format!("{item}{{{m},{n}}}"),
    }
}

fn char_terminal(c: char) -> String {
    format!("/\\x{{{:X}}}/", u32::from(c))
}

fn class_terminal(negated: bool, ranges: &[(char, char)]) -> String {
    let mut body = String::new();
    for &(lo, hi) in ranges.iter().filter(|(lo, hi)| lo <= hi) {
        let _ = write!(body, "\\x{{{:X}}}", u32::from(lo));
        if lo != hi {
            let _ = write!(body, "-\\x{{{:X}}}", u32::from(hi));
        }
    }
    match (negated, body.is_empty()) {
        // An empty class matches nothing; its negation, anything.
        (false, true) => "/[^\\x{0}-\\x{10FFFF}]/".to_string(),
        (true, true) => "/(?s:.)/".to_string(),
        (false, false) => format!("/[{body}]/"),
        (true, false) => format!("/[^{body}]/"),
    }
}

/// A recursive-descent parser over the source's characters, with llama.cpp's whitespace rules.
struct Parser<'a> {
    src: &'a str,
    chars: Vec<(usize, char)>,
    pos: usize,
}

type PResult<T> = Result<T, ConstrainError>;

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Self {
        Self { src, chars: src.char_indices().collect(), pos: 0 }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).map(|&(_, c)| c)
    }

    fn peek_at(&self, k: usize) -> Option<char> {
        self.chars.get(self.pos + k).map(|&(_, c)| c)
    }

    /// An error at the current position, with its line and column.
    fn err(&self, msg: &str) -> ConstrainError {
        let byte = self.chars.get(self.pos).map_or(self.src.len(), |&(b, _)| b);
        let before = &self.src[..byte];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        gbnf_err(format!("line {line}, column {col}: {msg}"))
    }

    /// Skips spaces, tabs and comments, and newlines when `newline_ok`.
    fn space(&mut self, newline_ok: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newline_ok => self.pos += 1,
                '#' => {
                    while self.peek().is_some_and(|c| c != '\r' && c != '\n') {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn is_word(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '-'
    }

    fn name(&mut self) -> PResult<String> {
        let start = self.pos;
        while self.peek().is_some_and(Self::is_word) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err("expected a rule name"));
        }
        Ok(self.chars[start..self.pos].iter().map(|&(_, c)| c).collect())
    }

    fn grammar(mut self) -> PResult<Grammar> {
        let mut g = Grammar::default();
        self.space(true);
        while self.peek().is_some() {
            let name = self.name()?;
            self.space(false);
            if !(self.peek() == Some(':') && self.peek_at(1) == Some(':') && self.peek_at(2) == Some('=')) {
                return Err(self.err("expected `::=`"));
            }
            self.pos += 3;
            self.space(true);
            let alts = self.alternates(false)?;
            match self.peek() {
                None => {}
                Some('\r') | Some('\n') => self.pos += 1,
                Some(_) => return Err(self.err("expected the end of the rule (a newline)")),
            }
            self.space(true);
            // A later definition replaces an earlier one, as in llama.cpp.
            match g.rules.iter_mut().find(|(n, _)| *n == name) {
                Some(rule) => rule.1 = alts,
                None => g.rules.push((name, alts)),
            }
        }
        Ok(g)
    }

    fn alternates(&mut self, nested: bool) -> PResult<Vec<Vec<Term>>> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(alts)
    }

    fn sequence(&mut self, nested: bool) -> PResult<Vec<Term>> {
        let mut seq: Vec<Term> = Vec::new();
        while let Some(c) = self.peek() {
            let item = match c {
                '"' => self.literal()?,
                '[' => self.class()?,
                '.' => {
                    self.pos += 1;
                    Item::Any
                }
                '(' => {
                    self.pos += 1;
                    self.space(true);
                    let alts = self.alternates(true)?;
                    if self.peek() != Some(')') {
                        return Err(self.err("expected `)`"));
                    }
                    self.pos += 1;
                    Item::Group(alts)
                }
                '<' => self.token(false)?,
                '!' => {
                    self.pos += 1;
                    if self.peek() != Some('<') {
                        return Err(self.err("expected `<` after `!`"));
                    }
                    self.token(true)?
                }
                '*' | '+' | '?' | '{' => {
                    let (min, max) = self.repetition(nested)?;
                    let Some(last) = seq.last_mut() else {
                        return Err(self.err("a repetition needs a preceding item"));
                    };
                    *last = repeat(last.clone(), min, max);
                    self.space(nested);
                    continue;
                }
                c if Self::is_word(c) => Item::Rule(self.name()?),
                _ => break,
            };
            seq.push(Term { item, min: 1, max: Some(1) });
            self.space(nested);
        }
        Ok(seq)
    }

    fn literal(&mut self) -> PResult<Item> {
        self.pos += 1;
        let mut chars = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.err("unterminated literal")),
                Some('"') => {
                    self.pos += 1;
                    return Ok(Item::Literal(chars));
                }
                Some(_) => chars.push(self.char()?),
            }
        }
    }

    fn class(&mut self) -> PResult<Item> {
        self.pos += 1;
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.err("unterminated character class")),
                Some(']') => {
                    self.pos += 1;
                    return Ok(Item::Class { negated, ranges });
                }
                Some(_) => {
                    let lo = self.char()?;
                    let hi = if self.peek() == Some('-') && self.peek_at(1).is_some_and(|c| c != ']') {
                        self.pos += 1;
                        self.char()?
                    } else {
                        lo
                    };
                    ranges.push((lo, hi));
                }
            }
        }
    }

    /// One character of a literal or class, escapes decoded.
    fn char(&mut self) -> PResult<char> {
        let Some(c) = self.peek() else { return Err(self.err("unexpected end of input")) };
        self.pos += 1;
        if c != '\\' {
            return Ok(c);
        }
        let Some(e) = self.peek() else { return Err(self.err("unexpected end of input")) };
        self.pos += 1;
        let hex = |p: &mut Self, n: usize| -> PResult<char> {
            let digits: String = (0..n).filter_map(|k| p.peek_at(k)).collect();
            if digits.len() != n || !digits.chars().all(|d| d.is_ascii_hexdigit()) {
                return Err(p.err(&format!("expected {n} hex digits")));
            }
            p.pos += n;
            let v = u32::from_str_radix(&digits, 16).map_err(|_| p.err("bad hex escape"))?;
            char::from_u32(v).ok_or_else(|| p.err(&format!("U+{v:X} is not a character")))
        };
        match e {
            'x' => hex(self, 2),
            'u' => hex(self, 4),
            'U' => hex(self, 8),
            't' => Ok('\t'),
            'r' => Ok('\r'),
            'n' => Ok('\n'),
            '\\' | '"' | '[' | ']' | '-' => Ok(e),
            _ => {
                self.pos -= 1;
                Err(self.err(&format!("unknown escape `\\{e}`")))
            }
        }
    }

    /// A token reference after an optional `!`: `<[id]>` (a token id) or `<name>` (a special
    /// token's text), as llguidance's `<[id]>`, `<[^id]>` (any token but `id`) or `<name>`.
    fn token(&mut self, inverse: bool) -> PResult<Item> {
        let start = self.pos;
        self.pos += 1;
        if self.peek() == Some('[') {
            self.pos += 1;
            let id = self.int()?;
            let Ok(id) = u32::try_from(id) else {
                return Err(self.err(&format!("token id {id} is too large")));
            };
            if self.peek() != Some(']') || self.peek_at(1) != Some('>') {
                return Err(self.err("expected `]>` after a token id"));
            }
            self.pos += 2;
            return Ok(if inverse { Item::NotToken(id) } else { Item::Token(format!("<[{id}]>")) });
        }
        while self.peek().is_some_and(|c| c != '>') {
            self.pos += 1;
        }
        if self.peek().is_none() {
            self.pos = start;
            return Err(self.err("unterminated token reference `<…>`"));
        }
        self.pos += 1;
        let text: String = self.chars[start..self.pos].iter().map(|&(_, c)| c).collect();
        let inner = &text[1..text.len() - 1];
        if inner.is_empty() || inner.chars().any(|c| c.is_whitespace() || c == '<') {
            self.pos = start;
            return Err(self.err(&format!("{text} is not a special token's name")));
        }
        if inverse {
            self.pos = start;
            return Err(
                self.err(&format!("an inverse token reference needs a token id: `!<[id]>`, not `!{text}`"))
            );
        }
        Ok(Item::Token(text))
    }

    fn int(&mut self) -> PResult<u64> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        let digits: String = self.chars[start..self.pos].iter().map(|&(_, c)| c).collect();
        if digits.is_empty() {
            return Err(self.err("expected an integer"));
        }
        digits.parse().map_err(|_| self.err("integer too large"))
    }

    /// `*`, `+`, `?` or `{m}`, `{m,}`, `{m,n}`: the bounds.
    fn repetition(&mut self, nested: bool) -> PResult<(u64, Option<u64>)> {
        let c = self.peek();
        self.pos += 1;
        let (min, max) = match c {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            _ => {
                self.space(nested);
                let min = self.int()?;
                self.space(nested);
                let max = match self.peek() {
                    Some('}') => Some(min),
                    Some(',') => {
                        self.pos += 1;
                        self.space(nested);
                        let max = if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                            Some(self.int()?)
                        } else {
                            None
                        };
                        self.space(nested);
                        if self.peek() != Some('}') {
                            return Err(self.err("expected `}`"));
                        }
                        max
                    }
                    _ => return Err(self.err("expected `,` or `}`")),
                };
                self.pos += 1;
                if min > MAX_REPETITION {
                    return Err(
                        self.err(&format!("a repetition of {min} is over the limit of {MAX_REPETITION}"))
                    );
                }
                (min, max.filter(|&m| m <= MAX_REPETITION))
            }
        };
        if max.is_some_and(|m| m < min) {
            return Err(self.err(&format!("a repetition of at least {min} and at most {max:?}")));
        }
        Ok((min, max))
    }
}

/// `t` repeated `min..=max` times, composed with the repetition it already has.
fn repeat(t: Term, min: u64, max: Option<u64>) -> Term {
    if t.min == 1 && t.max == Some(1) {
        return Term { item: t.item, min, max };
    }
    // An already repeated item (`x*?`, `x{2}{3}`) repeats as a group.
    Term { item: Item::Group(vec![vec![t]]), min, max }
}

#[cfg(test)]
mod tests;
