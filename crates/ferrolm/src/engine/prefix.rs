//! The shared prefix cache: values (the KV cache of finished sequences) keyed by token ids.
//!
//! A new request asks for the stored entry that shares the longest prefix with its prompt, among
//! all entries, and reuses that many tokens of its KV. The keys live in a compressed radix tree:
//! each edge is labelled with a run of tokens and children are keyed by their first token, so a
//! lookup costs O(prompt length) whatever the number of entries.
//!
//! No stored key is a prefix of another (an insert removes the entries it extends and drops a key
//! that an entry already extends), so the entries are exactly the tree's leaves. Every node keeps
//! the most recently used entry of its subtree; since all leaves below the point where a prompt
//! stops matching share the same match length, that entry is the answer. Memory is bounded by the
//! stored tokens: inner nodes other than the root have at least two children, so there are at most
//! `2 * len() + 1` nodes, and edge labels hold at most `tokens()` tokens in all.
//!
//! Eviction is least-recently-used under a byte budget: each use takes a new value of a monotonic
//! clock, and an ordered map from clock value to entry finds the oldest entry in O(log n).

use std::collections::{BTreeMap, HashMap};

/// The root's index in the node slab. The root has an empty label and never holds an entry.
const ROOT: usize = 0;

/// A node of the radix tree.
#[derive(Default)]
struct Node {
    /// Tokens on the edge from the parent to this node; empty only for the root.
    label: Vec<u32>,
    /// Parent node (the root points at itself).
    parent: usize,
    /// Children keyed by the first token of their label.
    children: HashMap<u32, usize>,
    /// The entry whose tokens end here; set exactly on leaves.
    entry: Option<usize>,
    /// `(last use, entry id)` of the most recently used entry in this subtree (not kept up to date
    /// on the root, where it is never read).
    mru: (u64, usize),
}

/// A stored value.
struct Entry<V> {
    value: V,
    /// The leaf where its tokens end.
    node: usize,
    tokens: usize,
    bytes: usize,
    /// Clock value of its last use; its key in the LRU map.
    last_used: u64,
}

/// A prefix cache over token sequences with LRU eviction under a byte budget.
pub struct PrefixCache<V> {
    budget: usize,
    /// Node slab; `nodes[ROOT]` is the root. Freed slots are reset and listed in `free_nodes`.
    nodes: Vec<Node>,
    free_nodes: Vec<usize>,
    /// Entry slab; freed slots are `None` and listed in `free_entries`.
    entries: Vec<Option<Entry<V>>>,
    free_entries: Vec<usize>,
    /// Clock value of last use -> entry id, oldest first.
    lru: BTreeMap<u64, usize>,
    clock: u64,
    bytes: usize,
    tokens: usize,
}

