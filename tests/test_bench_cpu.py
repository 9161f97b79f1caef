"""`qgemm bench` (qgemm/bench/, cutlass_gen/cli.py cmd_bench) without a GPU: argument parsing and its
errors, the no-GPU message, the JSON schema, the PNG plot written from fake rows, and the L2 rotation
rule. One GPU test runs `qgemm bench w8a8` end to end."""
from __future__ import annotations

import importlib.util
import inspect
import json
import math
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import qgemm
import qgemm.bench.timing as bench_timing
from cutlass_gen import cli
from qgemm import bench
from qgemm.bench import peers as bench_peers
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


def test_the_old_timing_import_still_works(monkeypatch):
    """benchmarks/diag_*.py still say `from timing import ...`."""
    import importlib

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    monkeypatch.delitem(sys.modules, "timing", raising=False)
    old = importlib.import_module("timing")
    for name in ("rotation_count", "timed_rotating", "timed", "bench", "bench_graph", "copy_bandwidth", "geomean",
                 "host_us", "l2_bytes"):
        assert getattr(old, name) is getattr(bench_timing, name), name
    monkeypatch.delitem(sys.modules, "timing")


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
    ("bench_fpaintb.py", ["--json", "--sweep", "--no-bf16", "--sweep-bits", "--sweep-match", "--quick", "--nk", "--m"]),
    ("bench_fp8.py", ["--json", "--sweep", "--quick", "--nk"]),
    ("bench_conv.py", ["--json", "--batch", "--sweep", "--quick"]),
    ("bench_conv_fpaintb.py", ["--json", "--batch", "--quick", "--sweep"]),
])
def test_benchmark_scripts_keep_the_flags_device_scripts_pass(script, flags, monkeypatch, capsys):
    """benchmarks/bench_*.py are wrappers over qgemm.bench now; benchmarks/device_*.sh still call them."""
    import runpy

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(REPO / "benchmarks" / script), run_name="__main__")
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in flags:
        assert flag in out, flag
    if script == "bench_fpaintb.py":
        assert "{sm90,sm80,all}" in out


# ---- the family runners, on fakes ------------------------------------------------------------------
# The runners only run on a GPU. Here torch's CUDA calls, qgemm's plans, the peers and the timers are
# replaced by fakes that check every call's arguments against the real signatures, so a runner's
# bookkeeping (arguments, row keys, warm columns, JSON, plot, the scripts' legacy tables) is exercised
# on CPU; the times are made up.



def _checked(real, result=lambda *a, **k: None, skip_self=False):
    """A function with `real`'s signature (checked on every call) returning result(*args)."""
    sig = inspect.signature(real)

    def fake(*args, **kwargs):
        sig.bind(*((None,) if skip_self else ()), *args, **kwargs)
        return result(*args, **kwargs)

    return fake


def _fake_class(real, results=None):
    """Instances accept what real's __init__ accepts; their methods exist only where real's do and take
    the same arguments; results[name](self, *args) gives a method's return value (default None)."""
    results = results or {}

    class Fake:
        def __init__(self, *args, **kwargs):
            inspect.signature(real.__init__).bind(self, *args, **kwargs)
            self.args, self.kwargs = args, kwargs

        def __call__(self, *args, **kwargs):
            inspect.signature(real.__call__).bind(self, *args, **kwargs)
            return results.get("__call__", lambda *a, **k: None)(self, *args, **kwargs)

        def __getattr__(self, name):
            sig = inspect.signature(getattr(real, name))  # AttributeError: real has no such method

            def method(*args, **kwargs):
                sig.bind(self, *args, **kwargs)
                return results.get(name, lambda *a, **k: None)(self, *args, **kwargs)

            return method

    Fake.__name__ = f"Fake{real.__name__}"
    return Fake


def _no_cuda(fn):
    def call(*args, device=None, **kwargs):
        assert device in (None, "cuda"), device
        return fn(*args, **kwargs)

    return call


