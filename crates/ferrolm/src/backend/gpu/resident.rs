//! Device mirrors of host buffers for the length of a forward pass ([`Backend::begin_pass`]), so
//! that one operator's output stays on the device for the next and a pass copies little
//! between host and device.
//!
//! A [`Mirrors`] holds, for each registered host range, a device buffer of the same size and
//! which side holds the current contents ([`State`]). A device's views consult it: a view of
//! memory inside an active mirror is the mirror's buffer (at an offset), copied to only when
//! the host holds newer data, and never copied back by the operator; the host gets the data
//! only when it asks ([`Mirrors::host_read`]).
//!
//! Invariants:
//! - Active mirrors never overlap. A mirror is active while at least one pass that registered
//!   it has not ended; an inactive mirror is kept for reuse by a later pass registering the same
//!   range, and dropped when a new range overlaps it or when too many are kept.
//! - `Host` means the device copy is stale, `Device` that the host copy is, `Both` that they
//!   agree. A scratch range starts a pass as `Host` (its first operator usually overwrites it
//!   whole, which needs no copy). A constant starts as `Both` when it was mirrored before with
//!   the same contents (a hash of its bytes) and the device has not written it since.
//! - A view of part of a mirror whose device copy is stale uploads the whole mirror first, so
//!   the device copy is never partly stale.
//!
//! [`Backend::begin_pass`]: crate::backend::Backend::begin_pass

use crate::backend::{BackendError, BackendResult, HostRange};

/// Inactive mirrors kept for reuse at most; the least recently used go first.
const KEEP_INACTIVE: usize = 64;

/// Which copy of a mirrored range is current.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// The host's; the device copy is stale.
    Host,
    /// The device's; the host copy is stale.
    Device,
    /// Both agree.
    Both,
}

/// How an operator uses a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Reads it.
    Read,
    /// Reads and writes it (in place).
    ReadWrite,
    /// Writes every byte of it without reading.
    Write,
}

/// The copies a device makes for its mirrors.
pub(crate) trait MirrorIo<B> {
    /// A device buffer of `bytes` bytes.
    fn alloc(&self, bytes: usize) -> BackendResult<B>;

    /// Copies `len` bytes of host memory at `host` into `buf` at byte `offset`.
    ///
    /// # Safety
    /// `host..host + len` is readable host memory.
    unsafe fn upload(&self, buf: &B, offset: usize, host: *const u8, len: usize) -> BackendResult;

    /// Copies `len` bytes of `buf` at byte `offset` into host memory at `host`, once the queued
    /// work is done.
    ///
    /// # Safety
    /// `host..host + len` is writable host memory that nothing else uses meanwhile.
    unsafe fn download(&self, buf: &B, offset: usize, host: *mut u8, len: usize) -> BackendResult;
}

/// One mirrored range.
#[derive(Debug)]
struct Mirror<B> {
    range: HostRange,
    buf: B,
    state: State,
    /// The passes that registered it and have not ended.
    passes: Vec<u64>,
    /// For a constant: the hash of its bytes when it was registered.
    hash: Option<u64>,
    /// Whether the device wrote it since it was registered.
    device_wrote: bool,
    /// The pass that last used it (for dropping the least recently used).
    last_pass: u64,
}

/// Where a view of host memory lives.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// In mirror `index`'s buffer at byte `offset`, current there.
    Mirror { index: usize, offset: usize },
    /// In host memory (no active mirror holds it, or the host copy was made current for a
    /// device that cannot view the mirror at that offset).
    Host,
}

/// The mirrors of a device.
#[derive(Debug)]
pub(crate) struct Mirrors<B> {
    mirrors: Vec<Mirror<B>>,
    next_pass: u64,
}

impl<B> Default for Mirrors<B> {
    fn default() -> Self {
        Mirrors { mirrors: Vec::new(), next_pass: 1 }
    }
}

