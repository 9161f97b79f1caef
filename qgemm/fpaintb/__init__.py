"""FpA x IntB: FP16/BF16 activations times INT4/INT8 weights (W4A16, W8A16).

wq_format.py: the logical weight and the checkpoint formats (GPTQ, AWQ, signed, compressed-tensors);
pack.py: the kernels' packed layouts; plan.py: the packed weight and the GEMM plan; heuristics.py: the
kernel by shape.
"""
from .plan import (
    ACT_DTYPES,
    ACTIVATIONS,
    GROUP_SIZES,
    FpAIntBPlan,
    IntBWeight,
    StreamKBuffers,
    check_act_dtype,
    fpaintb_linear,
    sm90_streamk_flag_bytes,
)
