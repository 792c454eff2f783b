//! `include/riftco.h` is what cbindgen makes from the sources: generated in memory and
//! compared; `RIFTCO_WRITE_HEADER=1 cargo test -p riftco-capi --test header` rewrites it.

use std::path::Path;

#[test]
fn header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut generated);
    let path = dir.join("include/riftco.h");
    if std::env::var_os("RIFTCO_WRITE_HEADER").is_some() {
        let tmp = path.with_extension("h.tmp");
        std::fs::write(&tmp, &generated).expect("write the header");
        std::fs::rename(&tmp, &path).expect("replace the header");
        return;
    }
    let current = std::fs::read(&path).unwrap_or_default();
    assert!(
        current == generated,
        "include/riftco.h is out of date with the sources: run `make capi-header` \
         (RIFTCO_WRITE_HEADER=1 cargo test -p riftco-capi --test header)"
    );
}
