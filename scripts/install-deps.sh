#!/usr/bin/env bash
# Installs the Debian packages FuTransformer builds against (idempotent: does
# nothing when they are all present). The CUDA 13 toolkit (nvcc, cuBLASLt) must
# already be installed; it is not a Debian package here. With FUTR_CUDA=OFF
# (a CPU-only build: scripts/test-sanitize.sh in CI) it is not needed.
set -euo pipefail
PKGS=(build-essential cmake ninja-build ccache pkg-config git unzip python3-pip
      libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libfmt-dev
      libpcre2-dev libopenblas-dev libcpp-httplib-dev prometheus-cpp-dev clang libclang-rt-14-dev
      clang-format)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ "${FUTR_CUDA:-}" = OFF ]; then exit 0; fi
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH"; done
fi
command -v nvcc >/dev/null || { echo "install-deps: nvcc not found: install the CUDA 13 toolkit" >&2; exit 1; }
