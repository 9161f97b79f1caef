"""Kernel generator for qgemm: specs, Jinja2 rendering, the nvcc build driver and the CLI.

Nothing here needs a GPU or a CUDA driver; only `build` needs nvcc.
"""
from .specs import ActQuantSpec, KernelSpec, W8A8GemmSpec, SUPPORTED_TARGETS
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