@pytest.fixture
def fake_gpu_stack(monkeypatch):
    """torch's CUDA calls, qgemm's plans, the peers and the timers replaced by checked fakes; L2 1 MiB.
    Returns the list of fn lists the timers were given."""
    cuda = torch.cuda
    for name, value in dict(is_available=lambda: True, current_device=lambda: 0, empty_cache=lambda: None,
                            get_device_name=lambda device=None: "Fake GPU",
                            get_device_capability=lambda device=None: (9, 0),
                            get_device_properties=lambda device=None: types.SimpleNamespace(
                                multi_processor_count=132, L2_cache_size=1 << 20)).items():
        monkeypatch.setattr(cuda, name, value)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", torch.backends.cudnn.benchmark)
    for name in ("randn", "randint", "rand", "empty", "zeros", "ones"):
        monkeypatch.setattr(torch, name, _no_cuda(getattr(torch, name)))

    timed_lists = []

    def rotating(fns):
        fns = list(fns)
        assert fns
        timed_lists.append(fns)
        fns[0]()
        fns[-1]()
        return 10.0 + len(timed_lists) % 7

    timers = dict(timed_rotating=rotating, timed=lambda fn: rotating([fn]), bench=lambda fn, **k: rotating([fn]),
                  bench_graph=lambda fn, **k: rotating([fn]), host_us=lambda fn, **k: (fn(), 3.0)[1],
                  rotated_and_warm=lambda fns, warm: (rotating(fns), 5.0 if warm else None),
                  copy_bandwidth=lambda: 2.0e12, l2_bytes=lambda: 1 << 20)
    for mod in [bench_timing] + [bench.family(f) for f in bench.FAMILIES]:
        for name, fake in timers.items():
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, fake)
    monkeypatch.setattr(bench_timing, "rotation_count", lambda b, factor=4.0, l2=None: max(1, math.ceil(
        factor * (l2 or (1 << 20)) / b)))
    for mod in [bench.family(f) for f in bench.FAMILIES]:
        if hasattr(mod, "rotation_count"):
            monkeypatch.setattr(mod, "rotation_count", bench_timing.rotation_count)
    for name in ("cublas_matmul", "int_mm", "cublaslt_blockwise_fp8", "cublaslt_per_tensor_fp8", "tinygemm_int4",
                 "cudnn_conv2d"):
        monkeypatch.setattr(bench_peers, name, _checked(getattr(bench_peers, name), lambda *a, **k: (lambda: None)))
    # (block_int8_gemm(xq, x_scale, wq, w_scale, out_dtype): triton is not importable here)
    monkeypatch.setattr(bench.family("w8a8"), "triton_peer", lambda: (lambda xq, xs, wq, ws, dt: None))

    def weight(*a, **k):
        w = a[0]
        return types.SimpleNamespace(qweight=torch.zeros(w.shape[:2], dtype=torch.int8), scale=torch.ones(1),
                                     scale_inv=torch.ones(1), n=w.shape[0])

    def acts(x, *a, **k):
        return types.SimpleNamespace(q=torch.zeros(x.shape, dtype=torch.int8), scale=torch.ones(1))

    def conv_out(plan, h, w):
        w_q = plan.args[0]
        k, s, p = w_q.shape[1], plan.kwargs.get("stride", 1), plan.kwargs.get("padding", 0)
        return (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1

    spec = lambda *a, **k: types.SimpleNamespace(name="qgemm_fake_kernel")  # noqa: E731
    fakes = {
        "W8A8Weight": types.SimpleNamespace(from_float=_checked(qgemm.W8A8Weight.from_float, weight)),
        "W8A8GemmPlan": _fake_class(qgemm.W8A8GemmPlan, {"kernel_spec": spec}),
        "quantize_activations": _checked(qgemm.quantize_activations, acts),
        "IntBWeight": types.SimpleNamespace(from_float=_checked(qgemm.IntBWeight.from_float, weight)),
        "FpAIntBPlan": _fake_class(qgemm.FpAIntBPlan, {"choice": spec}),
        "Fp8Weight": types.SimpleNamespace(from_float=_checked(qgemm.Fp8Weight.from_float, weight)),
        "Fp8GemmPlan": _fake_class(qgemm.Fp8GemmPlan, {"choice": spec}),
        "quantize_activations_fp8": _checked(qgemm.quantize_activations_fp8, acts),
        "ConvInt8Quant": _checked(qgemm.ConvInt8Quant, lambda *a, **k: object()),
        "ConvInt8Plan": _fake_class(qgemm.ConvInt8Plan, {
            "output_hw": conv_out, "choice": lambda self, n, h, w, sm90=True: f"sm{90 if sm90 else 80}"}),
        "IntConvWeight": types.SimpleNamespace(from_float=_checked(qgemm.IntConvWeight.from_float, weight)),
        "FpAIntBConvPlan": _fake_class(qgemm.FpAIntBConvPlan, {"choice": spec}),
        "prebuild": _checked(qgemm.prebuild, lambda *a, **k: []),
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(qgemm, name, fake)
    for family_name, attr in (("fpaintb", "label"), ("fp8", "choice_label"), ("conv", "kernel_label"),
                              ("conv_fpaintb", "kernel_label")):
        monkeypatch.setattr(bench.family(family_name), attr, lambda choice: "fake-kernel")
    return timed_lists


SMALL = {"w8a8": "256,512;384,256", "fpaintb": "256,512", "fp8": "256,512", "conv": "conv1;l3.3x3",
         "conv_fpaintb": "l3.3x3"}


@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize("family", bench.FAMILIES)
def test_runners_on_fakes_fill_every_column(family, warm, fake_gpu_stack, tmp_path):
    mod = bench.family(family)
    rows_seen = []
    result = bench.run(family, bench.parse_shapes(family, SMALL[family]), [1, 64], warm=warm,
                       progress=rows_seen.append)
    assert result["rows"] == rows_seen and len(rows_seen) == 2 * len(SMALL[family].split(";"))
    optional = {"int4_sm80_us", "bf16_us", "cublas_bf16_us"} - ({"int4_sm80_us"} if family == "fpaintb" else set())
    for row in result["rows"]:
        for key, _ in mod.COLUMNS + (mod.WARM_COLUMNS if warm else []):
            if key not in optional:
                assert isinstance(row.get(key), float), (key, row.get(key))
        if not warm:
            assert not any(key in row for key, _ in mod.WARM_COLUMNS)
        assert row["speedup_vs_fp16"] == pytest.approx(row[mod.BASELINE] / row[mod.PRIMARY])
    if family == "w8a8":  # M=1 is <= 16: torch._int_mm is asked anyway (the fake takes it); block 32 at max M
        assert "asym_b32_us" in result["rows"][1] and "asym_b32_us" not in result["rows"][0]
    assert fake_gpu_stack, "nothing was timed"
    report.write_json(result, tmp_path / "r.json")
    if importlib.util.find_spec("matplotlib"):
        report.write_plot(result, tmp_path / "r.png")
    assert report.table(result).count("\n") > len(result["rows"])


@pytest.mark.parametrize("script, call", [
    ("bench_w8a8", lambda m: m.main),
    ("bench_fpaintb", lambda m: lambda: m.run([(512, 256)], [1, 64], None, True)),
    ("bench_fp8", lambda m: lambda: m.run([(256, 512)], [64], False)),
    ("bench_conv", lambda m: lambda: m.run(m.RESNET50[:2], [1], False)),
    ("bench_conv_fpaintb", lambda m: lambda: m.run(m.SHAPES[:1], [1], False)),
])
def test_benchmark_scripts_on_fakes(script, call, fake_gpu_stack, monkeypatch, tmp_path, capsys):
    """The scripts' tables, legacy summaries and JSON keys over qgemm.bench's rows."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    mod = __import__(script)
    if script == "bench_w8a8":
        monkeypatch.setattr(sys, "argv", ["bench_w8a8.py", "--json", str(tmp_path / "w.json"), "--nk", "256x512",
                                          "--m", "1", "--m", "64"])
        call(mod)()
        data = strict_json(tmp_path / "w.json")
        assert {"device", "copy_bandwidth_GBps", "l2_bytes", "host_overhead_us_per_gemm_call", "rows",
                "sweep"} <= set(data)
        assert "block 32 / block 128" in capsys.readouterr().out
        return
    result = call(mod)()
    report.write_json(result, tmp_path / "r.json")
    legacy = {"bench_fpaintb": ("l2_MiB", "host_overhead_us_per_call"),
              "bench_fp8": ("act_quant", "host_overhead_us_per_gemm_call"),
              "bench_conv": ("host_overhead_us_per_call",), "bench_conv_fpaintb": ()}[script]
    for key in legacy:
        assert key in result
    for row in result["rows"]:
        mod._fmt(row)


def test_kernel_labels_of_real_catalog_specs():
    """The tables name each row's kernel; the labels read the real specs' fields. (Choices as
    namespaces: the labels read only spec, splits, decomposition, ctas_per_sm, raster and swizzle.)"""
    from cutlass_gen.catalog import catalog

    def choice(spec, **kw):
        return types.SimpleNamespace(spec=spec, **{"splits": 2, "decomposition": 0, "ctas_per_sm": 2, "raster": 0,
                                                          "swizzle": 1, **kw})

    fpaintb, conv, fp8 = bench.family("fpaintb"), bench.family("conv"), bench.family("fp8")
    assert fpaintb.label(choice(catalog(90, "fpaintb_gemm_sm90")[0])).startswith("s90")
    assert fpaintb.label(choice(catalog(90, "fpaintb_gemm")[0])).startswith("g")
    assert fpaintb.label(choice(catalog(90, "fpaintb_gemv")[0])).startswith("m")
    assert fpaintb.label(choice(catalog(90, "fpaintb_dequant")[0])) == "dequant+cuBLAS"
    assert conv.kernel_label(catalog(90, "conv2d_int8_sm90")[0]).startswith("sm90 ")
    assert conv.kernel_label(catalog(80, "conv2d_int8")[0]).startswith("sm80 ")
    assert "/" in fp8.choice_label(choice(catalog(90, "fp8_blockwise_gemm")[0], raster=1, swizzle=4))
