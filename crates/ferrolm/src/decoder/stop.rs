//! Stop strings across token boundaries: text that could still turn into a stop string is held
//! back, so a partial stop string is never shown and a complete one is never shown at all.

/// Watches generated text for stop strings.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not yet released: a suffix that is a prefix of some stop string.
    held: String,
}

/// What [`StopMatcher::push`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopCheck {
    /// Text that is safe to show now.
    pub text: String,
    /// The stop string found, if any (generation ends; nothing after it is shown).
    pub hit: Option<String>,
}

impl StopMatcher {
    /// A matcher for these stop strings (empty strings are ignored).
    pub fn new(stops: &[String]) -> Self {
        Self { stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(), held: String::new() }
    }

    /// Adds generated text; returns what can be shown and whether a stop string completed.
    pub fn push(&mut self, text: &str) -> StopCheck {
        self.held.push_str(text);
        if self.stops.is_empty() {
            return StopCheck { text: std::mem::take(&mut self.held), hit: None };
        }
        // The earliest stop string wins (ties: the longest, so "\n\n" beats "\n" at one spot).
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, std::cmp::Reverse(s.len()), s)))
            .min();
        if let Some((at, _, s)) = first {
            let hit = s.clone();
            let text = self.held[..at].to_string();
            self.held.clear();
            return StopCheck { text, hit: Some(hit) };
        }
        // Hold back the longest suffix that is the start of some stop string.
        let keep_from = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.held[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.held.len());
        let text = self.held[..keep_from].to_string();
        self.held.drain(..keep_from);
        StopCheck { text, hit: None }
    }

    /// Releases the held-back text (generation ended for another reason).
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(stops: &[&str]) -> StopMatcher {
        StopMatcher::new(&stops.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn no_stops_passes_through() {
        let mut s = m(&[]);
        assert_eq!(s.push("abc"), StopCheck { text: "abc".into(), hit: None });
    }

    #[test]
    fn stop_split_across_pieces_is_never_shown() {
        let mut s = m(&["###"]);
        assert_eq!(s.push("Hello #").text, "Hello ");
        assert_eq!(s.push("#").text, "");
        let end = s.push("# tail");
        assert_eq!(end, StopCheck { text: String::new(), hit: Some("###".into()) });
    }

    #[test]
    fn false_start_is_released() {
        let mut s = m(&["STOP"]);
        assert_eq!(s.push("ST").text, "");
        assert_eq!(s.push("ART").text, "START");
        assert_eq!(s.push("S").text, "");
        assert_eq!(s.flush(), "S");
    }

    #[test]
    fn text_before_the_stop_in_the_same_piece_is_kept() {
        let mut s = m(&["\n\n", "User:"]);
        let r = s.push("ok. User: hi");
        assert_eq!(r, StopCheck { text: "ok. ".into(), hit: Some("User:".into()) });
    }

    #[test]
    fn earliest_stop_wins_and_multibyte_text_is_safe() {
        let mut s = m(&["é!", "b"]);
        assert_eq!(s.push("aé").text, "a");
        let r = s.push("!b");
        assert_eq!(r, StopCheck { text: "a".chars().skip(1).collect(), hit: Some("é!".into()) });
    }
}
