//! `ferrolm inspect`: a GGUF file's summary, metadata and tensor table, as text or JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use ferrolm::GgmlType;
use ferrolm::format::gguf::{GgufFile, MetaArray, MetaValue, TensorInfo};
use serde_json::{Value, json};

/// Array elements shown when an array is shortened.
const ARRAY_PREVIEW: usize = 5;
/// Characters of a string shown when it is shortened.
const STRING_PREVIEW: usize = 80;
/// Characters of a metadata key or tensor name shown in the text tables (even with `--full`):
/// the columns are padded to the longest name, and a corrupt file's 64 KiB name must neither
/// widen every line nor reach the formatter's width limit (a panic above 65,535).
const NAME_PREVIEW: usize = 96;

/// Arguments of `ferrolm inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file.
    pub file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Leave out the tensor table.
    #[arg(long)]
    pub no_tensors: bool,
    /// Show long strings (chat templates) and arrays (vocabularies) in full.
    #[arg(long)]
    pub full: bool,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    let file =
        GgufFile::open(&args.file).with_context(|| format!("cannot inspect {}", args.file.display()))?;
    let out = if args.json {
        let mut s = serde_json::to_string_pretty(&to_json(&file, &args))?;
        s.push('\n');
        s
    } else {
        to_text(&file, &args)
    };
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(out.as_bytes()) {
        // `ferrolm inspect x.gguf | head` is fine.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("cannot write to stdout"),
    }
}

/// Per-type totals.
#[derive(Default)]
struct TypeStats {
    tensors: u64,
    elements: u64,
    bytes: u64,
}

/// Totals per tensor type, largest first.
fn type_stats(file: &GgufFile) -> Vec<(GgmlType, TypeStats)> {
    let mut by_id: BTreeMap<u32, (GgmlType, TypeStats)> = BTreeMap::new();
    for t in file.tensors() {
        let s = &mut by_id.entry(t.ty.id()).or_insert_with(|| (t.ty, TypeStats::default())).1;
        s.tensors += 1;
        s.elements += t.n_elements();
        s.bytes += t.size;
    }
    let mut v: Vec<_> = by_id.into_values().collect();
    v.sort_by_key(|(_, s)| std::cmp::Reverse(s.bytes));
    v
}

fn parameter_count(file: &GgufFile) -> u64 {
    file.tensors().iter().map(TensorInfo::n_elements).sum()
}

fn meta_str<'a>(file: &'a GgufFile, key: &str) -> Option<&'a str> {
    file.opt_str(key).ok().flatten()
}

// ----- text -----------------------------------------------------------------------------------

fn to_text(file: &GgufFile, args: &Args) -> String {
    let mut o = String::new();
    let stats = type_stats(file);
    let params = parameter_count(file);
    let _ = writeln!(o, "file:          {}", args.file.display());
    let _ = writeln!(o, "GGUF version:  {}", file.version());
    let _ = writeln!(o, "alignment:     {}", file.alignment());
    let _ = writeln!(o, "architecture:  {}", meta_str(file, "general.architecture").unwrap_or("-"));
    let _ = writeln!(o, "name:          {}", meta_str(file, "general.name").unwrap_or("-"));
    let _ = writeln!(o, "file size:     {} ({} bytes)", human_bytes(file.file_size()), file.file_size());
    let _ = writeln!(o, "metadata:      {} keys", file.metadata().len());
    let _ = writeln!(o, "tensors:       {}", file.tensors().len());
    let _ = writeln!(o, "parameters:    {} ({params})", human_count(params));
    if !stats.is_empty() {
        let _ = writeln!(o, "types:");
        for (ty, s) in &stats {
            let _ = writeln!(
                o,
                "  {:<8} {:>5} tensors  {:>10} params  {:>11}  ({:.1}%)",
                ty.name(),
                s.tensors,
                human_count(s.elements),
                human_bytes(s.bytes),
                percent(s.bytes, file.file_size()),
            );
        }
    }

    let _ = writeln!(o, "\nmetadata:");
    let width = name_width(file.metadata().iter().map(|(k, _)| k.as_str()));
    for (k, v) in file.metadata() {
        let k = display_name(k);
        let _ = writeln!(o, "  {k:<width$}  {:<14} {}", type_label(v), text_value(v, args.full));
    }

    if !args.no_tensors && !file.tensors().is_empty() {
        let _ =
            writeln!(o, "\ntensors (offsets relative to the data section at byte {}):", file.data_offset());
        let nw = name_width(file.tensors().iter().map(|t| t.name.as_str()));
        let _ =
            writeln!(o, "  {:<nw$}  {:<8} {:<24} {:>12} {:>12}", "name", "type", "shape", "offset", "bytes");
        for t in file.tensors() {
            let _ = writeln!(
                o,
                "  {:<nw$}  {:<8} {:<24} {:>12} {:>12}",
                display_name(&t.name),
                t.ty.name(),
                shape(t),
                t.offset,
                t.size
            );
        }
    }
    o
}

