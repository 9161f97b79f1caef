"""qgemm as an installed package (issue 17): the wheel and the sdist carry the templates and headers;
a wheel installed into a fresh venv renders and builds kernels from any directory, and loads a built
kernel with the templates, jinja2 and nvcc all hidden.

The fresh venv gets the wheel itself (installed by pip, console script included) and sees its
dependencies (torch, cutlass, jinja2) through a .pth line naming this interpreter's site-packages, so
that the test needs no index and takes seconds; .ci/run does the same with a venv that installs the
dependencies too. Most tests use tests/fake_nvcc.py; the one marked nvcc compiles and loads for real.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import FAKE_NVCC, fake_compiles, requires_nvcc

from cutlass_gen.catalog import catalog
from cutlass_gen.paths import REPO_ROOT
from cutlass_gen.spec import SUPPORTED_TARGETS

TEMPLATE_SUFFIXES = (".j2", ".h", ".hpp")
SOURCE_FILES = ("cutlass_gen", "qgemm", "templates", "tests", "pyproject.toml", "setup.py", "MANIFEST.in",
                "README.md")


def template_files() -> dict[str, bytes]:
    root = REPO_ROOT / "templates"
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.suffix in TEMPLATE_SUFFIXES}


def clean_env() -> dict:
    """The environment without PYTHONPATH: a checkout on the path would make pip and the venv see the
    checkout's qgemm instead of the wheel's."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QGEMM_TEMPLATES", "QGEMM_NVCC")}


def run(command, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("timeout", 300)
    kwargs.setdefault("env", clean_env())
    proc = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory) -> Path:
    """The package's sources in a scratch folder, so building never writes build/ into the checkout."""
    dest = tmp_path_factory.mktemp("src") / "qgemm"
    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "_templates", "build", "dist")
    for name in SOURCE_FILES:
        src = REPO_ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


