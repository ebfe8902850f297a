//! The OpenCL plumbing every operator uses: device discovery, the compiled program and its
//! kernels, buffers over host memory, and kernel launches.
//!
//! Memory model: every buffer an operator reads or writes is the host's own memory seen by the
//! device through `CL_MEM_USE_HOST_PTR` ([`Cl::view`], [`Cl::view_mut`]) for the length of one
//! operator, and synchronised back with a blocking map/unmap ([`Cl::sync`]). On a
//! unified-memory device (phones, integrated GPUs, PoCL on a CPU) that is zero-copy: the CPU
//! and the device see the same bytes, so the KV cache, the activations and the memory-mapped
//! weights are never copied, and a generation can move between backends mid-way. A discrete
//! GPU's driver copies the regions at those points instead. Weights are wrapped once and kept
//! ([`Cl::weight`]); scratch buffers only the device uses (quantized activations, attention
//! scores) are device allocations grown on demand ([`Cl::scratch`]). During a forward pass the
//! pass's activation buffers and the model's norm weights are device buffers instead (mirrors,
//! see `gpu::resident`), which a discrete GPU's driver no longer copies at every operator.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::ptr;

use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_GPU, Device};
use opencl3::kernel::Kernel;
use opencl3::memory::{
    CL_MAP_READ, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE, CL_MEM_USE_HOST_PTR, create_buffer, release_mem_object,
};
use opencl3::platform::get_platforms;
use opencl3::program::Program;
use opencl3::types::{CL_BLOCKING, cl_device_id, cl_mem};

use crate::backend::gpu::resident::{Access, MirrorIo, Mirrors, Place};
use crate::backend::gpu::{Arg, Device as GpuDevice, DeviceView, SOURCES, ScratchSlots, bytes_of};
use crate::backend::{BackendError, BackendResult, HostRange};
use crate::ops::Weight;

/// Build options: IEEE division and square root, so quantization scales round like the CPU's.
const BUILD_OPTIONS: &str = "-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt";

/// What an OpenCL device is.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Platform name (e.g. "Portable Computing Language", "NVIDIA CUDA").
    pub platform: String,
    /// Device name.
    pub name: String,
    /// Device vendor.
    pub vendor: String,
    /// OpenCL version string of the device.
    pub version: String,
    /// Whether the device is a GPU (PoCL's CPU device is not).
    pub is_gpu: bool,
    /// Whether the device shares the host's memory (zero-copy host buffers).
    pub unified_memory: bool,
    /// Global memory in bytes.
    pub global_mem: u64,
}

/// Every OpenCL device of every platform, in platform order. An error when no OpenCL runtime
/// (ICD loader or driver) is installed.
pub fn list_devices() -> Result<Vec<(cl_device_id, DeviceInfo)>, BackendError> {
    let platforms = get_platforms().map_err(|e| BackendError::NoRuntime(e.to_string()))?;
    let mut out = Vec::new();
    for p in platforms {
        let pname = p.name().unwrap_or_default();
        let Ok(ids) = p.get_devices(CL_DEVICE_TYPE_ALL) else { continue };
        for id in ids {
            let d = Device::new(id);
            let info = DeviceInfo {
                platform: pname.clone(),
                name: d.name().unwrap_or_default().trim().to_string(),
                vendor: d.vendor().unwrap_or_default().trim().to_string(),
                version: d.version().unwrap_or_default().trim().to_string(),
                is_gpu: d.dev_type().is_ok_and(|t| t & CL_DEVICE_TYPE_GPU != 0),
                unified_memory: d.host_unified_memory().unwrap_or(false),
                global_mem: d.global_mem_size().unwrap_or(0),
            };
            out.push((id, info));
        }
    }
    if out.is_empty() {
        return Err(BackendError::NoDevice);
    }
    Ok(out)
}