/// A key or tensor name as the text tables show it: at most [`NAME_PREVIEW`] characters, a longer
/// one cut with its length in bytes appended.
fn display_name(name: &str) -> std::borrow::Cow<'_, str> {
    if name.chars().count() <= NAME_PREVIEW {
        return name.into();
    }
    let head: String = name.chars().take(NAME_PREVIEW).collect();
    format!("{head}… ({} bytes)", name.len()).into()
}

/// Column width for names as [`display_name`] shows them (bounded, so never a formatter panic).
fn name_width<'a>(names: impl Iterator<Item = &'a str>) -> usize {
    names.map(|n| display_name(n).chars().count()).max().unwrap_or(0)
}

fn type_label(v: &MetaValue) -> String {
    match v {
        MetaValue::Array(a) => format!("{}[{}]", a.elem_type_name(), a.len()),
        other => other.type_name().to_string(),
    }
}

fn shape(t: &TensorInfo) -> String {
    let dims: Vec<String> = t.dims.iter().map(u64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

fn text_value(v: &MetaValue, full: bool) -> String {
    match v {
        MetaValue::String(s) => text_string(s, full),
        MetaValue::Array(a) => text_array(a, full),
        other => other.to_string(),
    }
}

/// A string, quoted and escaped, shortened unless `full`.
fn text_string(s: &str, full: bool) -> String {
    let n = s.chars().count();
    if full || n <= STRING_PREVIEW {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(STRING_PREVIEW).collect();
        format!("{head:?}… ({n} chars; --full to show all)")
    }
}

/// The first few elements of an array (all with `full`), nested arrays included.
fn text_array(a: &MetaArray, full: bool) -> String {
    fn items<T>(v: &[T], full: bool, f: impl Fn(&T) -> String) -> (Vec<String>, usize) {
        let shown = if full { v.len() } else { v.len().min(ARRAY_PREVIEW) };
        (v[..shown].iter().map(f).collect(), v.len())
    }
    let (shown, len) = match a {
        MetaArray::U8(v) => items(v, full, u8::to_string),
        MetaArray::I8(v) => items(v, full, i8::to_string),
        MetaArray::U16(v) => items(v, full, u16::to_string),
        MetaArray::I16(v) => items(v, full, i16::to_string),
        MetaArray::U32(v) => items(v, full, u32::to_string),
        MetaArray::I32(v) => items(v, full, i32::to_string),
        MetaArray::F32(v) => items(v, full, f32::to_string),
        MetaArray::Bool(v) => items(v, full, bool::to_string),
        MetaArray::String(v) => items(v, full, |s| text_string(s, full)),
        MetaArray::U64(v) => items(v, full, u64::to_string),
        MetaArray::I64(v) => items(v, full, i64::to_string),
        MetaArray::F64(v) => items(v, full, f64::to_string),
        MetaArray::Array(v) => items(v, full, |a| text_array(a, full)),
    };
    let more = if shown.len() < len { format!(", … {} more", len - shown.len()) } else { String::new() };
    format!("[{}{more}]", shown.join(", "))
}

// ----- JSON -----------------------------------------------------------------------------------

fn to_json(file: &GgufFile, args: &Args) -> Value {
    let types: serde_json::Map<String, Value> = type_stats(file)
        .into_iter()
        .map(|(ty, s)| {
            (ty.name().to_string(), json!({"tensors": s.tensors, "elements": s.elements, "bytes": s.bytes}))
        })
        .collect();
    let metadata: Vec<Value> = file
        .metadata()
        .iter()
        .map(|(k, v)| {
            let mut e = serde_json::Map::new();
            e.insert("key".into(), json!(k));
            e.insert("type".into(), json!(v.type_name()));
            match v {
                MetaValue::Array(a) => {
                    e.insert("element_type".into(), json!(a.elem_type_name()));
                    e.insert("length".into(), json!(a.len()));
                }
                MetaValue::String(s) => {
                    e.insert("length".into(), json!(s.chars().count()));
                }
                _ => {}
            }
            let (value, truncated) = json_value(v, args.full);
            e.insert("value".into(), value);
            if truncated {
                e.insert("truncated".into(), json!(true));
            }
            Value::Object(e)
        })
        .collect();
    let mut out = json!({
        "file": args.file.display().to_string(),
        "version": file.version(),
        "alignment": file.alignment(),
        "data_offset": file.data_offset(),
        "architecture": meta_str(file, "general.architecture"),
        "name": meta_str(file, "general.name"),
        "file_size": file.file_size(),
        "tensor_count": file.tensors().len(),
        "parameter_count": parameter_count(file),
        "types": types,
        "metadata": metadata,
    });
    if !args.no_tensors {
        let tensors: Vec<Value> = file
            .tensors()
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "type": t.ty.name(),
                    "shape": t.dims,
                    "offset": t.offset,
                    "file_offset": file.data_offset() + t.offset,
                    "size": t.size,
                })
            })
            .collect();
        if let Some(obj) = out.as_object_mut() {
            obj.insert("tensors".into(), Value::Array(tensors));
        }
    }
    out
}

