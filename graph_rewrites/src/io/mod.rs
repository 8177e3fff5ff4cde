//! Loading and saving ONNX models.
//!
//! * Every file is written to a temporary name next to it and renamed into place, so a failed
//!   write (a full disk) leaves no truncated model, report or data file behind.
//! * Loading decodes the protobuf and never reads external data: tensors stored with
//!   `data_location = EXTERNAL` stay metadata-only until a rule asks for their bytes
//!   ([`crate::ir::Graph::read_initializer`]), so memory does not grow with weight size.
//! * Saving writes the protobuf and, when the output lies in another directory than the input,
//!   makes each external data file available next to the output under its unchanged relative
//!   `location` (a copy — a reflink where the file system can, holes kept — never a hard link;
//!   see [`external`]). The written model therefore
//!   resolves its external files wherever it is written, and stays loadable by ONNX Runtime,
//!   which refuses absolute or `..` locations.
//! * Initializers that rules created and that are at least [`spill::SPILL_MIN_BYTES`] are
//!   written to a side file `<output file name>.mxfuse.data` next to the output (see [`spill`]);
//!   smaller ones stay inline.

pub mod external;
pub mod spill;

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use prost::Message;

use crate::ir::Graph;
use crate::onnx_pb::{AttributeProto, GraphProto, ModelProto, TensorProto};
use crate::Error;

/// Decodes an ONNX model file. External data is not read.
pub fn load_model(path: &Path) -> Result<ModelProto, Error> {
    let bytes = fs::read(path).map_err(|e| Error::io(path, e))?;
    ModelProto::decode(bytes.as_slice()).map_err(|e| Error::Decode {
        path: path.to_path_buf(),
        reason: e.to_string().replace('\n', " "),
    })
}

/// Loads and validates a model into the arena IR; external data resolves against the model's
/// directory.
pub fn load_graph(path: &Path) -> Result<Graph, Error> {
    graph_from_model(load_model(path)?, path)
}

/// The arena IR of `model`, read from `path` (external data resolves against its directory); a
/// model the IR refuses names the file in the error.
pub fn graph_from_model(model: ModelProto, path: &Path) -> Result<Graph, Error> {
    let at = |why: String| format!("{}: {why}", path.display());
    Graph::from_model(model, Some(model_dir(path))).map_err(|e| match e {
        Error::Invalid(why) => Error::Invalid(at(why)),
        Error::Unsupported(why) => Error::Unsupported(at(why)),
        Error::Cycle(why) => Error::Invalid(at(format!("graph has a cycle through {why}"))),
        other => other,
    })
}

/// Writes `model` to `path`. `src_dir` is the directory its external `location`s are relative
/// to (the input model's directory); the data files are placed next to `path` when it lies
/// elsewhere (see the module docs). Missing parent directories are created.
pub fn save_model(model: &ModelProto, path: &Path, src_dir: Option<&Path>) -> Result<(), Error> {
    prepare_output_dir(model, path, src_dir)?;
    write_model(model, path)
}

/// Writes a graph (see [`save_model`]): external data resolves from the graph's base directory,
/// and large initializers created by rules go to the side file (see [`spill`]).
pub fn save_graph(g: Graph, path: &Path) -> Result<(), Error> {
    let created: HashSet<String> = g.created_initializers().into_iter().collect();
    let base_dir = g.base_dir().map(Path::to_path_buf);
    let mut model = g.into_model();
    // Place the input's data files first: the side file is new and lives only next to `path`.
    prepare_output_dir(&model, path, base_dir.as_deref())?;
    spill::spill_initializers(&mut model, &created, path, spill::SPILL_MIN_BYTES)?;
    write_model(&model, path)
}

/// Creates the output directory and makes the model's external data files reachable from it.
fn prepare_output_dir(
    model: &ModelProto,
    path: &Path,
    src_dir: Option<&Path>,
) -> Result<(), Error> {
    let out_dir = model_dir(path);
    fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, e))?;
    if let Some(src_dir) = src_dir {
        let locations = external_locations(model)?;
        external::place_external_files(locations.iter().map(PathBuf::as_path), src_dir, out_dir)?;
    }
    Ok(())
}

