#!/usr/bin/env bash
# Make sure Ruby is installed, so that the lint env's Homebrew formula check runs
# `ruby -c` (tools/homebrew.py check) instead of skipping it. Installs Debian's
# ruby only as root with apt-get available; otherwise it says so, and the check
# still checks the formula's shape and prints that the syntax check was skipped.
set -euo pipefail

if command -v ruby >/dev/null; then
    echo "ensure_ruby: $(ruby --version)"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "ensure_ruby: no ruby, and not root with apt-get: install one" \
        "(Debian/Ubuntu: apt-get install ruby) for the formula's syntax check" >&2
    exit 0
fi
echo "ensure_ruby: installing Debian's ruby"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends ruby >/dev/null
ruby --version
