//! Embed this module's build id (see riftco-build-id).

fn main() {
    riftco_build_id::emit("riftco.backends.metal._native", &["src", "../gpu/src"]);
}
