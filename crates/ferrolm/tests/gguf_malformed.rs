//! Malformed GGUF files: every defect gives a specific, clearly worded error, never a panic, an
//! out-of-bounds read or an absurd allocation.
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ferrolm::GgmlType;
use ferrolm::format::gguf::{GgufError, GgufFile, MetaArray, MetaValue};
use ferrolm::format::gguf_write::GgufWriter;

// ---------------------------------------------------------------------------------------------
// Allocation accounting: a global allocator that tracks, per thread, live and peak heap bytes so
// that a test can bound what parsing one file allocates while other tests run in parallel.

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    // `try_with` fails only while the thread's locals are being torn down; skip counting then.
    let _ = LIVE.try_with(|live| {
        let now = live.get().wrapping_add(delta);
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every method forwards to the system allocator with the caller's arguments unchanged and
// only updates plain thread-local counters (which never allocate) besides.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours, forwarded.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            track(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours, forwarded.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            track(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours, forwarded.
        unsafe { System.dealloc(ptr, layout) };
        track(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours, forwarded.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            track(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result with the peak number of heap bytes it had live at once on
/// this thread, beyond what was live when it started.
fn peak_alloc<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let r = f();
    let peak = PEAK.with(Cell::get);
    (r, (peak - start).max(0) as usize)
}

// ---------------------------------------------------------------------------------------------
// Raw image builder: lets a test write any bytes it likes, including ones the writer refuses.

/// GGUF value type ids.
const T_U8: u32 = 0;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;

#[derive(Clone, Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &[u8]) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s);
        self
    }
    fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key.as_bytes()).u32(T_U32).u32(v)
    }
    fn tensor(&mut self, name: &[u8], dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    fn pad(&mut self, align: usize) -> &mut Self {
        self.0.resize(self.0.len().next_multiple_of(align), 0);
        self
    }
    fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    fn bytes(&self) -> Vec<u8> {
        self.0.clone()
    }
}

/// Parses `$bytes`, asserts it fails with an error matching `$pat` whose message contains `$msg`,
/// and evaluates to the error.
macro_rules! assert_err {
    ($bytes:expr, $pat:pat, $msg:expr) => {
        assert_err!($bytes, $pat if true, $msg)
    };
    ($bytes:expr, $pat:pat if $guard:expr, $msg:expr) => {{
        match GgufFile::from_bytes($bytes) {
            Ok(f) => panic!("malformed file parsed: {f:?}"),
            Err(e) => {
                assert!(matches!(&e, $pat if $guard), "wrong error variant: {e:?}");
                let s = e.to_string();
                assert!(s.contains($msg), "message {s:?} does not contain {:?}", $msg);
                e
            }
        }
    }};
}

/// A small valid file with metadata of several types (nested arrays included) and three tensors.
fn small_valid() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add("general.architecture", MetaValue::String("llama".into())).unwrap();
    w.add("general.name", MetaValue::String("tiny".into())).unwrap();
    w.add("llama.context_length", MetaValue::U32(128)).unwrap();
    w.add("llama.rope.freq_base", MetaValue::F32(10000.0)).unwrap();
    w.add("t.flag", MetaValue::Bool(true)).unwrap();
    w.add("t.i64", MetaValue::I64(-5)).unwrap();
    let tokens = MetaArray::String(vec!["<s>".into(), "</s>".into(), "a".into()]);
    w.add("tokenizer.ggml.tokens", MetaValue::Array(tokens)).unwrap();
    w.add("tokenizer.ggml.scores", MetaValue::Array(MetaArray::F32(vec![0.0, -1.0, -2.0]))).unwrap();
    let nested = MetaArray::Array(vec![MetaArray::U8(vec![1, 2]), MetaArray::String(vec!["x".into()])]);
    w.add("t.nested", MetaValue::Array(nested)).unwrap();
    let f32s: Vec<u8> = (0..8u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.add_tensor("a.weight", &[4, 2], GgmlType::F32, f32s).unwrap();
    w.add_tensor("b.weight", &[32, 2], GgmlType::Q8_0, (0..68).map(|i| i as u8).collect()).unwrap();
    w.add_tensor("c.bias", &[16], GgmlType::F16, vec![7; 32]).unwrap();
    w.to_bytes()
}

