#!/usr/bin/env bash
# Installs what Peregrine builds and tests with, idempotently: Debian 12 packages (apt-get)
# and the npm packages the tests compare against (into .deps/npm, git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libpcre2-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libboost1.81-dev
  clang libclang-rt-14-dev
  python3 python3-jinja2
)
# Node.js and npm may come from elsewhere (a newer distribution): only install Debian's when absent.
command -v node >/dev/null 2>&1 || apt_packages+=(nodejs)
command -v npm >/dev/null 2>&1 || apt_packages+=(npm)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm test tools: reinstall only when tools/npm/package.json changed.
mkdir -p .deps/npm
if ! cmp -s tools/npm/package.json .deps/npm/package.json || [ ! -d .deps/npm/node_modules ]; then
  echo "setup: installing npm test tools into .deps/npm"
  cp tools/npm/package.json .deps/npm/package.json
  (cd .deps/npm && npm install --no-audit --no-fund --loglevel=error)
fi
echo "setup: ok"
