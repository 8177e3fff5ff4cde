//! Moving large initializers that rules created out of the protobuf into a side file next to
//! the output, so a rewritten model stays under protobuf's 2 GiB limit and loads with its
//! weights memory-mapped like any external-data model.

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{external_locations, model_dir};
use crate::onnx_pb::{tensor_proto::DataLocation, ModelProto, StringStringEntryProto};
use crate::Error;

/// Created initializers of at least this many bytes go to the side file.
pub const SPILL_MIN_BYTES: usize = 1 << 20;

/// Offsets in the side file are multiples of this (page size), so ONNX Runtime can map them.
const ALIGN: u64 = 4096;

/// The side file's name for an output model: `<output file name>.mxfuse.data`, or
/// `<output file name>.mxfuse.N.data` (N = 1, 2, ...) when the model already references that
/// name — e.g. when a model written by mxfuse is rewritten in place, whose tensors still live in
/// the old side file.
pub fn side_file_name(output: &Path, taken: &BTreeSet<PathBuf>) -> String {
    let file = output
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model.onnx".into());
    std::iter::once(format!("{file}.mxfuse.data"))
        .chain((1..).map(|i| format!("{file}.mxfuse.{i}.data")))
        .find(|name| !taken.contains(Path::new(name)))
        .unwrap_or_default() // unreachable: the candidates never run out
}

/// Moves the inline bytes of the named initializers of `model` that are at least `min_bytes`
/// into the side file of `output` and turns them into external tensors. Returns how many moved;
/// the side file is only written when at least one does.
pub fn spill_initializers(
    model: &mut ModelProto,
    names: &HashSet<String>,
    output: &Path,
    min_bytes: usize,
) -> Result<usize, Error> {
    let taken = external_locations(model)?;
    let Some(graph) = model.graph.as_mut() else {
        return Ok(0);
    };
    let location = side_file_name(output, &taken);
    let path = model_dir(output).join(&location);
    // Written under a temporary name and renamed when complete (as every file the rewrite
    // writes), so a failed write leaves no half side file behind.
    let tmp = super::temp_sibling(&path);
    let mut writer: Option<BufWriter<fs::File>> = None;
    let (mut offset, mut moved) = (0u64, 0usize);
    for t in &mut graph.initializer {
        let big = t.raw_data.as_ref().is_some_and(|r| r.len() >= min_bytes);
        if !big || !t.name.as_ref().is_some_and(|n| names.contains(n)) {
            continue;
        }
        let w = match writer.as_mut() {
            Some(w) => w,
            None => {
                // A new file renamed over the old one: a stale side file may be a hard link to
                // data something else still uses, which truncating in place would destroy.
                let f = super::create_new(&tmp).map_err(|e| Error::io(&tmp, e))?;
                writer.insert(BufWriter::new(f))
            }
        };
        let raw = t.raw_data.take().unwrap_or_default();
        let start = offset.next_multiple_of(ALIGN);
        let pad = vec![0u8; (start - offset) as usize];
        if let Err(e) = w.write_all(&pad).and_then(|_| w.write_all(&raw)) {
            // Removes the half-written file and returns the error (never Ok with an Err given).
            return super::commit_temp(&tmp, &path, Err(e)).map(|()| moved);
        }
        offset = start + raw.len() as u64;
        let entry = |k: &str, v: String| StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v),
        };
        t.data_location = Some(DataLocation::External as i32);
        t.external_data = vec![
            entry("location", location.clone()),
            entry("offset", start.to_string()),
            entry("length", raw.len().to_string()),
        ];
        moved += 1;
    }
    if let Some(mut w) = writer {
        super::commit_temp(&tmp, &path, w.flush())?;
    }
    Ok(moved)
}
