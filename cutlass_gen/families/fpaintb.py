"""FpA x IntB kernels: the small-M kernel, the tiled GEMM, the dequantizer and the Sm90 mixed-input
GEMM; their specs and their catalog per SM (the packed weight layouts: fpaintb_layout.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..spec import Slots, KernelSpec, _check_stages_and_smem, _warps, ctype
from . import fpaintb_layout


# The FpA x IntB operand slots (the small-M kernel, the tiled GEMM and the dequantizer share one
# layout, so a plan fills one problem for all three; the Sm90 kernel's ext differs).
FPAINTB_PTR = ("x", "w", "scale", "zero", "bias", "out", "partial")
FPAINTB_LD = ("ld_x", "ld_w", "ld_out")
FPAINTB_SLOTS = Slots(ptr=FPAINTB_PTR, ld=FPAINTB_LD, ext=("group_size", "activation", "ctas", "raster_group", "l2_prefetch"))


ACT_TYPES = ("f16", "bf16")


class _FpAIntBSpec(KernelSpec):
    """What the FpA x IntB specs share: activation and weight types, and the packed layout the
    templates read (cutlass_gen/families/fpaintb_layout.py)."""

    ARCHS: ClassVar[tuple] = (75, 80)

    def _check_types(self):
        if self.act not in ACT_TYPES:
            raise ValueError(f"act must be one of {ACT_TYPES}, got {self.act!r}")
        if self.bits not in fpaintb_layout.BITS:
            raise ValueError(f"bits must be one of {fpaintb_layout.BITS}, got {self.bits!r}")
        if self.arch not in self.ARCHS:
            raise ValueError(f"arch must be one of {self.ARCHS} for {self.family}, got {self.arch!r}")
        if self.act == "bf16" and self.arch < 80:
            raise ValueError("act bf16 needs arch 80 or later (Turing has no BF16 tensor-core MMA)")

    @property
    def act_ctype(self) -> str:
        return ctype(self.act)

    def template_context(self) -> dict:
        return {"layout": fpaintb_layout.layout(self.bits)}


@dataclass(frozen=True)
class FpAIntBGemvSpec(_FpAIntBSpec):
    """FP16/BF16 activations x INT4/INT8 weights, for small M: codes go from global memory
    straight into a ring of prefetch + 1 register buffers, through the lop3/prmt converters, into
    m16n8k16 MMAs (two m16n8k8 on Sm75). A CTA owns 16 * m_tiles rows (8 with rows8) and
    8 * n_tiles columns; warps_k warps split K.

    stream=True is the decode variant (issue 16): the weight is the MMA's A operand (16 columns per
    MMA, tokens on its 8-wide N: one MMA per two converted words instead of two per word), the K
    loop runs whole 128-row blocks without predicates (columns past N and rows past M read
    clamped, valid addresses whose results are never stored), scales and zeros travel in the
    register ring with the codes, and the group-scale mode (per weight, per block, per column) and
    the zeros are compile-time branches chosen once per launch. It needs m_tiles 1 and an even
    n_tiles (16-column MMA tiles); rows8 makes it one 8-token MMA tile, else two (M up to 16 per CTA).

    bulk_stages > 0 (the decode variant on sm90, arch 90): the codes do not pass through the register
    ring. A producer warp copies them with cp.async.bulk into a ring of that many shared-memory stages
    (one block per consumer warp and column group a stage), completed through mbarriers, so the bytes in
    flight cost no registers; the consumer warps read them from shared memory. Activations, scales and
    zeros keep the register ring (prefetch)."""

    family: ClassVar[str] = "fpaintb_gemv"
    template: ClassVar[str] = "fpaintb_gemv.cu.j2"
    SLOTS: ClassVar[Slots] = FPAINTB_SLOTS

    act: str
    bits: int
    m_tiles: int = 1
    n_tiles: int = 4
    warps_k: int = 4
    arch: int = 80
    min_warps_per_sm: int = 0  # > 0: cap registers so this many warps fit on an SM (0: no cap)
    prefetch: int = 1          # K blocks whose loads are in flight while one computes
    rows8: bool = False        # 8-row CTAs (decode): no registers or loads for rows g + 8
    stream: bool = False       # the decode variant (weights as the MMA's A operand; see above)
    bulk_stages: int = 0       # > 0: codes through a shared-memory ring filled by bulk copies (sm90)

    ARCHS: ClassVar[tuple] = (75, 80, 90)
    # Shared memory the bulk ring may take (the decode variant's CTAs share an SM two to four at a time).
    BULK_SMEM_LIMIT: ClassVar[int] = 96 * 1024

    def __post_init__(self):
        self._check_types()
        if (self.arch == 90) != (self.bulk_stages > 0):
            raise ValueError(f"bulk_stages > 0 needs arch 90 and arch 90 needs bulk_stages > 0 (bulk copies are "
                             f"sm90's; the register-ring kernels build as arch 75 or 80), got arch {self.arch!r} and "
                             f"bulk_stages {self.bulk_stages!r}")
        if self.bulk_stages and (not self.stream or self.bulk_stages not in (2, 3, 4, 6, 8)):
            raise ValueError(f"bulk_stages must be 2, 3, 4, 6 or 8 and needs stream=True, got {self.bulk_stages!r} "
                             f"with stream={self.stream!r}")
        if self.bulk_stages and self.bulk_stage_bytes * self.bulk_stages > self.BULK_SMEM_LIMIT:
            raise ValueError(f"bulk_stages {self.bulk_stages} x {self.bulk_stage_bytes} bytes a stage exceeds "
                             f"{self.BULK_SMEM_LIMIT} bytes of shared memory")
        if self.stream and (self.m_tiles != 1 or self.n_tiles % 2):
            raise ValueError(f"stream needs m_tiles 1 and an even n_tiles (16-column MMA tiles), got m_tiles "
                             f"{self.m_tiles!r} and n_tiles {self.n_tiles!r}")
        if self.min_warps_per_sm not in (0, 8, 12, 16, 24):
            raise ValueError(f"min_warps_per_sm must be 0, 8, 12, 16 or 24, got {self.min_warps_per_sm!r}")
        if self.prefetch not in (1, 2, 3):
            raise ValueError(f"prefetch must be 1, 2 or 3, got {self.prefetch!r}")
        if self.rows8 and self.m_tiles != 1:
            raise ValueError("rows8 needs m_tiles 1")
        if self.m_tiles not in (1, 2, 4):
            raise ValueError(f"m_tiles must be 1, 2 or 4, got {self.m_tiles!r}")
        if self.n_tiles not in (1, 2, 4, 8):
            raise ValueError(f"n_tiles must be 1, 2, 4 or 8, got {self.n_tiles!r}")
        if self.warps_k not in (1, 2, 4, 8):
            raise ValueError(f"warps_k must be 1, 2, 4 or 8, got {self.warps_k!r}")
        # Converted codes of every column tile plus the accumulators: beyond this the kernel spills.
        if self.m_tiles * self.n_tiles > 8:
            raise ValueError(f"m_tiles * n_tiles must be at most 8 (registers), got {self.m_tiles} * {self.n_tiles}")

    @property
    def bulk_stage_bytes(self) -> int:
        """Bytes of one bulk stage: a 128-row block of every column of the CTA for each consumer warp."""
        return self.warps_k * 8 * self.n_tiles * 128 * self.bits // 8

    @property
    def programmatic_launch(self) -> bool:
        """The decode variant waits for the stream's previous kernel itself (griddepcontrol.wait before
        any memory access, in builds for sm90 and later), so the runtime may launch it with
        programmatic stream serialization: its CTAs start while that kernel's last ones finish."""
        return self.stream

    @property
    def tile(self) -> tuple:
        """(rows, columns) of a CTA's output: the unit a split-K launch's partial buffer is sized by
        (qgemm.fpaintb.StreamKBuffers; only the stream variant splits K over CTAs)."""
        return (8 if self.rows8 else 16 * self.m_tiles), 8 * self.n_tiles

    @property
    def name(self) -> str:
        return (f"qgemm_fpaintb_gemv_sm{self.arch}_{self.act}_int{self.bits}"
                f"_m{16 * self.m_tiles}_n{8 * self.n_tiles}_wk{self.warps_k}"
                f"{f'_o{self.min_warps_per_sm}' if self.min_warps_per_sm else ''}"
                f"{f'_p{self.prefetch}' if self.prefetch != 1 else ''}{'_r8' if self.rows8 else ''}"
                f"{f'_b{self.bulk_stages}' if self.bulk_stages else ''}{'_s' if self.stream else ''}")


