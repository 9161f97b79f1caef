"""conv2d: int8 in and out with requantization (int8.py, quant.py, fold.py), and FpA x IntB with a
quantized filter (fpaintb.py); heuristics.py: the kernel by shape for both.
"""
from .fold import StrideFold
from .fpaintb import FpAIntBConvPlan, IntConvWeight, conv2d_fpaintb
from .int8 import LAYOUTS, MAX_ELEMENTS, MIN_SM, ConvInt8Plan, conv2d_int8, nhwc_extent
from .quant import ConvInt8Quant
