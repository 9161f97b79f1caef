"""`qgemm bench FAMILY`: time one kernel family on the current GPU against its peers.

    from qgemm import bench
    result = bench.run("w8a8", shapes=[(4096, 4096)], ms=[1, 16])   # needs a GPU
    bench.report.write_json(result, "out/bench_w8a8.json"); bench.report.write_plot(result, "out/bench_w8a8.png")

Families and what they are timed against (peers.py):
  w8a8          block-INT8 GEMM    cuBLAS FP16/BF16, torch._int_mm, the Triton block-INT8 GEMM
  fpaintb       FpA x IntB GEMM    cuBLAS FP16/BF16, tinygemm (torch._weight_int4pack_mm)
  fp8           FP8 blockwise GEMM cuBLASLt blockwise FP8 (scaled_mm), per-tensor FP8, cuBLAS BF16
  conv          int8 conv2d        cuDNN FP16/BF16
  conv_fpaintb  FpA x IntB conv2d  cuDNN FP16/BF16
and the memory-bandwidth floor. Every time is GPU time under CUDA-graph replay with the weights
rotated through at least 4x the L2 size (timing.py); `warm=True` adds the L2-warm figures.

Each family module holds its default shapes and M values, parse_shape/shape_label, the names of
its primary column (qgemm's kernel) and its baseline (the FP16/BF16 peer: cuBLAS, or cuDNN for
convolutions), and run(), which yields one row (a dict) per (shape, M). Importing this package needs
no GPU (matplotlib is imported only to draw the plot).
"""
from __future__ import annotations

import importlib
import logging
import time

from . import report
from .timing import ROTATION_FACTOR

logger = logging.getLogger("qgemm")

FAMILIES = ("w8a8", "fpaintb", "fp8", "conv", "conv_fpaintb")
SCHEMA = "qgemm-bench/1"


def family(name: str):
    """The benchmark module of a family (qgemm.bench.<name>)."""
    if name not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {name!r}")
    return importlib.import_module(f"{__name__}.{name}")


def parse_shapes(name: str, text: str) -> list:
    """--shapes for a family: ';'-separated shapes in the family's format (GEMMs: 'N,K'; convolutions:
    a ResNet-50 layer name or 'size,ci,co,k,stride,padding')."""
    mod = family(name)
    parts = [p.strip() for p in text.split(";") if p.strip()]
    if not parts:
        raise ValueError(f"--shapes: expected one or more shapes separated by ';', got {text!r}")
    return [mod.parse_shape(p) for p in parts]


def parse_ms(text: str) -> list[int]:
    """--m: '1,16,128' -> [1, 16, 128]."""
    from ._family import parse_ints

    return list(dict.fromkeys(parse_ints(text, "--m")))


def preview(name: str, dtype: str | None = None, warm: bool = False) -> dict:
    """The part of a result known before anything is timed (enough for report.format_header/format_row)."""
    mod = family(name)
    return {
        "family": name,
        "dtype": dtype or getattr(mod, "DEFAULT_DTYPE", "f16"),
        "m_label": mod.M_LABEL,
        "primary": mod.PRIMARY,
        "baseline": mod.BASELINE,
        "columns": [key for key, _ in mod.COLUMNS] + ([key for key, _ in mod.WARM_COLUMNS] if warm else []),
        "warm": warm,
    }


def run(name: str, shapes=None, ms=None, *, dtype: str | None = None, warm: bool = False,
        progress=None, **family_options) -> dict:
    """Time family `name` over shapes x ms (the family's defaults where None) on the current GPU and
    return the result: metadata plus one row per (shape, M), the dict write_json stores.
    progress(row) is called as each row is timed. Raises NoGpuError without a GPU."""
    import torch

    import qgemm
    from . import peers
    from .timing import copy_bandwidth, l2_bytes

    mod = family(name)
    head = preview(name, dtype, warm)
    dtype = head["dtype"]
    if dtype not in peers.DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(peers.DTYPES)}, got {dtype!r}")
    if not torch.cuda.is_available():
        raise qgemm.NoGpuError(f"qgemm bench {name} times kernels on a CUDA GPU, and torch sees none "
                               f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'})")
    shapes = list(mod.SHAPES if shapes is None else shapes)
    ms = list(mod.MS if ms is None else ms)
    started = time.time()
    bandwidth = copy_bandwidth()
    rows = []
    for row in mod.run(shapes, ms, dtype=dtype, warm=warm, bandwidth=bandwidth, **family_options):
        rows.append(row)
        if progress:
            progress(row)
    try:  # host overheads and the like: nice to have, never worth the run
        extras = mod.extras(bandwidth) if hasattr(mod, "extras") else {}
    except Exception as e:  # noqa: BLE001
        logger.warning("qgemm bench %s: extras failed: %s", name, e)
        extras = {}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "schema": SCHEMA,
        **head,
        "device": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
        "sm_count": props.multi_processor_count,
        "torch": torch.__version__,
        "qgemm": qgemm.__version__,
        "l2_bytes": l2_bytes(),
        "rotation_factor": ROTATION_FACTOR,
        "copy_bandwidth_GBps": bandwidth / 1e9,
        "seconds": time.time() - started,
        "extras": extras,
        "rows": rows,
        "summary": report.summary(rows, mod.PRIMARY, mod.BASELINE),
    }
