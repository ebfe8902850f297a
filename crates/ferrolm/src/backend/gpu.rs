//! What the GPU backends share: the [`Backend`] operators written once against a small
//! [`Device`] interface (buffers, kernel launches), and the kernels they launch
//! (`gpu/kernels/*.cl`).
//!
//! The kernels are OpenCL C 1.2. The OpenCL backend ([`super::opencl`]) compiles them as they
//! are; the CUDA backend ([`super::cuda`]) compiles the same files with NVRTC behind a short
//! prelude (`kernels/cuda_prelude.h`) that maps OpenCL's qualifiers, work-item functions and
//! half-precision loads onto CUDA's. One set of kernels, one set of host-side launch logic
//! ([`matmul`], [`ops`], [`attention`]): a fix or a new weight type reaches both backends.
//!
//! Work-item model: a launch names a `global` size (1 to 3 dimensions) and optionally a `local`
//! (work-group) size that divides it, as in OpenCL. A device without its own notion of that
//! (CUDA) launches `global / local` blocks of `local` threads; when the caller leaves `local` to
//! the device, the device picks a size that divides `global` exactly ([`pick_local`]), so no
//! kernel ever runs a work item outside `global`.

mod attention;
#[cfg(all(test, feature = "opencl"))]
mod attention_tests;
mod matmul;
#[cfg(all(test, feature = "opencl"))]
mod matmul_tests;
#[cfg(any(test, feature = "cuda"))]
pub(crate) mod nvrtc;
mod ops;
#[cfg(all(test, feature = "opencl"))]
mod ops_tests;
pub(crate) mod resident;
#[cfg(all(test, feature = "opencl"))]
mod test_util;

use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use half::f16;

use super::{AttentionShape, Backend, BackendError, BackendResult, HostRange, PassId, cpu};
use crate::GgmlType;
use crate::batch::BatchEntry;
use crate::kv::{KvCache, SeqCache, SeqId};
use crate::ops::{Activation, RopeParams, RopeStyle, Weight};
use resident::{MirrorIo, Mirrors};

/// The kernels' sources, in compilation order (one program).
pub(crate) const SOURCES: &[&str] = &[
    include_str!("gpu/kernels/common.cl"),
    include_str!("gpu/kernels/quant.cl"),
    include_str!("gpu/kernels/ops.cl"),
    include_str!("gpu/kernels/attention.cl"),
];

/// A kernel argument.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg<M> {
    /// A buffer.
    Mem(M),
    /// `int`.
    I32(i32),
    /// `uint`.
    U32(u32),
    /// `float`.
    F32(f32),
}

/// Host memory made visible to the device for one operator.
pub(crate) trait DeviceView<M> {
    /// The buffer, for [`Arg::Mem`].
    fn mem(&self) -> M;
}

