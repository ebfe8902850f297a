//! The CUDA plumbing the GPU operators use ([`Device`] on the CUDA driver API): the context, the
//! NVRTC-compiled module and its functions, device buffers, and launches on the legacy default
//! stream, which orders every copy and kernel of the process one after the other.
//!
//! Views ([`Cuda::view`], [`Cuda::view_mut`], [`Cuda::view_out`]) of memory a running pass
//! mirrors are the mirror's device memory (no copy either way, see `gpu::resident`); other
//! views copy host memory into a device buffer taken from a pool of power-of-two sizes (staged
//! through a pinned ring, so the copy is queued rather than waited for), and [`Cuda::sync`]
//! copies a written view back. Weights are uploaded once ([`Cuda::weight`]); scratch buffers
//! ([`Cuda::scratch`]) only the device uses.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUdevice_attribute, CUdeviceptr, CUfunction, CUmodule};
use cudarc::driver::{CudaContext, DriverError, result};

use crate::backend::gpu::nvrtc::{check_nvrtc, compile, kernel_names};
use crate::backend::gpu::resident::{Access, MirrorIo, Mirrors, Place};
use crate::backend::gpu::{Arg, Device, DeviceView, ScratchSlots, bytes_of, launch_dims, pick_local};
use crate::backend::{BackendError, BackendResult, HostRange};
use crate::ops::Weight;

/// Threads of a block when the caller leaves the work-group size to the device.
const AUTO_BLOCK: usize = 256;

/// The smallest buffer made (empty slices get one too).
const MIN_BYTES: usize = 4;

/// What a CUDA device is.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Ordinal.
    pub ordinal: usize,
    /// Device name ("NVIDIA H100 80GB HBM3").
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Global memory in bytes.
    pub total_mem: usize,
    /// NVRTC's version (major, minor).
    pub nvrtc: (i32, i32),
}

/// The NVRTC version, once it is known to load.
fn nvrtc_version() -> (i32, i32) {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: nvrtcVersion writes two ints through valid pointers; the library is loaded.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS { (major, minor) } else { (0, 0) }
}

/// A driver call's error.
fn cu_err(what: &'static str) -> impl Fn(DriverError) -> BackendError {
    move |e| BackendError::Cuda { what, message: e.to_string() }
}

/// A device allocation, freed on drop.
#[derive(Debug)]
pub(crate) struct DevBuf {
    ptr: CUdeviceptr,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

impl DevBuf {
    fn new(ctx: &Arc<CudaContext>, bytes: usize) -> BackendResult<Self> {
        ctx.bind_to_thread().map_err(cu_err("cuCtxSetCurrent"))?;
        // SAFETY: a plain allocation of `bytes` bytes in the current (bound) context.
        let ptr = unsafe { result::malloc_sync(bytes.max(MIN_BYTES)) }.map_err(cu_err("cuMemAlloc"))?;
        Ok(DevBuf { ptr, bytes: bytes.max(MIN_BYTES), ctx: ctx.clone() })
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc in this context and is freed exactly once, here;
            // cuMemFree waits for the work that may still use it.
            unsafe {
                let _ = result::free_sync(self.ptr);
            }
        }
    }
}

/// Bytes of pinned host memory that uploads are staged through.
const STAGING_BYTES: usize = 32 << 20;

/// Pinned host memory that small uploads are staged through, so that the copy is queued
/// behind the kernels instead of waiting for them (a copy from pageable memory first waits for
/// the device to finish its queue). Used as a ring: a region is reused only after the device
/// caught up, which [`Staging::caught_up`] notes after every synchronous copy.
#[derive(Debug)]
struct Staging {
    ptr: *mut u8,
    head: usize,
}

impl Staging {
    fn new(ctx: &Arc<CudaContext>) -> BackendResult<Self> {
        ctx.bind_to_thread().map_err(cu_err("cuCtxSetCurrent"))?;
        // SAFETY: a plain page-locked allocation of STAGING_BYTES in the bound context.
        let ptr = unsafe { result::malloc_host(STAGING_BYTES, 0) }.map_err(cu_err("cuMemHostAlloc"))?;
        Ok(Staging { ptr: ptr as *mut u8, head: 0 })
    }

