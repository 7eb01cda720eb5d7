#!/usr/bin/env bash
# nvdisasm for this machine (the CUDA toolkit here ships nvcc and ptxas, no cuobjdump or nvdisasm):
# Debian 12's non-free nvidia-cuda-toolkit (CUDA 11.8) has both. Only its .deb is fetched, through a
# private apt configuration (the system's sources and state are not touched), and only the two tools
# are kept, in .deps/sass-tools/bin (git-ignored). 11.8's nvdisasm reads sm_90 code; CUDA 13's cubins
# carry a newer ELF header, which scripts/sass_loops.py rewrites on a copy before disassembling.
#
#   scripts/fetch_sass_tools.sh        (idempotent: prints the tool's path)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/.deps/sass-tools"
if [[ -x "$out/bin/nvdisasm" ]]; then
  echo "$out/bin/nvdisasm"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/parts" "$work/lists/partial" "$work/cache/archives/partial"
cat >"$work/parts/nonfree.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/parts"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "APT::Sandbox::User=root")
echo "fetch_sass_tools: reading Debian non-free's package list" >&2
apt-get "${apt_opts[@]}" update >"$work/update.log" 2>&1 || {
  cat "$work/update.log" >&2
  echo "fetch_sass_tools: apt-get update failed (is deb.debian.org reachable?)" >&2
  exit 1
}
echo "fetch_sass_tools: downloading nvidia-cuda-toolkit (~84 MB; only nvdisasm and cu++filt are kept)" >&2
(cd "$work" && apt-get "${apt_opts[@]}" download nvidia-cuda-toolkit >"$work/download.log" 2>&1) || {
  cat "$work/download.log" >&2
  exit 1
}
dpkg -x "$work"/nvidia-cuda-toolkit_*.deb "$work/x"
mkdir -p "$out/bin"
cp "$work/x/usr/bin/nvdisasm" "$work/x/usr/bin/cu++filt" "$out/bin/"
echo "$out/bin/nvdisasm"
