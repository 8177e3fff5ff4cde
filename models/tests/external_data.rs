//! External-data placement: offsets, alignment, byte equality with the inline model, and the
//! sparse fake-weight mode that sizes a multi-GB side file without writing it.

use std::path::{Path, PathBuf};

use graph_rewrites::onnx_pb::{tensor_proto::DataLocation, ModelProto, TensorProto};
use models::external::EXTERNAL_THRESHOLD;
use models::{model_proto, DecoderConfig, WeightForm, WeightStorage};
use prost::Message;

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn ext(t: &TensorProto, key: &str) -> Option<String> {
    t.external_data
        .iter()
        .find(|e| e.key.as_deref() == Some(key))
        .and_then(|e| e.value.clone())
}

#[test]
fn external_weights_match_inline_bytes() {
    let dir = scratch("external_weights");
    let mut cfg = DecoderConfig::tiny();
    cfg.spelling.weights = WeightForm::StdMx;
    let inline = model_proto(&cfg).expect("inline");
    cfg.storage = WeightStorage::External { sparse: false };
    let path = dir.join("tiny.onnx");
    let stats = models::write(&cfg, &path).expect("write");
    let (data_path, data_len) = stats.data_file.expect("side file");
    assert_eq!(data_path, dir.join("tiny.onnx.data"));
    let data = std::fs::read(&data_path).expect("read side file");
    assert_eq!(data.len() as u64, data_len);
    let m =
        ModelProto::decode(std::fs::read(&path).expect("read model").as_slice()).expect("decode");
    let inits = &m.graph.as_ref().expect("graph").initializer;
    let reference = &inline.graph.as_ref().expect("graph").initializer;
    assert_eq!(inits.len(), reference.len());
    let mut external = 0;
    for (t, r) in inits.iter().zip(reference) {
        let want = r.raw_data.as_ref().expect("inline bytes");
        if t.data_location == Some(DataLocation::External as i32) {
            external += 1;
            assert_eq!(ext(t, "location").as_deref(), Some("tiny.onnx.data"));
            let off: usize = ext(t, "offset")
                .and_then(|v| v.parse().ok())
                .expect("offset");
            let len: usize = ext(t, "length")
                .and_then(|v| v.parse().ok())
                .expect("length");
            assert_eq!(off % 64, 0, "aligned");
            assert!(t.raw_data.is_none());
            assert_eq!(&data[off..off + len], want.as_slice(), "{:?}", t.name);
        } else {
            assert!(want.len() < EXTERNAL_THRESHOLD);
            assert_eq!(t.raw_data.as_ref(), Some(want));
        }
    }
    assert_eq!(external, stats.external_tensors);
    assert!(external >= 12, "every MatMul weight is external");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sparse_fake_weights_cost_no_disk() {
    let dir = scratch("sparse_weights");
    // The bench preset with fewer layers keeps the test quick; shapes are the real ones.
    let cfg = DecoderConfig {
        n_layers: 4,
        ..DecoderConfig::m3_tp4()
    };
    let path = dir.join("m3.onnx");
    let stats = models::write(&cfg, &path).expect("write");
    let (data_path, data_len) = stats.data_file.expect("side file");
    assert!(
        data_len >= cfg.approx_weight_bytes(),
        "{data_len} < {}",
        cfg.approx_weight_bytes()
    );
    let meta = std::fs::metadata(&data_path).expect("stat");
    assert_eq!(meta.len(), data_len);
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // Allocated blocks (512 B each) stay far below the logical size: the file is a hole.
        assert!(
            meta.blocks() * 512 < data_len / 100,
            "{} blocks for {data_len} bytes",
            meta.blocks()
        );
    }
    assert!(
        stats.model_bytes < 4 << 20,
        "graph only: {} bytes",
        stats.model_bytes
    );
    let _ = std::fs::remove_dir_all(&dir);
}
