//! A sequence's state as bytes: its tokens, its cache (positions, scores, keys and values as
//! stored, quantized types included) and optionally the logits after its last token, so that a
//! conversation can be saved to a file and restored later (llama.cpp's
//! `llama_state_seq_save_file`, llama-server's slot save/restore).
//!
//! Format (little-endian), version [`VERSION`]:
//! ```text
//! magic "FLMKVST\0" · version u32
//! identity: arch (u32 len + UTF-8) · n_layer u32 · kv_dim u32 · type_k u8 · type_v u8 · model_hash u64
//! n_tokens u32 · tokens [u32; n_tokens]
//! n_slots u32 · positions [u32; n_slots] · scores [f32; n_slots]
//! per layer: keys [type_k.row_bytes(kv_dim) * n_slots bytes], values [same for type_v]
//! n_logits u32 · logits [f32; n_logits]
//! checksum u64 (FNV-1a of every byte before it)
//! ```
//! Reading checks the identity against the cache it goes into (another model, shape or KV type
//! is refused with a clear error), every length against the bytes present and the checksum, so a
//! truncated or corrupt file is an error, never a panic.
//!
//! Version 2 differs from version 1 only in what quantized rows hold: since version 2 they are
//! rotated ([`super::KvRotation`]). A version 1 file is still read when both its types are
//! floats; one with a quantized type is refused (its rows would be read in the wrong basis).

use half::f16;

use super::{KvCache, KvType, Rows, SeqCache};
use crate::{Error, Result};

/// The file's first bytes.
const MAGIC: &[u8; 8] = b"FLMKVST\0";
/// The format version this code writes (and reads, with version 1 files of float caches).
pub const VERSION: u32 = 2;

/// What a state file must match to be loaded: the model and the cache's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateIdentity {
    /// The model's architecture (`general.architecture`).
    pub arch: String,
    /// Number of layers.
    pub n_layer: u32,
    /// Width of a key or value row.
    pub kv_dim: u32,
    /// Storage type of keys.
    pub type_k: KvType,
    /// Storage type of values.
    pub type_v: KvType,
    /// A hash of the model's vocabulary (see [`fnv1a`]), so another model of the same shape is
    /// refused.
    pub model_hash: u64,
}

impl StateIdentity {
    /// The identity of states of `kv`'s sequences, for a model of `arch` whose vocabulary hashes
    /// to `model_hash`.
    pub fn of(kv: &KvCache, arch: &str, model_hash: u64) -> Self {
        let (type_k, type_v) = kv.types();
        Self {
            arch: arch.to_string(),
            n_layer: kv.n_layer() as u32,
            kv_dim: kv.kv_dim() as u32,
            type_k,
            type_v,
            model_hash,
        }
    }
}

/// A sequence's state read back by [`decode`].
#[derive(Debug)]
pub struct SeqState {
    /// The tokens the sequence holds (more than the cache's slots once some were evicted).
    pub tokens: Vec<u32>,
    /// The cache, made for the cache passed to [`decode`].
    pub cache: SeqCache,
    /// The logits after the last token (`[n_vocab]`), or empty when they were not saved.
    pub logits: Vec<f32>,
}

/// FNV-1a, 64 bits: a stable hash of `bytes` (the same on every platform and release).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_from(0xcbf2_9ce4_8422_2325, bytes)
}