fn write_model(model: &ModelProto, path: &Path) -> Result<(), Error> {
    write_atomically(path, &model.encode_to_vec())
}

/// Writes `bytes` to `path` through a temporary file in the same directory renamed over it, so
/// that a failure part-way (a full disk) leaves `path` as it was — the input itself when a model
/// is rewritten in place. Missing parent directories are created.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    // Through a symlink to the file it names (as fs::write would), not over the link itself.
    let resolved = fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_symlink())
        .and_then(|_| fs::canonicalize(path).ok());
    let path = resolved.as_deref().unwrap_or(path);
    let dir = model_dir(path);
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tmp = temp_sibling(path);
    // A file replaced in place keeps its permissions (fs::write on it would have).
    let keep_mode = fs::metadata(path).ok().map(|m| m.permissions());
    let written = create_new(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, bytes))
        .and_then(|()| match keep_mode {
            Some(mode) => fs::set_permissions(&tmp, mode),
            None => Ok(()),
        });
    commit_temp(&tmp, path, written)
}

/// Renames the temporary file `tmp` over `path` once `written` (its filling) succeeded; on any
/// failure removes `tmp`, so nothing half-written is left, and reports the error for `path`.
pub(crate) fn commit_temp(
    tmp: &Path,
    path: &Path,
    written: std::io::Result<()>,
) -> Result<(), Error> {
    written.and_then(|()| fs::rename(tmp, path)).map_err(|e| {
        let _ = fs::remove_file(tmp);
        Error::io(path, e)
    })
}

/// A new file at `path` (an existing file or symlink there is replaced, never written through:
/// a temporary name in a shared directory must not follow a link someone planted).
pub(crate) fn create_new(path: &Path) -> std::io::Result<fs::File> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

/// A file name next to `path` for a write that is renamed into place when complete.
pub(crate) fn temp_sibling(path: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(".mxfuse-tmp-{}", std::process::id()));
    path.with_file_name(name)
}

/// The directory a model file's relative paths resolve against ("." for a bare file name).
pub fn model_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Every external data file referenced anywhere in the model: initializers, sparse
/// initializers, tensor attributes, subgraphs, functions and training graphs.
pub fn external_locations(model: &ModelProto) -> Result<BTreeSet<PathBuf>, Error> {
    let mut out = BTreeSet::new();
    let mut add = |t: &TensorProto| -> Result<(), Error> {
        if external::is_external(t) {
            out.insert(external::external_ref(t)?.location);
        }
        Ok(())
    };
    if let Some(g) = &model.graph {
        visit_graph_tensors(g, &mut add)?;
    }
    for f in &model.functions {
        for n in &f.node {
            visit_attr_tensors(&n.attribute, &mut add)?;
        }
        visit_attr_tensors(&f.attribute_proto, &mut add)?;
    }
    for ti in &model.training_info {
        for g in [&ti.initialization, &ti.algorithm].into_iter().flatten() {
            visit_graph_tensors(g, &mut add)?;
        }
    }
    Ok(out)
}

type TensorVisitor<'a> = dyn FnMut(&TensorProto) -> Result<(), Error> + 'a;

fn visit_graph_tensors(g: &GraphProto, f: &mut TensorVisitor<'_>) -> Result<(), Error> {
    for t in &g.initializer {
        f(t)?;
    }
    for s in &g.sparse_initializer {
        for t in [&s.values, &s.indices].into_iter().flatten() {
            f(t)?;
        }
    }
    for n in &g.node {
        visit_attr_tensors(&n.attribute, f)?;
    }
    Ok(())
}

fn visit_attr_tensors(attrs: &[AttributeProto], f: &mut TensorVisitor<'_>) -> Result<(), Error> {
    for a in attrs {
        for t in a.t.iter().chain(&a.tensors) {
            f(t)?;
        }
        for s in a.sparse_tensor.iter().chain(&a.sparse_tensors) {
            for t in [&s.values, &s.indices].into_iter().flatten() {
                f(t)?;
            }
        }
        for g in a.g.iter().chain(&a.graphs) {
            visit_graph_tensors(g, f)?;
        }
    }
    Ok(())
}
