//! Embed this module's build id (see riftco-build-id).

fn main() {
    riftco_build_id::emit(
        "riftco.backends.cuda._native",
        &["src", "../driver/src", "../driver/kernels"],
    );
}
