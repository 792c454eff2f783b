#!/usr/bin/env bash
# Make sure a Vulkan loader and at least one driver are installed, so that the
# vulkan backend's suite runs for real: on a machine without a GPU driver, Mesa's
# lavapipe (a Vulkan device on the CPU) from Debian's mesa-vulkan-drivers.
# Installs only as root with apt-get available; otherwise it says what is missing
# and leaves the decision to the tests (RIFTCO_REQUIRE_GPU).
set -euo pipefail

have_loader() { ldconfig -p 2>/dev/null | grep 'libvulkan\.so\.1' >/dev/null; }
have_driver() {
    local dir
    for dir in ${VK_DRIVER_FILES:+$(dirname "${VK_DRIVER_FILES%%:*}")} \
        ${VK_ICD_FILENAMES:+$(dirname "${VK_ICD_FILENAMES%%:*}")} \
        /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d; do
        compgen -G "$dir/*.json" >/dev/null && return 0
    done
    return 1
}

if have_loader && have_driver; then
    echo "ensure_vulkan: a Vulkan loader and driver are installed"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "ensure_vulkan: no Vulkan driver, and not root with apt-get: install one" \
        "(Debian/Ubuntu: apt-get install mesa-vulkan-drivers libvulkan1)" >&2
    exit 0
fi
echo "ensure_vulkan: installing Mesa's Vulkan drivers (lavapipe) and the loader"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers libvulkan1 >/dev/null
have_loader && have_driver
