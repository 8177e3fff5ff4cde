//! The bad-input corpus (tests/data/bad): every file must load to a clear error, never a panic.

use std::path::{Path, PathBuf};

use graph_rewrites::io::load_graph;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bad")
}

/// (file, expected message fragment) from EXPECTED.tsv.
fn expectations() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(corpus_dir().join("EXPECTED.tsv")).expect("EXPECTED.tsv");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (f, frag) = l.split_once('\t').expect("file<TAB>fragment");
            (f.to_owned(), frag.to_owned())
        })
        .collect()
}

#[test]
fn every_bad_model_has_an_expectation() {
    let listed: Vec<String> = expectations().into_iter().map(|(f, _)| f).collect();
    let mut files = 0;
    for entry in std::fs::read_dir(corpus_dir()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".onnx") {
            files += 1;
            assert!(
                listed.contains(&name),
                "{name} is missing from EXPECTED.tsv"
            );
        }
    }
    assert_eq!(
        files,
        listed.len(),
        "EXPECTED.tsv lists files that do not exist"
    );
}

#[test]
fn every_bad_model_fails_to_load_with_a_clear_one_line_error() {
    for (file, fragment) in expectations() {
        let path = corpus_dir().join(&file);
        let result = std::panic::catch_unwind(|| load_graph(&path));
        let err = match result {
            Err(_) => panic!("{file}: loading panicked"),
            Ok(Ok(_)) => panic!("{file}: loaded without error"),
            Ok(Err(e)) => e.to_string(),
        };
        assert!(
            err.contains(&fragment),
            "{file}: error '{err}' lacks '{fragment}'"
        );
        assert!(!err.contains('\n'), "{file}: error spans lines: {err}");
    }
}