/// Picks a device: `FERROLM_OPENCL_DEVICE` (an index into [`list_devices`] or part of a device
/// name) when set, else the first GPU, else the first device.
pub fn pick_device() -> Result<(cl_device_id, DeviceInfo), BackendError> {
    let devices = list_devices()?;
    if let Ok(want) = std::env::var("FERROLM_OPENCL_DEVICE") {
        let want = want.trim();
        let found = match want.parse::<usize>() {
            Ok(i) => devices.get(i).cloned(),
            Err(_) => {
                let lw = want.to_lowercase();
                devices.iter().find(|(_, d)| d.name.to_lowercase().contains(&lw)).cloned()
            }
        };
        return found.ok_or_else(|| BackendError::DeviceNotFound(want.to_string()));
    }
    let first_gpu = devices.iter().position(|(_, d)| d.is_gpu).unwrap_or(0);
    Ok(devices[first_gpu].clone())
}

/// An OpenCL buffer this module owns (released on drop).
#[derive(Debug)]
pub(crate) struct DevBuf {
    mem: cl_mem,
    bytes: usize,
}

// SAFETY: a cl_mem handle is a reference-counted object that OpenCL allows any thread to use;
// the backend serialises all use behind its mutex.
unsafe impl Send for DevBuf {}

impl Drop for DevBuf {
    fn drop(&mut self) {
        // SAFETY: `mem` was created by clCreateBuffer and is released exactly once, here.
        unsafe {
            let _ = release_mem_object(self.mem);
        }
    }
}

/// Host memory borrowed for one operator and seen by the device (`CL_MEM_USE_HOST_PTR`). The
/// borrow keeps the memory alive and unmoved while the buffer exists. A view of a pass's
/// mirrored memory is the mirror's own device buffer instead (`resident`).
#[derive(Debug)]
pub(crate) struct View<'a> {
    buf: Option<DevBuf>,
    resident: Option<cl_mem>,
    _host: PhantomData<&'a mut [u8]>,
}

impl DeviceView<cl_mem> for View<'_> {
    fn mem(&self) -> cl_mem {
        self.resident.or(self.buf.as_ref().map(|b| b.mem)).unwrap_or(ptr::null_mut())
    }
}

impl View<'_> {
    fn host(buf: DevBuf) -> Self {
        View { buf: Some(buf), resident: None, _host: PhantomData }
    }
}

/// A placeholder buffer for empty slices: OpenCL has no zero-sized buffers.
const MIN_BYTES: usize = 4;

/// The device, its context and queue, the compiled program, and cached buffers.
pub(crate) struct Cl {
    /// What the device is.
    pub(crate) info: DeviceInfo,
    context: Context,
    queue: CommandQueue,
    #[allow(dead_code)]
    program: Program,
    kernels: HashMap<String, Kernel>,
    /// Weights wrapped once, keyed by their bytes' address and length; the `Weight` clone keeps
    /// the bytes alive as long as the buffer.
    weights: HashMap<(usize, usize), (DevBuf, Weight)>,
    /// Device-only scratch buffers, by slot.
    scratch: ScratchSlots<DevBuf>,
    /// Zeroed bytes backing views of empty slices.
    empty: [u8; MIN_BYTES],
    /// Mirrors of the running passes' scratch and constants (device allocations: on a
    /// discrete GPU they save the driver's copies at every map).
    mirrors: RefCell<Mirrors<DevBuf>>,
}

// SAFETY: the OpenCL objects are thread-safe handles except kernels, whose arguments are
// mutable state; the backend only uses a `Cl` through a mutex, one thread at a time.
unsafe impl Send for Cl {}

impl std::fmt::Debug for Cl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cl").field("info", &self.info).finish_non_exhaustive()
    }
}