/// A compute device the GPU operators run on: its buffers and its kernel launches. One
/// operator at a time (the backend holds the device behind a mutex); launches are queued in
/// order, and [`Device::sync`] returns once the queued work that writes a view is done and the
/// view's host memory holds the result.
pub(crate) trait Device: Send + fmt::Debug + 'static {
    /// A device buffer, for [`Arg::Mem`].
    type Mem: Copy + fmt::Debug;
    /// A device allocation the device owns (a mirror's buffer).
    type Buf;
    /// Host memory seen by the device for one operator.
    type View<'a>: DeviceView<Self::Mem>;

    /// The backend's short name ("opencl", "cuda"), for errors and [`Backend::name`].
    const NAME: &'static str;

    /// What the device is, for people.
    fn describe(&self) -> String;

    /// A read-only device view of `data` for one operator.
    fn view<'a, T: Copy>(&self, data: &'a [T]) -> BackendResult<Self::View<'a>>;

    /// A read-write device view of `data` (its current contents included: in-place operators
    /// read it) for one operator; call [`Device::sync`] before the host reads it again.
    fn view_mut<'a, T: Copy>(&self, data: &'a mut [T]) -> BackendResult<Self::View<'a>>;

    /// A write-only device view of `data`: the operator overwrites every value without reading
    /// it, so its current contents need not reach the device. Call [`Device::sync`] as for
    /// [`Device::view_mut`].
    fn view_out<'a, T: Copy>(&self, data: &'a mut [T]) -> BackendResult<Self::View<'a>>;

    /// Waits for the queued kernels and puts the device's writes to `view` in the host memory
    /// it views (nothing for a view of a pass's mirrored scratch: see [`resident`]).
    fn sync(&self, view: &Self::View<'_>) -> BackendResult;

    /// The device's mirrors of its running passes' memory, and the copies they make; its views
    /// consult them.
    fn mirrors(&self) -> (&RefCell<Mirrors<Self::Buf>>, &dyn MirrorIo<Self::Buf>);

    /// Starts a pass: views of `scratch` and `constants` become views of device mirrors
    /// ([`resident::Mirrors::begin`]).
    fn begin_pass(&self, scratch: &[HostRange], constants: &[(HostRange, u64)]) -> BackendResult<u64> {
        let (mirrors, io) = self.mirrors();
        mirrors.borrow_mut().begin(scratch, constants, io)
    }

    /// Ends a pass begun by [`Device::begin_pass`].
    fn end_pass(&self, pass: u64) {
        self.mirrors().0.borrow_mut().end(pass);
    }

    /// Makes the host copy of `data` current ([`resident::Mirrors::host_read`]).
    fn to_host(&self, data: &mut [u8]) -> BackendResult {
        let (mirrors, io) = self.mirrors();
        mirrors.borrow_mut().host_read(data, io)
    }

    /// Notes a host write to `data` ([`resident::Mirrors::host_wrote`]).
    fn host_wrote(&self, data: &[u8]) -> BackendResult {
        let (mirrors, io) = self.mirrors();
        mirrors.borrow_mut().host_wrote(data, io)
    }

    /// The device buffer of a weight's bytes, made on first use and kept.
    fn weight(&mut self, w: &Weight) -> BackendResult<Self::Mem>;

    /// Device-only scratch buffer number `slot` of at least `bytes` bytes (contents undefined).
    fn scratch(&mut self, slot: usize, bytes: usize) -> BackendResult<Self::Mem>;

    /// Copies `bytes` into device buffer `mem` (a scratch buffer) at byte `offset`, after the
    /// work queued before (a kernel still reading `mem` sees its old contents).
    fn write(&self, mem: Self::Mem, offset: usize, bytes: &[u8]) -> BackendResult;

    /// Queues kernel `name` over `global` work items (1 to 3 dimensions) in work groups of
    /// `local` (which divides `global`), or of the device's choice.
    fn run(
        &self,
        name: &str,
        args: &[Arg<Self::Mem>],
        global: &[usize],
        local: Option<&[usize]>,
    ) -> BackendResult;
}

/// Bytes of `data`.
pub(crate) fn bytes_of<T: Copy>(data: &[T]) -> &[u8] {
    // SAFETY: `T: Copy` plain data (f32, f16, u32, u8, (f32, f32)) viewed as its bytes, same
    // length in bytes, same lifetime.
    unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) }
}

/// Bytes of `data`, writable.
pub(crate) fn bytes_of_mut(data: &mut [f32]) -> &mut [u8] {
    // SAFETY: any bytes are a valid f32, so writing bytes keeps `data` valid; same length in
    // bytes, same lifetime, exclusive borrow.
    unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr() as *mut u8, std::mem::size_of_val(data)) }
}

/// A work-group size for `global` when the caller names none: in each dimension the largest
/// divisor of `global` that keeps the group within `max_items` work items, filled from the
/// first dimension. Always divides `global` exactly.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // used by the CUDA device only
pub(crate) fn pick_local(global: &[usize], max_items: usize) -> Vec<usize> {
    let mut budget = max_items.max(1);
    global
        .iter()
        .map(|&g| {
            let l = (1..=budget.min(g.max(1))).rev().find(|l| g % l == 0).unwrap_or(1);
            budget /= l;
            l
        })
        .collect()
}

/// Blocks (or threads per block) in x, y, z.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // used by the CUDA device only
pub(crate) type Dim3 = (u32, u32, u32);

/// Grid and block of a CUDA-style launch of `global` items in groups of `local`: whole blocks,
/// at most 1024 threads a block, grid dimensions within CUDA's limits.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // used by the CUDA device only
pub(crate) fn launch_dims(name: &str, global: &[usize], local: &[usize]) -> BackendResult<(Dim3, Dim3)> {
    let bad = |why: &str| BackendError::Unsupported {
        backend: "gpu",
        what: format!("a launch of {name} over {global:?} in groups of {local:?} ({why})"),
    };
    if global.is_empty() || global.len() > 3 || local.len() != global.len() {
        return Err(bad("1 to 3 dimensions, local like global"));
    }
    let mut g = [1u32; 3];
    let mut b = [1u32; 3];
    let limits = [u32::MAX >> 1, 65535, 65535];
    for d in 0..global.len() {
        if local[d] == 0 || !global[d].is_multiple_of(local[d]) {
            return Err(bad("local does not divide global"));
        }
        let blocks = global[d] / local[d];
        if blocks > limits[d] as usize || local[d] > 1024 {
            return Err(bad("over the device's grid or block limits"));
        }
        g[d] = blocks as u32;
        b[d] = local[d] as u32;
    }
    if b.iter().map(|&x| x as usize).product::<usize>() > 1024 {
        return Err(bad("over 1024 threads per block"));
    }
    Ok(((g[0], g[1], g[2]), (b[0], b[1], b[2])))
}

