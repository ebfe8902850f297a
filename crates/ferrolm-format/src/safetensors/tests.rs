//! Reader, writer and folder tests on small generated files.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use super::*;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A file image with a hand-written header (padded to 8 bytes) and `data`.
fn raw_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

fn parse(bytes: Vec<u8>) -> Res<SafetensorsFile> {
    SafetensorsFile::from_bytes(bytes, "test.safetensors")
}

fn invalid_reason(r: Res<SafetensorsFile>) -> String {
    match r {
        Err(SafetensorsError::Invalid { reason, .. }) => reason,
        Err(SafetensorsError::InvalidTensor { reason, .. }) => reason,
        Err(e) => panic!("unexpected error {e}"),
        Ok(f) => panic!("accepted a malformed file: {f:?}"),
    }
}

#[test]
fn write_then_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let a = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b: Vec<u8> = [1u16, 2, 3].iter().flat_map(|x| x.to_le_bytes()).collect();
    let c = 7i64.to_le_bytes();
    write_safetensors(
        &path,
        &[
            ("a.weight", StDtype::F32, &[2, 3], &a),
            ("b", StDtype::BF16, &[3], &b),
            ("c", StDtype::I64, &[], &c),
        ],
    )
    .unwrap();
    let f = SafetensorsFile::open(&path).unwrap();
    assert_eq!(f.path(), path);
    assert_eq!(f.len(), 3);
    assert_eq!(f.metadata().get("format").map(String::as_str), Some("pt"));
    assert_eq!(f.names().collect::<Vec<_>>(), ["a.weight", "b", "c"]);
    assert_eq!(f.data_start() % 8, 0);

    let t = f.tensor("a.weight").unwrap();
    assert_eq!(t.dtype, StDtype::F32);
    assert_eq!(t.shape, [2, 3]);
    assert_eq!(t.numel(), 6);
    assert_eq!(&f.storage().as_bytes()[t.range.clone()], &a[..]);
    assert_eq!(f.data(t), &a[..]);
    assert!(matches!(&**f.storage(), Storage::Mapped(_)));

    let t = f.tensor("b").unwrap();
    assert_eq!((t.dtype, t.dtype.to_ggml()), (StDtype::BF16, Some(GgmlType::BF16)));
    assert_eq!(f.data(t), &b[..]);
    let t = f.tensor("c").unwrap();
    assert_eq!(t.shape, Vec::<usize>::new());
    assert_eq!(t.numel(), 1);
    assert_eq!(f.data(t), &c[..]);
    assert_eq!(t.dtype.to_ggml(), None);
    assert!(f.tensor("missing").is_none());
}

#[test]
fn dtype_names_and_sizes() {
    for d in StDtype::ALL {
        assert_eq!(StDtype::from_name(d.name()), Some(d));
        assert_eq!(d.to_string(), d.name());
    }
    assert_eq!(StDtype::from_name("F4"), None);
    assert_eq!(StDtype::F64.size(), 8);
    assert_eq!(StDtype::F16.size(), 2);
    assert_eq!(StDtype::BOOL.size(), 1);
    assert_eq!(StDtype::F32.to_ggml(), Some(GgmlType::F32));
    assert_eq!(StDtype::F16.to_ggml(), Some(GgmlType::F16));
}

#[test]
fn hand_written_header_with_empty_tensor() {
    let header = r#"{"__metadata__":{"k":"v"},"z":{"dtype":"F16","shape":[0,4],"data_offsets":[0,0]},
        "x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#;
    let f = parse(raw_file(header, &[9, 8])).unwrap();
    assert_eq!(f.metadata()["k"], "v");
    assert_eq!(f.tensor("z").unwrap().range.len(), 0);
    assert_eq!(f.data(f.tensor("x").unwrap()), [9, 8]);
}