/// A metadata value as JSON, and whether it was shortened. Non-finite floats become `null`.
fn json_value(v: &MetaValue, full: bool) -> (Value, bool) {
    match v {
        MetaValue::String(s) => json_string(s, full),
        MetaValue::Array(a) => json_array(a, full),
        MetaValue::U8(x) => (json!(x), false),
        MetaValue::I8(x) => (json!(x), false),
        MetaValue::U16(x) => (json!(x), false),
        MetaValue::I16(x) => (json!(x), false),
        MetaValue::U32(x) => (json!(x), false),
        MetaValue::I32(x) => (json!(x), false),
        MetaValue::F32(x) => (json!(x), false),
        MetaValue::Bool(x) => (json!(x), false),
        MetaValue::U64(x) => (json!(x), false),
        MetaValue::I64(x) => (json!(x), false),
        MetaValue::F64(x) => (json!(x), false),
    }
}

fn json_string(s: &str, full: bool) -> (Value, bool) {
    if full || s.chars().count() <= STRING_PREVIEW {
        (json!(s), false)
    } else {
        (json!(s.chars().take(STRING_PREVIEW).collect::<String>()), true)
    }
}

/// The first few elements (all with `full`); nested arrays are shortened the same way.
fn json_array(a: &MetaArray, full: bool) -> (Value, bool) {
    fn items<T>(v: &[T], full: bool, f: impl Fn(&T) -> (Value, bool)) -> (Value, bool) {
        let shown = if full { v.len() } else { v.len().min(ARRAY_PREVIEW) };
        let mut truncated = shown < v.len();
        let vals = v[..shown]
            .iter()
            .map(|x| {
                let (val, t) = f(x);
                truncated |= t;
                val
            })
            .collect();
        (Value::Array(vals), truncated)
    }
    let plain = |x: Value| (x, false);
    match a {
        MetaArray::U8(v) => items(v, full, |x| plain(json!(x))),
        MetaArray::I8(v) => items(v, full, |x| plain(json!(x))),
        MetaArray::U16(v) => items(v, full, |x| plain(json!(x))),
        MetaArray::I16(v) => items(v, full, |x| plain(json!(x))),
        MetaArray::U32(v) => items(v, full, |x| plain(json!(x))),
        MetaArray::I32(v) => items(v, full, |x| plain(json!(x))),
        MetaArray::F32(v) => items(v, full, |x| plain(json!(x))),
        MetaArray::Bool(v) => items(v, full, |x| plain(json!(x))),
        MetaArray::String(v) => items(v, full, |s| json_string(s, full)),
        MetaArray::U64(v) => items(v, full, |x| plain(json!(x))),
        MetaArray::I64(v) => items(v, full, |x| plain(json!(x))),
        MetaArray::F64(v) => items(v, full, |x| plain(json!(x))),
        MetaArray::Array(v) => items(v, full, |a| json_array(a, full)),
    }
}

// ----- formatting -----------------------------------------------------------------------------

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = n as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{x:.2} {}", UNITS[u]) }
}

fn human_count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.2} K", n as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2} M", n as f64 / 1e6),
        _ => format!("{:.2} B", n as f64 / 1e9),
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 * 100.0 / whole as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortening() {
        let a = MetaArray::U32((0..100).collect());
        assert_eq!(text_array(&a, false), "[0, 1, 2, 3, 4, … 95 more]");
        assert_eq!(text_array(&MetaArray::U8(vec![1, 2]), false), "[1, 2]");
        let nested = MetaArray::Array(vec![MetaArray::String(vec!["a\n".into()]), MetaArray::Array(vec![])]);
        assert_eq!(text_array(&nested, false), "[[\"a\\n\"], []]");
        let long = "é".repeat(200);
        assert!(text_string(&long, false).contains("(200 chars"));
        assert_eq!(text_string(&long, true).chars().count(), 202);
        let (v, t) = json_array(&a, false);
        assert_eq!((v.as_array().map(Vec::len), t), (Some(5), true));
        let (v, t) = json_array(&MetaArray::String(vec![long.clone()]), false);
        assert!(t && v[0].as_str().is_some_and(|s| s.chars().count() == STRING_PREVIEW));
        assert!(!json_array(&a, true).1);
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 20), "3.00 MiB");
        assert_eq!(human_count(134_515_008), "134.52 M");
        assert_eq!(human_count(999), "999");
    }
}
