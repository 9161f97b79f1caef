"""FP8 blockwise kernels (sm90): the GEMM and the activation quantizer; their specs and catalog."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..spec import Slots, KernelSpec, ctype

@dataclass(frozen=True)
class Fp8BlockwiseGemmSpec(KernelSpec):
    """Sm90 FP8 GEMM with DeepSeek-V3 scaling: activations scaled per (row, 128-K block),
    weights per (128-N, 128-K) block; FP32 promotion after every 128-K block (CUTLASS 3.x
    TMA + WGMMA warp-specialized mainloop, KernelTmaWarpSpecialized*FP8Blockwise).

    `tile` and `cluster` are in the kernel's own M x N. With swap_ab the kernel computes
    out^T = W X^T: its M runs over the weight's N (tile M a multiple of the 128-row scale
    block) and its N over the tokens, so a decode batch of 16 fills a 16-wide tile instead
    of padding a 64-row one. The output is then written column-major, i.e. out row-major.
    """

    family: ClassVar[str] = "fp8_blockwise_gemm"
    template: ClassVar[str] = "fp8_blockwise_gemm.cu.j2"
    SLOTS: ClassVar[Slots] = Slots(ptr=("x", "w", "sx", "sw", "bias", "out"), ld=("ld_x", "ld_w", "ld_sx", "ld_out"),
                                 ext=("raster", "swizzle", "splits"))
    SCHEDULES: ClassVar[tuple] = ("cooperative", "pingpong")
    SCHEDULERS: ClassVar[tuple] = ("persistent", "streamk")
    INPUTS: ClassVar[tuple] = ("e4m3", "e5m2")
    OUTPUTS: ClassVar[tuple] = ("bf16", "f16")
    # Scale blocks: 1 x 128 for activations, 128 x 128 for weights (DeepSeek-V3).
    SCALE_BLOCK: ClassVar[int] = 128
    TILE_K: ClassVar[int] = 128

    tile: tuple
    cluster: tuple
    schedule: str
    swap_ab: bool
    output: str
    scheduler: str = "persistent"
    act: str = "e4m3"
    weight: str = "e4m3"
    arch: int = 90

    def __post_init__(self):
        self._as_ints("tile", "cluster")
        tile, cluster = self.tile, self.cluster
        self._require_sm90()
        if len(tile) != 2 or len(cluster) != 2:
            raise ValueError(f"tile and cluster are (M, N) pairs, got tile={self.tile!r} cluster={self.cluster!r}")
        if self.schedule not in self.SCHEDULES:
            raise ValueError(f"schedule must be one of {self.SCHEDULES}, got {self.schedule!r}")
        if self.scheduler not in self.SCHEDULERS:
            raise ValueError(f"scheduler must be one of {self.SCHEDULERS}, got {self.scheduler!r}")
        if self.output not in self.OUTPUTS:
            raise ValueError(f"output must be one of {self.OUTPUTS}, got {self.output!r}")
        for what in ("act", "weight"):
            if getattr(self, what) not in self.INPUTS:
                raise ValueError(f"{what} must be one of {self.INPUTS}, got {getattr(self, what)!r}")
        if not isinstance(self.swap_ab, bool):
            raise ValueError(f"swap_ab must be a bool, got {self.swap_ab!r}")
        tm, tn = tile
        # wgmma M is 64 per warpgroup. Cooperative splits the tile's rows over two warpgroups;
        # ping-pong gives each warpgroup whole tiles, and the blockwise mainloop keeps two FP32
        # accumulators (per-block and promoted), so more than 64 rows would exhaust registers.
        rows = {"cooperative": (128, 256), "pingpong": (64,)}[self.schedule]
        if tm not in rows:
            raise ValueError(f"tile M must be one of {rows} with the {self.schedule} schedule, got {tm}")
        if tn % 8 or not 8 <= tn <= 256:
            raise ValueError(f"tile N must be a multiple of 8 in [8, 256] (wgmma N), got {tn}")
        # The 128-wide scale block of the weight must not straddle tiles.
        weight_rows = tm if self.swap_ab else tn
        if weight_rows % self.SCALE_BLOCK:
            raise ValueError(f"the tile's weight dimension ({'M' if self.swap_ab else 'N'} = {weight_rows}) "
                             f"must be a multiple of the {self.SCALE_BLOCK}-row weight scale block")
        if self.schedule == "pingpong" and self.scheduler == "streamk":
            raise ValueError("the pingpong schedule has no stream-K scheduler in CUTLASS; use cooperative")
        if cluster not in ((1, 1), (2, 1), (1, 2)):
            raise ValueError(f"cluster must be (1, 1), (2, 1) or (1, 2), got {cluster}")

    @property
    def act_ctype(self) -> str:
        return ctype(self.act)

    @property
    def weight_ctype(self) -> str:
        return ctype(self.weight)

    @property
    def name(self) -> str:
        tm, tn = self.tile
        cm, cn = self.cluster
        swap = "_swapab" if self.swap_ab else ""
        return (f"qgemm_fp8_blockwise_gemm_sm{self.arch}_{self.act}{self.weight}_{self.output}"
                f"_{tm}x{tn}x{self.TILE_K}_c{cm}x{cn}_{self.schedule}_{self.scheduler}{swap}")


@dataclass(frozen=True)
class Fp8ActQuantSpec(KernelSpec):
    """Per-token-group (1 x 128) FP8 quantization of activations, writing the scales
    M-major ([K / 128, M padded to 4], the layout the GEMM's TMA reads) in the same pass."""

    family: ClassVar[str] = "fp8_act_quant"
    template: ClassVar[str] = "fp8_act_quant.cu.j2"
    SLOTS: ClassVar[Slots] = Slots(ptr=("x", "q", "sx"), ld=("ld_x", "ld_q", "ld_sx"))
    INPUTS: ClassVar[tuple] = ("f32", "f16", "bf16")
    OUTPUTS: ClassVar[tuple] = ("e4m3", "e5m2")

    input: str
    output: str = "e4m3"
    arch: int = 90

    def __post_init__(self):
        if self.input not in self.INPUTS:
            raise ValueError(f"input must be one of {self.INPUTS}, got {self.input!r}")
        if self.output not in self.OUTPUTS:
            raise ValueError(f"output must be one of {self.OUTPUTS}, got {self.output!r}")
        if self.arch != 90:
            raise ValueError(f"arch must be 90 for {self.family} (it feeds the sm90 FP8 GEMM), got {self.arch!r}")

    @property
    def name(self) -> str:
        return f"qgemm_fp8_act_quant_sm{self.arch}_{self.input}_{self.output}"


# --- catalog ---------------------------------------------------------------------------------

# FP8 blockwise (sm90 only). Decode-sized M runs swapped (the weight's N on the kernel's M,
# tokens on a narrow tile N) so a batch of 16 tokens is not padded to 64 rows; prefill-sized M
# runs unswapped on 64- and 128-row tiles. All persistent: stream-K measured slower on every
# benchmark shape (qgemm/fp8/heuristics.py), and the spec still offers it.
# (tile, cluster, schedule, scheduler, swap_ab)
_FP8_CONFIGS = [
    ((128, 16), (1, 1), "cooperative", "persistent", True),
    ((128, 32), (1, 1), "cooperative", "persistent", True),
    ((128, 64), (1, 1), "cooperative", "persistent", True),
    ((64, 128), (1, 1), "pingpong", "persistent", False),
    ((128, 128), (1, 2), "cooperative", "persistent", False),
]


def _fp8_gemm(target_sm: int) -> list[KernelSpec]:
    if target_sm < 90:
        return []
    return [
        Fp8BlockwiseGemmSpec(tile, cluster, schedule, swap_ab, output, scheduler=scheduler)
        for output in Fp8BlockwiseGemmSpec.OUTPUTS
        for tile, cluster, schedule, scheduler, swap_ab in _FP8_CONFIGS
    ]


def _fp8_act_quant(target_sm: int) -> list[KernelSpec]:
    return [Fp8ActQuantSpec(dtype) for dtype in Fp8ActQuantSpec.INPUTS] if target_sm >= 90 else []


CATALOGS = {
    Fp8BlockwiseGemmSpec.family: _fp8_gemm,
    Fp8ActQuantSpec.family: _fp8_act_quant,
}