/// Reads everything an accepted file offers, as a consumer would.
fn touch_all(f: &GgufFile) -> u64 {
    let mut acc = 0u64;
    for (k, v) in f.metadata() {
        assert!(f.get(k).is_some_and(|g| std::ptr::eq(g, v)));
        acc = acc.wrapping_add(v.to_string().len() as u64);
        let _ = (f.get_str(k), f.get_u64(k), f.get_f32(k), f.opt_bool(k), f.get_str_array(k));
    }
    for t in f.tensors() {
        let d = f.tensor_data(t);
        assert_eq!(d.len() as u64, t.size);
        acc = acc.wrapping_add(d.iter().map(|&b| u64::from(b)).sum::<u64>());
    }
    acc
}

// ---------------------------------------------------------------------------------------------

#[test]
fn valid_base_file_parses() {
    let f = GgufFile::from_bytes(small_valid()).unwrap();
    assert_eq!(f.tensors().len(), 3);
    assert_eq!(f.architecture().unwrap(), "llama");
    touch_all(&f);
}

#[test]
fn bad_magic() {
    let mut b = small_valid();
    b[..4].copy_from_slice(b"GGML");
    assert_err!(b, GgufError::BadMagic(m) if m == b"GGML", "not a GGUF file");
    let mut b = small_valid();
    b[..4].copy_from_slice(b"FUGG");
    assert_err!(b, GgufError::BadMagic(_), "expected \"GGUF\"");
    assert_err!(vec![0u8; 64], GgufError::BadMagic([0, 0, 0, 0]), "magic bytes");
}

#[test]
fn empty_and_tiny_inputs() {
    for n in 0..4 {
        assert_err!(b"GGUF"[..n].to_vec(), GgufError::Truncated { what: "magic", .. }, "truncated");
    }
    // An empty file on disk goes through the memory-map path.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.gguf");
    std::fs::write(&path, b"").unwrap();
    let e = GgufFile::open(&path).unwrap_err();
    assert!(matches!(e, GgufError::Truncated { .. } | GgufError::Io { .. }), "{e:?}");
}

#[test]
fn unsupported_versions() {
    for v in [0u32, 1, 4, 0x0300_0000, u32::MAX] {
        let e = assert_err!(Raw::header(v, 0, 0).bytes(), GgufError::UnsupportedVersion(x) if *x == v, "unsupported GGUF version");
        assert!(e.to_string().contains(&v.to_string()));
    }
    // Version 2 and 3 share the layout.
    for v in [2, 3] {
        assert_eq!(GgufFile::from_bytes(Raw::header(v, 0, 0).bytes()).unwrap().version(), v);
    }
}

/// Cutting the file anywhere before the end of the last tensor's data must fail: inside the header,
/// metadata and tensor table with a truncation (or impossible-count) error, inside the padding or
/// the data with the out-of-bounds check.
#[test]
fn truncation_at_every_offset() {
    let full = small_valid();
    let f = GgufFile::from_bytes(full.clone()).unwrap();
    let data_offset = f.data_offset() as usize;
    let data_end = f.tensors().iter().map(|t| (f.data_offset() + t.offset + t.size) as usize).max().unwrap();
    assert!(data_offset > 200 && data_end <= full.len());
    for cut in 0..data_end {
        let e = GgufFile::from_bytes(full[..cut].to_vec()).unwrap_err();
        if cut < data_offset - 31 {
            // Inside the header, metadata or tensor table (the table ends at most 31 padding bytes
            // before the data section).
            assert!(
                matches!(
                    e,
                    GgufError::Truncated { .. }
                        | GgufError::AbsurdCount { .. }
                        | GgufError::DataOutOfBounds { .. }
                ),
                "cut at {cut}: {e:?}"
            );
            if let GgufError::Truncated { offset, needed, available, .. } = e {
                assert!(offset <= cut as u64 && needed > available, "cut at {cut}: {e:?}");
            }
        } else if cut >= data_offset {
            assert!(matches!(e, GgufError::DataOutOfBounds { .. }), "cut at {cut}: {e:?}");
            assert!(e.to_string().contains("runs past the end of the file"));
        }
    }
    // Cutting only trailing padding after the last tensor is harmless.
    for cut in data_end..=full.len() {
        touch_all(&GgufFile::from_bytes(full[..cut].to_vec()).unwrap());
    }
    // The same through the memory-mapped path.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.gguf");
    std::fs::write(&path, &full[..data_end - 1]).unwrap();
    assert!(matches!(GgufFile::open(&path), Err(GgufError::DataOutOfBounds { .. })));
}

