//! The committed fixtures (models/fixtures/) are exactly what the catalog builds today: a builder
//! change that alters them must regenerate them (`mxfuse-gen-model --fixtures models/fixtures`).

use std::path::Path;

use models::catalog::{fixtures, ManifestEntry};
use prost::Message;

#[test]
fn committed_fixtures_match_the_catalog() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut manifest = Vec::new();
    for f in fixtures() {
        let file = format!("{}.onnx", f.name);
        let built = models::model_proto(&f.cfg)
            .expect("build fixture")
            .encode_to_vec();
        let committed = std::fs::read(dir.join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(
            built == committed,
            "{file} is stale: run `cargo run -p models --bin mxfuse-gen-model -- --fixtures models/fixtures`"
        );
        manifest.push(ManifestEntry::new(file, f.what, &f.cfg));
    }
    let json = serde_json::to_string_pretty(&manifest).expect("manifest json") + "\n";
    let committed = std::fs::read_to_string(dir.join("manifest.json")).expect("manifest.json");
    assert_eq!(json, committed, "manifest.json is stale");
}
