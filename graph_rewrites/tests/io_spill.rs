//! Large initializers created by rules go to `<output>.mxfuse.data`; small ones and loaded ones
//! stay where they were.

use graph_rewrites::io::{load_graph, save_graph, spill::SPILL_MIN_BYTES};
use graph_rewrites::onnx_pb::TensorProto;
use graph_rewrites::testing::ModelBuilder;

fn tensor(len: usize, seed: u8) -> TensorProto {
    TensorProto {
        dims: vec![len as i64],
        data_type: Some(2), // UINT8
        raw_data: Some(
            (0..len)
                .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
                .collect(),
        ),
        ..Default::default()
    }
}

#[test]
fn large_created_initializers_are_spilled_next_to_the_output() {
    let dir = std::env::temp_dir().join(format!("mxfuse-spill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut b = ModelBuilder::new(21);
    b.input("x", 1, &[4]);
    b.init_raw(
        "loaded_big",
        2,
        &[SPILL_MIN_BYTES as i64],
        vec![7; SPILL_MIN_BYTES],
    );
    b.node("Identity", &["x"], &["y"]);
    b.output("y", 1, &[4]);
    let mut g = b.graph().unwrap();
    let big = tensor(SPILL_MIN_BYTES + 3, 1);
    let big2 = tensor(SPILL_MIN_BYTES, 2);
    let small = tensor(100, 3);
    g.add_initializer("big", big.clone());
    g.add_initializer("big2", big2.clone());
    g.add_initializer("small", small);
    assert_eq!(g.created_initializers(), ["big", "big2", "small"]);

    let out = dir.join("sub/out.onnx");
    save_graph(g, &out).unwrap();
    let side = dir.join("sub/out.onnx.mxfuse.data");
    let side_len = std::fs::metadata(&side).unwrap().len();
    assert_eq!(
        side_len,
        2 * SPILL_MIN_BYTES as u64 + 4096,
        "second tensor starts page-aligned"
    );

    let g = load_graph(&out).unwrap();
    let loaded = |name: &str| {
        g.initializers()
            .find(|t| t.name.as_deref() == Some(name))
            .unwrap()
            .clone()
    };
    assert_eq!(loaded("big").data_location, Some(1));
    assert_eq!(loaded("big2").data_location, Some(1));
    assert!(loaded("small").raw_data.is_some() && loaded("loaded_big").raw_data.is_some());
    for (name, t) in [("big", &big), ("big2", &big2)] {
        let c = g
            .read_initializer(g.value_by_name(name).unwrap())
            .unwrap()
            .unwrap();
        assert!(&c.raw == t.raw_data.as_ref().unwrap());
    }
    let small = g.value_by_name("small").unwrap();
    assert_eq!(g.read_initializer(small).unwrap().unwrap().raw.len(), 100);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rewriting_a_spilled_model_in_place_never_overwrites_its_data() {
    let dir = std::env::temp_dir().join(format!("mxfuse-respill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut b = ModelBuilder::new(21);
    b.input("x", 1, &[4]);
    b.node("Identity", &["x"], &["y"]);
    b.output("y", 1, &[4]);
    let mut g = b.graph().unwrap();
    let first = tensor(SPILL_MIN_BYTES, 5);
    g.add_initializer("first", first.clone());
    let out = dir.join("m.onnx");
    save_graph(g, &out).unwrap();

    // Second pass over the written model, in place, creating another large initializer.
    let mut g = load_graph(&out).unwrap();
    let second = tensor(SPILL_MIN_BYTES, 6);
    g.add_initializer("second", second.clone());
    save_graph(g, &out).unwrap();
    assert!(dir.join("m.onnx.mxfuse.1.data").exists());

    let g = load_graph(&out).unwrap();
    for (name, t) in [("first", &first), ("second", &second)] {
        let c = g
            .read_initializer(g.value_by_name(name).unwrap())
            .unwrap()
            .unwrap();
        assert!(&c.raw == t.raw_data.as_ref().unwrap(), "{name} survived");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Files are replaced through a temporary name, but a symlinked output is written through the
/// link (the link stays) and a replaced file keeps its permissions.
#[cfg(unix)]
#[test]
fn atomic_writes_follow_symlinks_and_keep_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = graph_rewrites::testing::scratch_dir("atomic-writes");
    let (target, link) = (dir.join("target.onnx"), dir.join("link.onnx"));
    std::fs::write(&target, b"old").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    graph_rewrites::io::write_atomically(&link, b"new").unwrap();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), b"new");
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let _ = std::fs::remove_dir_all(dir);
}