#[test]
fn absurd_counts() {
    for count in [u64::MAX, 1 << 40, 1 << 20] {
        let mut r = Raw::header(3, count, 0);
        r.zeros(1000);
        let e = assert_err!(r.bytes(), GgufError::AbsurdCount { what: "tensor", .. }, "tensor count");
        assert!(e.to_string().contains(&count.to_string()));
        let mut r = Raw::header(3, 0, count);
        r.zeros(1000);
        assert_err!(r.bytes(), GgufError::AbsurdCount { what: "metadata", .. }, "metadata count");
    }
}

#[test]
fn absurd_string_lengths() {
    for len in [u64::MAX, 1 << 40, 1000] {
        // Metadata key.
        let mut r = Raw::header(3, 0, 1);
        r.u64(len).zeros(100);
        assert_err!(r.bytes(), GgufError::Truncated { what: "metadata key", .. }, "needs");
        // String value.
        let mut r = Raw::header(3, 0, 1);
        r.str(b"k").u32(T_STRING).u64(len).zeros(100);
        assert_err!(r.bytes(), GgufError::Truncated { what: "metadata string", .. }, "metadata string");
        // Element of a string array.
        let mut r = Raw::header(3, 0, 1);
        r.str(b"k").u32(T_ARRAY).u32(T_STRING).u64(2).str(b"ok").u64(len).zeros(100);
        assert_err!(r.bytes(), GgufError::Truncated { what: "array string", .. }, "needs");
        // Tensor name.
        let mut r = Raw::header(3, 1, 0);
        r.u64(len).zeros(100);
        assert_err!(r.bytes(), GgufError::Truncated { what: "tensor name", .. }, "tensor name");
    }
}

#[test]
fn absurd_array_lengths() {
    let absurd = |elem: u32, n: u64| {
        let mut r = Raw::header(3, 0, 1);
        r.str(b"k").u32(T_ARRAY).u32(elem).u64(n).zeros(200);
        r.bytes()
    };
    for n in [u64::MAX, 1 << 62, 1 << 40, 1000] {
        for elem in 0..=12 {
            let e = assert_err!(
                absurd(elem, n),
                GgufError::AbsurdCount { what: "array element", .. },
                "array element count"
            );
            assert!(e.to_string().contains(&n.to_string()));
        }
    }
    // Nested: an absurd inner array inside a plausible outer one.
    for n in [u64::MAX, 1 << 40] {
        let mut r = Raw::header(3, 0, 1);
        r.str(b"k").u32(T_ARRAY).u32(T_ARRAY).u64(2);
        r.u32(T_U8).u64(1).u8(5); // first inner array: fine
        r.u32(T_I32).u64(n).zeros(200); // second: absurd
        assert_err!(r.bytes(), GgufError::AbsurdCount { count, .. } if *count == n, "array element count");
    }
}

/// `depth` arrays nested in each other, the innermost holding one u8.
fn nested(depth: usize) -> Vec<u8> {
    let mut r = Raw::header(3, 0, 1);
    r.str(b"deep").u32(T_ARRAY);
    for _ in 1..depth {
        r.u32(T_ARRAY).u64(1);
    }
    r.u32(T_U8).u64(1).u8(7);
    r.bytes()
}

