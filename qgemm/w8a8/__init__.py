"""W8A8: int8 activations and weights quantized per K-block (asymmetric, or block-INT8 symmetric).

plan.py: the weights, the activation quantizer and the GEMM plan; heuristics.py: the kernel by shape.
"""
from .plan import (
    BLOCK_SIZES,
    INPUT_DTYPES,
    K_ALIGNMENT,
    LAUNCH_MODES,
    MIN_SM,
    N_ALIGNMENT,
    OUTPUT_DTYPES,
    SCHEMES,
    WEIGHT_BLOCK_N,
    QuantizedActivations,
    W8A8GemmPlan,
    W8A8Weight,
    quantize_activations,
    w8a8_linear,
)
