//! Time per operator of forward passes: a [`Backend`] that times every call it passes on to
//! another backend, by operator (and, for matrix products, by weight type and role), separately
//! for the prompt and the generation (`ferrolm profile`, `ferrolm generate --profile`).
//!
//! Profiling costs nothing unless it is on: a model runs on a [`ProfiledBackend`] only after
//! [`Placement::profiled`] wrapped its backends, and the forward pass calls the backend through
//! the trait either way. While on, each call takes two clock reads and one uncontended lock.
//!
//! The times are what the host sees: a GPU backend that queues its kernels and waits only when
//! the host reads a buffer back shows its work in the calls that wait (`to_host`, the calls that
//! download a result), not in the calls that queued it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use half::f16;

use super::{AttentionShape, Backend, BackendResult, HostRange, MatmulJob, PassId, Placement};
use crate::batch::BatchEntry;
use crate::kv::{KvCache, SeqCache, SeqId};
use crate::ops::{Activation, RopeParams, RopeStyle, Weight};

/// The part of a generation that a forward pass belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Passes over the prompt.
    Prefill = 0,
    /// Passes over generated tokens.
    Decode = 1,
}

impl Phase {
    /// Both phases, in the order a generation runs them.
    pub const ALL: [Phase; 2] = [Phase::Prefill, Phase::Decode];

    /// `prefill` or `decode`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        }
    }
}

/// An operator of the [`Backend`] trait, as the profile counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// [`Backend::matmul`] and [`Backend::matmul_many`] (one call for several matrices).
    Matmul,
    /// Attention over the KV cache ([`Backend::attention`]).
    Attention,
    /// The eviction policies' attention statistics ([`Backend::attention_mass`]).
    AttentionMass,
    /// [`Backend::rms_norm`] and [`Backend::rms_norm_inplace`].
    RmsNorm,
    /// Rotating queries and keys ([`Backend::rope`]).
    Rope,
    /// A batch's RoPE angle table ([`Backend::rope_cos_sin`]).
    RopeTable,
    /// The gated activation of the feed-forward network ([`Backend::gated_activation`]).
    Activation,
    /// Residual additions ([`Backend::add`]).
    Add,
    /// Bias additions ([`Backend::add_bias`]).
    AddBias,
    /// Element-wise scaling ([`Backend::scale`]).
    Scale,
    /// Logit soft-capping ([`Backend::softcap`]).
    Softcap,
    /// [`Backend::softmax`].
    Softmax,
    /// The token embedding lookup ([`Backend::gather`]).
    Embedding,
    /// Key and value rows into an f16 cache ([`Backend::copy_to_f16`]).
    KvStore,
    /// Starting and ending a pass ([`Backend::begin_pass`], [`Backend::end_pass`]).
    Pass,
    /// Bringing a pass's buffer to the host ([`Backend::to_host`], [`Backend::host_wrote`]).
    Transfer,
}

impl OpKind {
    /// A short lowercase name (`matmul`, `rms_norm`, …).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Matmul => "matmul",
            OpKind::Attention => "attention",
            OpKind::AttentionMass => "attention_mass",
            OpKind::RmsNorm => "rms_norm",
            OpKind::Rope => "rope",
            OpKind::RopeTable => "rope_table",
            OpKind::Activation => "activation",
            OpKind::Add => "add",
            OpKind::AddBias => "add_bias",
            OpKind::Scale => "scale",
            OpKind::Softcap => "softcap",
            OpKind::Softmax => "softmax",
            OpKind::Embedding => "embedding",
            OpKind::KvStore => "kv_store",
            OpKind::Pass => "pass",
            OpKind::Transfer => "transfer",
        }
    }
}

/// One row of a profile: an operator (for matrix products, of one weight type and role) and
/// what its calls took in one phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpTime {
    /// The operator.
    pub op: OpKind,
    /// Matrix products: the weight type (`q4_0`; several joined by `+` for one call over
    /// matrices of different types).
    pub weight: Option<String>,
    /// Matrix products: the weights' role, their GGUF names without the block number
    /// (`attn_q+attn_k+attn_v`, `ffn_down`, `output`), or `?` for a weight the profiler was not
    /// told of.
    pub role: Option<String>,
    /// Calls.
    pub calls: u64,
    /// Nanoseconds spent in them.
    pub ns: u64,
}