fn fnv1a_from(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Serializes a sequence's state: `tokens`, `seq`'s cache and `logits` (may be empty).
pub fn encode(id: &StateIdentity, tokens: &[u32], seq: &SeqCache, logits: &[f32]) -> Result<Vec<u8>> {
    if seq.recurrent().is_some() {
        return Err(Error::InvalidInput(
            "saving the state of a model with recurrent layers (Qwen 3.5, LFM2) is not supported".into(),
        ));
    }
    let len32 = |n: usize, what: &str| {
        u32::try_from(n).map_err(|_| Error::InvalidInput(format!("too many {what} to save ({n})")))
    };
    if seq.n_layer() != id.n_layer as usize || seq.kv_dim != id.kv_dim as usize {
        return Err(Error::InvalidInput("the sequence's cache does not match the state identity".into()));
    }
    let mut out = Vec::with_capacity(64 + 4 * tokens.len() + 8 * seq.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&len32(id.arch.len(), "architecture bytes")?.to_le_bytes());
    out.extend_from_slice(id.arch.as_bytes());
    out.extend_from_slice(&id.n_layer.to_le_bytes());
    out.extend_from_slice(&id.kv_dim.to_le_bytes());
    out.push(type_code(id.type_k));
    out.push(type_code(id.type_v));
    out.extend_from_slice(&id.model_hash.to_le_bytes());
    out.extend_from_slice(&len32(tokens.len(), "tokens")?.to_le_bytes());
    tokens.iter().for_each(|t| out.extend_from_slice(&t.to_le_bytes()));
    out.extend_from_slice(&len32(seq.len(), "cache slots")?.to_le_bytes());
    seq.positions.iter().for_each(|p| out.extend_from_slice(&p.to_le_bytes()));
    seq.scores.iter().for_each(|s| out.extend_from_slice(&s.to_le_bytes()));
    for (k, v) in seq.k.iter().zip(&seq.v) {
        if !type_matches(k, id.type_k) || !type_matches(v, id.type_v) {
            return Err(Error::InvalidInput(
                "the sequence's KV types do not match the state identity".into(),
            ));
        }
        rows_bytes(k, &mut out);
        rows_bytes(v, &mut out);
    }
    out.extend_from_slice(&len32(logits.len(), "logits")?.to_le_bytes());
    logits.iter().for_each(|l| out.extend_from_slice(&l.to_le_bytes()));
    let sum = fnv1a(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    Ok(out)
}

/// Reads a state written by [`encode`] into a new sequence cache of `kv`, checking that it was
/// saved for `want` (the same model, shape and KV types). An [`Error::InvalidInput`] for a
/// file of another format version, model or layout, or a truncated or corrupt one.
pub fn decode(bytes: &[u8], want: &StateIdentity, kv: &KvCache) -> Result<SeqState> {
    if bytes.len() < MAGIC.len() + 12 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad("not a ferrolm KV state file"));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    let mut r = Reader { b: &bytes[MAGIC.len()..body.len()] };
    let version = r.u32()?;
    if version != VERSION && version != 1 {
        return Err(bad(&format!("KV state format version {version} (this build reads 1 and {VERSION})")));
    }
    if fnv1a(body).to_le_bytes() != sum {
        return Err(bad("the KV state file is corrupt (checksum mismatch)"));
    }
    let got = read_identity(&mut r)?;
    if got != *want {
        return Err(bad(&format!(
            "the KV state was saved for another model or cache layout ({} with {} layers, kv_dim {}, \
             K {} V {}, model hash {:016x}); this one is {} with {} layers, kv_dim {}, K {} V {}, \
             model hash {:016x}",
            got.arch,
            got.n_layer,
            got.kv_dim,
            got.type_k,
            got.type_v,
            got.model_hash,
            want.arch,
            want.n_layer,
            want.kv_dim,
            want.type_k,
            want.type_v,
            want.model_hash
        )));
    }
    if version == 1 && (got.type_k.blocks().is_some() || got.type_v.blocks().is_some()) {
        return Err(bad(&format!(
            "the KV state file is format version 1, whose {}/{} rows predate the rotation of quantized \
             caches; it cannot be read into this build's cache (save the state again)",
            got.type_k, got.type_v
        )));
    }
    let n_tokens = r.count(4)?;
    let tokens = r.u32s(n_tokens)?;
    let n_slots = r.count(8)?;
    if n_slots > kv.capacity() {
        return Err(bad(&format!(
            "the KV state holds {n_slots} tokens, over this context's {}",
            kv.capacity()
        )));
    }
    let mut cache = kv.new_seq();
    cache.positions = r.u32s(n_slots)?;
    cache.scores = r.u32s(n_slots)?.into_iter().map(f32::from_bits).collect();
    let d = kv.kv_dim();
    for (k, v) in cache.k.iter_mut().zip(cache.v.iter_mut()) {
        rows_from_bytes(k, r.take(want.type_k.row_bytes(d) * n_slots)?);
        rows_from_bytes(v, r.take(want.type_v.row_bytes(d) * n_slots)?);
    }
    let n_logits = r.count(4)?;
    let logits = r.u32s(n_logits)?.into_iter().map(f32::from_bits).collect();
    if !r.b.is_empty() {
        return Err(bad("the KV state file has trailing bytes"));
    }
    Ok(SeqState { tokens, cache, logits })
}

fn bad(msg: &str) -> Error {
    Error::InvalidInput(msg.to_string())
}

fn read_identity(r: &mut Reader<'_>) -> Result<StateIdentity> {
    let n = r.count(1)?;
    let arch =
        std::str::from_utf8(r.take(n)?).map_err(|_| bad("the KV state's architecture is not UTF-8"))?;
    let arch = arch.to_string();
    let n_layer = r.u32()?;
    let kv_dim = r.u32()?;
    let type_k = type_from_code(r.take(1)?[0])?;
    let type_v = type_from_code(r.take(1)?[0])?;
    let model_hash = u64::from_le_bytes(r.array()?);
    Ok(StateIdentity { arch, n_layer, kv_dim, type_k, type_v, model_hash })
}

fn type_code(t: KvType) -> u8 {
    match t {
        KvType::F32 => 0,
        KvType::F16 => 1,
        KvType::Q8_0 => 8,
        KvType::Q4_0 => 4,
    }
}

fn type_from_code(c: u8) -> Result<KvType> {
    KvType::ALL
        .into_iter()
        .find(|&t| type_code(t) == c)
        .ok_or_else(|| bad(&format!("unknown KV type code {c}")))
}

fn type_matches(rows: &Rows, t: KvType) -> bool {
    match rows {
        Rows::F32(_) => t == KvType::F32,
        Rows::F16(_) => t == KvType::F16,
        Rows::Blocks(b, _) => t.blocks() == Some(*b),
    }
}

/// Appends `rows` as stored (floats little-endian, blocks as they are).
fn rows_bytes(rows: &Rows, out: &mut Vec<u8>) {
    match rows {
        Rows::F32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Rows::F16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes())),
        Rows::Blocks(_, v) => out.extend_from_slice(v),
    }
}