#[test]
fn deep_nesting() {
    let f = GgufFile::from_bytes(nested(8)).unwrap();
    let mut a = f.get_array("deep").unwrap();
    let mut depth = 1;
    while let MetaArray::Array(v) = a {
        a = &v[0];
        depth += 1;
    }
    assert_eq!((depth, a), (8, &MetaArray::U8(vec![7])));
    assert_err!(nested(9), GgufError::TooDeep(k) if k == "deep", "nested too deeply");
    // Far deeper than any stack could recurse: still a clean error.
    assert_err!(nested(200_000), GgufError::TooDeep(_), "nested too deeply");
}

#[test]
fn unknown_value_types() {
    for ty in [13u32, 100, u32::MAX] {
        let mut r = Raw::header(3, 0, 1);
        r.str(b"k").u32(ty).zeros(16);
        let e = assert_err!(r.bytes(), GgufError::UnknownValueType { ty: t, .. } if *t == ty, "unknown metadata value type");
        assert!(e.to_string().contains("'k'"));
        // As an array element type.
        let mut r = Raw::header(3, 0, 1);
        r.str(b"k").u32(T_ARRAY).u32(ty).u64(1).zeros(16);
        assert_err!(r.bytes(), GgufError::UnknownValueType { .. }, "unknown metadata value type");
    }
}

/// One tensor with the given table entry, followed by `data` bytes of data.
fn one_tensor(dims: &[u64], ty: u32, offset: u64, data: usize) -> Vec<u8> {
    let mut r = Raw::header(3, 1, 0);
    r.tensor(b"t", dims, ty, offset).pad(32).zeros(data);
    r.bytes()
}

#[test]
fn unknown_tensor_types() {
    for id in [4u32, 5, 31, 36, 1000, u32::MAX] {
        let e = assert_err!(one_tensor(&[32], id, 0, 4096), GgufError::UnknownTensorType { id: i, .. } if *i == id, "unknown type id");
        assert!(e.to_string().contains("'t'"));
    }
}

#[test]
fn bad_dimension_counts() {
    for n_dims in [0u32, 5, 1000, u32::MAX] {
        let mut r = Raw::header(3, 1, 0);
        r.str(b"t").u32(n_dims).zeros(256);
        assert_err!(r.bytes(), GgufError::BadShape { .. }, "invalid shape");
    }
}

#[test]
fn bad_dimensions() {
    let f32 = GgmlType::F32.id();
    let cases: [&[u64]; 8] = [
        &[0],
        &[4, 0],
        &[4, 1, 1, 0],
        &[1 << 32, 1 << 32], // product overflows u64
        &[u64::MAX],         // more elements than GGML's i64 allows
        &[1 << 62, 4],       // product overflows i64
        &[1 << 62],          // fits i64, but its F32 byte size overflows u64
        &[1 << 40, 1 << 40], // product overflows
    ];
    for dims in cases {
        let e = assert_err!(one_tensor(dims, f32, 0, 64), GgufError::BadShape { .. }, "invalid shape");
        assert!(e.to_string().contains("tensor 't'"), "{dims:?}: {e}");
    }
    // Huge but representable: caught by the bounds check instead.
    assert_err!(one_tensor(&[1 << 40], f32, 0, 64), GgufError::DataOutOfBounds { .. }, "runs past the end");
}

#[test]
fn rows_not_a_whole_number_of_blocks() {
    let e = assert_err!(
        one_tensor(&[100, 2], GgmlType::Q4_K.id(), 0, 4096),
        GgufError::NotBlockAligned { ne0: 100, block: 256, .. },
        "not a multiple"
    );
    assert!(e.to_string().contains("Q4_K"));
    assert_err!(
        one_tensor(&[33], GgmlType::Q8_0.id(), 0, 4096),
        GgufError::NotBlockAligned { .. },
        "block size 32"
    );
}

#[test]
fn tensor_data_past_the_end() {
    // 1000 f32 = 4000 bytes, only 64 present.
    let e =
        assert_err!(one_tensor(&[1000], 0, 0, 64), GgufError::DataOutOfBounds { .. }, "runs past the end");
    assert!(e.to_string().contains("'t'"));
    // One byte short.
    assert_err!(one_tensor(&[16], 0, 0, 63), GgufError::DataOutOfBounds { .. }, "runs past the end");
    assert!(GgufFile::from_bytes(one_tensor(&[16], 0, 0, 64)).is_ok());
    // Offsets whose sum with the data offset overflows.
    for off in [!31u64, 1 << 63, 1 << 40] {
        assert_err!(one_tensor(&[8], 0, off, 64), GgufError::DataOutOfBounds { .. }, "runs past the end");
    }
}