/// What one phase's passes spent in each operator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhaseProfile {
    /// Forward passes begun in the phase.
    pub passes: u64,
    /// Operators, the slowest first.
    pub ops: Vec<OpTime>,
}

impl PhaseProfile {
    /// Nanoseconds spent in all operators.
    pub fn total_ns(&self) -> u64 {
        self.ops.iter().map(|o| o.ns).sum()
    }
}

/// An operator call's identity: its kind, and for a matrix product the weights it read.
type CallKey = (Phase, OpKind, u64);

/// The label and counters of one [`CallKey`].
#[derive(Debug)]
struct Counter {
    weight: Option<String>,
    role: Option<String>,
    calls: u64,
    ns: u64,
}

/// Collects the time of every call a [`ProfiledBackend`] passes on. Shared by the backends of a
/// placement ([`Placement::profiled`]); the caller says which phase the following passes belong
/// to ([`Profiler::set_phase`]).
#[derive(Debug)]
pub struct Profiler {
    phase: AtomicU8,
    /// Role of each weight the profiler was told of, by the address of its bytes.
    roles: HashMap<usize, String>,
    counters: Mutex<HashMap<CallKey, Counter>>,
    passes: Mutex<[u64; 2]>,
}

impl Profiler {
    /// A profiler that names matrix products by their weights' roles: `weights` are GGUF
    /// tensor names with their weights (`blk.3.attn_q.weight`; see
    /// `ModelWeights::matrices`), the role being the name without `blk.N.` and `.weight`
    /// (and without an expert's number). It starts in [`Phase::Prefill`].
    pub fn new<'a>(weights: impl IntoIterator<Item = (String, &'a Weight)>) -> Arc<Self> {
        let roles = weights.into_iter().map(|(name, w)| (weight_key(w), role_of(&name))).collect();
        Arc::new(Profiler {
            phase: AtomicU8::new(0),
            roles,
            counters: Mutex::default(),
            passes: Mutex::default(),
        })
    }

    /// The following passes belong to `phase`.
    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// The phase calls are counted in now.
    pub fn phase(&self) -> Phase {
        if self.phase.load(Ordering::Relaxed) == Phase::Decode as u8 { Phase::Decode } else { Phase::Prefill }
    }

    /// Forgets every call counted so far (after a warm-up run).
    pub fn reset(&self) {
        lock(&self.counters).clear();
        *lock(&self.passes) = [0; 2];
    }

    /// What each phase spent so far, every operator's calls summed over the layers.
    pub fn report(&self) -> [PhaseProfile; 2] {
        let passes = *lock(&self.passes);
        let mut out = [PhaseProfile::default(), PhaseProfile::default()];
        for (p, o) in out.iter_mut().enumerate() {
            o.passes = passes[p];
        }
        for (&(phase, op, _), c) in lock(&self.counters).iter() {
            let ops = &mut out[phase as usize].ops;
            match ops.iter_mut().find(|o| o.op == op && o.weight == c.weight && o.role == c.role) {
                Some(o) => {
                    o.calls += c.calls;
                    o.ns += c.ns;
                }
                None => ops.push(OpTime {
                    op,
                    weight: c.weight.clone(),
                    role: c.role.clone(),
                    calls: c.calls,
                    ns: c.ns,
                }),
            }
        }
        for o in &mut out {
            o.ops.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| (a.op, &a.role).cmp(&(b.op, &b.role))));
        }
        out
    }

    /// Counts one call of `op` that started at `t0`; `weights`: a matrix product's weights.
    fn record<'w>(&self, op: OpKind, weights: impl Iterator<Item = &'w Weight> + Clone, t0: Instant) {
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let id = weights.clone().fold(0u64, |h, w| h.rotate_left(17) ^ weight_key(w) as u64);
        let key = (self.phase(), op, id);
        let mut counters = lock(&self.counters);
        let c = counters.entry(key).or_insert_with(|| self.counter_for(weights));
        c.calls += 1;
        c.ns = c.ns.saturating_add(ns);
    }

    /// The label of a call over `weights` (none for other operators).
    fn counter_for<'w>(&self, weights: impl Iterator<Item = &'w Weight>) -> Counter {
        let (mut types, mut roles): (Vec<String>, Vec<&str>) = (Vec::new(), Vec::new());
        for w in weights {
            let t = w.ty.name().to_ascii_lowercase();
            if !types.contains(&t) {
                types.push(t);
            }
            roles.push(self.roles.get(&weight_key(w)).map_or("?", String::as_str));
        }
        let label = |v: &[&str]| (!v.is_empty()).then(|| v.join("+"));
        let types: Vec<&str> = types.iter().map(String::as_str).collect();
        Counter { weight: label(&types), role: label(&roles), calls: 0, ns: 0 }
    }

    fn count_pass(&self) {
        lock(&self.passes)[self.phase() as usize] += 1;
    }
}

