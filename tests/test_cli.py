"""The `qgemm` command line: list, render, check, and build's argument handling (no nvcc needed)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from cutlass_gen import cli
from cutlass_gen.catalog import catalog
from cutlass_gen.paths import REPO_ROOT
from cutlass_gen.spec import SUPPORTED_TARGETS


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


@pytest.mark.parametrize("argv", [["--help"], ["render", "--help"]])
def test_help_is_qgemms(argv):
    """`qgemm --help` as the console script runs it (a fresh interpreter whose sys.argv holds the
    flag while cutlass_library is imported: its generator parses sys.argv on import)."""
    code = f"import sys; sys.argv = {['qgemm'] + argv!r}; from cutlass_gen.cli import main; sys.exit(main())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: qgemm"), proc.stdout[:300]
    assert "disable-cutlass-package-imports" not in proc.stdout


def test_build_with_no_matching_kernels_fails(tmp_cache, capsys):
    assert cli.main(["build", "--sm", "75", "--kernels", "nomatch*"]) == 1
    assert "no kernels match" in capsys.readouterr().err
    assert not tmp_cache.exists()


# --- exit codes, --sm auto, the cache (issue 17) ------------------------------------------------------

def test_list_with_no_match_fails_with_a_message(capsys):
    assert cli.main(["list", "--sm", "80", "--family", "w8a8_gemm", "--kernels", "nomatch*"]) == 1
    assert "no kernels match sm80 family=w8a8_gemm kernels=nomatch*" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["70", "sm80", ""])
def test_bad_sm_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["build", "--sm", value])
    assert exc.value.code == 2
    assert "choose from auto, 75, 80, 90" in capsys.readouterr().err


def fake_gpu(monkeypatch, capability):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: capability is not None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")


@pytest.mark.parametrize("capability, target", [((9, 0), 90), ((8, 9), 80), ((12, 0), 80), ((7, 5), 75)])
def test_sm_auto_takes_the_gpus_target(monkeypatch, capsys, capability, target):
    """`--sm auto` (the default) asks the current GPU, and maps it as the runtime does."""
    fake_gpu(monkeypatch, capability)
    assert cli.main(["list"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [s.name for s in catalog(target)]
    assert f"sm{target} build" in captured.err


def test_sm_auto_without_a_gpu_fails_clearly(monkeypatch, tmp_cache, capsys):
    fake_gpu(monkeypatch, None)
    assert cli.main(["build"]) == 1
    err = capsys.readouterr().err
    assert "no CUDA GPU is visible" in err and "--sm 75|80|90" in err
    assert not tmp_cache.exists()


def test_sm_auto_on_a_gpu_too_old(monkeypatch, capsys):
    fake_gpu(monkeypatch, (7, 0))
    assert cli.main(["build", "--sm", "auto"]) == 1
    assert "Fake GPU) is sm_70; qgemm's kernels need sm_75 or newer" in capsys.readouterr().err


def test_build_exit_codes_and_manifest(tmp_cache, fake_nvcc, monkeypatch, capsys):
    """0 and a manifest on success; 1 with the nvcc error when a compile fails (the others still built)."""
    assert cli.main(["build", "--sm", "75", "--family", "act_quant", "-j", "2"]) == 0
    assert f"manifest: {tmp_cache / 'manifest-sm75.json'}" in capsys.readouterr().out
    monkeypatch.setenv("FAKE_NVCC_FAIL", "qgemm_act_quant_sm75_f16_s8_sym")
    assert cli.main(["build", "--sm", "80", "--family", "act_quant", "-j", "2"]) == 1
    err = capsys.readouterr().err
    assert "qgemm build: nvcc failed for qgemm_act_quant_sm75_f16_s8_sym" in err
    assert "built 5/6 kernels for sm80" in err


def test_render_and_check_outside_a_source_tree_need_out(monkeypatch, tmp_path, capsys):
    import cutlass_gen.paths as paths

    monkeypatch.setattr(paths, "in_source_tree", lambda: False)
    for command in ("render", "check"):
        assert cli.main([command]) == 1
        assert "pass --out FOLDER" in capsys.readouterr().err
    assert cli.main(["render", "--out", str(tmp_path / "g")]) == 0
    assert cli.main(["check", "--out", str(tmp_path / "g")]) == 0


def test_missing_templates_fail_clearly(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("QGEMM_TEMPLATES", str(tmp_path / "nothing-here"))
    assert cli.main(["render", "--out", str(tmp_path / "g")]) == 1
    err = capsys.readouterr().err
    assert "QGEMM_TEMPLATES=" in err and "does not hold qgemm's templates" in err
    assert "Traceback" not in err
