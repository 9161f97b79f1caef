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
from .fp8 import Fp8Activations, Fp8GemmPlan, Fp8Weight, fp8_linear, quantize_activations_fp8
from . import nn, reference

__all__ = [
    "CudaError",
    "Fp8Activations",
    "Fp8GemmPlan",
    "Fp8Weight",
    "KernelUnavailableError",
    "NoGpuError",
    "QgemmError",
    "QuantizedActivations",
    "W8A8GemmPlan",
    "W8A8Weight",
    "fp8_linear",
    "nn",
    "quantize_activations_fp8",
    "quantize_activations",
    "w8a8_linear",
    "reference",
]
__version__ = "0.1.0"
