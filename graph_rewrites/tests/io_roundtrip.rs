//! Round-trips of the shared sample models (load → save keeps everything), external data
//! placement, determinism and idempotence of a full rewrite.
//!
//! The samples are the committed copies in `models/fixtures/samples` (from `../shared/samples`).

use std::path::{Path, PathBuf};

use graph_rewrites::io::{load_graph, load_model, save_graph};
use graph_rewrites::ir::Graph;
use graph_rewrites::pipeline::{run_pipeline, PipelineOptions};
use graph_rewrites::testing::scratch_dir;
use prost::Message;

fn samples_dir() -> Option<PathBuf> {
    Some(graph_rewrites::testing::samples_dir())
}

/// Every `.onnx` under the samples directory (one level of subfolders).
fn sample_models(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            out.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else {
            out.push(p);
        }
    }
    out.retain(|p| p.extension().is_some_and(|e| e == "onnx"));
    out.sort();
    out
}

#[test]
fn samples_round_trip_unchanged() {
    let Some(dir) = samples_dir() else { return };
    let models = sample_models(&dir);
    assert!(
        models.len() >= 5,
        "expected the shared samples, found {models:?}"
    );
    for path in models {
        let original = load_model(&path).unwrap();
        let g = Graph::from_model(original.clone(), path.parent()).unwrap();
        let back = g.to_model();
        assert!(
            back == original,
            "{}: ModelProto changed by load → save",
            path.display()
        );
        // No normalisation at all: even the bytes are the file's.
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            back.encode_to_vec() == bytes,
            "{}: bytes changed",
            path.display()
        );
    }
}

#[test]
fn external_data_is_placed_next_to_a_model_saved_elsewhere() {
    let Some(dir) = samples_dir() else { return };
    let input = dir.join("ortgenai_llama_tiny_fp32/model.onnx");
    let out_dir = scratch_dir("external");
    let output = out_dir.join("nested/out.onnx");
    std::fs::create_dir_all(output.parent().unwrap()).unwrap();
    let g = load_graph(&input).unwrap();
    save_graph(g.clone(), &output).unwrap();
    let data = output.parent().unwrap().join("model.onnx.data");
    assert_eq!(
        std::fs::read(&data).unwrap(),
        std::fs::read(dir.join("ortgenai_llama_tiny_fp32/model.onnx.data")).unwrap()
    );
    // Loading the copy resolves every external tensor against its new directory.
    let copy = load_graph(&output).unwrap();
    assert_eq!(copy.to_model(), g.to_model());
    let w = copy.value_by_name("lm_head.MatMul.weight").or_else(|| {
        copy.initializers()
            .find(|t| t.data_location == Some(1))
            .and_then(|t| copy.value_by_name(t.name.as_deref()?))
    });
    let w = w.expect("an external initializer");
    let bytes = copy.read_initializer(w).unwrap().expect("readable");
    assert!(!bytes.raw.is_empty());
    // Saving again over the same place is fine (same file), a different file is refused.
    save_graph(g.clone(), &output).unwrap();
    std::fs::remove_file(&data).unwrap();
    std::fs::write(&data, b"something else").unwrap();
    let err = save_graph(g.clone(), &output).unwrap_err().to_string();
    assert!(err.contains("refusing to overwrite"), "{err}");
    let _ = std::fs::remove_dir_all(out_dir);
}

/// ONNX Runtime 1.31 refuses external data in a file with more than one hard link ("potential
/// hardlink attack"): placing the data next to a model saved elsewhere must copy, leaving both
/// the original and the copy with one link, and must undo a hard link an older version made.
#[cfg(unix)]
#[test]
fn external_data_is_copied_never_hard_linked() {
    use std::os::unix::fs::MetadataExt;
    let Some(dir) = samples_dir() else { return };
    let scratch = scratch_dir("external_links");
    let (src_dir, out_dir) = (scratch.join("src"), scratch.join("out"));
    std::fs::create_dir_all(&src_dir).unwrap();
    std::fs::create_dir_all(&out_dir).unwrap();
    for f in ["model.onnx", "model.onnx.data"] {
        std::fs::copy(
            dir.join("ortgenai_llama_tiny_fp32").join(f),
            src_dir.join(f),
        )
        .unwrap();
    }
    let (src_data, out_data) = (
        src_dir.join("model.onnx.data"),
        out_dir.join("model.onnx.data"),
    );
    let links = |p: &Path| std::fs::metadata(p).unwrap().nlink();
    let g = load_graph(&src_dir.join("model.onnx")).unwrap();
    save_graph(g.clone(), &out_dir.join("out.onnx")).unwrap();
    assert_eq!((links(&src_data), links(&out_data)), (1, 1));
    // A hard link left by an older version is replaced by a copy.
    std::fs::remove_file(&out_data).unwrap();
    std::fs::hard_link(&src_data, &out_data).unwrap();
    save_graph(g, &out_dir.join("out.onnx")).unwrap();
    assert_eq!((links(&src_data), links(&out_data)), (1, 1));
    assert_eq!(
        std::fs::read(&src_data).unwrap(),
        std::fs::read(&out_data).unwrap()
    );
    let _ = std::fs::remove_dir_all(scratch);
}

