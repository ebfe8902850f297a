//! The token environment llguidance matches grammars against: one token trie per tokenizer.

use std::sync::Arc;

use llguidance::ParserFactory;
use llguidance::api::ParserLimits;
use llguidance::earley::SlicedBiasComputer;
use llguidance::toktrie::{InferenceCapabilities, TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use super::ConstrainError;
use crate::tokenizer::{TokenType, Tokenizer};

/// Token environment of one tokenizer: built once per model (it walks the vocabulary), shared by
/// all constraints.
///
/// Every token is entered in a byte trie under the bytes it stands for in text. Control and
/// unknown tokens are entered as special tokens (`0xFF` followed by their text), so a grammar never
/// produces them as text; a Lark grammar can still name them (`<|im_end|>`). Unused and undefined
/// tokens are never allowed. All the tokenizer's end-of-generation tokens end a grammar.
pub struct TokenEnv {
    factory: ParserFactory,
    n_vocab: usize,
    eog: Vec<u32>,
    canonical: bool,
}

impl std::fmt::Debug for TokenEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEnv").field("n_vocab", &self.n_vocab).field("eog", &self.eog).finish()
    }
}

/// llguidance's view of our tokenizer: the trie plus canonical tokenization of text.
struct LlgEnv {
    trie: TokTrie,
    tokenizer: Tokenizer,
    /// Whether encoding a piece of text gives the tokens the model would see (false when the
    /// tokenizer adds a space prefix or otherwise changes the text): only then may llguidance force
    /// tokens from tokenized bytes.
    canonical: bool,
}

impl TokenizerEnv for LlgEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        if !self.canonical {
            return self.trie.greedy_tokenize(s);
        }
        // Valid UTF-8 runs go through the real tokenizer, stray bytes through the trie.
        self.trie.tokenize_with_greedy_fallback(s, |text| {
            self.tokenizer
                .encode(text, false, false)
                .unwrap_or_else(|_| self.trie.greedy_tokenize(text.as_bytes()))
        })
    }

    fn tokenize_is_canonical(&self) -> bool {
        self.canonical
    }
}

/// The bytes of token `id` in the trie (see [`TokenEnv`]).
fn trie_bytes(tokenizer: &Tokenizer, id: u32) -> Vec<u8> {
    match tokenizer.token_type(id) {
        Some(TokenType::Control | TokenType::Unknown) => {
            let mut b = vec![TokTrie::SPECIAL_TOKEN_MARKER];
            b.extend(tokenizer.token_to_piece(id));
            // A special token with no text cannot be named by a grammar; it only matters as EOG.
            if b.len() == 1 { Vec::new() } else { b }
        }
        Some(TokenType::Unused | TokenType::Undefined) | None => Vec::new(),
        Some(TokenType::Normal | TokenType::UserDefined | TokenType::Byte) => {
            let piece = tokenizer.token_to_piece(id);
            // A text token starting with byte 0xFF would read as a special token; 0xFF never
            // starts UTF-8 text, so no grammar over text can use it anyway.
            if piece.first() == Some(&TokTrie::SPECIAL_TOKEN_MARKER) { Vec::new() } else { piece }
        }
    }
}

/// llguidance's limits for every constraint. Fuel bounds the lexer and parser work of compiling
/// (building the lexer, the first mask and one step of lookahead, see
/// [`super::Constraint::new`]) and of each later mask; at llguidance's measured speeds:
///
/// - `initial_lexer_fuel` 1,000,000 (~50k/ms: ~20 ms): building the lexer's regexes, and
///   precomputing large lexemes against the vocabulary.
/// - `step_lexer_fuel` 200,000 (~14k/ms: ~14 ms) and `step_max_items` 50,000 (~20k/ms:
///   ~2.5 ms): one token mask. Compiling computes two.
/// - `max_grammar_size` 200,000 symbols: far more than a [`super::MAX_SPEC_BYTES`] source makes.
/// - `max_lexer_states` 100,000 (1-2 kB each): at most ~200 MB of lexer per request over the
///   whole generation, instead of ~500 MB.
/// - `max_items_in_row` 2,000: the grammar's branching factor (llguidance's default).
///
/// What fuel does not bound (parsing the source, long literals) the source's size
/// ([`super::MAX_SPEC_BYTES`]) and repetition counts ([`super::MAX_REPEAT`]) do. Errors do not
/// dump the parser state (it can be huge).
fn parser_limits() -> ParserLimits {
    ParserLimits {
        max_items_in_row: 2_000,
        initial_lexer_fuel: 1_000_000,
        step_lexer_fuel: 200_000,
        step_max_items: 50_000,
        max_lexer_states: 100_000,
        max_grammar_size: 200_000,
        precompute_large_lexemes: true,
        verbose_errors: false,
    }
}

