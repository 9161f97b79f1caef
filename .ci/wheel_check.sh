#!/usr/bin/env bash
# qgemm as a user installs it: build the wheel (isolated, as pip does), install it into a fresh venv
# with its dependencies from the index, and from a folder outside the tree import qgemm, render the
# catalog, build one small kernel with nvcc, then load that kernel with the templates, jinja2 and
# nvcc hidden. ~2 minutes, most of it installing torch.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

PY="${PYTHON:-python3}"
# From a clean copy: building in the checkout would leave build/ there, whose stale files setuptools
# would put into later wheels.
mkdir "$WORK/src"
tar -c --exclude=__pycache__ --exclude='*.egg-info' --exclude=_templates \
    cutlass_gen qgemm templates tests pyproject.toml setup.py MANIFEST.in README.md | tar -x -C "$WORK/src"
"$PY" -m pip wheel -q --no-deps -w "$WORK/dist" "$WORK/src"
WHEEL="$(ls "$WORK"/dist/qgemm-*.whl)"
"$PY" - "$WHEEL" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
packaged = [n for n in names if n.startswith("cutlass_gen/_templates/")]
print(f"wheel {sys.argv[1]}: {sum(n.endswith('.j2') for n in packaged)} templates, "
      f"{sum(n.endswith(('.h', '.hpp')) for n in packaged)} headers")
assert packaged, "the wheel carries no templates"
PY

"$PY" -m venv "$WORK/venv"
VENV="$WORK/venv"
"$VENV/bin/python" -m pip install -q torch==2.13.0      # the CPU build on disk
"$VENV/bin/python" -m pip install -q "$WHEEL"

mkdir "$WORK/elsewhere" && cd "$WORK/elsewhere"
export QGEMM_CACHE_DIR="$WORK/cache"
unset PYTHONPATH QGEMM_TEMPLATES
"$VENV/bin/python" - <<'PY'
import cutlass_gen.paths as paths, qgemm
assert not paths.in_source_tree(), paths.REPO_ROOT
print("qgemm", qgemm.__version__, "from", qgemm.__file__, "templates", paths.templates_dir())
PY
"$VENV/bin/qgemm" render --out rendered
"$VENV/bin/qgemm" build --sm 75 --family act_quant --kernels '*_f32_s8' -j 1

# Templates, jinja2 and nvcc out of reach: the kernel loads from the cache (host library on the CPU).
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mv "$SITE/cutlass_gen/_templates" "$SITE/cutlass_gen/_templates.hidden"
env -u CUDA_HOME -u QGEMM_NVCC PATH="$VENV/bin" "$VENV/bin/python" - <<'PY'
import sys
sys.modules["jinja2"] = None
from cutlass_gen.families.w8a8 import ActQuantSpec
from qgemm._runtime import get_kernel
kernel = get_kernel(ActQuantSpec("f32"), 75)
assert kernel.host.entry_name == "qgemm_act_quant_sm75_f32_s8", kernel.host.entry_name
print("loaded", kernel.name, "from", kernel.host.path, "without templates, jinja2 or nvcc")
PY
echo "wheel check passed"