/// Fills empty `rows` from bytes written by [`rows_bytes`] for the same type (whole values).
fn rows_from_bytes(rows: &mut Rows, bytes: &[u8]) {
    match rows {
        Rows::F32(v) => v.extend(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        Rows::F16(v) => {
            v.extend(bytes.chunks_exact(2).map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]]))))
        }
        Rows::Blocks(_, v) => v.extend_from_slice(bytes),
    }
}

/// Reads from a byte slice, every read checked against what is left.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.b.len() {
            return Err(bad("the KV state file is truncated"));
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A count of items of at least `item_bytes` each, refused when the bytes left cannot hold
    /// them (so a corrupt count never allocates).
    fn count(&mut self, item_bytes: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(item_bytes) > self.b.len() {
            return Err(bad("the KV state file is truncated"));
        }
        Ok(n)
    }

    fn u32s(&mut self, n: usize) -> Result<Vec<u32>> {
        let bytes = self.take(n.checked_mul(4).ok_or_else(|| bad("the KV state file is truncated"))?)?;
        Ok(bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn filled(ty: (KvType, KvType), n: u32) -> KvCache {
        let d = 64;
        let mut kv = KvCache::new(2, d, 16, ty.0, ty.1);
        for p in 0..n {
            let s = kv.push_slot(0, p).unwrap();
            for layer in 0..2 {
                let row: Vec<f32> =
                    (0..d).map(|i| ((i as f32 + 1.0) * (p as f32 + 1.5) + layer as f32).sin()).collect();
                kv.seq_mut(0).write(layer, s, &row, &row.iter().map(|x| -x).collect::<Vec<_>>());
            }
        }
        kv.seq_mut(0).scores_mut().iter_mut().enumerate().for_each(|(i, s)| *s = i as f32 * 0.25);
        kv
    }

    #[test]
    fn every_type_round_trips_exactly() {
        for ty in [(KvType::F32, KvType::F16), (KvType::F16, KvType::F16), (KvType::Q8_0, KvType::Q4_0)] {
            let kv = filled(ty, 7);
            let id = StateIdentity::of(&kv, "llama", 42);
            let seq = kv.seq(0).unwrap();
            let bytes = encode(&id, &[5, 6, 7, 8, 9, 10, 11, 12], seq, &[0.5, -1.0]).unwrap();
            let back = decode(&bytes, &id, &kv).unwrap();
            assert_eq!(back.tokens, [5, 6, 7, 8, 9, 10, 11, 12]);
            assert_eq!(back.logits, [0.5, -1.0]);
            assert_eq!(back.cache.positions(), seq.positions());
            assert_eq!(back.cache.scores(), seq.scores());
            for layer in 0..2 {
                assert_eq!(back.cache.keys(layer).to_f32(), seq.keys(layer).to_f32(), "{ty:?}");
                assert_eq!(back.cache.values(layer).to_f32(), seq.values(layer).to_f32(), "{ty:?}");
            }
            assert_eq!(back.cache.keys(0).as_blocks(), seq.keys(0).as_blocks());
        }
    }

    #[test]
    fn another_model_or_type_is_refused() {
        let kv = filled((KvType::F16, KvType::F16), 3);
        let id = StateIdentity::of(&kv, "llama", 42);
        let bytes = encode(&id, &[1, 2, 3], kv.seq(0).unwrap(), &[]).unwrap();
        let other = StateIdentity { model_hash: 43, ..id.clone() };
        let err = decode(&bytes, &other, &kv).unwrap_err().to_string();
        assert!(err.contains("another model"), "{err}");
        let q8 = KvCache::new(2, 64, 16, KvType::Q8_0, KvType::F16);
        let err = decode(&bytes, &StateIdentity::of(&q8, "llama", 42), &q8).unwrap_err().to_string();
        assert!(err.contains("K q8_0"), "{err}");
        let small = KvCache::new(2, 64, 2, KvType::F16, KvType::F16);
        assert!(decode(&bytes, &id, &small).is_err());
    }

    #[test]
    fn truncated_or_corrupt_files_are_errors() {
        let kv = filled((KvType::Q4_0, KvType::F32), 4);
        let id = StateIdentity::of(&kv, "qwen3", 7);
        let bytes = encode(&id, &[1, 2, 3, 4], kv.seq(0).unwrap(), &[1.0; 5]).unwrap();
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n], &id, &kv).is_err(), "truncated to {n}");
        }
        for i in (0..bytes.len()).step_by(7) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x41;
            assert!(decode(&bad, &id, &kv).is_err(), "byte {i} flipped");
        }
        let mut v3 = bytes.clone();
        v3[8] = 3;
        assert!(decode(&v3, &id, &kv).unwrap_err().to_string().contains("version 3"));
    }

    /// `bytes` relabelled as format version 1, checksum redone.
    fn as_version_1(mut bytes: Vec<u8>) -> Vec<u8> {
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        let body = bytes.len() - 8;
        let sum = fnv1a(&bytes[..body]);
        bytes[body..].copy_from_slice(&sum.to_le_bytes());
        bytes
    }

    #[test]
    fn version_1_files_are_read_for_float_caches_only() {
        for (ty, readable) in [
            ((KvType::F32, KvType::F16), true),
            ((KvType::F16, KvType::F16), true),
            ((KvType::Q8_0, KvType::F16), false),
            ((KvType::F16, KvType::Q4_0), false),
        ] {
            let kv = filled(ty, 5);
            let id = StateIdentity::of(&kv, "qwen2", 9);
            let bytes = as_version_1(encode(&id, &[1, 2, 3, 4, 5], kv.seq(0).unwrap(), &[]).unwrap());
            match decode(&bytes, &id, &kv) {
                Ok(back) => {
                    assert!(readable, "{ty:?}: a version 1 file of a quantized cache was read");
                    assert_eq!(back.cache.keys(1).to_f32(), kv.seq(0).unwrap().keys(1).to_f32());
                }
                Err(e) => {
                    assert!(!readable, "{ty:?}: {e}");
                    assert!(e.to_string().contains("version 1"), "{e}");
                }
            }
        }
    }
}
