"""What `qgemm bench` writes: the table on stdout, the JSON file, and the PNG plot of the speedup
against the FP16/BF16 peer versus M (one line per shape, log-x).

JSON (SCHEMA "qgemm-bench/1"): the keys in RESULT_KEYS, then "rows": one object per (shape, M)
with "shape" (a label), "m" (M, or the batch for convolutions), "speedup_vs_fp16" (baseline /
primary: > 1 means qgemm is faster) and the family's columns in microseconds; NaN (a contender
that did not run) is written as null. matplotlib is needed for the plot only: `pip install
"qgemm[plot]"`.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

RESULT_KEYS = ("schema", "family", "device", "dtype", "m_label", "primary", "baseline", "columns", "warm",
               "l2_bytes", "rotation_factor", "copy_bandwidth_GBps", "rows", "summary")
ROW_KEYS = ("shape", "m", "speedup_vs_fp16")


class PlotUnavailableError(ImportError):
    """matplotlib is not installed."""


def _geomean(values) -> float:
    values = [v for v in values if v is not None and not math.isnan(v) and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def summary(rows, primary: str, baseline: str) -> dict:
    """Per M: the geometric mean over the shapes of baseline / primary (> 1: qgemm faster)."""
    out = {}
    for m in sorted({r["m"] for r in rows}):
        sel = [r for r in rows if r["m"] == m]
        out[str(m)] = {"speedup_vs_fp16_geomean": _geomean(
            [r.get(baseline, math.nan) / r[primary] for r in sel
             if r.get(primary) and r.get(baseline) is not None]), "shapes": len(sel)}
    return out


def _headers(result) -> dict:
    from . import family

    mod = family(result["family"])
    return dict(mod.COLUMNS + mod.WARM_COLUMNS)


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def format_header(result) -> str:
    headers = _headers(result)
    cols = [f"{headers.get(c, c):>9}" for c in result["columns"]]
    return f"{'shape':<20} {result['m_label']:>6} | " + " ".join(cols) + f" | {'vs fp16':>7}"


def format_row(result, row) -> str:
    cols = [f"{_cell(row.get(c)):>9}" for c in result["columns"]]
    speedup = row.get("speedup_vs_fp16")
    s = "-" if speedup is None or math.isnan(speedup) else f"{speedup:.2f}x"
    return f"{row['shape']:<20} {row['m']:>6} | " + " ".join(cols) + f" | {s:>7}"


def table(result) -> str:
    """The result as a text table, then the per-M geomeans."""
    lines = [f"qgemm bench {result['family']} on {result['device']} ({result['dtype']}): microseconds per call, "
             f"CUDA graphs, weights rotated through >= {result['rotation_factor']:g}x L2 "
             f"({result['l2_bytes'] >> 20} MiB); copy bandwidth {result['copy_bandwidth_GBps']:.0f} GB/s",
             format_header(result)]
    lines += [format_row(result, r) for r in result["rows"]]
    lines.append(f"speedup = {result['baseline']} / {result['primary']} (> 1: qgemm faster); geomeans over the shapes:")
    for m, s in result["summary"].items():
        g = s["speedup_vs_fp16_geomean"]
        lines.append(f"  {result['m_label']}={m:>6}: {'-' if g is None or math.isnan(g) else f'{g:.2f}x'}")
    return "\n".join(lines)


def _nan_to_none(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {str(k): _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_none(v) for v in value]
    return value


def check_schema(result) -> None:
    """ValueError naming what is missing where `result` is not a qgemm-bench result."""
    missing = [k for k in RESULT_KEYS if k not in result]
    if missing:
        raise ValueError(f"bench result lacks {', '.join(missing)}")
    for i, row in enumerate(result["rows"]):
        lacking = [k for k in ROW_KEYS + (result["primary"], result["baseline"]) if k not in row]
        if lacking:
            raise ValueError(f"bench result row {i} lacks {', '.join(lacking)}")


def write_json(result, path) -> Path:
    """Write result as strict JSON (NaN as null); returns the path."""
    check_schema(result)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_nan_to_none(result), indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path


def write_plot(result, path) -> Path:
    """Write a PNG: the speedup against the FP16/BF16 peer versus M, one line per shape, log-x, a
    dashed line at 1. Raises PlotUnavailableError without matplotlib."""
    check_schema(result)
    try:
        import matplotlib
    except ImportError as e:
        raise PlotUnavailableError(f"writing the plot needs matplotlib ({e}); install it with "
                                   "`pip install \"qgemm[plot]\"` or pass --no-plot") from e
    matplotlib.use("Agg", force=True)  # files only: no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    try:
        shapes = list(dict.fromkeys(r["shape"] for r in result["rows"]))
        for shape in shapes:
            pts = sorted((r["m"], r["speedup_vs_fp16"]) for r in result["rows"] if r["shape"] == shape
                         and r["speedup_vs_fp16"] is not None and not math.isnan(r["speedup_vs_fp16"]))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=shape)
        ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
        ax.set_xscale("log", base=2)
        ms = sorted({r["m"] for r in result["rows"]})
        if ms:  # tick the M values measured, written out (1, 16, 4096), not as powers of two
            ax.set_xticks(ms, [str(m) for m in ms])
            ax.minorticks_off()
        ax.set_xlabel(result["m_label"])
        peer = "cuDNN" if result["baseline"].startswith("cudnn") else "cuBLAS"
        dtype = {"f16": "FP16", "bf16": "BF16"}.get(result["dtype"], result["dtype"])
        ax.set_ylabel(f"speedup vs {peer} {dtype} (> 1: qgemm faster)")
        ax.set_title(f"qgemm {result['family']} on {result['device']}: {result['baseline']} / {result['primary']}",
                     fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        if shapes:
            ax.legend(fontsize=7, loc="best", ncol=1 if len(shapes) <= 8 else 2)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return path


def read_json(path) -> dict:
    """A result write_json wrote (null back to NaN), checked against the schema."""
    def nan(value):
        if value is None:
            return math.nan
        if isinstance(value, dict):
            return {k: nan(v) for k, v in value.items()}
        if isinstance(value, list):
            return [nan(v) for v in value]
        return value

    result = json.loads(Path(path).read_text())
    result["rows"] = [{k: (math.nan if v is None else v) for k, v in row.items()} for row in result.get("rows", [])]
    check_schema(result)
    return result


def main(argv=None) -> int:
    """`python -m qgemm.bench.report RESULT.json...`: print each result's table and draw its PNG beside
    it (for JSON brought back from a GPU machine without matplotlib)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m qgemm.bench.report", description=main.__doc__)
    ap.add_argument("json", nargs="+", help="bench_FAMILY.json files written by `qgemm bench`")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    for name in args.json:
        result = read_json(name)
        print(table(result))
        if not args.no_plot:
            print(f"wrote {write_plot(result, Path(name).with_suffix('.png'))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