    /// Queues a copy of `bytes` to `dst` through the ring; `false` when they do not fit (the
    /// caller copies synchronously).
    fn upload(&mut self, dst: CUdeviceptr, bytes: &[u8]) -> BackendResult<bool> {
        let len = bytes.len();
        if len == 0 || len > STAGING_BYTES / 4 {
            return Ok(false);
        }
        if self.head + len > STAGING_BYTES {
            // SAFETY: waits for the legacy stream's work, after which no queued copy reads the ring.
            unsafe { result::stream::synchronize(result::stream::null()) }
                .map_err(cu_err("cuStreamSynchronize"))?;
            self.head = 0;
        }
        // SAFETY: `head + len <= STAGING_BYTES` bytes of the ring, which no queued copy still
        // reads (every copy queued since the last catch-up lies before `head`).
        let staged = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(self.head), len) };
        staged.copy_from_slice(bytes);
        // SAFETY: `dst` holds at least `len` bytes; `staged` is pinned and stays untouched until
        // the device caught up; the copy is ordered on the legacy stream.
        unsafe { result::memcpy_htod_async(dst, staged, result::stream::null()) }
            .map_err(cu_err("cuMemcpyHtoDAsync"))?;
        self.head += len.next_multiple_of(256);
        Ok(true)
    }

    /// The device finished everything queued so far: the whole ring is free.
    fn caught_up(&mut self) {
        self.head = 0;
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc and freed once; the owner synchronised first.
        unsafe {
            let _ = result::free_host(self.ptr as *mut c_void);
        }
    }
}

/// Device buffers not in use, by power-of-two size.
#[derive(Debug, Default)]
struct Pool {
    free: HashMap<usize, Vec<DevBuf>>,
}

impl Pool {
    /// A buffer of at least `bytes` bytes.
    fn take(pool: &Mutex<Pool>, ctx: &Arc<CudaContext>, bytes: usize) -> BackendResult<DevBuf> {
        let size = bytes.max(MIN_BYTES).next_power_of_two();
        let got = pool.lock().unwrap_or_else(|e| e.into_inner()).free.get_mut(&size).and_then(Vec::pop);
        match got {
            Some(b) => Ok(b),
            None => DevBuf::new(ctx, size),
        }
    }

    fn put(pool: &Mutex<Pool>, b: DevBuf) {
        pool.lock().unwrap_or_else(|e| e.into_inner()).free.entry(b.bytes).or_default().push(b);
    }
}

/// Host memory copied to the device for one operator; a read-write view copies back on
/// [`Cuda::sync`]. The borrow keeps the host memory alive and unaliased meanwhile. A view of a
/// pass's mirrored memory is the mirror's buffer (`resident`), neither copied nor copied back.
#[derive(Debug)]
pub(crate) struct View<'a> {
    /// The mirror's device memory at the view's offset.
    resident: Option<CUdeviceptr>,
    buf: Option<DevBuf>,
    pool: Arc<Mutex<Pool>>,
    /// The host bytes to copy back to, for a read-write view.
    host: Option<(*mut u8, usize)>,
    _host: PhantomData<&'a mut [u8]>,
}

impl DeviceView<CUdeviceptr> for View<'_> {
    fn mem(&self) -> CUdeviceptr {
        self.resident.or(self.buf.as_ref().map(|b| b.ptr)).unwrap_or(0)
    }
}

impl Drop for View<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            // Reuse is safe: every later copy or kernel is ordered after the ones using it.
            Pool::put(&self.pool, b);
        }
    }
}

/// The CUDA device: its context, kernels and buffers.
#[derive(Debug)]
pub(crate) struct Cuda {
    /// What the device is.
    pub(crate) info: DeviceInfo,
    ctx: Arc<CudaContext>,
    module: CUmodule,
    functions: HashMap<String, CUfunction>,
    /// Weights uploaded once, keyed by their bytes' address and length; the `Weight` clone keeps
    /// the key's bytes from being freed and reused by another weight.
    weights: HashMap<(usize, usize), (DevBuf, Weight)>,
    /// Device-only scratch buffers, by slot.
    scratch: ScratchSlots<DevBuf>,
    pool: Arc<Mutex<Pool>>,
    /// Mirrors of the running passes' scratch and constants.
    mirrors: RefCell<Mirrors<DevBuf>>,
    /// The ring uploads are staged through.
    staging: RefCell<Staging>,
}