#[test]
fn malformed_files_are_errors() {
    // Too short for the length.
    assert!(invalid_reason(parse(vec![1, 2, 3])).contains("too short"));
    // Header longer than the file.
    let mut b = raw_file("{}", &[]);
    b[0] = 200;
    assert!(invalid_reason(parse(b)).contains("exceeds"));
    // Absurd header length.
    let mut b = u64::MAX.to_le_bytes().to_vec();
    b.extend_from_slice(b"{}");
    assert!(invalid_reason(parse(b)).contains("limit"));
    // Truncated file: the header is cut.
    let good = safetensors_bytes(&[("a", StDtype::F32, &[2], &f32_bytes(&[1.0, 2.0]))], &[]).unwrap();
    assert!(invalid_reason(parse(good[..good.len() - 10].to_vec())).contains("exceeds"));
    // Truncated data: the tensor runs past the end.
    assert!(invalid_reason(parse(good[..good.len() - 1].to_vec())).contains("past the data section"));
    // Not JSON, not an object, not UTF-8.
    assert!(invalid_reason(parse(raw_file("{\"a\": ", &[]))).contains("JSON"));
    assert!(invalid_reason(parse(raw_file("[1, 2]", &[]))).contains("JSON"));
    assert!(invalid_reason(parse(raw_file("\u{0}\u{1}", &[]))).contains("JSON"));
    let mut b = raw_file("{\"a\":1}", &[]);
    b[10] = 0xFF;
    assert!(invalid_reason(parse(b)).contains("JSON"));

    let one = |entry: &str, data: &[u8]| parse(raw_file(&format!("{{\"t\":{entry}}}"), data));
    // Offsets out of range, reversed, or beyond u64 semantics.
    assert!(
        invalid_reason(one(r#"{"dtype":"U8","shape":[4],"data_offsets":[0,4]}"#, &[0; 3]))
            .contains("past the data section")
    );
    assert!(
        invalid_reason(one(r#"{"dtype":"U8","shape":[0],"data_offsets":[3,1]}"#, &[0; 3]))
            .contains("reversed")
    );
    assert!(
        invalid_reason(one(
            r#"{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,18446744073709551616]}"#,
            &[0; 3]
        ))
        .contains("malformed")
    );
    // Size mismatch, overflow of the element count and byte count.
    assert!(
        invalid_reason(one(r#"{"dtype":"F32","shape":[2],"data_offsets":[0,4]}"#, &[0; 8]))
            .contains("needs 8")
    );
    assert!(
        invalid_reason(one(
            r#"{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}"#,
            &[0; 4]
        ))
        .contains("too many")
    );
    assert!(
        invalid_reason(one(r#"{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}"#, &[0; 4]))
            .contains("too large")
    );
    // Unknown dtype, missing field, wrong field types, negative dims.
    assert!(
        invalid_reason(one(r#"{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}"#, &[0])).contains("dtype")
    );
    assert!(invalid_reason(one(r#"{"dtype":"U8","shape":[1]}"#, &[0])).contains("malformed"));
    assert!(
        invalid_reason(one(r#"{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}"#, &[0]))
            .contains("malformed")
    );
    assert!(
        invalid_reason(one(r#"{"dtype":"U8","shape":1,"data_offsets":[0,1]}"#, &[0])).contains("malformed")
    );
    assert!(invalid_reason(one("3", &[0])).contains("malformed"));
    // Bad metadata.
    assert!(invalid_reason(parse(raw_file(r#"{"__metadata__":{"a":1}}"#, &[]))).contains("__metadata__"));
    assert!(invalid_reason(parse(raw_file(r#"{"__metadata__":[]}"#, &[]))).contains("__metadata__"));
    // Overlapping tensors.
    let h = r#"{"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}"#;
    assert!(invalid_reason(parse(raw_file(h, &[0; 4]))).contains("overlap"));
}

#[test]
fn errors_name_the_tensor_and_path() {
    let b = raw_file(r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#, &[0; 4]);
    let e = parse(b).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("test.safetensors") && msg.contains("'w'"), "{msg}");
    let e = SafetensorsFile::open("/nonexistent/x.safetensors").unwrap_err();
    assert!(matches!(e, SafetensorsError::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/x.safetensors"));
}

#[test]
fn writer_rejects_bad_input() {
    assert!(safetensors_bytes(&[("a", StDtype::F32, &[2], &[0; 4])], &[]).is_err());
    assert!(
        safetensors_bytes(&[("a", StDtype::U8, &[1], &[0]), ("a", StDtype::U8, &[1], &[0])], &[]).is_err()
    );
    assert!(safetensors_bytes(&[("__metadata__", StDtype::U8, &[1], &[0])], &[]).is_err());
}

fn write_index(dir: &Path, map: &[(&str, &str)]) {
    let weight_map: serde_json::Map<String, serde_json::Value> =
        map.iter().map(|&(k, v)| (k.to_string(), v.into())).collect();
    let index = serde_json::json!({ "metadata": { "total_size": 0 }, "weight_map": weight_map });
    std::fs::write(dir.join(INDEX_FILE), index.to_string()).unwrap();
}

#[test]
fn sharded_folder() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = f32_bytes(&[1.0, 2.0]);
    let b = f32_bytes(&[3.0]);
    let c = f32_bytes(&[4.0, 5.0, 6.0]);
    write_safetensors(d.join("model-00001-of-00002.safetensors"), &[("a", StDtype::F32, &[2], &a)]).unwrap();
    write_safetensors(
        d.join("model-00002-of-00002.safetensors"),
        &[("b", StDtype::F32, &[1], &b), ("c", StDtype::F32, &[3], &c), ("extra", StDtype::U8, &[1], &[0])],
    )
    .unwrap();
    write_index(
        d,
        &[
            ("a", "model-00001-of-00002.safetensors"),
            ("c", "model-00002-of-00002.safetensors"),
            ("b", "model-00002-of-00002.safetensors"),
        ],
    );
    let set = SafetensorsSet::open_dir(d).unwrap();
    assert_eq!(set.dir(), d);
    assert_eq!(set.files().len(), 2);
    assert_eq!(set.len(), 3);
    assert_eq!(set.names().collect::<Vec<_>>(), ["a", "b", "c"]);
    let (storage, t) = set.tensor("c").unwrap();
    assert_eq!(&storage.as_bytes()[t.range.clone()], &c[..]);
    assert_eq!(set.data("a").unwrap(), &a[..]);
    assert_eq!(set.data("b").unwrap(), &b[..]);
    // Shards are shared: the two tensors of shard 2 index the same storage.
    assert!(Arc::ptr_eq(set.tensor("b").unwrap().0, set.tensor("c").unwrap().0));
    assert!(!Arc::ptr_eq(set.tensor("a").unwrap().0, set.tensor("c").unwrap().0));
    // Only the indexed tensors are exposed.
    assert!(set.tensor("extra").is_none());
    assert!(format!("{set:?}").contains("model-00001"));
}

#[test]
fn sharded_folder_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_safetensors(d.join("s1.safetensors"), &[("a", StDtype::U8, &[1], &[1])]).unwrap();

    write_index(d, &[("a", "s1.safetensors"), ("b", "s2.safetensors")]);
    let e = SafetensorsSet::open_dir(d).unwrap_err();
    assert!(matches!(&e, SafetensorsError::MissingShard { shard, .. } if shard == "s2.safetensors"), "{e}");
    assert!(e.to_string().contains("s2.safetensors"));

    write_index(d, &[("a", "s1.safetensors"), ("b", "s1.safetensors")]);
    let e = SafetensorsSet::open_dir(d).unwrap_err();
    assert!(matches!(&e, SafetensorsError::TensorNotInShard { name, .. } if name == "b"), "{e}");

    write_index(d, &[("a", "../s1.safetensors")]);
    assert!(matches!(SafetensorsSet::open_dir(d).unwrap_err(), SafetensorsError::InvalidIndex { .. }));
    write_index(d, &[("a", "/etc/passwd")]);
    assert!(matches!(SafetensorsSet::open_dir(d).unwrap_err(), SafetensorsError::InvalidIndex { .. }));
    write_index(d, &[]);
    assert!(matches!(SafetensorsSet::open_dir(d).unwrap_err(), SafetensorsError::InvalidIndex { .. }));
    std::fs::write(d.join(INDEX_FILE), "{\"weight_map\": 3}").unwrap();
    assert!(matches!(SafetensorsSet::open_dir(d).unwrap_err(), SafetensorsError::InvalidIndex { .. }));

    // A malformed shard reports the shard's path.
    std::fs::write(d.join("s1.safetensors"), [1, 2, 3]).unwrap();
    write_index(d, &[("a", "s1.safetensors")]);
    let e = SafetensorsSet::open_dir(d).unwrap_err();
    assert!(matches!(&e, SafetensorsError::Invalid { path, .. } if path.ends_with("s1.safetensors")), "{e}");
}

#[test]
fn single_and_unindexed_folders() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(matches!(SafetensorsSet::open_dir(d).unwrap_err(), SafetensorsError::NoWeights { .. }));
    assert!(matches!(SafetensorsSet::open_dir(d.join("missing")).unwrap_err(), SafetensorsError::Io { .. }));

    // Several files, no index: the union.
    write_safetensors(d.join("b.safetensors"), &[("y", StDtype::U8, &[1], &[2])]).unwrap();
    write_safetensors(d.join("a.safetensors"), &[("x", StDtype::U8, &[1], &[1])]).unwrap();
    let set = SafetensorsSet::open_dir(d).unwrap();
    assert_eq!(set.names().collect::<Vec<_>>(), ["x", "y"]);
    assert_eq!(set.data("y").unwrap(), [2]);
    assert!(set.files()[0].path().ends_with("a.safetensors"));

    // A repeated name across files.
    write_safetensors(d.join("c.safetensors"), &[("x", StDtype::U8, &[1], &[3])]).unwrap();
    let e = SafetensorsSet::open_dir(d).unwrap_err();
    assert!(matches!(&e, SafetensorsError::DuplicateTensor { name, .. } if name == "x"), "{e}");

    // model.safetensors wins over the other files.
    write_safetensors(d.join(SINGLE_FILE), &[("w", StDtype::U8, &[2], &[5, 6])]).unwrap();
    let set = SafetensorsSet::open_dir(d).unwrap();
    assert_eq!(set.names().collect::<Vec<_>>(), ["w"]);
    assert_eq!(set.file_of("w").unwrap().path(), d.join(SINGLE_FILE));
}