#[test]
fn overlapping_tensors() {
    for (off_a, off_b) in [(0u64, 0u64), (0, 32), (32, 0), (32, 64)] {
        let mut r = Raw::header(3, 2, 0);
        r.tensor(b"a", &[32], 0, off_a).tensor(b"b", &[16], 0, off_b).pad(32).zeros(512);
        let e = assert_err!(r.bytes(), GgufError::Overlap { .. }, "overlap");
        assert!(e.to_string().contains("'a'") && e.to_string().contains("'b'"));
    }
    // Adjacent is fine, in any table order.
    let mut r = Raw::header(3, 3, 0);
    r.tensor(b"a", &[32], 0, 64).tensor(b"b", &[8], 0, 0).tensor(b"c", &[8], 0, 32).pad(32).zeros(256);
    assert!(GgufFile::from_bytes(r.bytes()).is_ok());
    // Non-adjacent in offset order: a big one covering two others.
    let mut r = Raw::header(3, 3, 0);
    r.tensor(b"big", &[64], 0, 0).tensor(b"x", &[8], 0, 64).tensor(b"y", &[8], 0, 128).pad(32).zeros(512);
    assert_err!(r.bytes(), GgufError::Overlap { .. }, "overlap");
}

#[test]
fn misaligned_offsets() {
    for off in [1u64, 4, 16, 33] {
        assert_err!(
            one_tensor(&[8], 0, off, 256),
            GgufError::Misaligned { alignment: 32, .. },
            "not aligned to 32"
        );
    }
    // With a custom alignment.
    let mut r = Raw::header(3, 1, 1);
    r.kv_u32("general.alignment", 64).tensor(b"t", &[8], 0, 32).pad(64).zeros(256);
    assert_err!(r.bytes(), GgufError::Misaligned { offset: 32, alignment: 64, .. }, "not aligned to 64");
    let mut r = Raw::header(3, 2, 1);
    r.kv_u32("general.alignment", 8).tensor(b"s", &[2], 0, 0).tensor(b"t", &[8], 0, 8).pad(8).zeros(256);
    assert_eq!(GgufFile::from_bytes(r.bytes()).unwrap().alignment(), 8);
}

/// As in llama.cpp, the tensors tile the data section: a gap before the first tensor or between
/// two (a norm re-typed from F32 to F16 leaves half its bytes unaccounted for) is an error.
#[test]
fn gaps_between_tensors() {
    // 8 f32 = 32 bytes, padded to 32: the next one starts at 32.
    let mut r = Raw::header(3, 2, 0);
    r.tensor(b"a", &[8], 0, 0).tensor(b"b", &[8], 0, 32).pad(32).zeros(256);
    assert!(GgufFile::from_bytes(r.bytes()).is_ok());
    // 8 f16 = 16 bytes, padded to 32: also 32.
    let mut r = Raw::header(3, 2, 0);
    r.tensor(b"a", &[8], 1, 0).tensor(b"b", &[8], 0, 32).pad(32).zeros(256);
    assert!(GgufFile::from_bytes(r.bytes()).is_ok());
    // 32 f16 = 64 bytes (as if re-typed from 32 f32 = 128): a gap of 64.
    let mut r = Raw::header(3, 2, 0);
    r.tensor(b"a", &[32], 1, 0).tensor(b"b", &[8], 0, 128).pad(32).zeros(512);
    let e = assert_err!(r.bytes(), GgufError::Gap { offset: 128, expected: 64, .. }, "expected 64");
    assert!(e.to_string().contains("'b'"), "{e}");
    // The first tensor not at the start of the data section.
    assert_err!(one_tensor(&[8], 0, 64, 256), GgufError::Gap { offset: 64, expected: 0, .. }, "expected 0");
    // Bytes after the last tensor (a last tensor re-typed smaller leaves them) are ignored with a
    // warning, as llama.cpp ignores them.
    let f = GgufFile::from_bytes(one_tensor(&[8], 1, 0, 256)).expect("trailing bytes are accepted");
    assert_eq!(f.tensors()[0].size, 16);
}

