"""qgemm: quantized GEMM kernels generated from CUTLASS templates, driven from Python.

Importing qgemm needs no GPU; calls that launch kernels raise NoGpuError where
there is none.
"""
from .errors import CudaError, KernelUnavailableError, NoGpuError, QgemmError
from .w8a8 import (
    QuantizedActivations,
    W8A8GemmPlan,
    W8A8Weight,
    quantize_activations,
    w8a8_linear,
)
from . import reference

__all__ = [
    "CudaError",
    "KernelUnavailableError",
    "NoGpuError",
    "QgemmError",
    "QuantizedActivations",
    "W8A8GemmPlan",
    "W8A8Weight",
    "quantize_activations",
    "w8a8_linear",
    "reference",
]
__version__ = "0.1.0"
