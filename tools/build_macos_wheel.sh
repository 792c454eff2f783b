#!/usr/bin/env bash
# Build the riftco-backend-metal wheel for Apple-silicon Macs (macOS 11+, arm64),
# where wgpu drives the GPU through Metal. Run on a Mac with Xcode's command-line
# tools, Rust (rustup) and Python >= 3.10; the CI machines here are Linux and
# cannot run it (.github/workflows/wheels.yml builds the macOS wheels on macOS runners).
#
#     tools/build_macos_wheel.sh [WHEELHOUSE]      # default: build/wheelhouse
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -s)" != Darwin ]; then
    echo "build_macos_wheel: this builds the macOS wheel and must run on macOS (this is $(uname -s))" >&2
    exit 1
fi
out="${1:-build/wheelhouse}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export MACOSX_DEPLOYMENT_TARGET="${MACOSX_DEPLOYMENT_TARGET:-11.0}"
rustup target add aarch64-apple-darwin
python3 -m pip install --quiet "maturin>=1.9.4,<2"
(cd packages/backend-metal && maturin build --release --target aarch64-apple-darwin --out "$out")
ls "$out"/riftco_backend_metal-*macosx*arm64.whl