#[test]
fn bad_alignment_values() {
    for a in [0u32, 3, 48, 1 << 31, u32::MAX] {
        let mut r = Raw::header(3, 0, 1);
        r.kv_u32("general.alignment", a);
        assert_err!(r.bytes(), GgufError::BadAlignment(_), "invalid general.alignment");
    }
    // Negative, and not an integer at all.
    let mut r = Raw::header(3, 0, 1);
    r.str(b"general.alignment").u32(T_I32).u32((-32i32) as u32);
    assert_err!(r.bytes(), GgufError::BadAlignment(_), "general.alignment");
    let mut r = Raw::header(3, 0, 1);
    r.str(b"general.alignment").u32(T_STRING).str(b"32");
    assert_err!(r.bytes(), GgufError::BadAlignment(_), "general.alignment");
}

#[test]
fn duplicates() {
    let mut r = Raw::header(3, 0, 3);
    r.kv_u32("a", 1).kv_u32("b", 2).kv_u32("a", 3);
    let e =
        assert_err!(r.bytes(), GgufError::Duplicate { what: "metadata key", .. }, "duplicate metadata key");
    assert!(e.to_string().contains("'a'"));
    let mut r = Raw::header(3, 2, 0);
    r.tensor(b"w", &[8], 0, 0).tensor(b"w", &[8], 0, 32).pad(32).zeros(64);
    assert_err!(r.bytes(), GgufError::Duplicate { what: "tensor", .. }, "duplicate tensor 'w'");
}

#[test]
fn invalid_utf8() {
    let bad: &[u8] = b"ab\xff\xfe";
    let mut r = Raw::header(3, 0, 1);
    r.str(bad).u32(T_U32).u32(1);
    assert_err!(r.bytes(), GgufError::BadUtf8 { what: "metadata key", .. }, "invalid UTF-8");
    let mut r = Raw::header(3, 0, 1);
    r.str(b"k").u32(T_STRING).str(bad);
    assert_err!(r.bytes(), GgufError::BadUtf8 { what: "metadata string", .. }, "invalid UTF-8");
    let mut r = Raw::header(3, 0, 1);
    r.str(b"k").u32(T_ARRAY).u32(T_STRING).u64(2).str(b"fine").str(b"\xc3");
    assert_err!(r.bytes(), GgufError::BadUtf8 { what: "array string", .. }, "invalid UTF-8");
    let mut r = Raw::header(3, 1, 0);
    r.tensor(bad, &[8], 0, 0).pad(32).zeros(32);
    assert_err!(r.bytes(), GgufError::BadUtf8 { what: "tensor name", .. }, "invalid UTF-8 in tensor name");
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn random_corruption_never_panics() {
    let base = small_valid();
    let header_end = GgufFile::from_bytes(base.clone()).unwrap().data_offset() as usize;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut ok, mut err) = (0, 0);
    for i in 0..5000 {
        let mut b = base.clone();
        for _ in 0..1 + rng.below(4) {
            // Mostly hit the header, metadata and tensor table, where the structure is.
            let pos = if rng.below(4) == 0 { rng.below(b.len()) } else { rng.below(header_end) };
            b[pos] = match rng.below(4) {
                0 => b[pos] ^ (1 << rng.below(8)),
                1 => 0xff,
                2 => 0,
                _ => rng.next() as u8,
            };
        }
        if i % 5 == 0 {
            b.truncate(rng.below(b.len() + 1));
        }
        match GgufFile::from_bytes(b) {
            Ok(f) => {
                touch_all(&f);
                ok += 1;
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                err += 1;
            }
        }
    }
    assert!(ok > 100 && err > 1000, "ok {ok}, err {err}");
}

