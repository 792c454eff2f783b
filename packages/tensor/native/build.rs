//! Embed this module's build id (see riftco-build-id).

fn main() {
    riftco_build_id::emit("riftco.tensor._native", &["src", "../kernels/src"]);
}