/// A sparse data file (placeholder weights: a file of zeros with few blocks allocated) placed
/// next to a model saved elsewhere stays sparse, with the same bytes; no temporary file is left.
#[cfg(unix)]
#[test]
fn sparse_external_data_is_copied_with_its_holes() {
    use std::os::unix::fs::MetadataExt;
    let Some(dir) = samples_dir() else { return };
    let scratch = scratch_dir("external_sparse");
    let (src_dir, out_dir) = (scratch.join("src"), scratch.join("out"));
    std::fs::create_dir_all(&src_dir).unwrap();
    std::fs::copy(
        dir.join("ortgenai_llama_tiny_fp32/model.onnx"),
        src_dir.join("model.onnx"),
    )
    .unwrap();
    // The real bytes, then 64 MiB of hole: the model reads only the first part.
    let data = std::fs::read(dir.join("ortgenai_llama_tiny_fp32/model.onnx.data")).unwrap();
    let src_data = src_dir.join("model.onnx.data");
    std::fs::write(&src_data, &data).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&src_data)
        .unwrap();
    f.set_len(data.len() as u64 + (64 << 20)).unwrap();
    drop(f);
    let g = load_graph(&src_dir.join("model.onnx")).unwrap();
    save_graph(g, &out_dir.join("out.onnx")).unwrap();
    let out_data = out_dir.join("model.onnx.data");
    let (src_meta, out_meta) = (
        std::fs::metadata(&src_data).unwrap(),
        std::fs::metadata(&out_data).unwrap(),
    );
    assert_eq!(out_meta.len(), src_meta.len());
    assert!(
        out_meta.blocks() * 512 < (16 << 20),
        "{} bytes allocated",
        out_meta.blocks() * 512
    );
    assert_eq!(
        std::fs::read(&src_data).unwrap(),
        std::fs::read(&out_data).unwrap()
    );
    let names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains("mxfuse-tmp")), "{names:?}");
    let _ = std::fs::remove_dir_all(scratch);
}

/// Runs the default pipeline on `input`, saves to `output`, returns the report's fusion count.
fn rewrite(input: &Path, output: &Path) -> usize {
    let mut g = load_graph(input).unwrap();
    let report = run_pipeline(&mut g, &PipelineOptions::default()).unwrap();
    save_graph(g, output).unwrap();
    report.fusions.len()
}

#[test]
fn rewrites_are_deterministic_and_idempotent() {
    let Some(dir) = samples_dir() else { return };
    let out = scratch_dir("determinism");
    for (i, path) in sample_models(&dir).iter().enumerate() {
        let (a, b, c) = (
            out.join(format!("{i}a.onnx")),
            out.join(format!("{i}b.onnx")),
            out.join(format!("{i}c.onnx")),
        );
        rewrite(path, &a);
        rewrite(path, &b);
        assert!(
            std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
            "{}: two rewrites differ",
            path.display()
        );
        assert_eq!(
            rewrite(&a, &c),
            0,
            "{}: a second pass fused something",
            path.display()
        );
        assert!(
            std::fs::read(&a).unwrap() == std::fs::read(&c).unwrap(),
            "{}: second pass changed the model",
            path.display()
        );
    }
    let _ = std::fs::remove_dir_all(out);
}

/// External data copied out of a read-only file (a package's samples, say) is the rewritten
/// model's own file: writable by its owner, so the next save to the same place can replace it.
#[cfg(unix)]
#[test]
fn external_data_copied_from_a_read_only_file_is_owner_writable() {
    use std::os::unix::fs::PermissionsExt;
    let Some(dir) = samples_dir() else { return };
    let scratch = scratch_dir("external_read_only");
    let (src_dir, out_dir) = (scratch.join("src"), scratch.join("out"));
    std::fs::create_dir_all(&src_dir).unwrap();
    for f in ["model.onnx", "model.onnx.data"] {
        std::fs::copy(
            dir.join("ortgenai_llama_tiny_fp32").join(f),
            src_dir.join(f),
        )
        .unwrap();
    }
    let src_data = src_dir.join("model.onnx.data");
    std::fs::set_permissions(&src_data, std::fs::Permissions::from_mode(0o444)).unwrap();
    let g = load_graph(&src_dir.join("model.onnx")).unwrap();
    save_graph(g.clone(), &out_dir.join("out.onnx")).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let out_data = out_dir.join("model.onnx.data");
    assert_eq!(mode(&out_data), 0o644);
    assert_eq!(mode(&src_data), 0o444, "the source is left as it was");
    save_graph(g, &out_dir.join("out.onnx")).unwrap();
    let _ = std::fs::remove_dir_all(scratch);
}