// SAFETY: the module and function handles are plain driver handles valid in the context from
// any thread that binds it (every method does); the staging ring is host memory only this
// `Cuda` uses; the backend uses a `Cuda` through a mutex.
unsafe impl Send for Cuda {}

// SAFETY: a view's raw host pointer is only written through in `Cuda::sync`, under the view's
// exclusive borrow of that memory; the device buffer is a driver handle.
unsafe impl Send for View<'_> {}

impl Drop for Cuda {
    fn drop(&mut self) {
        if self.bind().is_ok() {
            // Waits for the queued work, which may still read the staging ring.
            let _ = result::ctx::synchronize();
        }
        self.weights.clear();
        self.scratch.clear();
        self.mirrors.get_mut().clear();
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the module was loaded by `open` and is unloaded once; its functions are not
            // used after this.
            unsafe {
                let _ = result::module::unload(self.module);
            }
        }
    }
}

impl Cuda {
    /// Opens device `FERROLM_CUDA_DEVICE` (default 0) and compiles and loads the kernels.
    pub(crate) fn open() -> BackendResult<Self> {
        // SAFETY: only tries to open the library (dlopen); nothing is called.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(BackendError::NoCudaDriver("libcuda.so not found".into()));
        }
        check_nvrtc()?;
        let ordinal = match std::env::var("FERROLM_CUDA_DEVICE") {
            Ok(s) => s.trim().parse::<usize>().map_err(|_| BackendError::CudaDeviceNotFound(s.clone()))?,
            Err(_) => 0,
        };
        let count = CudaContext::device_count().map_err(|e| BackendError::NoCudaDriver(e.to_string()))?;
        if count <= 0 {
            return Err(BackendError::NoDevice);
        }
        if ordinal >= count as usize {
            return Err(BackendError::CudaDeviceNotFound(ordinal.to_string()));
        }
        let ctx = CudaContext::new(ordinal).map_err(cu_err("cuCtx (primary context)"))?;
        let info = DeviceInfo {
            ordinal,
            name: ctx.name().map_err(cu_err("cuDeviceGetName"))?,
            compute_capability: ctx.compute_capability().map_err(cu_err("cuDeviceGetAttribute"))?,
            total_mem: ctx.total_mem().map_err(cu_err("cuDeviceTotalMem"))?,
            nvrtc: nvrtc_version(),
        };
        tracing::info!(device = %info.name, cc = ?info.compute_capability, "compiling CUDA kernels");
        let t = std::time::Instant::now();
        let ptx = CString::new(compile(info.compute_capability)?)
            .map_err(|_| BackendError::Compile("NVRTC returned PTX with a NUL byte".into()))?;
        // SAFETY: `ptx` is a NUL-terminated PTX image; the context is bound to this thread.
        let module = unsafe { result::module::load_data(ptx.as_ptr() as *const c_void) }
            .map_err(cu_err("cuModuleLoadData"))?;
        let mut functions = HashMap::new();
        for name in kernel_names() {
            let cname = CString::new(name.as_str()).map_err(|_| BackendError::MissingKernel(name.clone()))?;
            // SAFETY: `module` is loaded; `cname` is NUL-terminated.
            let f = unsafe { result::module::get_function(module, cname) }
                .map_err(|_| BackendError::MissingKernel(name.clone()))?;
            functions.insert(name, f);
        }
        let max_block = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
            .map_err(cu_err("cuDeviceGetAttribute"))?;
        tracing::info!(
            ms = t.elapsed().as_millis() as u64,
            kernels = functions.len(),
            max_block,
            "CUDA kernels ready"
        );
        let staging = Staging::new(&ctx)?;
        Ok(Cuda {
            info,
            ctx,
            module,
            functions,
            weights: HashMap::new(),
            scratch: ScratchSlots::default(),
            pool: Arc::new(Mutex::new(Pool::default())),
            mirrors: RefCell::new(Mirrors::default()),
            staging: RefCell::new(staging),
        })
    }

    fn bind(&self) -> BackendResult {
        self.ctx.bind_to_thread().map_err(cu_err("cuCtxSetCurrent"))
    }

    fn upload_view<'a>(&self, bytes: &[u8], host: Option<(*mut u8, usize)>) -> BackendResult<View<'a>> {
        self.bind()?;
        let buf = Pool::take(&self.pool, &self.ctx, bytes.len())?;
        self.copy_in(buf.ptr, bytes)?;
        Ok(View { resident: None, buf: Some(buf), pool: self.pool.clone(), host, _host: PhantomData })
    }

    /// A view of `data` for `access`: its mirror's memory when a pass mirrors it, else a pooled
    /// buffer (filled from the host unless the operator only writes it).
    fn view_for<'a>(
        &self,
        data: &[u8],
        access: Access,
        host: Option<(*mut u8, usize)>,
    ) -> BackendResult<View<'a>> {
        let mut mirrors = self.mirrors.borrow_mut();
        if let Place::Mirror { index, offset } =
            mirrors.access(HostRange::of(data), access, |_| true, self)?
        {
            let ptr = mirrors.buf(index).ptr + offset as CUdeviceptr;
            return Ok(View {
                resident: Some(ptr),
                buf: None,
                pool: self.pool.clone(),
                host: None,
                _host: PhantomData,
            });
        }
        drop(mirrors);
        if access == Access::Write {
            self.bind()?;
            let buf = Pool::take(&self.pool, &self.ctx, data.len())?;
            return Ok(View {
                resident: None,
                buf: Some(buf),
                pool: self.pool.clone(),
                host,
                _host: PhantomData,
            });
        }
        self.upload_view(data, host)
    }
}