@dataclass(frozen=True)
class FpAIntBGemmSpec(_FpAIntBSpec):
    """FP16/BF16 activations x INT4/INT8 weights, tiled: qgemm's own CUTLASS 2.x-style threadblock
    MMA (templates/include/qgemm/fpaintb/gemm.h). Each K tile of x, of the packed codes and of its
    scales and zeros goes to shared memory (cp.async multistage on arch 80, a two-stage register
    pipeline on arch 75); warps read x with ldmatrix and the codes as 32-bit B fragments, convert
    them after the shared-memory load and feed m16n8k16 MMAs with FP32 accumulation. At run time the
    (output tile, K tile) iterations may be spread over a fixed number of CTAs (stream-K; the last CTA
    to finish a shared tile adds the partial sums in CTA order).

    `tile` is the CTA's (M, N, K), `warp` each warp's (M, N); warps split the tile in M and N."""

    family: ClassVar[str] = "fpaintb_gemm"
    template: ClassVar[str] = "fpaintb_gemm.cu.j2"
    SLOTS: ClassVar[Slots] = FPAINTB_SLOTS
    TILE_M: ClassVar[tuple] = (16, 32, 64, 128, 256)
    TILE_N: ClassVar[tuple] = (64, 128, 256)
    TILE_K: ClassVar[tuple] = (64, 128, 256)
    # Shared memory a CTA may ask for: Turing's 64 KB; on later GPUs the sm_86/sm_89 opt-in limit
    # (99 KB), so every sm80-build kernel runs on every sm_8x GPU.
    SMEM_LIMIT: ClassVar[dict] = {75: 64 * 1024, 80: 99 * 1024}
    B_ROW_PAD: ClassVar[int] = 16  # bytes after each column group's codes: conflict-free B fragment loads

    act: str
    bits: int
    tile: tuple
    warp: tuple
    stages: int
    arch: int = 80

    def __post_init__(self):
        self._check_types()
        self._as_ints("tile", "warp")
        tile, warp = self.tile, self.warp
        if len(tile) != 3 or len(warp) != 2:
            raise ValueError(f"tile is (M, N, K) and warp is (M, N), got tile={self.tile!r} warp={self.warp!r}")
        for what, value, allowed in (("tile M", tile[0], self.TILE_M), ("tile N", tile[1], self.TILE_N),
                                     ("tile K", tile[2], self.TILE_K)):
            if value not in allowed:
                raise ValueError(f"{what} must be one of {allowed}, got {value}")
        if warp[0] % 16 or warp[1] % 8 or tile[0] % warp[0] or tile[1] % warp[1]:
            raise ValueError(f"warp {warp} must be a multiple of (16, 8) (one MMA) dividing tile {tile[:2]}")
        if self.warps not in (1, 2, 4, 8):
            raise ValueError(f"tile {tile[:2]} / warp {warp} gives {self.warps} warps; 1, 2, 4 or 8 are allowed")
        # Beyond 64 FP32 accumulators per thread (a 64 x 32 warp tile) the x fragments, the
        # converted codes and the copy addresses no longer fit beside them: ptxas spills.
        if (warp[0] // 16) * (warp[1] // 8) * 4 > 64:
            raise ValueError(f"warp {warp} needs {(warp[0] // 16) * (warp[1] // 8) * 4} FP32 accumulators per "
                             f"thread; at most 64 (e.g. 64 x 32) fit beside the fragments without spilling")
        _check_stages_and_smem(self)

    @property
    def warps(self) -> int:
        return _warps(self.tile, self.warp)

    @property
    def smem_bytes(self) -> int:
        """Shared memory of all stages: x tile, codes (padded rows per column group), and the
        scale and zero rows a K tile can span (group size 32 at the least)."""
        tm, tn, tk = self.tile
        lay = fpaintb_layout.layout(self.bits)
        codes = (tn // lay.interleave) * (tk * lay.interleave * self.bits // 8 + self.B_ROW_PAD)
        groups = tk // 32
        act_bytes = 2
        return self.stages * (tm * tk * act_bytes + codes + groups * tn * act_bytes + groups * tn)

    @property
    def name(self) -> str:
        tm, tn, tk = self.tile
        return (f"qgemm_fpaintb_gemm_sm{self.arch}_{self.act}_int{self.bits}"
                f"_{tm}x{tn}x{tk}_w{self.warp[0]}x{self.warp[1]}_s{self.stages}")


@dataclass(frozen=True)
class FpAIntBDequantSpec(_FpAIntBSpec):
    """Packed INT4/INT8 weight -> FP16/BF16 [N, K] with the GEMM kernels' converters."""

    family: ClassVar[str] = "fpaintb_dequant"
    template: ClassVar[str] = "fpaintb_dequant.cu.j2"
    SLOTS: ClassVar[Slots] = FPAINTB_SLOTS

    act: str
    bits: int
    arch: int = 80

    def __post_init__(self):
        self._check_types()

    @property
    def name(self) -> str:
        return f"qgemm_fpaintb_dequant_sm{self.arch}_{self.act}_int{self.bits}"


@dataclass(frozen=True)
class FpAIntBSm90Spec(KernelSpec):
    """FP16/BF16 activations x INT4/INT8 weights on Sm90: CUTLASS 3.x's mixed-input collective
    (cutlass/gemm/collective/sm90_mma_tma_gmma_rs_warpspecialized_mixed_input.hpp): TMA loads of the
    activations, of the packed codes and of each group's scales and zero', the codes converted in
    registers by CUTLASS's shuffle converters into w = q * scale + zero' and fed to register-sourced
    WGMMAs (FP32 accumulation), warp-specialized producer and consumers, persistent (stream-K when
    asked), with an epilogue visitor tree for bias and a run-time activation.

    The collective needs the narrow operand K-major and in registers, which makes it WGMMA's A: the
    kernel computes out^T = W^T x^T, its M over the weight's N (output channels) and its N over the
    tokens, so `tile` is (weight rows, tokens): 128 rows for the cooperative schedule (two consumer
    warp groups of 64), 64 for ping-pong; a narrow token tile serves a small batch. Its D is
    column-major [N, M], which is out [M, N] row-major. The weight is
    cutlass_gen/families/fpaintb_layout.py's Sm90WeightLayout.
    """

    family: ClassVar[str] = "fpaintb_gemm_sm90"
    template: ClassVar[str] = "fpaintb_gemm_sm90.cu.j2"
    SLOTS: ClassVar[Slots] = Slots(ptr=FPAINTB_PTR[:6], ld=("ld_x", None, "ld_out"),
                                 ext=("group_size", "activation", "raster", "swizzle", "splits", "decomposition"))
    SCHEDULES: ClassVar[tuple] = ("cooperative", "pingpong")
    SCHEDULERS: ClassVar[tuple] = ("persistent", "streamk")
    TILE_N: ClassVar[tuple] = (16, 32, 64, 128, 256)
    TILE_K: ClassVar[int] = 64  # the smallest K tile: 128 bytes of 16-bit activations, the 128-byte swizzle
    TILE_KS: ClassVar[tuple] = (64, 128)
    # Thread block clusters along the weight rows (the kernel's M): the cluster's CTAs share one token
    # tile, which TMA multicasts to all of them, so each activation byte leaves L2 once per cluster.
    CLUSTERS: ClassVar[tuple] = ((1, 1), (2, 1), (4, 1))
    # The consumer loop: CUTLASS's own ("cutlass": each k-block converted between two WGMMAs) or qgemm's
    # ("ahead": templates/include/qgemm/fpaintb/sm90_mainloop.hpp, a whole K tile converted while the
    # previous tile's WGMMAs run).
    MAINLOOPS: ClassVar[tuple] = ("cutlass", "ahead")

    act: str
    bits: int
    tile: tuple
    schedule: str = "cooperative"
    scheduler: str = "persistent"
    cluster: tuple = (1, 1)
    # zeros: CUTLASS's scale-with-zero mode, w = q * scale + zero' (every weight). False: its scale-only
    # mode, w = q * scale, for symmetric weights (zero' = 0): no zero' tile through TMA and shared
    # memory, no zero' fragment in registers and one FP op less per converted pair.
    zeros: bool = True
    # K per pipeline stage: 128 halves the per-stage barrier waits and scale loads and lets the mainloop
    # keep up to 7 WGMMAs in flight (CUTLASS's K_WAIT_MAX), for group sizes that are multiples of 128.
    tile_k: int = 64
    mainloop: str = "cutlass"
    # Threadblocks resident on one SM. 2 doubles the warps each scheduler can issue from, for the narrow
    # token tiles whose consumer loop waits on fixed-latency dependencies (ncu at M = 16: 0.59 issued
    # instructions per scheduler cycle with one CTA). It caps the CTA at 80 launch registers per thread
    # (24 for the producer warp group and 104 for each consumer after setmaxnreg, instead of CUTLASS's
    # 40 / 232) and at half the SM's shared memory, and the persistent grid holds two CTAs per SM.
    ctas_per_sm: int = 1
    arch: int = 90

    # Widest token tile under 104 consumer registers: a 64 x 32 warp-group tile holds 16 FP32
    # accumulators per thread beside a 128-deep K tile's converted weight fragments.
    CTAS_PER_SM_MAX_TILE_N: ClassVar[int] = 32

    def __post_init__(self):
        self._as_ints("tile", "cluster")
        if not isinstance(self.zeros, bool):
            raise TypeError(f"zeros must be a bool, got {type(self.zeros).__name__}")
        tile = self.tile
        self._require_sm90()
        if self.act not in ACT_TYPES:
            raise ValueError(f"act must be one of {ACT_TYPES}, got {self.act!r}")
        if self.bits not in fpaintb_layout.BITS:
            raise ValueError(f"bits must be one of {fpaintb_layout.BITS}, got {self.bits!r}")
        if len(tile) != 2:
            raise ValueError(f"tile is a (weight rows, tokens) pair, got {self.tile!r}")
        for what, value, allowed in (("schedule", self.schedule, self.SCHEDULES),
                                     ("scheduler", self.scheduler, self.SCHEDULERS), ("tile N", tile[1], self.TILE_N),
                                     ("cluster", self.cluster, self.CLUSTERS), ("tile_k", self.tile_k, self.TILE_KS),
                                     ("mainloop", self.mainloop, self.MAINLOOPS)):
            if value not in allowed:
                raise ValueError(f"{what} must be one of {allowed}, got {value!r}")
        rows = {"cooperative": 128, "pingpong": 64}[self.schedule]
        if tile[0] != rows:
            raise ValueError(f"tile M (weight rows) must be {rows} with the {self.schedule} schedule: 64 rows per "
                             f"consumer warp group, got {tile[0]}")
        # Each consumer thread holds tile N / 2 FP32 accumulators per 64 rows beside the converted
        # weight fragments; past 128 (a 64 x 256 warp-group tile) the register-sourced mainloop spills.
        if self.schedule == "pingpong" and tile[1] > 128:
            raise ValueError(f"tile N must be at most 128 with the pingpong schedule (registers), got {tile[1]}")
        if self.schedule == "pingpong" and self.scheduler == "streamk":
            raise ValueError("the pingpong schedule has no stream-K scheduler in CUTLASS; use cooperative")
        if self.ctas_per_sm not in (1, 2):
            raise ValueError(f"ctas_per_sm must be 1 or 2, got {self.ctas_per_sm!r}")
        if self.ctas_per_sm == 2 and (self.schedule != "cooperative" or self.cluster != (1, 1)
                                      or tile[1] > self.CTAS_PER_SM_MAX_TILE_N):
            raise ValueError(f"ctas_per_sm 2 takes the cooperative schedule without a cluster and at most "
                             f"{self.CTAS_PER_SM_MAX_TILE_N} tokens per tile (104 registers per consumer thread), "
                             f"got {self.schedule}, cluster {self.cluster}, tile {tile}")

    @property
    def programmatic_launch(self) -> bool:
        """CUTLASS's Sm90 kernel waits for the previous kernel in its producer warps before any load
        (built with CUTLASS_GDC_ENABLED; the template says why the consumers need no wait)."""
        return True

    @property
    def bundle_key(self) -> str:
        """A two-CTA kernel changes the register split of every cooperative kernel in its translation
        unit (the setmaxnreg specializations in the template), so it shares one only with other two-CTA
        kernels, whose split is the same."""
        return self.template if self.ctas_per_sm == 1 else f"{self.template} ctas_per_sm={self.ctas_per_sm}"

    @property
    def act_ctype(self) -> str:
        return ctype(self.act)

    @property
    def layout(self) -> fpaintb_layout.Sm90WeightLayout:
        return fpaintb_layout.sm90_layout(self.bits)

    @staticmethod
    def supports_group_size(group_size: int, k: int, tile_k: int = TILE_K) -> bool:
        """The collective reads one scale row per K tile: groups of whole K tiles, or K itself."""
        return group_size == k or (group_size > 0 and group_size % tile_k == 0)

    def supports(self, k: int, group_size: int) -> bool:
        """Whether this kernel takes a weight of K rows in groups of group_size (K in whole K tiles)."""
        return k % self.tile_k == 0 and self.supports_group_size(group_size, k, self.tile_k)

    def template_context(self) -> dict:
        return {"layout": self.layout}

    @property
    def name(self) -> str:
        tm, tn = self.tile
        cm, cn = self.cluster
        return (f"qgemm_fpaintb_gemm_sm90_{self.act}_int{self.bits}_{tm}x{tn}x{self.tile_k}_c{cm}x{cn}"
                f"_{self.schedule}_{self.scheduler}{'' if self.zeros else '_scaleonly'}"
                f"{'' if self.mainloop == 'cutlass' else '_' + self.mainloop}"
                f"{'' if self.ctas_per_sm == 1 else f'_{self.ctas_per_sm}cta'}")


# --- catalog ---------------------------------------------------------------------------------

# FpA x IntB small-M kernel: the decode configuration qgemm/fpaintb/heuristics.py fpaintb_choice picks (up to
# 8 rows), for each activation type and weight width (Sm75: FP16 only). Larger M runs the tiled GEMM.
_FPAINTB_GEMV_CONFIGS = [dict(m_tiles=1, n_tiles=2, warps_k=8, min_warps_per_sm=16, rows8=True)]


def _fpaintb_arch(target_sm: int) -> tuple[int, tuple]:
    return (75, ("f16",)) if target_sm == 75 else (80, ("f16", "bf16"))


# The decode variant (FpAIntBGemvSpec stream=True, issue 16), sm80 and later: the configurations
# qgemm/fpaintb/heuristics.py FPAINTB_STREAM and FPAINTB_STREAM_WIDE pick, plus alternatives for
# benchmarks/bench_fpaintb.py --decode to time against them (fewer blocks in flight; 16-token CTAs).
_FPAINTB_STREAM_CONFIGS = {
    4: [dict(n_tiles=2, warps_k=8, prefetch=2, min_warps_per_sm=16, rows8=True),
        dict(n_tiles=2, warps_k=4, min_warps_per_sm=12),
        dict(n_tiles=2, warps_k=8, min_warps_per_sm=16, rows8=True),
        dict(n_tiles=4, warps_k=4, rows8=True)],
    8: [dict(n_tiles=2, warps_k=8, min_warps_per_sm=16, rows8=True),
        dict(n_tiles=2, warps_k=4, min_warps_per_sm=12),
        dict(n_tiles=4, warps_k=4, rows8=True)],
}


# 16-token CTAs for M = 9 ... 16, wider than the catalog's (more columns share each lane's activation
# registers, which the 16-column CTA spends twice over at 16 tokens): for bench_fpaintb.py --decode and
# benchmarks/diag_decode16.py only (qgemm/fpaintb/heuristics.py has what they measured).
_FPAINTB_STREAM_SWEEP_CONFIGS = {
    4: [dict(n_tiles=4, warps_k=4), dict(n_tiles=8, warps_k=4), dict(n_tiles=4, warps_k=8),
        dict(n_tiles=4, warps_k=4, prefetch=2)],
    8: [],
}


# The decode variant with its codes through a shared-memory ring of bulk copies (bulk_stages, arch 90),
# sm90 only: for bench_fpaintb.py --decode to time against the register ring (8-token CTAs of 16 to 64
# columns, 2 to 8 stages, one capped at three CTAs per SM; 16-token CTAs).
_FPAINTB_STREAM_BULK_SWEEP_CONFIGS = {
    4: [dict(n_tiles=4, warps_k=4, rows8=True, bulk_stages=4),
        dict(n_tiles=4, warps_k=4, rows8=True, bulk_stages=8),
        dict(n_tiles=4, warps_k=4, rows8=True, bulk_stages=4, min_warps_per_sm=12),
        dict(n_tiles=2, warps_k=8, rows8=True, bulk_stages=4),
        dict(n_tiles=4, warps_k=8, rows8=True, bulk_stages=3),
        dict(n_tiles=8, warps_k=4, rows8=True, bulk_stages=4),
        dict(n_tiles=4, warps_k=4, bulk_stages=4),
        dict(n_tiles=2, warps_k=4, bulk_stages=6)],
    8: [dict(n_tiles=2, warps_k=8, rows8=True, bulk_stages=3),
        dict(n_tiles=2, warps_k=4, rows8=True, bulk_stages=6),
        dict(n_tiles=4, warps_k=4, rows8=True, bulk_stages=3),
        dict(n_tiles=2, warps_k=4, bulk_stages=4)],
}


def fpaintb_stream_configs(bits: int, sweep: bool = False, target_sm: int = 80) -> list[dict]:
    """The decode variant's catalog configurations (with sweep, also the benchmark-only ones, and for
    target_sm 90 the bulk-copy ones, which carry arch=90)."""
    configs = _FPAINTB_STREAM_CONFIGS[bits] + (_FPAINTB_STREAM_SWEEP_CONFIGS[bits] if sweep else [])
    if sweep and target_sm >= 90:
        configs = configs + [dict(c, arch=90) for c in _FPAINTB_STREAM_BULK_SWEEP_CONFIGS[bits]]
    return [dict(c, stream=True) for c in configs]


def _fpaintb_gemv(target_sm: int) -> list[KernelSpec]:
    arch, acts = _fpaintb_arch(target_sm)
    specs = [FpAIntBGemvSpec(act, bits, arch=arch, **config)
             for act in acts for bits in (4, 8) for config in _FPAINTB_GEMV_CONFIGS]
    if arch >= 80:
        specs += [FpAIntBGemvSpec(act, bits, arch=arch, **config)
                  for act in acts for bits in (4, 8) for config in fpaintb_stream_configs(bits)]
    return specs


# FpA x IntB tiled GEMM: the (tile, warp, stages) qgemm/fpaintb/heuristics.py fpaintb_choice picks, per
# weight width: 16-row tiles for decode batches, 32 or 64 rows up to 64, 128 rows up to 512 (INT4
# 128 x 64 with four warps, INT8 128 x 128 with eight). Turing: the same shapes in two stages,
# within its 64 KB of shared memory.
_FPAINTB_GEMM_CONFIGS = {
    4: [((16, 128, 128), (16, 32), 4), ((32, 128, 128), (32, 32), 3), ((128, 64, 64), (64, 32), 4)],
    8: [((16, 64, 128), (16, 16), 4), ((64, 128, 64), (32, 64), 4), ((128, 128, 64), (64, 32), 3)],
}


def fpaintb_gemm_configs(bits: int, arch: int) -> list[tuple]:
    """(tile, warp, stages) of the catalog's tiled GEMMs for a weight width and arch."""
    return [(tile, warp, 2 if arch == 75 else stages) for tile, warp, stages in _FPAINTB_GEMM_CONFIGS[bits]]


def _fpaintb_gemm(target_sm: int) -> list[KernelSpec]:
    arch, acts = _fpaintb_arch(target_sm)
    return [FpAIntBGemmSpec(act, bits, tile, warp, stages, arch)
            for act in acts for bits in (4, 8) for tile, warp, stages in fpaintb_gemm_configs(bits, arch)]


def _fpaintb_dequant(target_sm: int) -> list[KernelSpec]:
    arch, acts = _fpaintb_arch(target_sm)
    return [FpAIntBDequantSpec(act, bits, arch) for act in acts for bits in (4, 8)]


# FpA x IntB on Sm90 (CUTLASS's mixed-input WGMMA collective; the weight is WGMMA's A, tokens on the
# kernel's N): what qgemm/fpaintb/heuristics.py fpaintb_sm90_choice picks, for FP16 and BF16 and INT4 and INT8.
# Each catalog tile comes in these forms (FpAIntBSm90Spec keywords): qgemm's consumer loop on 128-deep K
# tiles with zeros and scale-only, for weights whose K and group size are multiples of 128 (2-13% faster,
# heuristics.py FPAINTB_SM90_AHEAD), and CUTLASS's loop on 64-deep K tiles with zeros for the others (group
# 64, K an odd multiple of 64). Those are rare, so their kernel with zeros also runs symmetric weights
# (zero' = 0: it reads a zero per scale, about 3% more bytes than the INT4 g64 codes and scales alone)
# rather than the catalog carrying a scale-only form too: twelve kernels, about three minutes of CI build.
# FPAINTB_SM90_SWEEP_CONFIGS keeps the scale-only forms for benchmarks.
FPAINTB_SM90_AHEAD_VARIANTS = [dict(zeros=True, tile_k=128, mainloop="ahead"),
                               dict(zeros=False, tile_k=128, mainloop="ahead")]
FPAINTB_SM90_VARIANTS = [dict(zeros=True), *FPAINTB_SM90_AHEAD_VARIANTS]
# The 16-token tile also with two CTAs per SM (qgemm/fpaintb/heuristics.py FPAINTB_SM90_TWO_CTAS_STREAM_K_MIN_K:
# more output tiles than SMs). They share translation units only with each other (FpAIntBSm90Spec.bundle_key).
FPAINTB_SM90_TWO_CTA_VARIANTS = [dict(v, ctas_per_sm=2) for v in FPAINTB_SM90_AHEAD_VARIANTS]
# (tile (weight rows, tokens), schedule, scheduler, forms): 16-, 32-, 64- and 128-token stream-K tiles for
# batches up to 16, 32, 64 and FPAINTB_SM90_DEQUANT_MIN_M - 1 rows (the tile sweeps in heuristics.py). The
# 16-token tile comes only with qgemm's loop: below 17 rows the other weights keep the Sm80 kernels
# (heuristics.FPAINTB_SM90_NARROW_MAX_M). Every kernel costs ~25 s of CI build time in a bundle, so the
# catalog stays at these 52 (13 per activation type and width);
# FPAINTB_SM90_SWEEP_CONFIGS adds the other tiles, the persistent scheduler and the ping-pong schedule for
# benchmarks/bench_fpaintb.py --sweep (built on first use, or with `qgemm build` on a spec list), not in
# the CI build.
FPAINTB_SM90_CONFIGS = [
    ((128, 16), "cooperative", "streamk", FPAINTB_SM90_AHEAD_VARIANTS + FPAINTB_SM90_TWO_CTA_VARIANTS),
    ((128, 32), "cooperative", "streamk", FPAINTB_SM90_VARIANTS),
    ((128, 64), "cooperative", "streamk", FPAINTB_SM90_VARIANTS),
    ((128, 128), "cooperative", "streamk", FPAINTB_SM90_VARIANTS),
]
FPAINTB_SM90_SWEEP_CONFIGS = [
    dict(tile=(128, 16), scheduler="streamk"),
    # CUTLASS's loop scale-only (the catalog runs symmetric weights of group 64 on its form with zeros)
    dict(tile=(128, 32), scheduler="streamk", zeros=False),
    dict(tile=(128, 64), scheduler="streamk", zeros=False),
    dict(tile=(128, 128), scheduler="streamk", zeros=False),
    dict(tile=(128, 64), scheduler="persistent"),
    dict(tile=(128, 128), scheduler="persistent"),
    dict(tile=(128, 256), scheduler="persistent"),
    dict(tile=(128, 256), scheduler="streamk"),
    dict(tile=(64, 64), schedule="pingpong", scheduler="persistent"),
    dict(tile=(64, 128), schedule="pingpong", scheduler="persistent"),
    # Clusters along the weight rows (the token tile multicast to 2 or 4 CTAs). At a 128 x 128 tile a
    # CTA reads 4x more activation bytes (FP16) than code bytes (INT4), so sharing them looked like the
    # lever for M = 128-1024. Measured on an H100 (benchmarks/device_cluster.sh, 2026-11-27, the six
    # shapes, M 32-2048): within a few percent of the same tile without a cluster either way, no
    # consistent gain; ncu of the 128 x 128 kernel at M = 1024 (14336 x 21504) puts L2 at 65% of peak and
    # the tensor pipe at 74% of elapsed cycles, so L2 traffic is not what limits it. Not in the catalog.
    dict(tile=(128, 32), scheduler="streamk", cluster=(2, 1)),
    dict(tile=(128, 64), scheduler="streamk", cluster=(2, 1)),
    dict(tile=(128, 128), scheduler="streamk", cluster=(2, 1)),
    dict(tile=(128, 128), scheduler="streamk", cluster=(4, 1)),
    dict(tile=(128, 256), scheduler="streamk", cluster=(2, 1)),
    dict(tile=(128, 128), scheduler="persistent", cluster=(2, 1)),
    # 128-deep K tiles, and the 128 x 256 tile scale-only: fewer conversion and per-stage instructions
    # per WGMMA. ncu of the plan's 128 x 128 scale-only kernel at M = 1024 (14336 x 21504, H100): tensor
    # pipe 80% of active cycles, issue slots 44% busy, where cuBLAS's kernel has 97% and 18%. Measured
    # (benchmarks/device_tilek.sh, 2026-11-27, the six shapes, M = 128, 256, 1024) against the plan's
    # 128 x 128 scale-only kernel: 128-deep K tiles 0.99-1.03x geomean (0.92-1.09x per shape), 128 x 256
    # 0.47x at M = 128, 0.76x at 256, 0.93x at 1024 (0.80-1.10x): no consistent gain. Not in the catalog.
    dict(tile=(128, 128), scheduler="streamk", zeros=False, tile_k=128),
    dict(tile=(128, 128), scheduler="streamk", tile_k=128),
    dict(tile=(128, 256), scheduler="streamk", zeros=False),
    # qgemm's consumer loop (mainloop="ahead": a whole K tile converted while the previous tile's WGMMAs
    # run) on 64-deep K tiles (qgemm/fpaintb/heuristics.py FPAINTB_SM90_AHEAD: no gain without the
    # 128-deep tile), and on 128-deep 16- and 256-token tiles.
    dict(tile=(128, 128), scheduler="streamk", zeros=True, mainloop="ahead"),
    dict(tile=(128, 128), scheduler="streamk", zeros=False, mainloop="ahead"),
    dict(tile=(128, 256), scheduler="streamk", zeros=False, tile_k=128, mainloop="ahead"),
    # 256 tokens on 64-deep K tiles (the 128-deep 128 x 256 tile's 72 KB stages leave two in shared memory,
    # both held by the loop, so nothing is prefetched: 0.58x of 128 x 128 at M = 1024), and the persistent
    # scheduler under qgemm's loop. Measured on an H100 (benchmarks/device_tokens.sh, 2026-11-27, INT4 g128
    # scale-only, the six shapes, M = 256-4096) against the plan's 128 x 128 stream-K kernel: 128 x 256
    # slower on every shape and M (e.g. 289 against 240 us at M = 256, 14336 x 21504; 0.70-0.85x at
    # K = 4096); persistent 128 x 128 faster on a few short-K rows at M = 256 (54.2 against 56.5 us,
    # 4096 x 12288) and up to 27% slower elsewhere (58.3 against 45.7, 11008 x 4096). Neither adopted.
    dict(tile=(128, 256), scheduler="streamk", zeros=False, mainloop="ahead"),
    dict(tile=(128, 128), scheduler="persistent", zeros=False, tile_k=128, mainloop="ahead"),
    # Two CTAs per SM on the 32-token tile (the 16-token one is in the catalog): at most 2% faster at M = 24-32
    # (4096 x 28672), slower elsewhere (heuristics.py FPAINTB_SM90_TWO_CTAS_STREAM_K_MIN_K has the measurements).
    dict(tile=(128, 32), scheduler="streamk", zeros=False, tile_k=128, mainloop="ahead", ctas_per_sm=2),
]


def fpaintb_sm90_specs(act: str, bits: int, sweep: bool = False) -> list[FpAIntBSm90Spec]:
    """The catalog's Sm90 FpA x IntB kernels for one activation type and weight width: each tile in
    its FPAINTB_SM90_CONFIGS forms (zero points or scale-only, CUTLASS's loop on 64-deep K tiles or
    qgemm's on 128-deep ones), and with sweep also the benchmark-only configurations."""
    specs = [FpAIntBSm90Spec(act, bits, tile, schedule, scheduler, **variant)
             for tile, schedule, scheduler, variants in FPAINTB_SM90_CONFIGS for variant in variants]
    if sweep:
        specs += [FpAIntBSm90Spec(act, bits, **config) for config in FPAINTB_SM90_SWEEP_CONFIGS]
    return specs


def _fpaintb_gemm_sm90(target_sm: int) -> list[KernelSpec]:
    if target_sm < 90:
        return []
    return [spec for act in ("f16", "bf16") for bits in (4, 8) for spec in fpaintb_sm90_specs(act, bits)]


CATALOGS = {
    FpAIntBGemvSpec.family: _fpaintb_gemv,
    FpAIntBGemmSpec.family: _fpaintb_gemm,
    FpAIntBDequantSpec.family: _fpaintb_dequant,
    FpAIntBSm90Spec.family: _fpaintb_gemm_sm90,
}
