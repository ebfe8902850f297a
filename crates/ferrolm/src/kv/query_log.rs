//! The last few queries of a sequence, per layer: SnapKV's observation window.
//!
//! SnapKV scores cached tokens by how much the most recent queries attend to them. Queries are
//! not cached (only keys and values are), so a sequence that uses SnapKV keeps its last `window`
//! rotated queries of every layer here as the forward pass computes them. The memory is small:
//! `window * n_layer * q_dim` floats (2.2 MB for SmolLM2 with a window of 32).

/// A ring of the last `window` queries of every layer, indexed by logical position.
#[derive(Debug, Clone)]
pub struct QueryLog {
    window: usize,
    n_layer: usize,
    q_dim: usize,
    /// Logical position held by each ring entry (`u32::MAX`: empty). `[window]`
    pos: Vec<u32>,
    /// Rotated queries. `[window, n_layer, q_dim]`
    data: Vec<f32>,
}

impl QueryLog {
    /// An empty log keeping `window` positions of `n_layer` layers of `q_dim`-wide queries.
    pub fn new(window: usize, n_layer: usize, q_dim: usize) -> Self {
        let window = window.max(1);
        Self {
            window,
            n_layer,
            q_dim,
            pos: vec![u32::MAX; window],
            data: vec![0.0; window * n_layer * q_dim],
        }
    }

    /// How many positions the log keeps.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Records the query of the token at logical position `pos` in `layer`. `q: [q_dim]`
    pub fn record(&mut self, layer: usize, pos: u32, q: &[f32]) {
        if layer >= self.n_layer || q.len() != self.q_dim {
            return;
        }
        let e = pos as usize % self.window;
        self.pos[e] = pos;
        let start = (e * self.n_layer + layer) * self.q_dim;
        self.data[start..start + self.q_dim].copy_from_slice(q);
    }

    /// Forgets the queries at logical position `pos` and later (the sequence was rewound).
    pub fn forget_from(&mut self, pos: u32) {
        for p in &mut self.pos {
            if *p != u32::MAX && *p >= pos {
                *p = u32::MAX;
            }
        }
    }

    /// The recorded queries of `layer`, as (position, `[q_dim]` query), for the positions within
    /// `window` of the latest one, oldest first.
    pub fn queries(&self, layer: usize) -> impl Iterator<Item = (u32, &[f32])> + '_ {
        let last = self.pos.iter().copied().filter(|&p| p != u32::MAX).max();
        let mut order: Vec<usize> = (0..self.window)
            .filter(|&e| {
                let p = self.pos[e];
                last.is_some_and(|l| p != u32::MAX && (l - p) < self.window as u32)
            })
            .collect();
        order.sort_by_key(|&e| self.pos[e]);
        order.into_iter().map(move |e| {
            let start = (e * self.n_layer + layer) * self.q_dim;
            (self.pos[e], &self.data[start..start + self.q_dim])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_window_in_order() {
        let mut log = QueryLog::new(3, 2, 2);
        for p in 0..5u32 {
            for l in 0..2 {
                log.record(l, p, &[p as f32, l as f32]);
            }
        }
        let got: Vec<(u32, Vec<f32>)> = log.queries(1).map(|(p, q)| (p, q.to_vec())).collect();
        assert_eq!(got, vec![(2, vec![2.0, 1.0]), (3, vec![3.0, 1.0]), (4, vec![4.0, 1.0])]);
        log.forget_from(4);
        let got: Vec<u32> = log.queries(0).map(|(p, _)| p).collect();
        assert_eq!(got, vec![2, 3]);
    }
}