/// A weight's identity for the profile: the address of its bytes (stable while the model
/// lives, whether or not the model moves).
fn weight_key(w: &Weight) -> usize {
    w.data().as_ptr() as usize
}

/// The role in a GGUF tensor name: `blk.3.attn_q.weight` → `attn_q`, `blk.0.ffn_up_exps.5.weight`
/// → `ffn_up_exps`, `output.weight` → `output`.
fn role_of(name: &str) -> String {
    let name = name.strip_suffix(".weight").unwrap_or(name);
    let name = match name.strip_prefix("blk.") {
        Some(rest) => rest.split_once('.').map_or(rest, |(_, r)| r),
        None => name,
    };
    match name.rsplit_once('.') {
        Some((stem, n)) if n.bytes().all(|b| b.is_ascii_digit()) => stem.to_string(),
        _ => name.to_string(),
    }
}

/// Locks a mutex, also after a panic elsewhere (the counters stay usable).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A backend that passes every call on to `inner` and records its time in a [`Profiler`].
#[derive(Debug)]
pub struct ProfiledBackend {
    inner: Arc<dyn Backend>,
    profiler: Arc<Profiler>,
}

impl ProfiledBackend {
    /// `inner`, timed into `profiler`.
    pub fn new(inner: Arc<dyn Backend>, profiler: Arc<Profiler>) -> Self {
        Self { inner, profiler }
    }

    /// Runs `f` and records its time as a call of `op`.
    #[inline]
    fn timed<R>(&self, op: OpKind, f: impl FnOnce() -> R) -> R {
        let t0 = Instant::now();
        let r = f();
        self.profiler.record(op, std::iter::empty(), t0);
        r
    }
}

impl Placement {
    /// The same placement with every backend timed into `profiler` ([`ProfiledBackend`]).
    pub fn profiled(&self, profiler: &Arc<Profiler>) -> Placement {
        let wrap = |b: &Arc<dyn Backend>| -> Arc<dyn Backend> {
            Arc::new(ProfiledBackend::new(b.clone(), profiler.clone()))
        };
        match self {
            Placement::Single(b) => Placement::Single(wrap(b)),
            Placement::Hybrid { prefill, decode, min_batch, switch_ctx } => Placement::Hybrid {
                prefill: wrap(prefill),
                decode: wrap(decode),
                min_batch: *min_batch,
                switch_ctx: *switch_ctx,
            },
        }
    }
}

impl Backend for ProfiledBackend {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn description(&self) -> String {
        self.inner.description()
    }

    fn supports_weight(&self, ty: crate::GgmlType) -> bool {
        self.inner.supports_weight(ty)
    }

    fn check_kv(&self, kv: &KvCache) -> BackendResult {
        self.inner.check_kv(kv)
    }

    fn prepare_weights(&self, weights: &[&Weight]) -> usize {
        self.inner.prepare_weights(weights)
    }

