//! The files `mxfuse rewrite` writes (the model, the report, the external data files placed
//! next to the model) and the check, before anything is written, that none of them is a file
//! the rewrite reads or another of them: an output named like the input's external data file
//! would otherwise overwrite the weights both models point at, and a report named like the input
//! would replace it, each with exit status 0.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::io::{model_dir, spill::side_file_name};
use crate::Error;

/// The file `p` names, so that two spellings of one file compare equal: an existing path fully
/// resolved (symlinks included — the rewrite writes through a symlinked output); otherwise its
/// longest existing ancestor resolved and the rest, which cannot hold symlinks, normalised by
/// text (`newdir/../m.onnx` is `m.onnx` once `newdir` is created).
fn resolved(p: &Path) -> PathBuf {
    use std::path::Component;
    if let Ok(full) = fs::canonicalize(p) {
        return full;
    }
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let parts: Vec<Component> = abs.components().collect();
    let mut known = parts.len();
    while known > 0 && !parts[..known].iter().collect::<PathBuf>().exists() {
        known -= 1;
    }
    let prefix: PathBuf = parts[..known].iter().collect();
    let mut out = fs::canonicalize(&prefix).unwrap_or(prefix);
    for c in &parts[known..] {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Checks that the model output `output`, the optional report and the external data files
/// (`locations`, relative to the input's directory, and their copies next to the output) are
/// distinct files, and that neither output nor report is one of the input's data files or (the
/// report) the input itself. `output == input` (rewriting in place) is allowed.
pub fn check_output_paths(
    input: &Path,
    output: &Path,
    report: Option<&Path>,
    locations: &BTreeSet<PathBuf>,
) -> Result<(), Error> {
    let (src_dir, dst_dir) = (model_dir(input), model_dir(output));
    let data: Vec<(PathBuf, String)> = locations
        .iter()
        .flat_map(|loc| [src_dir.join(loc), dst_dir.join(loc)])
        .map(|p| {
            let shown = p.display().to_string();
            (resolved(&p), shown)
        })
        .collect();
    let out = resolved(output);
    if let Some((_, shown)) = data.iter().find(|(p, _)| *p == out) {
        return Err(Error::Invalid(format!(
            "output {} is the external data file {shown} of the model: writing it would destroy the weights",
            output.display()
        )));
    }
    if let Some(r) = report {
        let rep = resolved(r);
        // The side file large rule-made initializers go to (`io::spill`).
        let spill = dst_dir.join(side_file_name(output, locations));
        let clash = if rep == resolved(&spill) {
            Some("the output's side file".to_string())
        } else if rep == resolved(input) {
            Some("the input model".to_string())
        } else if rep == out {
            Some("the output model".to_string())
        } else {
            data.iter()
                .find(|(p, _)| *p == rep)
                .map(|(_, shown)| format!("the external data file {shown}"))
        };
        if let Some(what) = clash {
            return Err(Error::Invalid(format!(
                "report {} is {what}: choose another report path",
                r.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locs(v: &[&str]) -> BTreeSet<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn refuses_outputs_that_are_read_or_written_data() {
        let dir = crate::testing::scratch_dir("cli-paths");
        let input = dir.join("m.onnx");
        fs::write(&input, b"x").unwrap();
        let sub = dir.join("out");
        let l = locs(&["m.onnx.data"]);
        let check = |o: &Path, r: Option<&Path>| check_output_paths(&input, o, r, &l);
        // The output is the input's data file, or (in another directory) the data copied there.
        assert!(check(&dir.join("m.onnx.data"), None).is_err());
        assert!(check(&sub.join("m.onnx.data"), None).is_err());
        assert!(check(&dir.join("./m.onnx.data"), None).is_err());
        // The report is the input, the output or a data file.
        for r in [
            dir.join("m.onnx"),
            sub.join("o.onnx"),
            dir.join("m.onnx.data"),
        ] {
            assert!(
                check(&sub.join("o.onnx"), Some(&r)).is_err(),
                "{}",
                r.display()
            );
        }
        // Spelled through a directory that does not exist yet, or through a symlink.
        let r = dir.join("newdir/../m.onnx");
        assert!(check(&sub.join("o.onnx"), Some(&r)).is_err());
        assert!(check(&dir.join("newdir/../m.onnx.data"), None).is_err());
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.join("m.onnx.data"), dir.join("link.onnx")).unwrap();
            fs::write(dir.join("m.onnx.data"), b"w").unwrap();
            assert!(check(&dir.join("link.onnx"), None).is_err());
        }
        assert!(check(&sub.join("o.onnx"), Some(&sub.join("o.onnx.mxfuse.data"))).is_err());
        // In place, elsewhere, and a report of its own are fine.
        assert!(check(&input, Some(&dir.join("r.json"))).is_ok());
        assert!(check(&sub.join("o.onnx"), Some(&sub.join("r.json"))).is_ok());
        let _ = fs::remove_dir_all(dir);
    }
}
