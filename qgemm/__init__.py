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
from .fpaintb import FpAIntBPlan, IntBWeight, fpaintb_linear
from .conv import ConvInt8Plan, ConvInt8Quant, FpAIntBConvPlan, IntConvWeight, conv2d_fpaintb, conv2d_int8
from .conv import quant as conv_quant  # qgemm.conv_quant.quantize_weight (docs/guide.md)
from .fpaintb import wq_format
from . import nn, reference
from .quantize import (
    ConvCalibration,
    Fp8BlockwiseConfig,
    Int4WeightOnlyConfig,
    Int8ConvConfig,
    Int8WeightOnlyConfig,
    IntWeightConvConfig,
    W8A8BlockConfig,
    calibrate_convs,
    quantize_,
)
from .checkpoint import CheckpointError, load_quantized
from .fuse import PACKED_MODULES, FuseReport, fuse_projections_
from .prebuild import prebuild
from . import tp  # tensor parallelism under torch.distributed (qgemm/tp.py)

__all__ = [
    "ConvInt8Plan",
    "ConvInt8Quant",
    "CudaError",
    "Fp8Activations",
    "Fp8GemmPlan",
    "Fp8Weight",
    "FpAIntBConvPlan",
    "FpAIntBPlan",
    "IntBWeight",
    "IntConvWeight",
    "KernelUnavailableError",
    "NoGpuError",
    "QgemmError",
    "QuantizedActivations",
    "W8A8GemmPlan",
    "W8A8Weight",
    "conv2d_fpaintb",
    "conv2d_int8",
    "fp8_linear",
    "fpaintb_linear",
    "nn",
    "prebuild",
    "quantize_activations_fp8",
    "quantize_activations",
    "w8a8_linear",
    "reference",
    "wq_format",
    # model-level API (qgemm/quantize.py, qgemm/checkpoint.py)
    "CheckpointError",
    "ConvCalibration",
    "Fp8BlockwiseConfig",
    "Int4WeightOnlyConfig",
    "Int8ConvConfig",
    "Int8WeightOnlyConfig",
    "IntWeightConvConfig",
    "W8A8BlockConfig",
    "calibrate_convs",
    "FuseReport",
    "PACKED_MODULES",
    "fuse_projections_",
    "load_quantized",
    "quantize_",
    "tp",
]
__version__ = "0.1.0"
