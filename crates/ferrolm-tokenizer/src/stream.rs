//! Streaming detokenization: token pieces can end in the middle of a UTF-8 character (byte-fallback
//! tokens, byte-level BPE); the stream decoder holds such tails back until the character completes.

use super::Tokenizer;

/// Turns a stream of tokens into text without ever emitting half a character.
///
/// Bytes that can never become valid UTF-8 are emitted as U+FFFD as soon as that is certain; an
/// incomplete character at the end stays pending until more bytes arrive or [`StreamDecoder::flush`].
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    /// An empty decoder.
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Adds a token's piece; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        let piece = tokenizer.token_to_piece(id);
        self.push_bytes(&piece)
    }

    /// Adds raw bytes; returns the text that is now complete (possibly empty).
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut consumed = 0;
        loop {
            match std::str::from_utf8(&self.pending[consumed..]) {
                Ok(s) => {
                    out.push_str(s);
                    consumed = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // The prefix is valid UTF-8 by construction.
                    out.push_str(&String::from_utf8_lossy(&self.pending[consumed..consumed + valid]));
                    consumed += valid;
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            consumed += bad;
                        }
                        None => break, // incomplete character at the end: wait for more
                    }
                }
            }
        }
        self.pending.drain(..consumed);
        out
    }

    /// Whether bytes are held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Emits whatever is held back (an incomplete character becomes U+FFFD) and resets.
    pub fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_character_is_held_back() {
        let mut d = StreamDecoder::new();
        // "é" = C3 A9, "€" = E2 82 AC
        assert_eq!(d.push_bytes(b"a\xC3"), "a");
        assert!(d.has_pending());
        assert_eq!(d.push_bytes(b"\xA9\xE2"), "é");
        assert_eq!(d.push_bytes(b"\x82"), "");
        assert_eq!(d.push_bytes(b"\xAC!"), "€!");
        assert!(!d.has_pending());
        assert_eq!(d.flush(), "");
    }

    #[test]
    fn invalid_bytes_become_replacement() {
        let mut d = StreamDecoder::new();
        assert_eq!(d.push_bytes(b"\xFFx"), "\u{FFFD}x");
        assert_eq!(d.push_bytes(b"\xF0\x9F"), "");
        assert_eq!(d.flush(), "\u{FFFD}");
        assert_eq!(d.flush(), "");
    }
}