/// A buffer of `context` over `bytes` bytes at `host` (or a device allocation when `host` is null).
fn create(context: &Context, flags: u64, bytes: usize, host: *mut c_void) -> Result<DevBuf, BackendError> {
    // SAFETY: `host` is null (device allocation) or points to `bytes` bytes that the caller
    // keeps alive and unmoved for the buffer's life (see `View`, `Cl::weight`).
    let mem = unsafe { create_buffer(context.get(), flags, bytes, host) }
        .map_err(|code| BackendError::Cl { what: "clCreateBuffer", code })?;
    Ok(DevBuf { mem, bytes })
}

fn cl_err(what: &'static str) -> impl Fn(opencl3::error_codes::ClError) -> BackendError {
    move |e| BackendError::Cl { what, code: e.0 }
}

impl Cl {
    /// Opens `device` and compiles the kernels for it.
    pub(crate) fn new(device: cl_device_id, info: DeviceInfo) -> Result<Self, BackendError> {
        let dev = Device::new(device);
        let context = Context::from_device(&dev).map_err(cl_err("clCreateContext"))?;
        #[allow(deprecated)]
        let queue = CommandQueue::create_default(&context, 0).map_err(cl_err("clCreateCommandQueue"))?;
        // One source string: opencl3's multi-source call mishandles Rust string slices.
        let program = Program::create_and_build_from_source(&context, &SOURCES.concat(), BUILD_OPTIONS)
            .map_err(BackendError::Compile)?;
        let mut kernels = HashMap::new();
        for name in program.kernel_names().split(';').filter(|s| !s.is_empty()) {
            let k = Kernel::create(&program, name).map_err(cl_err("clCreateKernel"))?;
            kernels.insert(name.to_string(), k);
        }
        Ok(Cl {
            info,
            context,
            queue,
            program,
            kernels,
            weights: HashMap::new(),
            scratch: ScratchSlots::default(),
            empty: [0; MIN_BYTES],
            mirrors: RefCell::new(Mirrors::default()),
        })
    }

    /// Creates a buffer over `bytes` bytes at `host` (or a device allocation when `host` is null).
    fn create(&self, flags: u64, bytes: usize, host: *mut c_void) -> Result<DevBuf, BackendError> {
        create(&self.context, flags, bytes, host)
    }

    /// Waits for every queued command.
    pub(crate) fn finish(&self) -> Result<(), BackendError> {
        self.queue.finish().map_err(cl_err("clFinish"))
    }

    /// The mirror's buffer when a pass mirrors `data` (at offset 0: OpenCL buffers have no
    /// offsets), else `None` (the caller views host memory).
    fn resident(&self, data: &[u8], access: Access) -> BackendResult<Option<View<'static>>> {
        let mut mirrors = self.mirrors.borrow_mut();
        Ok(match mirrors.access(HostRange::of(data), access, |o| o == 0, self)? {
            Place::Mirror { index, .. } => {
                Some(View { buf: None, resident: Some(mirrors.buf(index).mem), _host: PhantomData })
            }
            Place::Host => None,
        })
    }
}

impl Cl {
    /// A read-write (or write-only) view of `data`: its mirror, or its host memory.
    fn write_view<'a, T: Copy>(&self, data: &'a mut [T], access: Access) -> BackendResult<View<'a>> {
        let bytes = std::mem::size_of_val(data);
        if bytes == 0 {
            let buf = self.create(CL_MEM_READ_WRITE, MIN_BYTES, ptr::null_mut())?;
            return Ok(View::host(buf));
        }
        if let Some(v) = self.resident(bytes_of(data), access)? {
            return Ok(v);
        }
        let buf =
            self.create(CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, data.as_mut_ptr() as *mut c_void)?;
        Ok(View::host(buf))
    }
}

impl MirrorIo<DevBuf> for Cl {
    fn alloc(&self, bytes: usize) -> BackendResult<DevBuf> {
        self.create(CL_MEM_READ_WRITE, bytes.max(MIN_BYTES), ptr::null_mut())
    }

    unsafe fn upload(&self, buf: &DevBuf, offset: usize, host: *const u8, len: usize) -> BackendResult {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the caller guarantees `host..host + len` is readable.
        let src = unsafe { std::slice::from_raw_parts(host, len) };
        GpuDevice::write(self, buf.mem, offset, src)
    }

