//! ONNX external data: parsing a tensor's `external_data` entries, reading its bytes on demand,
//! and making the data files reachable from a model written to another directory.
//!
//! Locations must stay *relative paths inside the model's directory*: ONNX Runtime (1.2x+) and
//! `onnx.checker` reject absolute locations, locations with `..`, and symbolic links that leave
//! the model directory. So a model saved to a different directory keeps its `location` strings
//! unchanged and each data file is placed next to it under the same relative path as a copy
//! (`fs::copy`: the kernel's `copy_file_range`, which shares extents where the file system can
//! reflink). Never a hard link: ONNX Runtime (1.31) refuses to load external data from a file
//! with more than one link ("potential hardlink attack"), so a link would break the rewritten
//! model *and* the original.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use crate::onnx_pb::{tensor_proto::DataLocation, TensorProto};
use crate::Error;

/// Where one externally stored tensor lives, as read from its `external_data` entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalRef {
    /// Relative path of the data file, from the model's directory.
    pub location: PathBuf,
    pub offset: u64,
    /// `None`: up to the end of the file.
    pub length: Option<u64>,
}

/// Whether the tensor's bytes live in an external file.
pub fn is_external(t: &TensorProto) -> bool {
    t.data_location == Some(DataLocation::External as i32)
}

/// Parses the `external_data` entries of an external tensor. Rejects missing, absolute or
/// escaping (`..`) locations and unparsable numbers: both ONNX Runtime and `onnx.checker`
/// refuse such models, and following them could read arbitrary files.
pub fn external_ref(t: &TensorProto) -> Result<ExternalRef, Error> {
    let name = t.name.as_deref().unwrap_or("");
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for e in &t.external_data {
        let value = e.value.as_deref().unwrap_or("");
        let number = |what: &str| {
            value.parse::<u64>().map_err(|_| {
                Error::Invalid(format!(
                    "tensor '{name}': external data {what} '{value}' is not a non-negative integer"
                ))
            })
        };
        match e.key.as_deref().unwrap_or("") {
            "location" => location = Some(PathBuf::from(value)),
            "offset" => offset = number("offset")?,
            "length" => length = Some(number("length")?),
            _ => {} // "checksum" and future keys are kept verbatim and not needed here.
        }
    }
    let location = location.ok_or_else(|| {
        Error::Invalid(format!(
            "tensor '{name}': data_location is EXTERNAL but external_data has no 'location'"
        ))
    })?;
    let escapes = location
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if location.as_os_str().is_empty() || escapes {
        return Err(Error::Invalid(format!(
            "tensor '{name}': external data location '{}' must be a relative path inside the model directory",
            location.display()
        )));
    }
    Ok(ExternalRef {
        location,
        offset,
        length,
    })
}

/// Checks, from file metadata only, that an external tensor's bytes exist: the file is there and
/// `offset + length` lies within it. Never reads the data.
pub fn check_external(t: &TensorProto, base_dir: &Path) -> Result<(), Error> {
    let r = external_ref(t)?;
    let path = base_dir.join(&r.location);
    let size = fs::metadata(&path)
        .map_err(|e| {
            Error::Invalid(format!(
                "initializer '{}': external data file {} is missing ({e})",
                t.name.as_deref().unwrap_or(""),
                path.display()
            ))
        })?
        .len();
    let end = r.offset.checked_add(r.length.unwrap_or(0));
    if r.offset > size || end.is_none_or(|end| end > size) {
        return Err(Error::Invalid(format!(
            "initializer '{}': external data range {}+{} lies beyond the end of {} ({size} bytes)",
            t.name.as_deref().unwrap_or(""),
            r.offset,
            r.length.unwrap_or(0),
            path.display()
        )));
    }
    Ok(())
}

/// Reads an external tensor's bytes, or `Ok(None)` when they exceed `max_bytes` (callers then
/// treat the value as "constant, bytes not loaded").
pub fn read_external(
    t: &TensorProto,
    base_dir: &Path,
    max_bytes: u64,
) -> Result<Option<Vec<u8>>, Error> {
    let r = external_ref(t)?;
    let path = base_dir.join(&r.location);
    let mut f = fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
    let size = f.metadata().map_err(|e| Error::io(&path, e))?.len();
    let length = match r.length {
        Some(l) => l,
        None => size.saturating_sub(r.offset),
    };
    if length > max_bytes {
        return Ok(None);
    }
    if r.offset.checked_add(length).is_none_or(|end| end > size) {
        return Err(Error::Invalid(format!(
            "tensor '{}': external data range {}+{length} lies beyond the end of {}",
            t.name.as_deref().unwrap_or(""),
            r.offset,
            path.display()
        )));
    }
    f.seek(SeekFrom::Start(r.offset))
        .map_err(|e| Error::io(&path, e))?;
    // `length <= max_bytes` keeps this allocation bounded.
    let mut buf = vec![0u8; length as usize];
    f.read_exact(&mut buf).map_err(|e| Error::io(&path, e))?;
    Ok(Some(buf))
}

