#!/usr/bin/env bash
# Installs the Debian packages FuTransformer builds against (idempotent: does
# nothing when they are all present). The CUDA 13 toolkit (nvcc, cuBLASLt) is
# not a Debian package here: without it the build is CPU-only (said once);
# FUTR_CUDA=ON (CI) makes it required, FUTR_CUDA=OFF skips looking for it.
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
if ! command -v nvcc >/dev/null; then
  # FUTR_CUDA=ON (CI) requires the toolkit; otherwise a machine without it
  # gets the CPU-only build, which runs every command on the CPU engine.
  if [ "${FUTR_CUDA:-}" = ON ]; then
    echo "install-deps: nvcc not found and FUTR_CUDA=ON: install the CUDA 13 toolkit" >&2
    exit 1
  fi
  echo "install-deps: no CUDA toolkit (nvcc): CPU-only build (the CPU reference engine; the GPU engine needs" \
       "the CUDA 13 toolkit and a Hopper GPU)"
fi
