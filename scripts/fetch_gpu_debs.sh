#!/usr/bin/env bash
# Fetches (here, on the Debian 12 dev machine) the .deb files that scripts/gpu_suite.sh unpacks
# on the GPU machine (Ubuntu 24.04, no Debian dev packages, no network) into .deps/gpu-debs/, and
# Boost's headers (a 10 MB .deb: server/ and so the `peregrine` binary need them to build) into
# .deps/gpu-debs-build/. A call that builds there carries both; a call with the binaries built here
# (scripts/gpu_pack.sh) carries .deps/gpu-debs and .deps/prebuilt only: with the tracked tree (~42 MB)
# the three would pass the device's 64 MiB carry.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.deps/gpu-debs
packages=(
  nlohmann-json3-dev libcli11-dev          # header-only
  libfmt-dev libfmt9                       # fmt 9.1 (+ runtime .so)
  libspdlog-dev libspdlog1.10              # spdlog 1.10 (+ runtime .so)
  libpcre2-dev libpcre2-8-0                # PCRE2 headers, .pc and libpcre2-8
  libgtest-dev libgmock-dev                # prebuilt static GoogleTest/GoogleMock + CMake config
  libbenchmark-dev libbenchmark1debian     # Google Benchmark, for bench/ targets that use it
  pkgconf pkgconf-bin libpkgconf3          # pkg-config, used only if the GPU machine lacks one
)
build_only=(libboost1.81-dev)              # Boost.Beast / Asio headers (server/) and their CMake config
mkdir -p "$dest" "$dest-build"
rm -f "$dest"/*.deb "$dest-build"/*.deb
(cd "$dest" && apt-get download "${packages[@]}")
(cd "$dest-build" && apt-get download "${build_only[@]}")
du -sh "$dest" "$dest-build"
ls "$dest" "$dest-build"
