//! Placing initializer bytes: inline `raw_data`, or an external side file
//! (`data_location = EXTERNAL`, `location`/`offset`/`length` entries). Unmaterialised
//! [`Payload::Zeros`] become holes of a sparse file sized with `set_len`: no disk, no time.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use graph_rewrites::onnx_pb::{tensor_proto::DataLocation, ModelProto, StringStringEntryProto};
use prost::Message;

use crate::builder::{BuiltModel, Payload};
use crate::error::{Error, Result};

/// Initializers smaller than this stay inline (onnx's `size_threshold` default).
pub const EXTERNAL_THRESHOLD: usize = 1024;
/// Offsets of large tensors are aligned to 64 KiB (mmap allocation granularity on Windows, a
/// whole number of pages elsewhere), small ones to 64 bytes.
const LARGE_ALIGN: u64 = 1 << 16;
const SMALL_ALIGN: u64 = 64;
/// Protobuf refuses messages of 2 GiB and more.
const PROTO_LIMIT: usize = (1 << 31) - 1;

/// What [`write_model`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteStats {
    pub model_bytes: u64,
    /// Side file and its logical size (holes included), if any.
    pub data_file: Option<(PathBuf, u64)>,
    pub external_tensors: usize,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn entry(k: &str, v: String) -> StringStringEntryProto {
    StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    }
}

/// Moves every initializer into `raw_data` and returns the complete model.
pub fn into_inline(built: BuiltModel) -> ModelProto {
    let BuiltModel {
        mut model,
        initializers,
    } = built;
    if let Some(g) = model.graph.as_mut() {
        for init in initializers {
            let mut t = init.proto;
            t.raw_data = Some(init.payload.into_bytes());
            g.initializer.push(t);
        }
    }
    model
}

/// Writes `built` to `path`: inline (`external = false`), or with every initializer of at least
/// [`EXTERNAL_THRESHOLD`] bytes in `<file name>.data` beside it.
pub fn write_model(built: BuiltModel, path: &Path, external: bool) -> Result<WriteStats> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    let (model, data_file, external_tensors) = if external {
        let (m, data, n) = externalize(built, path)?;
        (m, Some(data), n)
    } else {
        (into_inline(built), None, 0)
    };
    let len = model.encoded_len();
    if len > PROTO_LIMIT {
        return Err(Error::InvalidConfig(format!(
            "the model proto would be {len} bytes, over protobuf's 2 GiB: write weights externally"
        )));
    }
    std::fs::write(path, model.encode_to_vec()).map_err(io_err(path))?;
    Ok(WriteStats {
        model_bytes: len as u64,
        data_file,
        external_tensors,
    })
}

/// Writes the large initializers to the side file and returns the model referencing it.
fn externalize(built: BuiltModel, path: &Path) -> Result<(ModelProto, (PathBuf, u64), usize)> {
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::InvalidConfig(format!("{}: not a file name", path.display())))?;
    let location = format!("{file_name}.data");
    let data_path = path.with_file_name(&location);
    let mut file: File = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&data_path)
        .map_err(io_err(&data_path))?;
    let BuiltModel {
        mut model,
        initializers,
    } = built;
    let mut offset = 0u64;
    let mut count = 0;
    let mut placed = Vec::with_capacity(initializers.len());
    for init in initializers {
        let mut t = init.proto;
        let len = init.payload.len();
        if len < EXTERNAL_THRESHOLD {
            t.raw_data = Some(init.payload.into_bytes());
            placed.push(t);
            continue;
        }
        let align = if len >= 1 << 20 {
            LARGE_ALIGN
        } else {
            SMALL_ALIGN
        };
        offset = offset.div_ceil(align) * align;
        // Zeros stay holes; everything else (lazy weights included) is made and written now.
        if !matches!(init.payload, Payload::Zeros(_)) {
            let bytes = init.payload.into_bytes();
            file.seek(SeekFrom::Start(offset))
                .map_err(io_err(&data_path))?;
            file.write_all(&bytes).map_err(io_err(&data_path))?;
        }
        t.data_location = Some(DataLocation::External as i32);
        t.external_data = vec![
            entry("location", location.clone()),
            entry("offset", offset.to_string()),
            entry("length", len.to_string()),
        ];
        offset += len as u64;
        count += 1;
        placed.push(t);
    }
    // Extends past the last written byte with zeros; for fake weights this is the whole file, a
    // hole on every common filesystem.
    file.set_len(offset).map_err(io_err(&data_path))?;
    if let Some(g) = model.graph.as_mut() {
        g.initializer = placed;
    }
    Ok((model, (data_path, offset), count))
}