/// A device's scratch buffers ([`Device::scratch`]) by slot: each is kept and reused, and
/// replaced by a larger one (a power of two of at least `min` bytes) when a caller needs more.
#[derive(Debug)]
pub(crate) struct ScratchSlots<B> {
    /// `(buffer, its bytes)` of each slot in use.
    slots: Vec<Option<(B, usize)>>,
}

impl<B> Default for ScratchSlots<B> {
    fn default() -> Self {
        ScratchSlots { slots: Vec::new() }
    }
}

impl<B> ScratchSlots<B> {
    /// The handle (`mem`) of slot `slot`'s buffer of at least `bytes` bytes, made by `alloc`
    /// (given the size to make) when the slot has none that large.
    pub(crate) fn get<M>(
        &mut self,
        slot: usize,
        bytes: usize,
        min: usize,
        mem: impl Fn(&B) -> M,
        alloc: impl FnOnce(usize) -> BackendResult<B>,
    ) -> BackendResult<M> {
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, || None);
        }
        let bytes = bytes.max(min);
        if let Some((b, have)) = &self.slots[slot]
            && *have >= bytes
        {
            return Ok(mem(b));
        }
        // Free the old one first so that memory is not held twice.
        self.slots[slot] = None;
        let size = bytes.next_power_of_two();
        let b = alloc(size)?;
        let m = mem(&b);
        self.slots[slot] = Some((b, size));
        Ok(m)
    }

    /// Frees every buffer.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // used by the CUDA device only
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
    }
}

/// The [`Backend`] operators on a [`Device`].
#[derive(Debug)]
pub struct GpuBackend<D> {
    dev: Mutex<D>,
}

#[allow(private_bounds)] // `Device` is this crate's own
impl<D: Device> GpuBackend<D> {
    /// The backend on `dev`.
    pub(crate) fn on(dev: D) -> Self {
        GpuBackend { dev: Mutex::new(dev) }
    }

    /// The device, for one operator.
    pub(crate) fn dev(&self) -> MutexGuard<'_, D> {
        self.dev.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The process's one backend in `slot`, opened by `open` on first use (compiling the
    /// kernels once); a failed open is retried by the next call.
    pub(crate) fn shared_in(
        slot: &'static OnceLock<Mutex<Option<Arc<Self>>>>,
        open: impl FnOnce() -> BackendResult<Self>,
    ) -> BackendResult<Arc<Self>> {
        let mut g = slot.get_or_init(|| Mutex::new(None)).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = g.as_ref() {
            return Ok(b.clone());
        }
        let b = Arc::new(open()?);
        *g = Some(b.clone());
        Ok(b)
    }
}

