//! SentencePiece-style BPE (llama.cpp's `llm_tokenizer_spm`): start from single characters, merge
//! the adjacent pair whose concatenation is the highest-scoring vocabulary entry until no pair is
//! in the vocabulary, then emit tokens, falling back to `<0xXX>` byte tokens.

use super::TokenizerError;
use super::merge::{Score, merge};
use super::vocab::Vocab;

/// Tokenizes one fragment (already space-escaped) and appends the ids to `out`.
pub(crate) fn encode(vocab: &Vocab, text: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
    for piece in merge(text, |_, _, joined| vocab.id_of(joined).map(|id| Score(vocab.score(id)))) {
        match vocab.id_of(piece) {
            Some(id) => out.push(id),
            None => {
                for &byte in piece.as_bytes() {
                    out.push(vocab.byte_token(byte)?);
                }
            }
        }
    }
    Ok(())
}