/// Length of the common prefix of `a` and `b`.
fn common_len(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl<V> PrefixCache<V> {
    /// An empty cache that keeps at most `budget_bytes` bytes (the sum of its entries' sizes).
    pub fn new(budget_bytes: usize) -> Self {
        Self {
            budget: budget_bytes,
            nodes: vec![Node::default()],
            free_nodes: Vec::new(),
            entries: Vec::new(),
            free_entries: Vec::new(),
            lru: BTreeMap::new(),
            clock: 0,
            bytes: 0,
            tokens: 0,
        }
    }

    /// Stores `value`, which holds the KV of the first `tokens.len()` tokens; `bytes` is its size.
    ///
    /// - empty `tokens`, or an entry larger than the budget, is not stored (nothing changes);
    /// - an existing entry whose tokens are a prefix of (or equal to) `tokens` is removed, since
    ///   the new one covers it;
    /// - if `tokens` is a strict prefix of existing entries, `value` is dropped and the most
    ///   recently used of those entries is marked used;
    /// - then least-recently-used entries are evicted until the total fits the budget.
    ///
    /// Returns whether `value` was stored.
    pub fn insert(&mut self, tokens: Vec<u32>, value: V, bytes: usize) -> bool {
        if tokens.is_empty() || bytes > self.budget {
            return false;
        }
        let mut node = ROOT;
        let mut i = 0;
        let leaf = loop {
            if let Some(old) = self.nodes[node].entry {
                // A leaf whose entry is a prefix of `tokens`: the new entry replaces it here.
                drop(self.take_entry(old));
                self.nodes[node].label.extend_from_slice(&tokens[i..]);
                break node;
            }
            if i == tokens.len() {
                // An inner node (not the root: `tokens` is not empty): entries below extend `tokens`.
                self.touch(self.nodes[node].mru.1);
                return false;
            }
            let Some(&child) = self.nodes[node].children.get(&tokens[i]) else {
                let leaf = self.alloc_node(tokens[i..].to_vec(), node);
                self.nodes[node].children.insert(tokens[i], leaf);
                break leaf;
            };
            let k = common_len(&self.nodes[child].label, &tokens[i..]);
            if k == self.nodes[child].label.len() {
                node = child;
                i += k;
            } else if i + k == tokens.len() {
                // `tokens` ends inside the edge: every entry below `child` extends it.
                self.touch(self.nodes[child].mru.1);
                return false;
            } else {
                let mid = self.split(child, k);
                let leaf = self.alloc_node(tokens[i + k..].to_vec(), mid);
                self.nodes[mid].children.insert(tokens[i + k], leaf);
                break leaf;
            }
        };
        let entry = Entry { value, node: leaf, tokens: tokens.len(), bytes, last_used: 0 };
        let id = match self.free_entries.pop() {
            Some(id) => {
                self.entries[id] = Some(entry);
                id
            }
            None => {
                self.entries.push(Some(entry));
                self.entries.len() - 1
            }
        };
        self.nodes[leaf].entry = Some(id);
        self.bytes += bytes;
        self.tokens += tokens.len();
        self.touch(id);
        // The new entry is the most recent and fits alone, so it is never the one evicted.
        while self.bytes > self.budget && self.evict_oldest() {}
        true
    }

    /// The entry sharing the longest prefix with `prompt`, and that length (at least 1, at most
    /// `prompt.len()`); among entries with the same match length, the most recently used. The
    /// entry is marked used. `None` when no entry starts with `prompt[0]`.
    pub fn lookup(&mut self, prompt: &[u32]) -> Option<(&V, usize)> {
        let (node, len) = self.find(prompt);
        if len == 0 {
            return None;
        }
        let id = self.nodes[node].mru.1;
        self.touch(id);
        self.entries[id].as_ref().map(|e| (&e.value, len))
    }

    /// The length [`lookup`](Self::lookup) would return (0 for no match), without marking any
    /// entry used.
    pub fn peek_len(&self, prompt: &[u32]) -> usize {
        self.find(prompt).1
    }

    /// Number of stored entries.
    pub fn len(&self) -> usize {
        self.lru.len()
    }

    /// Whether no entry is stored.
    pub fn is_empty(&self) -> bool {
        self.lru.is_empty()
    }

    /// Sum of the stored entries' sizes in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Sum of the stored entries' token counts.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// The byte budget given to [`new`](Self::new).
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Removes every entry (dropping the values) and frees the tree.
    pub fn clear(&mut self) {
        *self = Self::new(self.budget);
    }

    /// The node below which the best matches of `prompt` lie, and the match length.
    fn find(&self, prompt: &[u32]) -> (usize, usize) {
        let mut node = ROOT;
        let mut i = 0;
        while let Some(&child) = prompt.get(i).and_then(|t| self.nodes[node].children.get(t)) {
            let label = &self.nodes[child].label;
            let k = common_len(label, &prompt[i..]);
            node = child;
            i += k;
            if k < label.len() {
                break;
            }
        }
        (node, i)
    }

    /// Marks entry `id` as used now.
    fn touch(&mut self, id: usize) {
        self.clock += 1;
        let Some(entry) = self.entries[id].as_mut() else { return };
        self.lru.remove(&entry.last_used);
        entry.last_used = self.clock;
        self.lru.insert(self.clock, id);
        // The clock only grows, so this entry is now the most recent of every subtree holding it.
        let mut n = entry.node;
        loop {
            self.nodes[n].mru = (self.clock, id);
            if n == ROOT {
                break;
            }
            n = self.nodes[n].parent;
        }
    }

    /// Takes entry `id` out of the slab, the LRU map and the totals, leaving its leaf without an
    /// entry (the caller reuses or prunes the leaf).
    fn take_entry(&mut self, id: usize) -> Option<Entry<V>> {
        let entry = self.entries[id].take()?;
        self.free_entries.push(id);
        self.lru.remove(&entry.last_used);
        self.bytes -= entry.bytes;
        self.tokens -= entry.tokens;
        self.nodes[entry.node].entry = None;
        Some(entry)
    }

    /// Removes the entry stored under exactly `tokens` and returns its value (`None`, and nothing
    /// changes, when no entry has exactly these tokens).
    pub fn remove(&mut self, tokens: &[u32]) -> Option<V> {
        let (node, len) = self.find(tokens);
        if len != tokens.len() || len == 0 {
            return None;
        }
        let id = self.nodes[node].entry?;
        let value = self.remove_entry(id)?;
        Some(value)
    }

    /// Removes the least recently used entry and prunes the tree. Returns false when the cache
    /// is empty.
    fn evict_oldest(&mut self) -> bool {
        let Some((_, &id)) = self.lru.first_key_value() else { return false };
        self.remove_entry(id).is_some()
    }

    /// Removes entry `id` and prunes the tree: its leaf goes, a parent left with one child is
    /// merged into that child, and the most recent entry of every node above is recomputed
    /// from its children. (The root's `mru` is not kept: a match of length 0 is no match.)
    fn remove_entry(&mut self, id: usize) -> Option<V> {
        let entry = self.take_entry(id)?;
        let leaf = entry.node;
        let n = self.nodes[leaf].parent;
        let first = self.nodes[leaf].label[0];
        self.nodes[n].children.remove(&first);
        self.free_node(leaf);
        let mut up = n;
        if n != ROOT && self.nodes[n].children.len() == 1 {
            let only = *self.nodes[n].children.values().next()?;
            let parent = self.nodes[n].parent;
            let mut label = std::mem::take(&mut self.nodes[n].label);
            label.extend_from_slice(&self.nodes[only].label);
            self.nodes[parent].children.insert(label[0], only);
            self.nodes[only].label = label;
            self.nodes[only].parent = parent;
            self.free_node(n);
            up = parent;
        }
        while up != ROOT {
            let best = self.nodes[up].children.values().map(|&c| self.nodes[c].mru).max();
            if let Some(best) = best {
                self.nodes[up].mru = best;
            }
            up = self.nodes[up].parent;
        }
        Some(entry.value)
    }

    /// Splits the edge into `child` after `k` tokens (`0 < k < label length`); returns the new
    /// node in the middle.
    fn split(&mut self, child: usize, k: usize) -> usize {
        let parent = self.nodes[child].parent;
        let tail = self.nodes[child].label.split_off(k);
        let head = std::mem::replace(&mut self.nodes[child].label, tail);
        let first = head[0];
        let mid = self.alloc_node(head, parent);
        self.nodes[mid].mru = self.nodes[child].mru;
        let child_first = self.nodes[child].label[0];
        self.nodes[mid].children.insert(child_first, child);
        self.nodes[child].parent = mid;
        self.nodes[parent].children.insert(first, mid);
        mid
    }

    /// A new node with `label` below `parent` (the caller links it into `parent.children`).
    fn alloc_node(&mut self, label: Vec<u32>, parent: usize) -> usize {
        let node = Node { label, parent, ..Node::default() };
        match self.free_nodes.pop() {
            Some(n) => {
                self.nodes[n] = node;
                n
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        }
    }

    /// Returns node `n`'s slot to the free list, releasing its memory.
    fn free_node(&mut self, n: usize) {
        self.nodes[n] = Node::default();
        self.free_nodes.push(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    /// Checks the tree's structure and returns the number of nodes reachable from the root.
    fn check<V>(c: &PrefixCache<V>) -> usize {
        let mut visited = 0;
        let mut label_tokens = 0;
        let mut stack = vec![(ROOT, 0usize)];
        while let Some((n, depth)) = stack.pop() {
            visited += 1;
            let node = &c.nodes[n];
            label_tokens += node.label.len();
            let mut best = None;
            if n != ROOT {
                assert!(!node.label.is_empty());
                assert_eq!(c.nodes[node.parent].children.get(&node.label[0]), Some(&n));
            }
            if let Some(id) = node.entry {
                assert!(node.children.is_empty(), "an entry on an inner node");
                let e = c.entries[id].as_ref().expect("a leaf names a live entry");
                assert_eq!((e.node, e.tokens), (n, depth));
                assert_eq!(c.lru.get(&e.last_used), Some(&id));
                best = Some((e.last_used, id));
            } else {
                assert!(n == ROOT || node.children.len() >= 2, "an unmerged or empty node");
            }
            for &ch in node.children.values() {
                assert_eq!(c.nodes[ch].parent, n);
                best = best.max(Some(c.nodes[ch].mru));
                stack.push((ch, depth + c.nodes[ch].label.len()));
            }
            if n != ROOT {
                assert_eq!(Some(node.mru), best, "stale mru");
            }
        }
        assert_eq!(visited, c.nodes.len() - c.free_nodes.len(), "leaked nodes");
        assert!(visited <= 2 * c.len() + 1 && visited <= c.tokens() + 1);
        assert!(label_tokens <= c.tokens());
        assert_eq!(c.len(), c.entries.iter().flatten().count());
        visited
    }

    fn get(c: &mut PrefixCache<u32>, prompt: &[u32]) -> Option<(u32, usize)> {
        c.lookup(prompt).map(|(v, n)| (*v, n))
    }

    #[test]
    fn remove_takes_exactly_one_entry_and_keeps_the_tree_valid() {
        let mut c = PrefixCache::new(100);
        assert!(c.insert(vec![1, 2, 3], 1, 10));
        assert!(c.insert(vec![1, 2, 4], 2, 10));
        assert!(c.insert(vec![1, 5], 3, 10));
        assert_eq!(get(&mut c, &[1, 2, 4]), Some((2, 3)));
        assert_eq!(c.remove(&[1, 2]), None);
        assert_eq!(c.remove(&[1, 2, 4, 6]), None);
        assert_eq!(c.remove(&[1, 2, 4]), Some(2));
        check(&c);
        assert_eq!((c.len(), c.bytes(), c.tokens()), (2, 20, 5));
        // The most recent entry under [1, 2] is now [1, 2, 3].
        assert_eq!(get(&mut c, &[1, 2, 9]), Some((1, 2)));
        assert_eq!(c.remove(&[1, 5]), Some(3));
        assert_eq!(c.remove(&[1, 2, 3]), Some(1));
        assert!(c.is_empty());
        assert_eq!(check(&c), 1);
    }

    #[test]
    fn empty_and_oversize_are_not_stored() {
        let mut c = PrefixCache::new(100);
        assert!(!c.insert(vec![], 1, 1));
        assert!(c.insert(vec![1, 2], 2, 100));
        assert!(!c.insert(vec![1, 2, 3], 3, 101));
        assert_eq!((c.len(), c.bytes(), c.tokens()), (1, 100, 2));
        assert_eq!(get(&mut c, &[1, 2, 3]), Some((2, 2)));
        assert_eq!(c.peek_len(&[]), 0);
        assert_eq!(get(&mut c, &[]), None);
        assert_eq!(get(&mut c, &[7, 1, 2]), None);
        check(&c);
    }

    #[test]
    fn longer_entry_supersedes_its_prefixes() {
        let mut c = PrefixCache::new(100);
        assert!(c.insert(vec![1, 2], 1, 10));
        assert!(c.insert(vec![1, 2, 3, 4], 2, 20));
        assert_eq!((c.len(), c.bytes(), c.tokens()), (1, 20, 4));
        assert_eq!(get(&mut c, &[1, 2, 9]), Some((2, 2)));
        // Equal tokens: the new value replaces the old one.
        assert!(c.insert(vec![1, 2, 3, 4], 3, 30));
        assert_eq!((c.len(), c.bytes(), c.tokens()), (1, 30, 4));
        assert_eq!(get(&mut c, &[1, 2, 3, 4, 5]), Some((3, 4)));
        assert_eq!(check(&c), 2);
    }

    #[test]
    fn prefix_of_existing_is_dropped_and_touches_it() {
        let mut c = PrefixCache::new(30);
        assert!(c.insert(vec![1, 2, 3], 1, 10));
        assert!(c.insert(vec![5, 6], 2, 10));
        // Ends inside the edge [1, 2, 3], then at an inner node after a split.
        assert!(!c.insert(vec![1, 2], 3, 10));
        assert!(c.insert(vec![1, 2, 4], 4, 5));
        assert!(!c.insert(vec![1, 2], 5, 10));
        assert_eq!((c.len(), c.bytes(), c.tokens()), (3, 25, 8));
        // The touch made entry 4 the most recent among the two extending [1, 2] ...
        assert_eq!(get(&mut c, &[1, 2]), Some((4, 2)));
        // ... and [5, 6] the least recent overall, so it goes first.
        assert!(c.insert(vec![7], 6, 12));
        assert_eq!(c.peek_len(&[5, 6]), 0);
        assert_eq!((c.len(), c.bytes()), (3, 27));
        check(&c);
    }

    #[test]
    fn lru_eviction_under_budget() {
        let mut c = PrefixCache::new(30);
        assert!(c.insert(vec![1], 1, 10));
        assert!(c.insert(vec![2], 2, 10));
        assert!(c.insert(vec![3], 3, 10));
        assert_eq!(get(&mut c, &[1, 9]), Some((1, 1)));
        assert!(c.insert(vec![4], 4, 10)); // evicts 2, the least recently used
        assert_eq!([1, 2, 3, 4].map(|t| c.peek_len(&[t])), [1, 0, 1, 1]);
        assert!(c.insert(vec![5, 5], 5, 25)); // evicts 3, 1 and 4
        assert_eq!((c.len(), c.bytes(), c.tokens()), (1, 25, 2));
        assert_eq!(c.budget(), 30);
        assert_eq!(check(&c), 2);
    }

    #[test]
    fn match_ends_mid_edge_and_ties_go_to_most_recent() {
        let mut c = PrefixCache::new(1000);
        assert!(c.insert(vec![1, 2, 3, 4, 5], 1, 1));
        assert_eq!(get(&mut c, &[1, 2, 9]), Some((1, 2)));
        assert_eq!(get(&mut c, &[1, 2, 3, 4, 5, 6, 7]), Some((1, 5)));
        assert_eq!(get(&mut c, &[1, 2, 3]), Some((1, 3)));
        assert!(c.insert(vec![1, 2, 3, 7], 2, 1));
        assert_eq!(get(&mut c, &[1, 2, 8]), Some((2, 2)));
        assert_eq!(get(&mut c, &[1, 2, 3, 4]), Some((1, 4)));
        assert_eq!(get(&mut c, &[1, 2, 8]), Some((1, 2)));
        assert_eq!(c.peek_len(&[1, 2, 3, 7, 7]), 4);
        assert_eq!(get(&mut c, &[1, 2, 8]), Some((1, 2)), "peek_len must not touch");
        check(&c);
    }

    #[test]
    fn removal_prunes_and_merges_and_drops_values() {
        let v = Rc::new(());
        let mut c = PrefixCache::new(20);
        assert!(c.insert(vec![1, 2, 3], Rc::clone(&v), 10));
        assert!(c.insert(vec![1, 2, 4, 5], Rc::clone(&v), 10));
        assert!(c.insert(vec![1, 9], Rc::clone(&v), 10)); // evicts [1, 2, 3]
        assert_eq!(Rc::strong_count(&v), 3);
        assert_eq!(check(&c), 4); // root, [1], [2, 4, 5], [9]
        assert!(!c.insert(vec![1, 2, 4, 5, 6], Rc::clone(&v), 21));
        assert!(c.insert(vec![1, 2, 4, 5, 6], Rc::clone(&v), 10)); // replaces [1, 2, 4, 5]
        assert_eq!(Rc::strong_count(&v), 3);
        c.clear();
        assert_eq!(Rc::strong_count(&v), 1);
        assert!(c.is_empty() && c.bytes() == 0 && c.tokens() == 0);
        assert_eq!(check(&c), 1);
    }

    /// xorshift64: enough randomness for the tests, with no dependency.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// The brute-force reference: `(tokens, id, bytes, last_used)` for each entry.
    struct Model {
        budget: usize,
        entries: Vec<(Vec<u32>, u32, usize, u64)>,
        clock: u64,
    }

    impl Model {
        fn touch(&mut self, i: usize) {
            self.clock += 1;
            self.entries[i].3 = self.clock;
        }
        /// Index of the most recently used entry among those with the longest match, and that length.
        fn best(&self, prompt: &[u32]) -> Option<(usize, usize)> {
            let matches = self.entries.iter().enumerate().map(|(i, e)| (common_len(&e.0, prompt), e.3, i));
            let (len, _, i) = matches.max()?;
            (len > 0).then_some((i, len))
        }
        fn insert(&mut self, tokens: Vec<u32>, id: u32, bytes: usize) -> bool {
            if tokens.is_empty() || bytes > self.budget {
                return false;
            }
            let extending = self.entries.iter().enumerate().filter(|(_, e)| e.0.len() > tokens.len());
            if let Some((_, i)) =
                extending.filter(|(_, e)| e.0.starts_with(&tokens)).map(|(i, e)| (e.3, i)).max()
            {
                self.touch(i);
                return false;
            }
            self.entries.retain(|e| !tokens.starts_with(&e.0));
            self.entries.push((tokens, id, bytes, 0));
            self.touch(self.entries.len() - 1);
            while self.entries.iter().map(|e| e.2).sum::<usize>() > self.budget {
                let oldest = (0..self.entries.len())
                    .min_by_key(|&i| self.entries[i].3)
                    .expect("over budget, so not empty");
                self.entries.remove(oldest);
            }
            true
        }
    }

    /// A random sequence over `alphabet` tokens, often a variation on one seen before.
    fn sequence(rng: &mut Rng, seen: &[Vec<u32>], alphabet: usize) -> Vec<u32> {
        let mut s = if !seen.is_empty() && rng.below(3) > 0 {
            let base = &seen[rng.below(seen.len())];
            base[..rng.below(base.len() + 1)].to_vec()
        } else {
            Vec::new()
        };
        let extra = if s.is_empty() { rng.below(10) } else { rng.below(5) };
        s.extend((0..extra).map(|_| rng.below(alphabet) as u32));
        s
    }

    #[test]
    fn matches_brute_force_model() {
        for seed in 1..=12u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let alphabet = 2 + (seed as usize / 3 % 3);
            let budget = [40, 100, 400][seed as usize % 3];
            let mut cache = PrefixCache::new(budget);
            let mut model = Model { budget, entries: Vec::new(), clock: 0 };
            let mut seen: Vec<Vec<u32>> = Vec::new();
            let mut max_nodes = 0;
            for op in 0..3000u32 {
                let s = sequence(&mut rng, &seen, alphabet);
                match rng.below(10) {
                    0..=4 => {
                        let spread = if rng.below(20) == 0 { 3 * budget } else { 12 };
                        let bytes = s.len() + rng.below(spread);
                        let stored = cache.insert(s.clone(), op, bytes);
                        assert_eq!(stored, model.insert(s.clone(), op, bytes), "seed {seed} op {op} {s:?}");
                        seen.push(s);
                    }
                    5..=8 => {
                        let want = model.best(&s).map(|(i, len)| {
                            model.touch(i);
                            (model.entries[i].1, len)
                        });
                        assert_eq!(get(&mut cache, &s), want, "seed {seed} op {op} lookup {s:?}");
                    }
                    _ => {
                        let want = model.best(&s).map_or(0, |(_, len)| len);
                        assert_eq!(cache.peek_len(&s), want, "seed {seed} op {op} peek {s:?}");
                    }
                }
                assert_eq!(cache.len(), model.entries.len());
                assert_eq!(cache.bytes(), model.entries.iter().map(|e| e.2).sum::<usize>());
                assert_eq!(cache.tokens(), model.entries.iter().map(|e| e.0.len()).sum::<usize>());
                assert!(cache.bytes() <= budget);
                max_nodes = max_nodes.max(check(&cache));
                if op % 1000 == 999 {
                    seen.clear();
                }
            }
            assert!(max_nodes > budget / 20, "seed {seed}: the tree never grew ({max_nodes} nodes)");
        }
    }
}
