//! Logit bias: fixed amounts added to chosen tokens' logits before any other step.

use super::candidates::Candidates;

/// Adds each bias to its token (`-inf` bans it; several biases for one token add up). Tokens
/// that are not among the candidates are ignored.
pub(crate) fn apply(c: &mut Candidates, biases: &[(u32, f32)]) {
    if biases.is_empty() {
        return;
    }
    for &(tok, b) in biases {
        match c.data.get_mut(tok as usize) {
            Some(x) if x.id == tok => x.logit += b,
            // Indexed by id and not there: the token is out of range.
            _ if c.identity => {}
            _ => {
                if let Some(x) = c.data.iter_mut().find(|x| x.id == tok) {
                    x.logit += b;
                }
            }
        }
    }
    c.logits_changed();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_biases_by_index_and_by_search() {
        let mut c = Candidates::default();
        c.fill(&[0.0, 1.0, 2.0]);
        apply(&mut c, &[(1, 0.5), (2, f32::NEG_INFINITY), (1, 0.25), (7, 3.0)]);
        assert_eq!(c.data.iter().map(|x| x.logit).collect::<Vec<_>>(), vec![0.0, 1.75, f32::NEG_INFINITY]);

        c.fill(&[0.0, 1.0, 2.0]);
        c.sort();
        apply(&mut c, &[(0, 5.0), (7, 3.0)]);
        assert_eq!(c.data[2].id, 0);
        assert_eq!(c.data[2].logit, 5.0);
        assert!(!c.sorted);
    }
}
