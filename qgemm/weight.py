"""What the quantized weights stored as nn.Linear's [N, K] (`qweight`) share: their extent and device."""
from __future__ import annotations

import torch


class NKWeight:
    """Mixin of the weight dataclasses whose codes are `qweight` [N, K] (W8A8Weight, Fp8Weight)."""

    qweight: torch.Tensor

    @property
    def n(self) -> int:
        return self.qweight.shape[0]

    @property
    def k(self) -> int:
        return self.qweight.shape[1]

    @property
    def device(self) -> torch.device:
        return self.qweight.device
