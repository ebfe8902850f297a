//! Fuzz target: parse arbitrary bytes as GGUF. The reader must return `Ok` or `Err`, never panic,
//! read out of bounds or allocate absurd memory; a file it accepts must be fully readable (every
//! tensor's data slice, every metadata value through the typed accessors) and must survive a
//! round trip through the writer. Then the model's configuration is read from it and, when that
//! succeeds, its weights are bound: both must fail with an error, never a panic or an allocation
//! sized by an unchecked hyperparameter.
#![no_main]

use ferrolm::model::weights::ModelWeights;
use ferrolm::model::{ModelConfig, TensorMap};
use ferrolm_format::gguf::{GgufFile, MetaValue};
use ferrolm_format::gguf_write::GgufWriter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else { return };
    let mut acc = 0u64;
    for (key, value) in file.metadata() {
        assert!(file.get(key).is_some_and(|v| std::ptr::eq(v, value)), "get({key:?}) is not the entry");
        acc = acc.wrapping_add(value.to_string().len() as u64);
        let _ = file.get_str(key);
        let _ = file.get_u64(key);
        let _ = file.get_f32(key);
        let _ = file.opt_bool(key);
        let _ = file.get_str_array(key);
        if let MetaValue::Array(a) = value {
            acc = acc.wrapping_add(a.len() as u64);
            let _ = a.to_i64_vec();
        }
    }
    let _ = file.architecture();
    let end = file.file_size();
    for t in file.tensors() {
        assert_eq!(file.tensor(&t.name), Some(t));
        let bytes = file.tensor_data(t);
        assert_eq!(bytes.len() as u64, t.size);
        assert!(file.data_offset() + t.offset + t.size <= end);
        assert_eq!(t.offset % file.alignment(), 0);
        acc = acc.wrapping_add(bytes.iter().map(|&b| u64::from(b)).sum::<u64>());
        acc = acc.wrapping_add(t.n_elements() ^ t.n_rows() ^ t.ne0());
    }
    std::hint::black_box(acc);

    let tensors = TensorMap::from_gguf(&file);
    if let Ok(cfg) = ModelConfig::from_gguf(&file, &tensors) {
        std::hint::black_box(ModelWeights::from_tensors(&tensors, &cfg).is_ok());
    }

    // Whatever the reader accepts, the writer must re-encode, and the re-encoding must read back
    // and re-encode to the same bytes.
    let w = GgufWriter::from_file(&file).expect("writer rejects a file the reader accepted");
    let bytes = w.to_bytes();
    let again = GgufFile::from_bytes(bytes.clone()).expect("reader rejects the writer's output");
    assert_eq!(again.tensors().len(), file.tensors().len());
    assert_eq!(again.metadata().len(), file.metadata().len());
    let bytes2 = GgufWriter::from_file(&again).expect("second re-encode").to_bytes();
    assert!(bytes == bytes2, "writer output is not stable");
});
