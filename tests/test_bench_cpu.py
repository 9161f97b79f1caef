"""`qgemm bench` (qgemm/bench/, cutlass_gen/cli.py cmd_bench) without a GPU: argument parsing and its
errors, the no-GPU message, the JSON schema, the PNG plot written from fake rows, and the L2 rotation
rule. One GPU test runs `qgemm bench w8a8` end to end."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cutlass_gen import cli
from qgemm import bench
from qgemm.bench import report
from qgemm.bench.timing import ROTATION_FACTOR, rotation_count

from conftest import gpu_available

REPO = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def fake_result(family="w8a8", rows=None, warm=False) -> dict:
    """A result as bench.run returns it, with made-up times: two shapes, three M values, one NaN (a peer
    that did not run)."""
    head = bench.preview(family, None, warm)
    primary, baseline = head["primary"], head["baseline"]
    if rows is None:
        rows = []
        for i, shape in enumerate(("N=4096 K=4096", "N=12288 K=4096")):
            for m in (1, 16, 4096):
                row = {"shape": shape, "m": m, primary: 10.0 + i + m / 100, baseline: 12.0 + m / 50,
                       "floor_us": 5.0, "int_mm_us": math.nan}
                row["speedup_vs_fp16"] = row[baseline] / row[primary]
                rows.append(row)
    return {"schema": bench.SCHEMA, **head, "device": "Fake GPU", "capability": [9, 0], "sm_count": 132,
            "torch": torch.__version__, "qgemm": "0", "l2_bytes": 50 << 20, "rotation_factor": ROTATION_FACTOR,
            "copy_bandwidth_GBps": 3000.0, "seconds": 1.0, "extras": {}, "rows": rows,
            "summary": report.summary(rows, primary, baseline)}


def strict_json(path: Path):
    def reject(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(path.read_text(), parse_constant=reject)


# ---- families and parsing ----------------------------------------------------------------------------

def test_cli_families_are_the_packages():
    assert cli.BENCH_FAMILIES == bench.FAMILIES


@pytest.mark.parametrize("name", bench.FAMILIES)
def test_every_family_declares_its_defaults_and_columns(name):
    mod = bench.family(name)
    keys = [k for k, _ in mod.COLUMNS]
    assert mod.PRIMARY in keys and mod.BASELINE in keys
    assert mod.SHAPES and mod.MS and all(isinstance(m, int) and m >= 1 for m in mod.MS)
    assert mod.M_LABEL in ("M", "batch")
    # A default shape survives its label: the label is what the plot's legend and the JSON show.
    assert len({mod.shape_label(s) for s in mod.SHAPES}) == len(mod.SHAPES)
    assert callable(mod.run)


def test_unknown_family_names_the_choices():
    with pytest.raises(ValueError, match="family must be one of w8a8, fpaintb, fp8, conv, conv_fpaintb, got 'w4a4'"):
        bench.family("w4a4")


def test_gemm_shapes_are_n_comma_k():
    assert bench.parse_shapes("w8a8", "4096,4096; 12288,4096") == [(4096, 4096), (12288, 4096)]
    assert bench.parse_shapes("fp8", "2112,7168") == [(2112, 7168)]
    # fpaintb holds (K, N), the weight-only tables' order, but takes N,K like the others.
    assert bench.parse_shapes("fpaintb", "12288,4096") == [(4096, 12288)]
    assert bench.family("fpaintb").shape_label((4096, 12288)) == "N=12288 K=4096"


def test_conv_shapes_are_layer_names_or_six_numbers():
    shapes = bench.parse_shapes("conv", "l3.3x3;14,64,64,3,1,0")
    assert shapes[0] == ("l3.3x3", 14, 256, 256, 3, 1, 1, 5)
    assert shapes[1] == ("h14c64o64k3s1p0", 14, 64, 64, 3, 1, 0, 1)
    assert bench.parse_shapes("conv_fpaintb", "l1.3x3")[0][0] == "l1.3x3"


@pytest.mark.parametrize("family, text, match", [
    ("w8a8", "4096", r"--shapes \(N,K\): expected 2 positive integers"),
    ("w8a8", "4096,0", "expected 2 positive integers"),
    ("w8a8", "a,b", "got 'a,b'"),
    ("w8a8", ";", "one or more shapes"),
    ("conv", "l9.9x9", "'l9.9x9' is no layer of conv1, "),
    ("conv", "14,64,64,3,0,1", "must be positive"),
    ("conv_fpaintb", "conv1", "in channels a multiple of 8, got 3"),
])
def test_bad_shapes_name_the_argument_and_the_value(family, text, match):
    with pytest.raises(ValueError, match=match):
        bench.parse_shapes(family, text)


def test_m_values():
    assert bench.parse_ms("1,16,16,4096") == [1, 16, 4096]
    for bad in ("0", "1,-2", "x", ""):
        with pytest.raises(ValueError, match="--m"):
            bench.parse_ms(bad)


# ---- the command line ------------------------------------------------------------------------------

def fake_gpu(monkeypatch, present: bool):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: present)


@pytest.mark.parametrize("argv, match", [
    (["bench", "w8a8", "--shapes", "4096"], "--shapes (N,K): expected 2 positive integers"),
    (["bench", "w8a8", "--m", "0,1"], "--m: expected positive integers"),
    (["bench", "conv", "--shapes", "4096,4096"], "expected 6 integers >= 0"),
])
def test_malformed_shapes_or_m_are_usage_errors(argv, match, monkeypatch, capsys):
    fake_gpu(monkeypatch, True)
    monkeypatch.setattr(bench, "run", lambda *a, **k: pytest.fail("ran despite a usage error"))
    assert cli.main(argv) == cli.EXIT_USAGE
    assert match in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["bench"], ["bench", "w4a4"], ["bench", "w8a8", "--dtype", "f32"],
                                  ["bench", "w8a8", "--bogus"]])
def test_argparse_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "usage: qgemm" in capsys.readouterr().err


def test_without_a_gpu_the_cli_says_so_and_exits_1(monkeypatch, tmp_path, capsys):
    fake_gpu(monkeypatch, False)
    monkeypatch.setattr(bench, "run", lambda *a, **k: pytest.fail("ran without a GPU"))
    assert cli.main(["bench", "w8a8", "--out", str(tmp_path / "out")]) == cli.EXIT_FAILURE
    captured = capsys.readouterr()
    assert "qgemm bench: no CUDA GPU" in captured.err and "Run it on a GPU machine" in captured.err
    assert captured.out == ""
    assert not (tmp_path / "out").exists()


def test_without_a_gpu_the_cli_subprocess_exits_1(tmp_path):
    if gpu_available():
        pytest.skip("this machine has a GPU")
    proc = subprocess.run([sys.executable, "-m", "qgemm", "bench", "fp8", "--out", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "no CUDA GPU" in proc.stderr and "Traceback" not in proc.stderr


def test_without_a_gpu_the_api_raises_no_gpu_error(monkeypatch):
    import qgemm

    fake_gpu(monkeypatch, False)
    with pytest.raises(qgemm.NoGpuError, match="qgemm bench conv times kernels on a CUDA GPU"):
        bench.run("conv")


def test_bad_dtype_through_the_api():
    with pytest.raises(ValueError, match="dtype must be one of f16, bf16, got 'fp32'"):
        bench.run("w8a8", dtype="fp32")


def run_cli_with_fake_bench(monkeypatch, argv, family="w8a8"):
    """cli.main(argv) with a GPU pretended and bench.run returning fake_result (rows fed to progress)."""
    fake_gpu(monkeypatch, True)
    calls = []

    def fake_run(name, shapes, ms, *, dtype, warm, progress):
        calls.append(dict(name=name, shapes=shapes, ms=ms, dtype=dtype, warm=warm))
        result = fake_result(name, warm=warm)
        for row in result["rows"]:
            progress(row)
        return result

    monkeypatch.setattr(bench, "run", fake_run)
    return cli.main(argv), calls


def test_cli_passes_its_arguments_and_writes_json_and_png(monkeypatch, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "deep" / "out"
    rc, calls = run_cli_with_fake_bench(monkeypatch, ["bench", "w8a8", "--m", "1,16", "--shapes", "4096,4096",
                                                      "--dtype", "bf16", "--warm", "--out", str(out)])
    assert rc == 0
    assert calls == [dict(name="w8a8", shapes=[(4096, 4096)], ms=[1, 16], dtype="bf16", warm=True)]
    stdout = capsys.readouterr().out
    assert "N=4096 K=4096" in stdout and "geomeans over the shapes" in stdout
    assert "sym warm" in stdout  # --warm adds the L2-warm columns
    data = strict_json(out / "bench_w8a8.json")
    assert data["family"] == "w8a8" and len(data["rows"]) == 6
    png = (out / "bench_w8a8.png").read_bytes()
    assert png.startswith(PNG_SIGNATURE) and len(png) > 1000


def test_cli_no_plot_needs_no_matplotlib(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    rc, _ = run_cli_with_fake_bench(monkeypatch, ["bench", "conv", "--no-plot", "--out", str(tmp_path)])
    assert rc == 0
    assert (tmp_path / "bench_conv.json").exists() and not (tmp_path / "bench_conv.png").exists()


def test_cli_without_matplotlib_fails_before_timing(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    fake_gpu(monkeypatch, True)
    monkeypatch.setattr(bench, "run", lambda *a, **k: pytest.fail("timed before finding matplotlib missing"))
    assert cli.main(["bench", "w8a8", "--out", str(tmp_path)]) == cli.EXIT_FAILURE
    err = capsys.readouterr().err
    assert 'pip install "qgemm[plot]"' in err and "--no-plot" in err


# ---- JSON ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", bench.FAMILIES)
def test_json_schema(family, tmp_path):
    result = fake_result(family)
    path = report.write_json(result, tmp_path / "r.json")
    data = strict_json(path)  # NaN is written as null, so any JSON reader takes it
    for key in report.RESULT_KEYS:
        assert key in data, key
    assert data["schema"] == "qgemm-bench/1" and data["family"] == family
    assert data["primary"] in data["columns"] and data["baseline"] in data["columns"]
    assert data["m_label"] == bench.family(family).M_LABEL
    for row in data["rows"]:
        for key in report.ROW_KEYS + (data["primary"], data["baseline"]):
            assert key in row
        assert row["int_mm_us"] is None  # the NaN
        assert row["speedup_vs_fp16"] == pytest.approx(row[data["baseline"]] / row[data["primary"]])
    # summary: per M the geomean over the shapes of baseline / primary
    s = data["summary"]["16"]
    rows16 = [r for r in data["rows"] if r["m"] == 16]
    expect = math.exp(sum(math.log(r["speedup_vs_fp16"]) for r in rows16) / len(rows16))
    assert s["speedup_vs_fp16_geomean"] == pytest.approx(expect) and s["shapes"] == 2
    assert not list(tmp_path.glob("*.tmp"))


def test_json_rejects_a_result_missing_keys(tmp_path):
    result = fake_result()
    del result["rows"][2]["sym_us"]
    with pytest.raises(ValueError, match="row 2 lacks sym_us"):
        report.write_json(result, tmp_path / "r.json")
    del result["l2_bytes"]
    with pytest.raises(ValueError, match="lacks l2_bytes"):
        report.write_json(result, tmp_path / "r.json")
    assert not (tmp_path / "r.json").exists()


def test_table_prints_every_row_and_the_geomeans():
    result = fake_result("fpaintb")
    text = report.table(result)
    lines = text.splitlines()
    assert sum("N=12288 K=4096" in line for line in lines) == 3
    assert "cublas_us / int4_us" in text and "M=  4096:" in text


# ---- the plot --------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["w8a8", "conv"])
def test_plot_is_written_from_fake_rows(family, tmp_path):
    pytest.importorskip("matplotlib")
    path = report.write_plot(fake_result(family), tmp_path / "sub" / "plot.png")
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 1000


def test_plot_skips_missing_points_and_empty_results(tmp_path):
    pytest.importorskip("matplotlib")
    result = fake_result()
    for row in result["rows"][:3]:
        row["speedup_vs_fp16"] = math.nan  # one shape whose qgemm kernel never ran
    assert report.write_plot(result, tmp_path / "a.png").stat().st_size > 0
    assert report.write_plot(fake_result(rows=[]), tmp_path / "b.png").stat().st_size > 0


def test_plot_without_matplotlib_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(report.PlotUnavailableError, match=r'pip install "qgemm\[plot\]"'):
        report.write_plot(fake_result(), tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()


def test_importing_bench_does_not_import_matplotlib():
    code = "import sys, qgemm.bench, qgemm.bench.report; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


# ---- the L2 rotation rule --------------------------------------------------------------------------

@pytest.mark.parametrize("l2", [40 << 20, 50 << 20, 60 << 20, 96 << 20])
@pytest.mark.parametrize("weight_bytes", [1, 4096, 4096 * 4096 // 2, 4096 * 4096, 50 << 20, 2 * 8192 * 28672,
                                          3 << 30])
def test_rotation_spans_at_least_4x_l2_and_no_more_copies_than_needed(weight_bytes, l2):
    copies = rotation_count(weight_bytes, l2=l2)
    assert ROTATION_FACTOR == 4.0
    assert copies >= 1
    assert copies * weight_bytes >= 4 * l2
    if copies > 1:  # the smallest such count: one copy fewer falls short
        assert (copies - 1) * weight_bytes < 4 * l2


def test_rotation_defaults_to_the_gpus_l2(monkeypatch):
    import qgemm.bench.timing as timing

    monkeypatch.setattr(timing, "l2_bytes", lambda: 50 << 20)
    assert timing.rotation_count(4096 * 4096) == 13  # 16 MiB int8 weight: 13 copies span 208 MiB >= 200 MiB


def test_rotation_rejects_empty_weights():
    with pytest.raises(ValueError, match="weight_bytes must be positive, got 0"):
        rotation_count(0, l2=1 << 20)


def test_the_old_timing_import_still_works():
    code = ("import sys; sys.path.insert(0, 'benchmarks'); from timing import rotation_count, timed_rotating, "
            "bench_graph, copy_bandwidth, geomean")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


# ---- on a GPU --------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs a CUDA GPU")
def test_bench_w8a8_end_to_end(tmp_path):
    """`qgemm bench w8a8 --m 16 --shapes 4096,4096 --out tmp` on the GPU: a table, the JSON, the PNG
    (where matplotlib is installed), and times that make sense."""
    try:
        import matplotlib  # noqa: F401
        plot = []
    except ImportError:
        plot = ["--no-plot"]
    out = tmp_path / "tmp"
    proc = subprocess.run([sys.executable, "-m", "qgemm", "bench", "w8a8", "--m", "16", "--shapes", "4096,4096",
                           "--out", str(out), *plot], cwd=REPO, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "N=4096 K=4096" in proc.stdout
    data = strict_json(out / "bench_w8a8.json")
    [row] = data["rows"]
    assert (row["m"], row["n"], row["k"]) == (16, 4096, 4096)
    assert row["sym_us"] > 0 and row["fp16_us"] > 0 and row["floor_us"] > 0
    # The floor is a floor: no kernel moves its bytes faster than the measured copy bandwidth (10% slack
    # for the copy's own measurement).
    assert row["sym_us"] > 0.9 * row["floor_us"] and row["fp16_us"] > 0.9 * row["floor_us"]
    assert row["copies"] * 4096 * 4096 >= 4 * data["l2_bytes"]
    assert data["summary"]["16"]["speedup_vs_fp16_geomean"] == pytest.approx(row["fp16_us"] / row["sym_us"])
    if not plot:
        png = (out / "bench_w8a8.png").read_bytes()
        assert png.startswith(PNG_SIGNATURE) and len(png) > 1000


def test_a_json_result_replots_on_another_machine(tmp_path, capsys):
    """python -m qgemm.bench.report: JSON from a GPU machine without matplotlib, drawn here."""
    pytest.importorskip("matplotlib")
    path = report.write_json(fake_result("fp8"), tmp_path / "bench_fp8.json")
    back = report.read_json(path)
    assert math.isnan(back["rows"][0]["int_mm_us"]) and back["rows"][0]["m"] == 1
    assert report.main([str(path)]) == 0
    assert "qgemm bench fp8 on Fake GPU" in capsys.readouterr().out
    assert (tmp_path / "bench_fp8.png").read_bytes().startswith(PNG_SIGNATURE)


@pytest.mark.parametrize("script, flags", [
    ("bench_w8a8.py", ["--json", "--quick", "--nk", "--m", "--sweep", "--sweep-m", "--sweep-promote", "--no-table"]),
    ("bench_fpaintb.py", ["--json", "--sweep", "--no-bf16", "--sweep-bits", "--quick", "--nk", "--m"]),
    ("bench_fp8.py", ["--json", "--sweep", "--quick", "--nk"]),
    ("bench_conv.py", ["--json", "--batch", "--sweep", "--quick"]),
    ("bench_conv_fpaintb.py", ["--json", "--batch", "--quick", "--sweep"]),
])
def test_benchmark_scripts_keep_the_flags_device_scripts_pass(script, flags):
    """benchmarks/bench_*.py are wrappers over qgemm.bench now; benchmarks/device_*.sh still call them."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'benchmarks'}"}
    proc = subprocess.run([sys.executable, f"benchmarks/{script}", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    for flag in flags:
        assert flag in proc.stdout, flag
    if script == "bench_fpaintb.py":
        assert "{sm90,sm80,all}" in proc.stdout
