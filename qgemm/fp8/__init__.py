"""FP8 blockwise (DeepSeek-V3 scaling): FP8 activations per token and 128-K group, weights per 128 x 128 block.

plan.py: the weights, the activation quantizer and the GEMM plan; heuristics.py: the kernel by shape.
"""
from .plan import (
    FP8_DTYPES,
    GROUP,
    INPUT_DTYPES,
    N_ALIGNMENT,
    OUTPUT_DTYPES,
    SUPPORTED_CAPABILITY,
    Fp8Activations,
    Fp8GemmPlan,
    Fp8Weight,
    fp8_linear,
    quantize_activations_fp8,
)