/// Makes every external data file named in `locations` (relative to `src_dir`) reachable at the
/// same relative path from `dst_dir`. Nothing happens when both directories are the same.
/// A destination that already exists is accepted only if it has the same content (a hard link
/// to the source, as older versions made, is replaced by a copy: see the module docs); anything
/// else is an error rather than an overwrite.
pub fn place_external_files<'a>(
    locations: impl IntoIterator<Item = &'a Path>,
    src_dir: &Path,
    dst_dir: &Path,
) -> Result<(), Error> {
    let same_dir = match (fs::canonicalize(src_dir), fs::canonicalize(dst_dir)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same_dir {
        return Ok(());
    }
    let mut seen = std::collections::BTreeSet::new();
    for loc in locations {
        if !seen.insert(loc.to_path_buf()) {
            continue;
        }
        let src = src_dir.join(loc);
        let dst = dst_dir.join(loc);
        if let Some(parent) = dst.parent() {
            fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        if dst.exists() {
            if is_same_file(&src, &dst)? {
                // A hard link (older mxfuse versions made them): ONNX Runtime loads neither
                // model while the file has two links, so unlink this one and copy.
                fs::remove_file(&dst).map_err(|e| Error::io(&dst, e))?;
            } else if same_content(&src, &dst)? {
                continue;
            } else {
                return Err(Error::Invalid(format!(
                    "{} already exists and differs from {}; refusing to overwrite external data",
                    dst.display(),
                    src.display()
                )));
            }
        }
        copy_file(&src, &dst)?;
    }
    Ok(())
}

/// Copies `src` to `dst` through a temporary file renamed into place (a copy that fails part-way
/// — a full disk — leaves no truncated `dst` that a retry would then refuse as different data).
/// A sparse source (fewer blocks allocated than its length: placeholder weights) is copied with
/// its zero runs left as holes, so a multi-GB file of zeros does not become one on disk.
fn copy_file(src: &Path, dst: &Path) -> Result<(), Error> {
    let meta = fs::metadata(src).map_err(|e| Error::io(src, e))?;
    let tmp = super::temp_sibling(dst);
    // The temporary file is created new (not through a link left at its name), then filled.
    let copied = super::create_new(&tmp).and_then(|_| {
        if is_sparse(&meta) {
            copy_keeping_holes(src, &tmp)?;
        } else {
            fs::copy(src, &tmp)?;
        }
        fs::set_permissions(&tmp, owner_writable(meta.permissions()))
    });
    super::commit_temp(&tmp, dst, copied)
}

/// The source's permissions plus write for the owner: the copy is the rewritten model's own file
/// (a weights file copied out of a read-only folder, a package's samples say, would otherwise
/// stay read-only, and the next rewrite to the same place could not replace it).
fn owner_writable(mut p: fs::Permissions) -> fs::Permissions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        p.set_mode(p.mode() | 0o200);
    }
    #[cfg(not(unix))]
    {
        #[allow(clippy::permissions_set_readonly_false)]
        p.set_readonly(false);
    }
    p
}

/// Whether fewer bytes are allocated to the file than its length (always false off Unix).
fn is_sparse(meta: &fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        meta.blocks().saturating_mul(512) < meta.len()
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        false
    }
}

/// A streamed copy that seeks over all-zero chunks instead of writing them, then sets the
/// length: the same bytes, with holes where the source had zeros.
fn copy_keeping_holes(src: &Path, dst: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let mut from = fs::File::open(src)?;
    let mut to = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(dst)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if buf[..n].iter().all(|&b| b == 0) {
            to.seek(SeekFrom::Current(n as i64))?;
        } else {
            to.write_all(&buf[..n])?;
        }
        len += n as u64;
    }
    to.set_len(len)
}

/// Whether `a` and `b` are the same inode (always false off Unix).
fn is_same_file(a: &Path, b: &Path) -> Result<bool, Error> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let ma = fs::metadata(a).map_err(|e| Error::io(a, e))?;
        let mb = fs::metadata(b).map_err(|e| Error::io(b, e))?;
        Ok(ma.dev() == mb.dev() && ma.ino() == mb.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        Ok(false)
    }
}

/// Same file (inode) or same bytes, compared in a streamed fashion.
fn same_content(a: &Path, b: &Path) -> Result<bool, Error> {
    let (ma, mb) = (
        fs::metadata(a).map_err(|e| Error::io(a, e))?,
        fs::metadata(b).map_err(|e| Error::io(b, e))?,
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if ma.dev() == mb.dev() && ma.ino() == mb.ino() {
            return Ok(true);
        }
    }
    if ma.len() != mb.len() {
        return Ok(false);
    }
    let mut fa = std::io::BufReader::new(fs::File::open(a).map_err(|e| Error::io(a, e))?);
    let mut fb = std::io::BufReader::new(fs::File::open(b).map_err(|e| Error::io(b, e))?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = fa.read(&mut ba).map_err(|e| Error::io(a, e))?;
        if n == 0 {
            return Ok(true);
        }
        fb.read_exact(&mut bb[..n]).map_err(|e| Error::io(b, e))?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}