def build_wheel(source: Path, out: Path) -> Path:
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "-w", str(out), str(source)], cwd=source)
    wheels = list(out.glob("qgemm-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def wheel(source_copy, tmp_path_factory) -> Path:
    return build_wheel(source_copy, tmp_path_factory.mktemp("dist"))


def test_wheel_carries_templates_and_headers(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        packaged = {n[len("cutlass_gen/_templates/"):]: z.read(n) for n in names
                    if n.startswith("cutlass_gen/_templates/")}
    expected = template_files()
    assert sum(n.endswith(".j2") for n in expected) >= 10 and sum(n.endswith(".h") for n in expected) >= 10
    assert packaged == expected
    assert "qgemm/__init__.py" in names and "cutlass_gen/build.py" in names
    assert not any(n.startswith(("tests/", "generated/", "benchmarks/", "templates/")) for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    with zipfile.ZipFile(wheel) as z:
        assert "qgemm = cutlass_gen.cli:main" in z.read(entry_points).decode()


def test_sdist_carries_templates_and_builds_a_complete_wheel(source_copy, tmp_path):
    run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path)], cwd=source_copy)
    sdist = next(tmp_path.glob("qgemm-*.tar.gz"))
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
        t.extractall(tmp_path / "unpacked", filter="data")
    for rel in template_files():
        assert f"templates/{rel}" in names, rel
    assert {"setup.py", "MANIFEST.in", "README.md", "tests/fake_nvcc.py"} <= names
    assert not any(n.startswith(("generated/", "benchmarks/")) for n in names)
    unpacked = next((tmp_path / "unpacked").iterdir())
    with zipfile.ZipFile(build_wheel(unpacked, tmp_path / "dist")) as z:
        packaged = {n for n in z.namelist() if n.startswith("cutlass_gen/_templates/")}
    assert packaged == {f"cutlass_gen/_templates/{rel}" for rel in template_files()}


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed by pip; dependencies seen through a .pth line."""
    root = tmp_path_factory.mktemp("venv") / "v"
    run([sys.executable, "-m", "venv", "--without-pip", str(root)])
    python = root / "bin" / "python"
    # The wheel first, into a venv that sees nothing else: pip must not find (and skip, or worse,
    # uninstall) a qgemm installed in the dependencies' site-packages.
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
         str(wheel)])
    purelib = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    assert (purelib / "cutlass_gen" / "_templates").is_dir()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (purelib / "zz_qgemm_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    return root


def venv_env(tmp_path, **extra) -> dict:
    env = clean_env()
    env.update(QGEMM_CACHE_DIR=str(tmp_path / "cache"), **extra)
    return env


def installed_templates(venv: Path) -> Path:
    return next(venv.glob("lib/python*/site-packages/cutlass_gen/_templates"))


class hidden:
    """Rename a path away for the duration of a with-block."""

    def __init__(self, path: Path):
        self.path, self.away = path, path.with_name(path.name + ".hidden")

    def __enter__(self):
        self.path.rename(self.away)

    def __exit__(self, *exc):
        self.away.rename(self.path)


LOAD_WITHOUT_TEMPLATES = """
import sys
sys.modules["jinja2"] = None  # hidden: importing it raises ImportError
from cutlass_gen.build import find_artifact
from cutlass_gen.families.w8a8 import ActQuantSpec
art = find_artifact(ActQuantSpec("f32"), 75)
print(art.directory if art else "NOT FOUND")
"""


def test_installed_wheel_renders_builds_and_finds_kernels_outside_the_tree(venv, tmp_path, fake_nvcc):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = venv_env(tmp_path, QGEMM_NVCC=FAKE_NVCC, FAKE_NVCC_LOG=str(fake_nvcc))
    qgemm = str(venv / "bin" / "qgemm")
    python = str(venv / "bin" / "python")

    where = run([python, "-c", "import qgemm, cutlass_gen.paths as p; print(qgemm.__file__); "
                               "print(p.templates_dir()); print(p.in_source_tree())"], cwd=elsewhere, env=env)
    module, templates, in_tree = where.stdout.split()
    assert module.startswith(str(venv)) and templates == str(installed_templates(venv)) and in_tree == "False"

    assert run([qgemm, "list", "--sm", "75"], cwd=elsewhere, env=env).stdout.split() == [s.name for s in catalog(75)]
    run([qgemm, "render", "--out", "rendered"], cwd=elsewhere, env=env)
    expected = {s.name for sm in SUPPORTED_TARGETS for s in catalog(sm)}
    assert {p.stem for p in (elsewhere / "rendered").glob("*.cu")} == expected
    no_out = subprocess.run([qgemm, "check"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert no_out.returncode == 1 and "pass --out FOLDER" in no_out.stderr

    run([qgemm, "build", "--sm", "75", "--family", "act_quant", "--kernels", "*_f32_s8"], cwd=elsewhere, env=env)
    assert len(fake_compiles(fake_nvcc)) == 1
    built = run([python, "-c", LOAD_WITHOUT_TEMPLATES], cwd=elsewhere, env=env).stdout.strip()
    assert built.startswith(str(tmp_path / "cache" / "sm75"))

    # Templates, jinja2 and nvcc hidden: the built kernel is still found, by its recorded spec and digests.
    no_tools = venv_env(tmp_path, PATH=str(venv / "bin"))
    no_tools.pop("CUDA_HOME", None)
    with hidden(installed_templates(venv)):
        assert run([python, "-c", LOAD_WITHOUT_TEMPLATES], cwd=elsewhere, env=no_tools).stdout.strip() == built
        failed = subprocess.run([qgemm, "render", "--out", "x"], cwd=elsewhere, env=no_tools, capture_output=True,
                                text=True)
        assert failed.returncode == 1 and "templates are missing" in failed.stderr
        assert "Traceback" not in failed.stderr
        nothing = subprocess.run([qgemm, "build", "--sm", "75", "--kernels", "*_f16_s8"], cwd=elsewhere,
                                 env=no_tools, capture_output=True, text=True)
        assert nothing.returncode == 1 and "Traceback" not in nothing.stderr


@requires_nvcc
@pytest.mark.nvcc
def test_installed_wheel_compiles_and_loads_a_kernel_without_templates_or_nvcc(venv, tmp_path):
    """The issue's criterion with a real compile: from outside the tree the installed wheel builds a small
    kernel, which then loads (host library planning on the CPU) with templates, jinja2 and nvcc hidden."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    python = str(venv / "bin" / "python")
    run([str(venv / "bin" / "qgemm"), "build", "--sm", "75", "--family", "act_quant", "--kernels", "*_f32_s8"],
        cwd=elsewhere, env=venv_env(tmp_path), timeout=600)
    load = ("import sys; sys.modules['jinja2'] = None\n"
            "from qgemm._runtime import get_kernel\nfrom cutlass_gen.families.w8a8 import ActQuantSpec\n"
            "k = get_kernel(ActQuantSpec('f32'), 75)\nprint(k.host.entry_name, k.host.path)\n")
    no_tools = venv_env(tmp_path, PATH=str(venv / "bin"), QGEMM_NVCC=str(tmp_path / "no-nvcc"))
    no_tools.pop("CUDA_HOME", None)
    with hidden(installed_templates(venv)):
        name, so = run([python, "-c", load], cwd=elsewhere, env=no_tools).stdout.split()
    assert name == "qgemm_act_quant_sm75_f32_s8" and so.startswith(str(tmp_path / "cache"))