/// Counts are checked against the bytes that remain, but elements are bigger in memory than on
/// disk; a hostile file must still not make the parser reserve memory out of proportion to it.
#[test]
fn allocation_stays_proportionate() {
    const LEN: usize = 16 << 20;
    // The largest metadata count the remaining bytes allow; the entries are duplicates, so
    // parsing fails right after the first two.
    let mut r = Raw::header(3, 0, (LEN as u64 - 24) / 13);
    r.zeros(LEN - 24);
    // The largest tensor count, with empty names (also duplicates).
    let mut t = Raw::header(3, (LEN as u64 - 24) / 32, 0);
    t.zeros(LEN - 24);
    // A nested array announcing as many arrays, then as many strings, as could fit; the first
    // string's length is absurd.
    let mut n = Raw::header(3, 0, 1);
    n.str(b"k").u32(T_ARRAY).u32(T_ARRAY).u64((LEN as u64) / 12 - 100);
    n.u32(T_STRING).u64((LEN as u64) / 8 - 16).u64(u64::MAX).zeros(LEN - 73);
    for (name, bytes) in [("metadata", r.bytes()), ("tensors", t.bytes()), ("nested", n.bytes())] {
        assert!(bytes.len() <= LEN);
        let (res, peak) = peak_alloc(|| GgufFile::from_bytes(bytes).map(|_| ()));
        assert!(res.is_err(), "{name}");
        assert!(peak < 8 << 20, "{name}: parsing a {LEN}-byte file allocated {peak} bytes at once");
    }
}

/// Writes the fuzzing seed corpus (`fuzz/seeds/gguf_parse/`). Run with
/// `cargo test -p ferrolm --test gguf_malformed -- --ignored write_fuzz_seeds`.
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/gguf_parse");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("small.gguf"), small_valid()).unwrap();
    std::fs::write(dir.join("empty.gguf"), GgufWriter::new().to_bytes()).unwrap();
    std::fs::write(dir.join("nested.gguf"), nested(8)).unwrap();

    // Version 2, custom alignment, one value of every type, block-quantized tensors.
    let mut w = GgufWriter::with_version(2).unwrap();
    w.add("general.alignment", MetaValue::U32(64)).unwrap();
    w.add("general.architecture", MetaValue::String("gemma3".into())).unwrap();
    let values = [
        MetaValue::U8(1),
        MetaValue::I8(-1),
        MetaValue::U16(2),
        MetaValue::I16(-2),
        MetaValue::U32(3),
        MetaValue::I32(-3),
        MetaValue::F32(0.5),
        MetaValue::Bool(false),
        MetaValue::U64(4),
        MetaValue::I64(-4),
        MetaValue::F64(0.25),
        MetaValue::Array(MetaArray::I16(vec![1, -1])),
        MetaValue::Array(MetaArray::U64(vec![9])),
        MetaValue::Array(MetaArray::Bool(vec![true])),
    ];
    for (i, v) in values.into_iter().enumerate() {
        w.add(format!("v.{i}"), v).unwrap();
    }
    w.add_tensor("q4k", &[256], GgmlType::Q4_K, vec![1; 144]).unwrap();
    w.add_tensor("q4_1", &[32, 2], GgmlType::Q4_1, vec![2; 40]).unwrap();
    w.add_tensor("bf16", &[2, 2, 2], GgmlType::BF16, vec![3; 16]).unwrap();
    std::fs::write(dir.join("v2_aligned.gguf"), w.to_bytes()).unwrap();

    // The head of a real vocab file's layout, shrunk: a tokenizer with a few tokens.
    let mut w = GgufWriter::new();
    w.add("general.architecture", MetaValue::String("qwen2".into())).unwrap();
    w.add("tokenizer.ggml.model", MetaValue::String("gpt2".into())).unwrap();
    let toks: Vec<String> = ["!", "\"", "Ġthe", "<|im_end|>"].iter().map(|s| s.to_string()).collect();
    w.add("tokenizer.ggml.tokens", MetaValue::Array(MetaArray::String(toks))).unwrap();
    w.add("tokenizer.ggml.token_type", MetaValue::Array(MetaArray::I32(vec![1, 1, 1, 3]))).unwrap();
    w.add("tokenizer.ggml.merges", MetaValue::Array(MetaArray::String(vec!["Ġ t".into()]))).unwrap();
    w.add("tokenizer.chat_template", MetaValue::String("{% for m in messages %}{{ m }}{% endfor %}".into()))
        .unwrap();
    std::fs::write(dir.join("vocab.gguf"), w.to_bytes()).unwrap();
    std::fs::write(dir.join("tiny_llama.gguf"), tiny_model()).unwrap();
}