/// Whether encoding text and decoding the tokens gives the text back for a few probes (a
/// tokenizer that adds a space prefix, for instance, does not).
fn round_trips(tokenizer: &Tokenizer) -> bool {
    const PROBES: [&str; 5] = ["a", " a", "{\"name\": \"Ann\"", "\n  x_1 = [1, 2]", "héllo wörld"];
    PROBES.iter().all(|p| tokenizer.encode(p, false, false).is_ok_and(|ids| tokenizer.decode(&ids) == *p))
}

impl TokenEnv {
    /// Builds the token trie of `tokenizer` and llguidance's parser factory for it.
    ///
    /// Fails when the tokenizer has no end-of-generation token (a grammar could never end).
    pub fn new(tokenizer: &Tokenizer) -> crate::Result<Arc<TokenEnv>> {
        let n_vocab = tokenizer.n_vocab();
        let mut eog: Vec<u32> = tokenizer.eog_ids().filter(|&id| (id as usize) < n_vocab).collect();
        if eog.is_empty() {
            eog.extend(tokenizer.eos().filter(|&id| (id as usize) < n_vocab));
        }
        let Some(&first_eog) = eog.first() else {
            return Err(ConstrainError::NoEndOfGeneration.into());
        };
        let n_vocab_u32 = u32::try_from(n_vocab)
            .map_err(|_| crate::Error::Config(format!("vocabulary of {n_vocab} tokens is too large")))?;
        let words: Vec<Vec<u8>> = (0..n_vocab_u32).map(|id| trie_bytes(tokenizer, id)).collect();
        let info = TokRxInfo {
            vocab_size: n_vocab_u32,
            tok_eos: first_eog,
            tok_bos: tokenizer.bos(),
            tok_pad: None,
            tok_unk: None,
            tok_end_of_turn: None,
        };
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eog);
        let canonical = round_trips(tokenizer);
        let env = LlgEnv { trie, tokenizer: tokenizer.clone(), canonical };
        let tok_env: TokEnv = Arc::new(env);
        let mut factory = ParserFactory::new(
            &tok_env,
            InferenceCapabilities::default(),
            &SlicedBiasComputer::general_slices(),
        )
        .map_err(|e| ConstrainError::Matcher(format!("building the token environment: {e}")))?;
        factory.quiet();
        *factory.limits_mut() = parser_limits();
        Ok(Arc::new(TokenEnv { factory, n_vocab, eog, canonical }))
    }

    /// Number of tokens of the vocabulary.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The end-of-generation tokens, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Whether the tokenizer encodes text canonically (encoding and decoding round-trip), so that
    /// text the grammar forces is masked down to the tokens the tokenizer would give; otherwise
    /// any tokens spelling the forced text are allowed.
    pub fn canonical_tokenization(&self) -> bool {
        self.canonical
    }

    /// Whether `id` ends generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// A token's text for error messages (special tokens in their `<|…|>` form).
    pub(super) fn token_text(&self, id: u32) -> String {
        self.factory.tok_env().tok_trie().token_dbg(id)
    }

    /// llguidance's parser factory for this vocabulary.
    pub(super) fn factory(&self) -> &ParserFactory {
        &self.factory
    }
}
