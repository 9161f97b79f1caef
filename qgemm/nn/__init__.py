"""torch.nn modules over qgemm's plans, for swapping into a model in place of nn.Linear or
nn.Conv2d: their quantized tensors are buffers (state_dict round-trips), they move and convert
like torch modules without touching the quantized dtypes, they can be built on the CPU or the
meta device, and they make their kernel plans on the first forward on a GPU (qgemm/nn/_base.py).
On the CPU they run a float64 reference of the same quantized math."""
from . import _ops  # registers qgemm::module_forward
from ._base import QuantModule
from .conv import IntWeightConv2d, QuantConv2d
from .linear import Fp8Linear, QuantLinear, W8A8Linear

QUANT_MODULES = (QuantLinear, Fp8Linear, W8A8Linear, QuantConv2d, IntWeightConv2d)

__all__ = ["Fp8Linear", "IntWeightConv2d", "QUANT_MODULES", "QuantConv2d", "QuantLinear", "QuantModule", "W8A8Linear"]
