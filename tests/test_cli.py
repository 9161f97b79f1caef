"""The `qgemm` command line: list, render, check, and build's argument handling (no nvcc needed)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from cutlass_gen import cli
from cutlass_gen.catalog import catalog
from cutlass_gen.paths import REPO_ROOT
from cutlass_gen.specs import SUPPORTED_TARGETS


def all_catalog_names() -> set[str]:
    return {s.name for sm in SUPPORTED_TARGETS for s in catalog(sm)}


def test_list_prints_catalog_names(capsys):
    assert cli.main(["list", "--sm", "75"]) == 0
    assert capsys.readouterr().out.splitlines() == [s.name for s in catalog(75)]


def test_list_filters_by_family_and_glob(capsys):
    assert cli.main(["list", "--sm", "80", "--family", "w8a8_gemm", "--kernels", "*_sm80_*f32*"]) == 0
    names = capsys.readouterr().out.splitlines()
    assert names == [s.name for s in catalog(80, "w8a8_gemm") if s.arch == 80 and s.output == "f32"]
    assert len(names) == 3


def test_list_rejects_unsupported_sm(capsys):
    """--sm is restricted by argparse choices: sm70 is a usage error (exit 2)."""
    with pytest.raises(SystemExit) as exc:
        cli.main(["list", "--sm", "70"])
    assert exc.value.code == 2


def test_check_passes_on_committed_generated_dir(capsys):
    """generated/ in the repo must match the templates and catalog (run `qgemm render` after edits)."""
    assert cli.main(["check"]) == 0, capsys.readouterr().err
    assert "is current" in capsys.readouterr().out


def test_render_then_check_detects_edits_and_stale_files(tmp_path, capsys):
    out = tmp_path / "generated"
    assert cli.main(["render", "--out", str(out)]) == 0
    files = sorted(p.name for p in out.glob("*.cu"))
    assert files == sorted(f"{n}.cu" for n in all_catalog_names())
    assert cli.main(["check", "--out", str(out)]) == 0
    capsys.readouterr()

    edited = out / files[0]
    edited.write_text(edited.read_text() + "// hand edit\n")
    assert cli.main(["check", "--out", str(out)]) == 1
    assert f"out of date {edited}" in capsys.readouterr().err

    stale = out / "qgemm_removed_kernel.cu"
    stale.write_text("// from an older catalog\n")
    assert cli.main(["check", "--out", str(out)]) == 1
    assert f"stale {stale}" in capsys.readouterr().err

    # render repairs both: rewrites the edited file and removes the stale one.
    assert cli.main(["render", "--out", str(out)]) == 0
    assert "removed 1 stale" in capsys.readouterr().out
    assert not stale.exists()
    assert cli.main(["check", "--out", str(out)]) == 0


def test_check_reports_missing_file(tmp_path, capsys):
    out = tmp_path / "generated"
    assert cli.main(["render", "--out", str(out)]) == 0
    missing = next(out.glob("*.cu"))
    missing.unlink()
    capsys.readouterr()
    assert cli.main(["check", "--out", str(out)]) == 1
    assert f"missing {missing}" in capsys.readouterr().err


def test_python_dash_m_qgemm():
    """`python -m qgemm` is the same command (qgemm/__main__.py)."""
    proc = subprocess.run([sys.executable, "-m", "qgemm", "list", "--sm", "80"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [s.name for s in catalog(80)]


def test_build_with_no_matching_kernels_fails(tmp_cache, capsys):
    assert cli.main(["build", "--sm", "75", "--kernels", "nomatch*"]) == 1
    assert "no kernels match" in capsys.readouterr().err
    assert not tmp_cache.exists()