impl Cuda {
    /// Copies `bytes` to `dst`, queued behind the earlier work (staged through pinned memory
    /// when they fit the ring, else synchronously). The context is bound.
    fn copy_in(&self, dst: CUdeviceptr, bytes: &[u8]) -> BackendResult {
        if bytes.is_empty() || self.staging.borrow_mut().upload(dst, bytes)? {
            return Ok(());
        }
        // SAFETY: `dst` holds at least `bytes.len()` bytes; the copy is ordered after any
        // earlier work on the default stream that used the buffer.
        unsafe { result::memcpy_htod_sync(dst, bytes) }.map_err(cu_err("cuMemcpyHtoD"))?;
        self.staging.borrow_mut().caught_up();
        Ok(())
    }

    /// Copies `len` bytes at `src` into `dst` once the queued work is done. The context is bound.
    fn copy_out(&self, dst: &mut [u8], src: CUdeviceptr) -> BackendResult {
        // SAFETY: `src` holds at least `dst.len()` bytes; the copy waits for the work queued
        // before it on the default stream.
        unsafe { result::memcpy_dtoh_sync(dst, src) }.map_err(cu_err("cuMemcpyDtoH"))?;
        self.staging.borrow_mut().caught_up();
        Ok(())
    }
}

impl MirrorIo<DevBuf> for Cuda {
    fn alloc(&self, bytes: usize) -> BackendResult<DevBuf> {
        DevBuf::new(&self.ctx, bytes)
    }

    unsafe fn upload(&self, buf: &DevBuf, offset: usize, host: *const u8, len: usize) -> BackendResult {
        if len == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the caller guarantees `host..host + len` is readable.
        let src = unsafe { std::slice::from_raw_parts(host, len) };
        debug_assert!(offset + len <= buf.bytes);
        self.copy_in(buf.ptr + offset as CUdeviceptr, src)
    }

    unsafe fn download(&self, buf: &DevBuf, offset: usize, host: *mut u8, len: usize) -> BackendResult {
        if len == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the caller guarantees `host..host + len` is writable and unused meanwhile.
        let dst = unsafe { std::slice::from_raw_parts_mut(host, len) };
        debug_assert!(offset + len <= buf.bytes);
        self.copy_out(dst, buf.ptr + offset as CUdeviceptr)
    }
}

impl Device for Cuda {
    type Mem = CUdeviceptr;
    type Buf = DevBuf;
    type View<'a> = View<'a>;

    const NAME: &'static str = "cuda";

    fn describe(&self) -> String {
        let i = &self.info;
        format!(
            "CUDA: {} (device {}, compute {}.{}, {} MiB, NVRTC {}.{})",
            i.name,
            i.ordinal,
            i.compute_capability.0,
            i.compute_capability.1,
            i.total_mem >> 20,
            i.nvrtc.0,
            i.nvrtc.1
        )
    }