/// The smallest complete llama model (one layer, width 8, two heads, a 4-token vocabulary, F32
/// weights, no tokenizer): a seed that reaches the configuration and weight checks.
fn tiny_model() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add("general.architecture", MetaValue::String("llama".into())).unwrap();
    for (k, v) in [
        ("block_count", 1u32),
        ("embedding_length", 8),
        ("feed_forward_length", 16),
        ("attention.head_count", 2),
    ] {
        w.add(format!("llama.{k}"), MetaValue::U32(v)).unwrap();
    }
    w.add("llama.attention.layer_norm_rms_epsilon", MetaValue::F32(1e-5)).unwrap();
    let mut tensors =
        vec![("token_embd.weight".to_string(), vec![8u64, 4]), ("output_norm.weight".into(), vec![8])];
    for (n, dims) in [
        ("attn_norm", vec![8]),
        ("attn_q", vec![8, 8]),
        ("attn_k", vec![8, 8]),
        ("attn_v", vec![8, 8]),
        ("attn_output", vec![8, 8]),
        ("ffn_norm", vec![8]),
        ("ffn_gate", vec![8, 16]),
        ("ffn_up", vec![8, 16]),
        ("ffn_down", vec![16, 8]),
    ] {
        tensors.push((format!("blk.0.{n}.weight"), dims));
    }
    for (name, dims) in tensors {
        let n: u64 = dims.iter().product();
        let data = (0..n).flat_map(|i| (1.0 + i as f32 / 64.0).to_le_bytes()).collect();
        w.add_tensor(name, &dims, GgmlType::F32, data).unwrap();
    }
    w.to_bytes()
}

#[test]
fn tiny_model_seed_binds_every_tensor() {
    use ferrolm::model::weights::ModelWeights;
    use ferrolm::model::{ModelConfig, TensorMap};
    let f = GgufFile::from_bytes(tiny_model()).unwrap();
    let tensors = TensorMap::from_gguf(&f);
    let cfg = ModelConfig::from_gguf(&f, &tensors).unwrap();
    ModelWeights::from_tensors(&tensors, &cfg).unwrap();
}

/// A llama header with `block_count` layers and one embedding table (no layer tensors).
fn llama_header(block_count: u32, arch: &str) -> GgufFile {
    let mut w = GgufWriter::new();
    w.add("general.architecture", MetaValue::String(arch.into())).unwrap();
    for (k, v) in [
        ("block_count", block_count),
        ("embedding_length", 32),
        ("feed_forward_length", 64),
        ("attention.head_count", 4),
        ("attention.sliding_window", 16),
    ] {
        w.add(format!("{arch}.{k}"), MetaValue::U32(v)).unwrap();
    }
    w.add_tensor("token_embd.weight", &[32, 8], GgmlType::F32, vec![0; 32 * 8 * 4]).unwrap();
    GgufFile::from_bytes(w.to_bytes()).unwrap()
}

#[test]
fn huge_block_count_is_refused_before_any_per_layer_allocation() {
    use ferrolm::model::{ModelConfig, TensorMap};
    for arch in ["llama", "gemma3"] {
        let f = llama_header(u32::MAX, arch);
        let tensors = TensorMap::from_gguf(&f);
        let (r, peak) = peak_alloc(|| ModelConfig::from_gguf(&f, &tensors));
        let err = r.unwrap_err().to_string();
        assert!(err.contains("n_layer 4294967295"), "{arch}: {err}");
        // A per-layer table would be 4 GiB; the checks themselves need a few strings.
        assert!(peak < 1 << 20, "{arch}: peak {peak} bytes before the error");
    }
    // The same header with a sane block count passes the configuration step.
    let f = llama_header(2, "llama");
    ModelConfig::from_gguf(&f, &TensorMap::from_gguf(&f)).unwrap();
}