/// A cheap hash of the bytes of `data` (8 at a time), to notice a constant that changed.
pub(crate) fn hash_f32(data: &[f32]) -> u64 {
    let mut h = data.len() as u64;
    let mut it = data.chunks_exact(2);
    for p in &mut it {
        let w = u64::from(p[0].to_bits()) | (u64::from(p[1].to_bits()) << 32);
        h = (h.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    for x in it.remainder() {
        h = (h.rotate_left(5) ^ u64::from(x.to_bits())).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h
}

impl<B> Mirrors<B> {
    /// Registers a pass's scratch ranges and constants (with their hashes); returns its id.
    /// Fails when a scratch range overlaps one another pass is using.
    pub(crate) fn begin(
        &mut self,
        scratch: &[HostRange],
        constants: &[(HostRange, u64)],
        io: &dyn MirrorIo<B>,
    ) -> BackendResult<u64> {
        let pass = self.next_pass;
        self.next_pass += 1;
        let all = scratch.iter().map(|r| (*r, None)).chain(constants.iter().map(|(r, h)| (*r, Some(*h))));
        for (range, hash) in all {
            if range.bytes == 0 {
                continue;
            }
            if let Err(e) = self.register(pass, range, hash, io) {
                self.end(pass);
                return Err(e);
            }
        }
        Ok(pass)
    }

    fn register(
        &mut self,
        pass: u64,
        range: HostRange,
        hash: Option<u64>,
        io: &dyn MirrorIo<B>,
    ) -> BackendResult {
        if let Some(m) = self.mirrors.iter_mut().find(|m| m.range == range) {
            let reused_constant = hash.is_some() && m.hash == hash && !m.device_wrote;
            if !m.passes.is_empty() {
                // Two passes share it: only a constant of the same contents may be.
                if !reused_constant {
                    return Err(in_use(range));
                }
            } else {
                m.state = if reused_constant && m.state != State::Host { State::Both } else { State::Host };
                m.hash = hash;
                m.device_wrote = false;
            }
            m.passes.push(pass);
            m.last_pass = pass;
            return Ok(());
        }
        if self.mirrors.iter().any(|m| !m.passes.is_empty() && m.range.overlaps(&range)) {
            return Err(in_use(range));
        }
        self.mirrors.retain(|m| !m.range.overlaps(&range));
        let buf = io.alloc(range.bytes)?;
        self.mirrors.push(Mirror {
            range,
            buf,
            state: State::Host,
            passes: vec![pass],
            hash,
            device_wrote: false,
            last_pass: pass,
        });
        Ok(())
    }

    /// Ends pass `pass`: its mirrors become inactive unless another pass uses them; the least
    /// recently used inactive ones beyond [`KEEP_INACTIVE`] are freed.
    pub(crate) fn end(&mut self, pass: u64) {
        for m in &mut self.mirrors {
            m.passes.retain(|&p| p != pass);
        }
        let inactive = self.mirrors.iter().filter(|m| m.passes.is_empty()).count();
        if inactive > KEEP_INACTIVE {
            let mut ages: Vec<u64> =
                self.mirrors.iter().filter(|m| m.passes.is_empty()).map(|m| m.last_pass).collect();
            ages.sort_unstable();
            let cutoff = ages[inactive - KEEP_INACTIVE - 1];
            self.mirrors.retain(|m| !m.passes.is_empty() || m.last_pass > cutoff);
        }
    }

    /// Prepares a view of `range` for `access` by a device that can view mirror buffers at
    /// byte offsets for which `offset_ok` holds: copies what must be copied, updates the state,
    /// and says where the view lives.
    pub(crate) fn access(
        &mut self,
        range: HostRange,
        access: Access,
        offset_ok: impl Fn(usize) -> bool,
        io: &dyn MirrorIo<B>,
    ) -> BackendResult<Place> {
        let Some(index) = self.mirrors.iter().position(|m| !m.passes.is_empty() && m.range.overlaps(&range))
        else {
            return Ok(Place::Host);
        };
        let m = &self.mirrors[index];
        let offset = range.addr.saturating_sub(m.range.addr);
        if !m.range.contains(&range) || !offset_ok(offset) {
            // The host views it: the copy of every mirror it touches must be current there, and
            // a write makes the device's stale.
            for m in self.mirrors.iter_mut().filter(|m| !m.passes.is_empty() && m.range.overlaps(&range)) {
                if m.state == State::Device {
                    // SAFETY: the mirrored range is registered host memory, alive and unmoved
                    // during the pass, and not in use by the host while an operator runs.
                    unsafe { io.download(&m.buf, 0, m.range.addr as *mut u8, m.range.bytes)? };
                    m.state = State::Both;
                }
                if access != Access::Read {
                    m.state = State::Host;
                }
            }
            return Ok(Place::Host);
        }
        let m = &mut self.mirrors[index];
        let whole_write = access == Access::Write && range == m.range;
        if m.state == State::Host && !whole_write {
            // SAFETY: as above; the host holds the current bytes.
            unsafe { io.upload(&m.buf, 0, m.range.addr as *const u8, m.range.bytes)? };
            m.state = State::Both;
        }
        if access != Access::Read {
            m.state = State::Device;
            m.device_wrote = true;
        }
        Ok(Place::Mirror { index, offset })
    }

    /// The buffer of mirror `index` (from [`Place::Mirror`]).
    pub(crate) fn buf(&self, index: usize) -> &B {
        &self.mirrors[index].buf
    }

    /// Makes the host copy of `data`'s range current (a download of that range when the device
    /// holds newer data). `data` need not be mirrored.
    pub(crate) fn host_read(&mut self, data: &mut [u8], io: &dyn MirrorIo<B>) -> BackendResult {
        let range = HostRange::of(data);
        for m in self.mirrors.iter().filter(|m| !m.passes.is_empty() && m.range.overlaps(&range)) {
            if m.state != State::Device {
                continue;
            }
            let (lo, hi) = (range.addr.max(m.range.addr), range.end().min(m.range.end()));
            // SAFETY: `lo..hi` lies in `data`, which the caller lends mutably.
            unsafe { io.download(&m.buf, lo - m.range.addr, lo as *mut u8, hi - lo)? };
        }
        Ok(())
    }

    /// Notes that the host wrote `data`'s range: uploads it where the device copy was current
    /// (so it stays current).
    pub(crate) fn host_wrote(&mut self, data: &[u8], io: &dyn MirrorIo<B>) -> BackendResult {
        let range = HostRange::of(data);
        for m in self.mirrors.iter_mut().filter(|m| !m.passes.is_empty() && m.range.overlaps(&range)) {
            if m.state == State::Host {
                continue;
            }
            let (lo, hi) = (range.addr.max(m.range.addr), range.end().min(m.range.end()));
            // SAFETY: `lo..hi` lies in `data`, which the caller lends.
            unsafe { io.upload(&m.buf, lo - m.range.addr, lo as *const u8, hi - lo)? };
            m.device_wrote = true; // the device copy no longer matches the constant's hash
        }
        Ok(())
    }

    /// Frees every mirror.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA device frees them first
    pub(crate) fn clear(&mut self) {
        self.mirrors.clear();
    }

    /// The state of the active mirror of exactly `range`, for tests.
    #[cfg(test)]
    fn state_of(&self, range: HostRange) -> Option<State> {
        self.mirrors.iter().find(|m| m.range == range && !m.passes.is_empty()).map(|m| m.state)
    }
}

fn in_use(range: HostRange) -> BackendError {
    BackendError::Unsupported {
        backend: "gpu",
        what: format!(
            "a forward pass over host memory {:#x}..{:#x} that another pass is using",
            range.addr,
            range.end()
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// A device whose buffers are host vectors, logging its copies.
    #[derive(Default)]
    struct FakeIo {
        log: RefCell<Vec<String>>,
    }

    type Buf = RefCell<Vec<u8>>;

    impl MirrorIo<Buf> for FakeIo {
        fn alloc(&self, bytes: usize) -> BackendResult<Buf> {
            self.log.borrow_mut().push(format!("alloc {bytes}"));
            Ok(RefCell::new(vec![0xAA; bytes]))
        }
        unsafe fn upload(&self, buf: &Buf, offset: usize, host: *const u8, len: usize) -> BackendResult {
            self.log.borrow_mut().push(format!("up {offset}+{len}"));
            // SAFETY: the caller's contract.
            let src = unsafe { std::slice::from_raw_parts(host, len) };
            buf.borrow_mut()[offset..offset + len].copy_from_slice(src);
            Ok(())
        }
        unsafe fn download(&self, buf: &Buf, offset: usize, host: *mut u8, len: usize) -> BackendResult {
            self.log.borrow_mut().push(format!("down {offset}+{len}"));
            // SAFETY: the caller's contract.
            let dst = unsafe { std::slice::from_raw_parts_mut(host, len) };
            dst.copy_from_slice(&buf.borrow()[offset..offset + len]);
            Ok(())
        }
    }

    impl FakeIo {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.log.borrow_mut())
        }
    }

    fn any(_: usize) -> bool {
        true
    }

    /// A device kernel writing `v` into every byte of the view.
    fn device_fill(m: &Mirrors<Buf>, place: &Place, len: usize, v: u8) {
        let Place::Mirror { index, offset } = *place else { panic!("not on the device: {place:?}") };
        m.buf(index).borrow_mut()[offset..offset + len].fill(v);
    }

    #[test]
    fn an_output_overwritten_whole_is_never_copied_and_reaches_the_host_only_when_asked() {
        let io = FakeIo::default();
        let mut m = Mirrors::default();
        let mut x = vec![1u8; 16];
        let r = HostRange::of(&x);
        let pass = m.begin(&[r], &[], &io).expect("ok");
        assert_eq!(io.take(), ["alloc 16"]);
        let p = m.access(r, Access::Write, any, &io).expect("ok");
        device_fill(&m, &p, 16, 7);
        assert_eq!(io.take(), Vec::<String>::new(), "a whole write needs no upload");
        assert_eq!(m.state_of(r), Some(State::Device));
        // A read by the next operator stays on the device.
        assert_eq!(m.access(r, Access::Read, any, &io).expect("ok"), Place::Mirror { index: 0, offset: 0 });
        assert_eq!(x, [1; 16], "the host copy is untouched until asked");
        m.host_read(&mut x[4..8], &io).expect("ok");
        assert_eq!(io.take(), ["down 4+4"]);
        assert_eq!(&x[..8], [1, 1, 1, 1, 7, 7, 7, 7]);
        m.end(pass);
        assert_eq!(m.access(r, Access::Read, any, &io).expect("ok"), Place::Host, "inactive after the pass");
    }

    #[test]
    fn a_partial_write_or_a_read_of_stale_device_data_uploads_the_whole_range_first() {
        let io = FakeIo::default();
        let mut m = Mirrors::default();
        let x: Vec<u8> = (0..16).collect();
        let r = HostRange::of(&x);
        m.begin(&[r], &[], &io).expect("ok");
        io.take();
        let part = HostRange::of(&x[8..12]);
        let p = m.access(part, Access::Write, any, &io).expect("ok");
        assert_eq!(p, Place::Mirror { index: 0, offset: 8 });
        assert_eq!(io.take(), ["up 0+16"]);
        device_fill(&m, &p, 4, 99);
        let got = m.buf(0).borrow().clone();
        assert_eq!(&got[..8], &x[..8], "the rest of the range holds the host's bytes");
        assert_eq!(&got[8..12], [99; 4]);
        // Reading again copies nothing.
        m.access(r, Access::Read, any, &io).expect("ok");
        assert_eq!(io.take(), Vec::<String>::new());
    }

    #[test]
    fn host_writes_reach_the_device_and_offsets_the_device_cannot_view_go_through_the_host() {
        let io = FakeIo::default();
        let mut m = Mirrors::default();
        let mut x = vec![0u8; 16];
        let r = HostRange::of(&x);
        m.begin(&[r], &[], &io).expect("ok");
        let p = m.access(r, Access::Write, any, &io).expect("ok");
        device_fill(&m, &p, 16, 5);
        io.take();
        x[0..4].fill(9);
        m.host_wrote(&x[0..4], &io).expect("ok");
        assert_eq!(io.take(), ["up 0+4"]);
        assert_eq!(&m.buf(0).borrow()[..6], [9, 9, 9, 9, 5, 5]);
        // A device that can only view offset 0: a read at offset 4 is served from the host.
        let only_zero = |o: usize| o == 0;
        let part = HostRange::of(&x[4..8]);
        assert_eq!(m.access(part, Access::Read, only_zero, &io).expect("ok"), Place::Host);
        assert_eq!(io.take(), ["down 0+16"]);
        assert_eq!(&x[..6], [9, 9, 9, 9, 5, 5]);
        assert_eq!(m.state_of(r), Some(State::Both));
        // A write there makes the device copy stale, so the next device view uploads.
        assert_eq!(m.access(part, Access::ReadWrite, only_zero, &io).expect("ok"), Place::Host);
        x[4..8].fill(1);
        assert_eq!(m.state_of(r), Some(State::Host));
        m.access(r, Access::Read, only_zero, &io).expect("ok");
        assert_eq!(io.take(), ["up 0+16"]);
        assert_eq!(&m.buf(0).borrow()[..8], [9, 9, 9, 9, 1, 1, 1, 1]);
    }

    #[test]
    fn a_view_across_two_mirrors_brings_both_to_the_host() {
        let io = FakeIo::default();
        let mut m = Mirrors::default();
        let x = vec![0u8; 16];
        let (a, b) = (HostRange::of(&x[..8]), HostRange::of(&x[8..]));
        m.begin(&[a, b], &[], &io).expect("ok");
        for r in [a, b] {
            let p = m.access(r, Access::Write, any, &io).expect("ok");
            device_fill(&m, &p, 8, 3);
        }
        io.take();
        assert_eq!(m.access(HostRange::of(&x[4..12]), Access::Read, any, &io).expect("ok"), Place::Host);
        assert_eq!(io.take(), ["down 0+8", "down 0+8"]);
        assert_eq!(x, [3; 16]);
        assert_eq!((m.state_of(a), m.state_of(b)), (Some(State::Both), Some(State::Both)));
    }

    #[test]
    fn constants_stay_on_the_device_across_passes_while_their_bytes_do_not_change() {
        let io = FakeIo::default();
        let mut m = Mirrors::default();
        let mut w = vec![0.5f32; 8];
        let c = |w: &[f32]| (HostRange::of(w), hash_f32(w));
        let p1 = m.begin(&[], &[c(&w)], &io).expect("ok");
        m.access(HostRange::of(&w), Access::Read, any, &io).expect("ok");
        assert_eq!(io.take(), ["alloc 32", "up 0+32"]);
        m.end(p1);
        let p2 = m.begin(&[], &[c(&w)], &io).expect("ok");
        m.access(HostRange::of(&w), Access::Read, any, &io).expect("ok");
        assert_eq!(io.take(), Vec::<String>::new(), "same bytes: kept");
        // Two passes may share a constant.
        let p3 = m.begin(&[], &[c(&w)], &io).expect("ok");
        m.end(p2);
        m.end(p3);
        w[3] = 2.0;
        let p4 = m.begin(&[], &[c(&w)], &io).expect("ok");
        m.access(HostRange::of(&w), Access::Read, any, &io).expect("ok");
        assert_eq!(io.take(), ["up 0+32"], "changed bytes: uploaded again");
        m.end(p4);
    }

    #[test]
    fn scratch_of_a_running_pass_is_refused_to_another_and_stale_mirrors_are_replaced() {
        let io = FakeIo::default();
        let mut m = Mirrors::default();
        let x = vec![0u8; 32];
        let whole = HostRange::of(&x);
        let p1 = m.begin(&[whole], &[], &io).expect("ok");
        assert!(m.begin(&[HostRange::of(&x[8..16])], &[], &io).is_err());
        m.end(p1);
        // The same memory, cut differently by a later pass: the old mirror goes.
        let p2 = m.begin(&[HostRange::of(&x[..16]), HostRange::of(&x[16..])], &[], &io).expect("ok");
        assert_eq!(m.mirrors.len(), 2);
        m.end(p2);
        // Many inactive mirrors: the oldest are freed.
        let bufs: Vec<Vec<u8>> = (0..KEEP_INACTIVE + 10).map(|_| vec![0u8; 4]).collect();
        for b in &bufs {
            let p = m.begin(&[HostRange::of(b)], &[], &io).expect("ok");
            m.end(p);
        }
        assert_eq!(m.mirrors.len(), KEEP_INACTIVE);
    }
}