impl<D: Device> Backend for GpuBackend<D> {
    fn name(&self) -> &'static str {
        D::NAME
    }

    fn description(&self) -> String {
        self.dev().describe()
    }

    fn supports_weight(&self, ty: GgmlType) -> bool {
        matmul::supports(ty)
    }

    fn check_kv(&self, kv: &KvCache) -> BackendResult {
        attention::check_kv::<D>(kv)
    }

    fn begin_pass(
        &self,
        scratch: &[HostRange],
        constants: &mut dyn Iterator<Item = &[f32]>,
    ) -> BackendResult<PassId> {
        let constants: Vec<(HostRange, u64)> =
            constants.map(|c| (HostRange::of(c), resident::hash_f32(c))).collect();
        self.dev().begin_pass(scratch, &constants).map(PassId)
    }

    fn end_pass(&self, pass: PassId) {
        self.dev().end_pass(pass.0);
    }

    fn to_host(&self, data: &mut [f32]) -> BackendResult {
        self.dev().to_host(bytes_of_mut(data))
    }

    fn host_wrote(&self, data: &[f32]) -> BackendResult {
        self.dev().host_wrote(bytes_of(data))
    }

    fn matmul(&self, w: &Weight, x: &[f32], n: usize, out: &mut [f32]) -> BackendResult {
        matmul::matmul(&mut *self.dev(), w, x, n, out)
    }

    fn gather(&self, table: &Weight, ids: &[u32], scale: f32, out: &mut [f32]) -> BackendResult {
        matmul::gather(&mut *self.dev(), table, ids, scale, out)
    }

    fn rms_norm(&self, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) -> BackendResult {
        ops::rms_norm(&mut *self.dev(), x, w, eps, out)
    }

    fn rms_norm_inplace(&self, x: &mut [f32], w: &[f32], eps: f32) -> BackendResult {
        ops::rms_norm_inplace(&mut *self.dev(), x, w, eps)
    }

    fn rope_cos_sin(
        &self,
        positions: &[u32],
        rope_dims: usize,
        params: &RopeParams,
        factors: Option<&[f32]>,
        out: &mut [(f32, f32)],
    ) -> BackendResult {
        // One row per token: on the host, as the CPU computes it.
        cpu::rope_table(positions, rope_dims, params, factors, out);
        self.dev().host_wrote(bytes_of(out))
    }

    fn rope(
        &self,
        x: &mut [f32],
        n: usize,
        head_dim: usize,
        cos_sin: &[(f32, f32)],
        style: RopeStyle,
    ) -> BackendResult {
        ops::rope(&mut *self.dev(), x, n, head_dim, cos_sin, style)
    }

    fn softmax(&self, x: &mut [f32], cols: usize) -> BackendResult {
        ops::softmax(&mut *self.dev(), x, cols)
    }

    fn gated_activation(&self, gate: &mut [f32], up: &[f32], act: Activation, exact: bool) -> BackendResult {
        ops::gated_activation(&mut *self.dev(), gate, up, act, exact)
    }

    fn add(&self, x: &mut [f32], y: &[f32]) -> BackendResult {
        ops::add(&mut *self.dev(), x, y)
    }

    fn add_bias(&self, x: &mut [f32], bias: &[f32]) -> BackendResult {
        ops::add_bias(&mut *self.dev(), x, bias)
    }

    fn scale(&self, x: &mut [f32], s: f32) -> BackendResult {
        if x.is_empty() {
            return Ok(());
        }
        ops::scale(&mut *self.dev(), x, s)
    }

    fn softcap(&self, x: &mut [f32], cap: f32) -> BackendResult {
        // Rare (Gemma 2's final logits): on the host, as the CPU computes it.
        let dev = self.dev();
        dev.to_host(bytes_of_mut(x))?;
        cpu::softcap(x, cap);
        dev.host_wrote(bytes_of(x))
    }

    fn copy_to_f16(&self, src: &[f32], dst: &mut [f16]) -> BackendResult {
        ops::copy_to_f16(&mut *self.dev(), src, dst)
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
        attention::attention(&mut *self.dev(), shape, entries, prompt_chunks, kv, layer, q, out)
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
        // Only for H2O: on the host over the cache, with the CPU's reference.
        crate::kv::attention_mass(shape, seq, layer, q, qpos, mass);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{launch_dims, pick_local};

    #[test]
    fn launches_are_whole_blocks_within_the_limits() {
        assert_eq!(launch_dims("k", &[64 * 10, 3], &[64, 1]).expect("fits"), ((10, 3, 1), (64, 1, 1)));
        assert_eq!(launch_dims("k", &[32, 9, 5], &[32, 3, 1]).expect("fits"), ((1, 3, 5), (32, 3, 1)));
        assert!(launch_dims("k", &[100], &[64]).is_err(), "64 does not divide 100");
        assert!(launch_dims("k", &[64, 70000 * 2], &[64, 1]).is_err(), "grid y over 65535");
        assert!(launch_dims("k", &[2048], &[2048]).is_err(), "block over 1024");
        assert!(launch_dims("k", &[64, 64], &[64, 32]).is_err(), "2048 threads in a block");
    }

    #[test]
    fn a_picked_work_group_divides_the_launch_and_stays_within_the_limit() {
        for global in
            [vec![1], vec![7], vec![576], vec![49152], vec![32, 9, 5], vec![64, 3, 1], vec![97, 256]]
        {
            let local = pick_local(&global, 256);
            assert_eq!(local.len(), global.len());
            assert!(local.iter().product::<usize>() <= 256, "{global:?} -> {local:?}");
            for (g, l) in global.iter().zip(&local) {
                assert_eq!(g % l, 0, "{global:?} -> {local:?}");
            }
        }
        assert_eq!(pick_local(&[576], 256), [192]);
        assert_eq!(pick_local(&[32, 9, 5], 256), [32, 3, 1]);
        assert_eq!(pick_local(&[97], 256), [97]);
        assert_eq!(pick_local(&[0], 256), [1]);
    }
}