    fn view<'a, T: Copy>(&self, data: &'a [T]) -> BackendResult<View<'a>> {
        self.view_for(bytes_of(data), Access::Read, None)
    }

    fn view_mut<'a, T: Copy>(&self, data: &'a mut [T]) -> BackendResult<View<'a>> {
        let host = (data.as_mut_ptr() as *mut u8, std::mem::size_of_val(data));
        self.view_for(bytes_of(data), Access::ReadWrite, Some(host))
    }

    fn view_out<'a, T: Copy>(&self, data: &'a mut [T]) -> BackendResult<View<'a>> {
        let host = (data.as_mut_ptr() as *mut u8, std::mem::size_of_val(data));
        self.view_for(bytes_of(data), Access::Write, Some(host))
    }

    fn mirrors(&self) -> (&RefCell<Mirrors<DevBuf>>, &dyn MirrorIo<DevBuf>) {
        (&self.mirrors, self)
    }

    fn sync(&self, view: &View<'_>) -> BackendResult {
        // A mirror's view (no `host`) stays on the device: the next operator reads it there.
        let (Some((ptr, len)), Some(buf)) = (view.host, view.buf.as_ref()) else { return Ok(()) };
        if len == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: `ptr` is the start of the `len` host bytes the view borrows mutably (so nothing
        // else reads or writes them meanwhile); the buffer holds at least `len` bytes.
        let host = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        self.copy_out(host, buf.ptr)
    }

    fn weight(&mut self, w: &Weight) -> BackendResult<CUdeviceptr> {
        let data = w.data();
        let key = (data.as_ptr() as usize, data.len());
        if let Some((b, _)) = self.weights.get(&key) {
            return Ok(b.ptr);
        }
        let buf = DevBuf::new(&self.ctx, data.len())?;
        if !data.is_empty() {
            // SAFETY: `buf` holds `data.len()` bytes.
            unsafe { result::memcpy_htod_sync(buf.ptr, data) }.map_err(cu_err("cuMemcpyHtoD"))?;
        }
        let ptr = buf.ptr;
        self.weights.insert(key, (buf, w.clone()));
        Ok(ptr)
    }

    fn write(&self, mem: CUdeviceptr, offset: usize, bytes: &[u8]) -> BackendResult {
        self.bind()?;
        self.copy_in(mem + offset as CUdeviceptr, bytes)
    }

    fn scratch(&mut self, slot: usize, bytes: usize) -> BackendResult<CUdeviceptr> {
        let ctx = &self.ctx;
        self.scratch.get(slot, bytes, MIN_BYTES, |b| b.ptr, |size| DevBuf::new(ctx, size))
    }

    fn run(
        &self,
        name: &str,
        args: &[Arg<CUdeviceptr>],
        global: &[usize],
        local: Option<&[usize]>,
    ) -> BackendResult {
        if global.contains(&0) {
            return Ok(());
        }
        let f = *self.functions.get(name).ok_or_else(|| BackendError::MissingKernel(name.to_string()))?;
        let local = match local {
            Some(l) => l.to_vec(),
            None => pick_local(global, AUTO_BLOCK),
        };
        let (grid, block) = launch_dims(name, global, &local)?;
        // Each argument's value in the low bytes of a u64 (little-endian), pointed to as the
        // driver wants.
        let mut vals: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                Arg::Mem(p) => p,
                Arg::I32(v) => u64::from(v as u32),
                Arg::U32(v) => u64::from(v),
                Arg::F32(v) => u64::from(v.to_bits()),
            })
            .collect();
        let mut params: Vec<*mut c_void> = vals.iter_mut().map(|v| v as *mut u64 as *mut c_void).collect();
        self.bind()?;
        // SAFETY: `f` is a function of the loaded module whose parameters are, in order, the
        // kinds of `args` (pointers are 8 bytes, int/uint/float 4, read from the low bytes);
        // `params` outlives the call, which copies the values; the buffers are live device
        // allocations that outlive the queued kernel (views are synced or kept until after).
        unsafe { result::launch_kernel(f, grid, block, 0, result::stream::null(), &mut params) }
            .map_err(|e| BackendError::Cuda { what: "cuLaunchKernel", message: format!("{name}: {e}") })
    }
}