    fn begin_pass(
        &self,
        scratch: &[HostRange],
        constants: &mut dyn Iterator<Item = &[f32]>,
    ) -> BackendResult<PassId> {
        self.profiler.count_pass();
        self.timed(OpKind::Pass, || self.inner.begin_pass(scratch, constants))
    }

    fn end_pass(&self, pass: PassId) {
        self.timed(OpKind::Pass, || self.inner.end_pass(pass))
    }

    fn to_host(&self, data: &mut [f32]) -> BackendResult {
        self.timed(OpKind::Transfer, || self.inner.to_host(data))
    }

    fn host_wrote(&self, data: &[f32]) -> BackendResult {
        self.timed(OpKind::Transfer, || self.inner.host_wrote(data))
    }

    fn matmul(&self, w: &Weight, x: &[f32], n: usize, out: &mut [f32]) -> BackendResult {
        let t0 = Instant::now();
        let r = self.inner.matmul(w, x, n, out);
        self.profiler.record(OpKind::Matmul, std::iter::once(w), t0);
        r
    }

    fn matmul_many(&self, x: &[f32], n: usize, jobs: &mut [MatmulJob<'_>]) -> BackendResult {
        let t0 = Instant::now();
        let r = self.inner.matmul_many(x, n, jobs);
        self.profiler.record(OpKind::Matmul, jobs.iter().map(|j| j.w), t0);
        r
    }

    fn gather(&self, table: &Weight, ids: &[u32], scale: f32, out: &mut [f32]) -> BackendResult {
        self.timed(OpKind::Embedding, || self.inner.gather(table, ids, scale, out))
    }

    fn rms_norm(&self, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) -> BackendResult {
        self.timed(OpKind::RmsNorm, || self.inner.rms_norm(x, w, eps, out))
    }

    fn rms_norm_inplace(&self, x: &mut [f32], w: &[f32], eps: f32) -> BackendResult {
        self.timed(OpKind::RmsNorm, || self.inner.rms_norm_inplace(x, w, eps))
    }

    fn rope_cos_sin(
        &self,
        positions: &[u32],
        rope_dims: usize,
        params: &RopeParams,
        factors: Option<&[f32]>,
        out: &mut [(f32, f32)],
    ) -> BackendResult {
        self.timed(OpKind::RopeTable, || self.inner.rope_cos_sin(positions, rope_dims, params, factors, out))
    }

    fn rope(
        &self,
        x: &mut [f32],
        n: usize,
        head_dim: usize,
        cos_sin: &[(f32, f32)],
        style: RopeStyle,
    ) -> BackendResult {
        self.timed(OpKind::Rope, || self.inner.rope(x, n, head_dim, cos_sin, style))
    }

    fn softmax(&self, x: &mut [f32], cols: usize) -> BackendResult {
        self.timed(OpKind::Softmax, || self.inner.softmax(x, cols))
    }

    fn gated_activation(&self, gate: &mut [f32], up: &[f32], act: Activation, exact: bool) -> BackendResult {
        self.timed(OpKind::Activation, || self.inner.gated_activation(gate, up, act, exact))
    }

    fn add(&self, x: &mut [f32], y: &[f32]) -> BackendResult {
        self.timed(OpKind::Add, || self.inner.add(x, y))
    }

    fn add_bias(&self, x: &mut [f32], bias: &[f32]) -> BackendResult {
        self.timed(OpKind::AddBias, || self.inner.add_bias(x, bias))
    }

    fn scale(&self, x: &mut [f32], s: f32) -> BackendResult {
        self.timed(OpKind::Scale, || self.inner.scale(x, s))
    }

    fn softcap(&self, x: &mut [f32], cap: f32) -> BackendResult {
        self.timed(OpKind::Softcap, || self.inner.softcap(x, cap))
    }

    fn copy_to_f16(&self, src: &[f32], dst: &mut [f16]) -> BackendResult {
        self.timed(OpKind::KvStore, || self.inner.copy_to_f16(src, dst))
    }

    fn attention(
        &self,
        shape: AttentionShape,
        entries: &[BatchEntry],
        prompt_chunks: &[(SeqId, u32)],
        kv: &KvCache,
        layer: usize,
        q: &[f32],
        out: &mut [f32],
    ) -> BackendResult {
        self.timed(OpKind::Attention, || {
            self.inner.attention(shape, entries, prompt_chunks, kv, layer, q, out)
        })
    }

    fn attention_mass(
        &self,
        shape: AttentionShape,
        seq: &SeqCache,
        layer: usize,
        q: &[f32],
        qpos: &[u32],
        mass: &mut [f32],
    ) -> BackendResult {
        self.timed(OpKind::AttentionMass, || self.inner.attention_mass(shape, seq, layer, q, qpos, mass))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgmlType;
    use crate::backend::CpuBackend;

    #[test]
    fn roles_are_names_without_block_numbers() {
        assert_eq!(role_of("blk.3.attn_q.weight"), "attn_q");
        assert_eq!(role_of("blk.12.ffn_up_exps.5.weight"), "ffn_up_exps");
        assert_eq!(role_of("output.weight"), "output");
        assert_eq!(role_of("token_embd.weight"), "token_embd");
    }

    fn weight(rows: usize, cols: usize) -> Weight {
        let bytes = (0..rows * cols).flat_map(|i| (i as f32 / 100.0).to_le_bytes()).collect();
        Weight::owned(GgmlType::F32, rows, cols, bytes)
    }

    #[test]
    fn calls_are_counted_by_phase_operator_and_weight() {
        let (wq, wk, wo) = (weight(4, 8), weight(2, 8), weight(8, 4));
        let names = [("blk.0.attn_q.weight".to_string(), &wq), ("blk.0.attn_k.weight".to_string(), &wk)];
        let prof = Profiler::new(names);
        let be = ProfiledBackend::new(Arc::new(CpuBackend), prof.clone());
        let x = vec![1f32; 8];
        let (mut q, mut k, mut y) = (vec![0f32; 4], vec![0f32; 2], vec![0f32; 8]);
        let pass = be.begin_pass(&[], &mut std::iter::empty()).expect("cpu");
        be.matmul_many(&x, 1, &mut [MatmulJob { w: &wq, out: &mut q }, MatmulJob { w: &wk, out: &mut k }])
            .expect("cpu");
        be.matmul(&wo, &q, 1, &mut y).expect("cpu");
        be.end_pass(pass);
        prof.set_phase(Phase::Decode);
        for _ in 0..3 {
            be.add(&mut y, &x).expect("cpu");
        }
        let [prefill, decode] = prof.report();
        assert_eq!((prefill.passes, decode.passes), (1, 0));
        let find = |p: &PhaseProfile, op, role: Option<&str>| {
            p.ops.iter().find(|o| o.op == op && o.role.as_deref() == role).map(|o| o.calls)
        };
        assert_eq!(find(&prefill, OpKind::Matmul, Some("attn_q+attn_k")), Some(1));
        assert_eq!(find(&prefill, OpKind::Matmul, Some("?")), Some(1));
        assert_eq!(find(&prefill, OpKind::Pass, None), Some(2));
        assert_eq!(find(&decode, OpKind::Add, None), Some(3));
        assert_eq!(find(&prefill, OpKind::Add, None), None);
        assert!(prefill.ops.iter().all(|o| o.op != OpKind::Matmul || o.weight.as_deref() == Some("f32")));
        assert_eq!(q, {
            let mut want = vec![0f32; 4];
            CpuBackend.matmul(&wq, &x, 1, &mut want).expect("cpu");
            want
        });
        prof.reset();
        assert_eq!(prof.report(), [PhaseProfile::default(), PhaseProfile::default()]);
    }

    #[test]
    fn a_profiled_placement_keeps_its_backends() {
        let prof = Profiler::new(std::iter::empty());
        let p = Placement::default().profiled(&prof);
        assert_eq!(p.backends().iter().map(|b| b.name()).collect::<Vec<_>>(), ["cpu"]);
        assert!(p.backends()[0].supports_weight(GgmlType::Q4_0));
    }
}
