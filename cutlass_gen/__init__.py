"""Kernel generator for qgemm: specs, Jinja2 rendering, the nvcc build driver and the CLI.

Nothing here needs a GPU or a CUDA driver; only `build` needs nvcc.
"""
from .spec import SUPPORTED_TARGETS, KernelSpec
from .families.w8a8 import ActQuantSpec, W8A8GemmSpec
from .render import RenderedKernel, render
from .catalog import catalog

__all__ = [
    "ActQuantSpec",
    "KernelSpec",
    "W8A8GemmSpec",
    "SUPPORTED_TARGETS",
    "RenderedKernel",
    "render",
    "catalog",
]