    unsafe fn download(&self, buf: &DevBuf, offset: usize, host: *mut u8, len: usize) -> BackendResult {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the caller guarantees `host..host + len` is writable and unused; the blocking
        // read waits for the queued kernels (in-order queue) and returns once it is copied.
        unsafe {
            let dst = std::slice::from_raw_parts_mut(host, len);
            let b = opencl3::memory::Buffer::<u8>::new(buf.mem);
            let res = self.queue.enqueue_read_buffer(&b, CL_BLOCKING, offset, dst, &[]);
            std::mem::forget(b);
            res.map_err(cl_err("clEnqueueReadBuffer"))?;
        }
        Ok(())
    }
}

impl GpuDevice for Cl {
    type Mem = cl_mem;
    type Buf = DevBuf;
    type View<'a> = View<'a>;

    const NAME: &'static str = "opencl";

    fn describe(&self) -> String {
        let i = &self.info;
        let kind = if i.is_gpu { "GPU" } else { "non-GPU device" };
        let mem = if i.unified_memory { "unified memory" } else { "own memory" };
        format!("OpenCL: {} ({}, {kind}, {mem}, {})", i.name, i.platform, i.version)
    }

    /// A read-only device view of `data` for one operator.
    fn view<'a, T: Copy>(&self, data: &'a [T]) -> BackendResult<View<'a>> {
        let bytes = std::mem::size_of_val(data);
        let (ptr, bytes) =
            if bytes == 0 { (self.empty.as_ptr(), MIN_BYTES) } else { (data.as_ptr() as *const u8, bytes) };
        // The device only reads a READ_ONLY buffer, so the shared borrow is respected.
        if let Some(v) = self.resident(bytes_of(data), Access::Read)? {
            return Ok(v);
        }
        let buf = self.create(CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, bytes, ptr as *mut c_void)?;
        Ok(View::host(buf))
    }

    /// A read-write device view of `data` for one operator; call [`Cl::sync`] before the host
    /// reads it again.
    fn view_mut<'a, T: Copy>(&self, data: &'a mut [T]) -> BackendResult<View<'a>> {
        self.write_view(data, Access::ReadWrite)
    }

    /// A write-only view: as [`Cl::view_mut`] (host memory is shared, nothing is copied).
    fn view_out<'a, T: Copy>(&self, data: &'a mut [T]) -> BackendResult<View<'a>> {
        self.write_view(data, Access::Write)
    }

    fn mirrors(&self) -> (&RefCell<Mirrors<DevBuf>>, &dyn MirrorIo<DevBuf>) {
        (&self.mirrors, self)
    }

    /// Waits for the queued kernels and makes the device's writes to `view` visible in the host
    /// memory it wraps (a blocking map and unmap: free on unified memory).
    fn sync(&self, view: &View<'_>) -> BackendResult {
        // A mirror's view stays on the device; the wait keeps the other views of host memory
        // alive until the kernels that read them have run.
        let Some(vbuf) = view.buf.as_ref() else { return self.finish() };
        let mut mapped: cl_mem = ptr::null_mut();
        // SAFETY: `view` is a live buffer of `bytes` bytes; the blocking map returns once the
        // device's writes are in host memory; the pointer is unmapped right away.
        unsafe {
            let buf = opencl3::memory::Buffer::<u8>::new(vbuf.mem);
            let res = self.queue.enqueue_map_buffer(
                &buf,
                CL_BLOCKING,
                CL_MAP_READ,
                0,
                vbuf.bytes,
                &mut mapped,
                &[],
            );
            // `Buffer::new` took no reference of its own: do not let its drop release ours.
            std::mem::forget(buf);
            res.map_err(cl_err("clEnqueueMapBuffer"))?;
            self.queue
                .enqueue_unmap_mem_object(vbuf.mem, mapped, &[])
                .map_err(cl_err("clEnqueueUnmapMemObject"))?;
        }
        self.finish()
    }

    /// The device buffer of a weight's bytes, wrapped on first use and kept.
    fn weight(&mut self, w: &Weight) -> BackendResult<cl_mem> {
        let data = w.data();
        let key = (data.as_ptr() as usize, data.len());
        if let Some((b, _)) = self.weights.get(&key) {
            return Ok(b.mem);
        }
        let (ptr, bytes) =
            if data.is_empty() { (self.empty.as_ptr(), MIN_BYTES) } else { (data.as_ptr(), data.len()) };
        // Read-only: the device never writes the (possibly memory-mapped, read-only) bytes.
        let buf = self.create(CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, bytes, ptr as *mut c_void)?;
        let mem = buf.mem;
        self.weights.insert(key, (buf, w.clone()));
        Ok(mem)
    }

    /// Copies `bytes` into `mem` at `offset` (a blocking write, after the queued kernels).
    fn write(&self, mem: cl_mem, offset: usize, bytes: &[u8]) -> BackendResult {
        if bytes.is_empty() {
            return Ok(());
        }
        // SAFETY: `mem` is a live buffer of at least `offset + bytes.len()` bytes (a scratch
        // buffer sized by the caller); the blocking write returns once the bytes are copied;
        // `Buffer::new` takes no reference of its own (forgotten).
        unsafe {
            let mut b = opencl3::memory::Buffer::<u8>::new(mem);
            let res = self.queue.enqueue_write_buffer(&mut b, CL_BLOCKING, offset, bytes, &[]);
            std::mem::forget(b);
            res.map_err(cl_err("clEnqueueWriteBuffer"))?;
        }
        Ok(())
    }

    /// Device-only scratch buffer number `slot` of at least `bytes` bytes (contents undefined).
    fn scratch(&mut self, slot: usize, bytes: usize) -> BackendResult<cl_mem> {
        let Cl { scratch, context, .. } = self;
        scratch.get(
            slot,
            bytes,
            MIN_BYTES,
            |b| b.mem,
            |size| create(context, CL_MEM_READ_WRITE, size, ptr::null_mut()),
        )
    }

    /// Enqueues kernel `name` over `global` work items (1 to 3 dimensions) with work groups of
    /// `local` (or the runtime's choice).
    fn run(
        &self,
        name: &str,
        args: &[Arg<cl_mem>],
        global: &[usize],
        local: Option<&[usize]>,
    ) -> Result<(), BackendError> {
        if global.contains(&0) {
            return Ok(());
        }
        let k = self.kernels.get(name).ok_or_else(|| BackendError::MissingKernel(name.to_string()))?;
        for (i, a) in args.iter().enumerate() {
            let i = i as u32;
            // SAFETY: each argument matches the kernel's declared parameter (checked by the
            // runtime: a mismatch in size returns an error), and buffers outlive the launch
            // (callers sync or finish before their views drop).
            let r = unsafe {
                match a {
                    Arg::Mem(m) => k.set_arg(i, m),
                    Arg::I32(v) => k.set_arg(i, v),
                    Arg::U32(v) => k.set_arg(i, v),
                    Arg::F32(v) => k.set_arg(i, v),
                }
            };
            r.map_err(|e| BackendError::KernelArg { kernel: name.to_string(), index: i, code: e.0 })?;
        }
        if let Some(l) = local {
            debug_assert_eq!(l.len(), global.len());
        }
        // SAFETY: `global` (and `local`, same length) outlive the call, which copies them.
        unsafe {
            self.queue.enqueue_nd_range_kernel(
                k.get(),
                global.len() as u32,
                ptr::null(),
                global.as_ptr(),
                local.map_or(ptr::null(), |l| l.as_ptr()),
                &[],
            )
        }
        .map_err(|e| BackendError::Launch { kernel: name.to_string(), code: e.0 })?;
        Ok(())
    }
}
