"""W8A8 kernels: the per-K-block GEMMs (the chained reference path, the Sm90 promotion kernels, the
Sm80/Sm75 promote kernels) and the activation quantizer; their specs and their catalog per SM."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..spec import Slots, KernelSpec, _check_int8_tensorop, _check_stages_and_smem, _shape, _warps


# The W8A8 GEMMs' operand slots: one layout for the three GEMM families, so that a plan fills one
# problem whichever kernel it launches; ext differs per family.
W8A8_PTR = ("x", "w", "sx", "ox", "sum_x", "sw", "ow", "sum_w", "bias", "partial", "out", "v")
W8A8_LD = ("ld_x", "ld_w", "ld_partial", "ld_out")
W8A8_SCALAR = ("clamp_lo", "clamp_hi")


@dataclass(frozen=True)
class W8A8GemmSpec(KernelSpec):
    """int8 x int8 -> int32 TensorOp GEMM, one K-block per threadblock, dequant epilogue.

    arch 75 uses the Turing 8x8x16 int8 MMA with a two-stage mainloop; arch 80 the
    Ampere 16x8x32 MMA with a cp.async multistage mainloop (tile K of 64, so block
    sizes of 64 and up).
    """

    family: ClassVar[str] = "w8a8_gemm"
    template: ClassVar[str] = "w8a8_gemm.cu.j2"
    SLOTS: ClassVar[Slots] = Slots(ptr=W8A8_PTR, ld=W8A8_LD, ext=("block_size", "block_begin", "slices"), scalar=W8A8_SCALAR)
    INSTRUCTIONS: ClassVar[dict] = {75: (8, 8, 16), 80: (16, 8, 32)}
    TILE_K: ClassVar[dict] = {75: (32, 64), 80: (64,)}
    OUTPUTS: ClassVar[tuple] = ("f32", "f16")

    arch: int
    tile: tuple
    warp: tuple
    stages: int
    output: str
    swizzle: int = 1

    def __post_init__(self):
        if self.arch not in self.INSTRUCTIONS:
            raise ValueError(f"arch must be one of {sorted(self.INSTRUCTIONS)} for {self.family}, got {self.arch!r}")
        object.__setattr__(self, "tile", _shape(self.tile, "tile"))
        object.__setattr__(self, "warp", _shape(self.warp, "warp"))
        if self.output not in self.OUTPUTS:
            raise ValueError(f"output must be one of {self.OUTPUTS}, got {self.output!r}")
        if self.tile[2] not in self.TILE_K[self.arch]:
            raise ValueError(f"tile K must be one of {self.TILE_K[self.arch]} on sm{self.arch}, got {self.tile[2]}")
        _check_int8_tensorop(self)
        if self.swizzle not in (1, 2, 4, 8):
            raise ValueError(f"swizzle must be 1, 2, 4 or 8, got {self.swizzle}")

    @property
    def instruction(self) -> tuple[int, int, int]:
        return self.INSTRUCTIONS[self.arch]

    @property
    def name(self) -> str:
        t, w = self.tile, self.warp
        return (
            f"qgemm_w8a8_gemm_sm{self.arch}_s8s8_{self.output}"
            f"_{t[0]}x{t[1]}x{t[2]}_w{w[0]}x{w[1]}x{w[2]}_s{self.stages}_sw{self.swizzle}"
        )

    def supports_block_size(self, block_size: int) -> bool:
        return block_size % self.tile[2] == 0


@dataclass(frozen=True)
class W8A8Sm90Spec(KernelSpec):
    """W8A8 GEMM quantized per K-block on Sm90: TMA + int8 WGMMA over one K-block at a time, each
    block's int32 product promoted into FP32 registers with the block's scale (and, asymmetric,
    offset) vectors (templates/include/qgemm/w8a8/sm90_block_promote.hpp), a CUTLASS 3.x
    warp-specialized kernel with an epilogue of bias and activation.

    `tile` (M, N) is in the kernel's own M x N: with swap_ab the kernel computes out^T = W X^T, its
    M over the weight's rows and its N over the tokens (a decode batch on a narrow tile). Pipeline
    stages hold 128 K each: blocks of 32 and 64 are promoted 4 and 2 times per stage, a block of
    256 over two stages. `scheme`: "asymmetric" (MNN's per-block scale and offset of both operands)
    or "symmetric" (block-INT8: activation scales per (row, block), weight scales per (128 rows,
    block)). `epilogue`: "clamp" (bounds at run time: none, ReLU, ReLU6) or "silu". `schedule`:
    "cooperative" (two consumer warp groups on one 128- or 256-row tile, CUTLASS's kernel layer),
    "cooperative3" (three on one 192-row tile, qgemm's kernel layer sm90_gemm_three_consumers.hpp:
    persistent, no swap-AB, its own direct-store epilogue) or "pingpong" (one per 64-row tile).
    `alternate` (cooperative schedules): the warp groups take turns on the tensor cores, so that one
    promotes while the others' WGMMAs run (two warp groups: faster for the asymmetric scheme's heavier
    promotion, slower for the symmetric one: see sm90_block_promote.hpp; three: two issue while one
    promotes). `blocks_in_flight` (1, 2 or 4; blocks of 128 or
    256, tile M 64 or 128, no turns): a warp group issues that many blocks' WGMMAs before it waits for
    the first and promotes each as it completes, so that the latencies of a decode tile's short
    blocks overlap instead of chaining. `max_stages`: the pipeline's stages are as many as the shared
    memory beside the epilogue holds, at most this many. `operand`: "s8", or "e4m3" for an experiment
    outside every catalog: FP8 operands with the symmetric scheme's scales (DeepSeek's FP8 blockwise
    layout), the WGMMAs accumulating each block in FP32 temporaries (benchmarks/diag_fp8_promote.py).
    """

    family: ClassVar[str] = "w8a8_gemm_sm90"
    template: ClassVar[str] = "w8a8_gemm_sm90.cu.j2"
    SLOTS: ClassVar[Slots] = Slots(ptr=W8A8_PTR, ld=W8A8_LD, ext=("block_size", "raster", "swizzle", "splits"),
                                 scalar=W8A8_SCALAR)
    SCHEMES: ClassVar[tuple] = ("asymmetric", "symmetric")
    BLOCK_SIZES: ClassVar[tuple] = (32, 64, 128, 256)
    OUTPUTS: ClassVar[tuple] = ("f16", "bf16", "f32")
    EPILOGUES: ClassVar[dict] = {"clamp": "Clamp", "silu": "SiLu"}
    SCHEDULES: ClassVar[tuple] = ("cooperative", "cooperative3", "pingpong")
    SCHEDULERS: ClassVar[tuple] = ("persistent", "streamk")
    # "e4m3": an experiment, not in a catalog: FP8 blockwise operands (the FP8 family's data) on this collective.
    OPERANDS: ClassVar[tuple] = ("s8", "e4m3")
    CLUSTERS: ClassVar[tuple] = ((1, 1), (2, 1), (1, 2))
    WEIGHT_BLOCK_N: ClassVar[int] = 128  # symmetric weights: one scale per 128 rows
    TILE_K: ClassVar[int] = 128

    tile: tuple
    block_size: int
    scheme: str
    output: str
    schedule: str = "cooperative"
    scheduler: str = "persistent"
    swap_ab: bool = False
    epilogue: str = "clamp"
    cluster: tuple = (1, 1)
    alternate: bool = False
    blocks_in_flight: int = 1
    max_stages: int = 8
    operand: str = "s8"
    arch: int = 90

    def __post_init__(self):
        self._as_ints("tile", "cluster")
        tile = self.tile
        self._require_sm90()
        if len(tile) != 2:
            raise ValueError(f"tile is an (M, N) pair, got {self.tile!r}")
        for what, value, allowed in (("block_size", self.block_size, self.BLOCK_SIZES), ("scheme", self.scheme, self.SCHEMES),
                                     ("output", self.output, self.OUTPUTS), ("epilogue", self.epilogue, tuple(self.EPILOGUES)),
                                     ("schedule", self.schedule, self.SCHEDULES),
                                     ("scheduler", self.scheduler, self.SCHEDULERS), ("cluster", self.cluster, self.CLUSTERS)):
            if value not in allowed:
                raise ValueError(f"{what} must be one of {allowed}, got {value!r}")
        if not isinstance(self.swap_ab, bool):
            raise ValueError(f"swap_ab must be a bool, got {self.swap_ab!r}")
        if self.scheme == "symmetric" and self.block_size != 128:
            raise ValueError(f"the symmetric (block-INT8) scheme has 128 x 128 weight blocks: block_size 128, "
                             f"got {self.block_size}")
        tm, tn = tile
        # WGMMA M is 64 per warp group: cooperative splits the tile's rows over two warp groups
        # (cooperative3 over three), ping-pong gives each warp group a whole tile. Beside the FP32
        # accumulators each thread holds the int32 block temporaries of one 64-row slice: 128 x 128 per
        # tile (64 + 64 registers per thread over 256 threads) leaves room for the rest; 256 x 128 gives
        # each warp group two slices, run and promoted in turn (128 + 64 registers); wider tiles would
        # spill. Three consumer warp groups get 160 registers each (the producer 32).
        rows = {"cooperative": (128, 256), "cooperative3": (192,), "pingpong": (64,)}[self.schedule]
        if tm not in rows:
            raise ValueError(f"tile M must be one of {rows} with the {self.schedule} schedule, got {tm}")
        if tn % 8 or not 8 <= tn <= 128:
            raise ValueError(f"tile N must be a multiple of 8 in [8, 128] (WGMMA N; accumulators and block "
                             f"temporaries in registers), got {tn}")
        if not isinstance(self.alternate, bool):
            raise ValueError(f"alternate must be a bool, got {self.alternate!r}")
        if tm == 256 and (self.scheme != "symmetric" or self.swap_ab):
            raise ValueError(f"tile M 256 is a symmetric-scheme prefill tile without swap_ab (the asymmetric "
                             f"promotion's three vectors per side spill beside 128 + 64 registers per thread), got "
                             f"scheme={self.scheme!r}, swap_ab={self.swap_ab!r}")
        if self.alternate and self.schedule == "pingpong":
            raise ValueError(f"alternate (warp groups taking turns on one tile) needs a cooperative schedule, "
                             f"got {self.schedule!r}")
        if self.alternate and tm == 256:
            raise ValueError(f"alternate (turns per block) needs one 64-row slice per warp group (tile M 128 or 192), "
                             f"got {tm}")
        if self.schedule == "cooperative3":
            # qgemm's three-consumer kernel layer: the persistent scheduler only (CUTLASS's stream-K fix-up
            # is sized for its own kernels), no swap-AB (its epilogue adds a per-column bias), and the one
            # tile width measured.
            if self.scheduler != "persistent" or self.swap_ab or tn != 128:
                raise ValueError(f"the cooperative3 schedule (three consumer warp groups) is a 192 x 128 prefill tile "
                                 f"with the persistent scheduler and no swap_ab, got tile {tuple(tile)}, scheduler="
                                 f"{self.scheduler!r}, swap_ab={self.swap_ab!r}")
        if self.blocks_in_flight not in (1, 2, 4) or isinstance(self.blocks_in_flight, bool):
            raise ValueError(f"blocks_in_flight must be one of (1, 2, 4), got {self.blocks_in_flight!r}")
        if self.blocks_in_flight > 1 and (self.block_size < self.TILE_K or tm in (192, 256) or self.alternate):
            raise ValueError(f"blocks_in_flight > 1 needs one promotion per stage (block_size 128 or 256), one "
                             f"64-row slice per warp group (tile M 64 or 128; 192 leaves no registers for a second "
                             f"temporary) and no turns, got block_size="
                             f"{self.block_size}, tile M {tm}, alternate={self.alternate}")
        if isinstance(self.max_stages, bool) or not isinstance(self.max_stages, int) or not 2 <= self.max_stages <= 32:
            raise ValueError(f"max_stages must be an int in [2, 32], got {self.max_stages!r}")
        # A warp group holds blocks_in_flight stages at once, so fewer stages would deadlock. The tiles that
        # may keep blocks in flight (M 64 or 128, N <= 128) fit at least four stages of 128 K beside their
        # epilogue, so the cap alone decides.
        if self.max_stages < self.blocks_in_flight:
            raise ValueError(f"max_stages must be at least blocks_in_flight (a warp group holds that many stages "
                             f"at once), got max_stages={self.max_stages}, blocks_in_flight={self.blocks_in_flight}")
        if self.operand not in self.OPERANDS:
            raise ValueError(f"operand must be one of {self.OPERANDS}, got {self.operand!r}")
        if self.operand != "s8" and self.scheme != "symmetric":
            raise ValueError(f"FP8 operands (operand={self.operand!r}) take the symmetric scheme's scales (DeepSeek's "
                             f"FP8 blockwise layout), got scheme={self.scheme!r}")
        if self.schedule == "pingpong" and self.scheduler == "streamk":
            raise ValueError("the pingpong schedule has no stream-K scheduler in CUTLASS; use cooperative")

    @property
    def activation_functor(self) -> str:
        return self.EPILOGUES[self.epilogue]

    @property
    def programmatic_launch(self) -> bool:
        """CUTLASS's TMA warp and the collective's vector warp wait for the previous kernel before any
        load (built with CUTLASS_GDC_ENABLED; the template says why the consumers need no wait)."""
        return True

    @property
    def weight_scale_per_tile(self) -> bool:
        """Symmetric weights have one scale per 128 rows: a weight tile extent dividing 128 reads one."""
        weight_extent = self.tile[0] if self.swap_ab else self.tile[1]
        return self.scheme == "symmetric" and self.WEIGHT_BLOCK_N % weight_extent == 0

    @property
    def name(self) -> str:
        tm, tn = self.tile
        cm, cn = self.cluster
        scheme = "asym" if self.scheme == "asymmetric" else "sym"
        swap = "_swapab" if self.swap_ab else ""
        epilogue = "" if self.epilogue == "clamp" else f"_{self.epilogue}"
        alternate = "_alt" if self.alternate else ""
        in_flight = f"_inflight{self.blocks_in_flight}" if self.blocks_in_flight > 1 else ""
        in_flight += f"_s{self.max_stages}" if self.max_stages != 8 else ""
        return (f"qgemm_w8a8_gemm_sm90_{self.operand}{self.operand}_{self.output}_{scheme}_b{self.block_size}"
                f"_{tm}x{tn}x{self.TILE_K}_c{cm}x{cn}_{self.schedule}{alternate}{in_flight}_{self.scheduler}{swap}"
                f"{epilogue}")


@dataclass(frozen=True)
class ActQuantSpec(KernelSpec):
    """Per-row, per-K-block int8 quantization of activations (plain CUDA): asymmetric (scale,
    offset and the sum of q per block) or, with `symmetric`, one scale per block (block-INT8)."""

    family: ClassVar[str] = "act_quant"
    template: ClassVar[str] = "act_quant.cu.j2"
    SLOTS: ClassVar[Slots] = Slots(ptr=("x", "q", "scale", "offset", "sum"), ld=("ld_x", "ld_q"), ext=("block_size",))
    INPUTS: ClassVar[tuple] = ("f32", "f16", "bf16")

    input: str
    arch: int = 75
    symmetric: bool = False

    def __post_init__(self):
        if self.input not in self.INPUTS:
            raise ValueError(f"input must be one of {self.INPUTS}, got {self.input!r}")
        if self.arch != 75:
            raise ValueError(f"arch must be 75 for {self.family} (it runs on every later SM), got {self.arch!r}")
        if not isinstance(self.symmetric, bool):
            raise ValueError(f"symmetric must be a bool, got {self.symmetric!r}")

    @property
    def name(self) -> str:
        return f"qgemm_act_quant_sm{self.arch}_{self.input}_s8{'_sym' if self.symmetric else ''}"


@dataclass(frozen=True)
class W8A8PromoteSpec(KernelSpec):
    """W8A8 GEMM quantized per K-block on Sm80/Sm75 (and Sm90 as an sm80 build): qgemm's own 2.x-style
    threadblock MMA (templates/include/qgemm/w8a8/promote_gemm.h). Each warp runs s8 x s8 -> s32
    mma.sync (m16n8k32 on arch 80, m8n8k16 on arch 75) into int32 accumulators for the current
    K-block and, when the block ends, promotes them into FP32 registers with the block's scale (and,
    asymmetric, offset) vectors, staged in shared memory with the operands (cp.async multistage on
    arch 80, two stages through registers on arch 75). One CTA covers a tile's whole K, or a
    stream-K share of it split at block boundaries.

    `tile` is the CTA's (M, N, K), `warp` each warp's (M, N). The block size is a run-time value (32,
    64, 128 or 256): the tile K (32, 64, 128) and every block size are powers of two, so one divides
    the other (a block spans whole K tiles, or a K tile whole blocks), which is the kernel's rule.
    `scheme`: "asymmetric" (MNN's) or "symmetric" (block-INT8: the weight scale per 128 rows, so tile
    N must divide 128). The activation (clamp bounds or SiLU) is a run-time value too."""

    family: ClassVar[str] = "w8a8_gemm_promote"
    template: ClassVar[str] = "w8a8_gemm_promote.cu.j2"
    SLOTS: ClassVar[Slots] = Slots(ptr=W8A8_PTR, ld=W8A8_LD, ext=("block_size", "activation", "ctas", "raster_group"),
                                 scalar=W8A8_SCALAR)
    ARCHS: ClassVar[tuple] = (75, 80)
    SCHEMES: ClassVar[tuple] = ("asymmetric", "symmetric")
    OUTPUTS: ClassVar[tuple] = ("f16", "bf16", "f32")
    TILE_M: ClassVar[tuple] = (16, 32, 64, 128, 256)
    TILE_N: ClassVar[tuple] = (32, 64, 128)
    TILE_K: ClassVar[tuple] = (32, 64, 128)
    BLOCK_SIZES: ClassVar[tuple] = (32, 64, 128, 256)
    WEIGHT_BLOCK_N: ClassVar[int] = 128
    # Shared memory a CTA may ask for: Turing's 64 KB; on later GPUs the sm_86/sm_89 opt-in limit
    # (99 KB), so every sm80-build kernel runs on every sm_8x GPU.
    SMEM_LIMIT: ClassVar[dict] = {75: 64 * 1024, 80: 99 * 1024}
    # int32 block accumulators plus as many FP32 ones: beyond 64 + 64 registers per thread the
    # fragments, vectors and addresses no longer fit beside them (255 registers) and ptxas spills.
    MAX_ACCUMULATORS: ClassVar[int] = 64

    arch: int
    tile: tuple
    warp: tuple
    stages: int
    scheme: str
    output: str

    def __post_init__(self):
        self._as_ints("tile", "warp")
        tile, warp = self.tile, self.warp
        if self.arch not in self.ARCHS:
            raise ValueError(f"arch must be one of {self.ARCHS} for {self.family}, got {self.arch!r}")
        if len(tile) != 3 or len(warp) != 2:
            raise ValueError(f"tile is (M, N, K) and warp is (M, N), got tile={self.tile!r} warp={self.warp!r}")
        for what, value, allowed in (("tile M", tile[0], self.TILE_M), ("tile N", tile[1], self.TILE_N),
                                     ("tile K", tile[2], self.TILE_K), ("scheme", self.scheme, self.SCHEMES),
                                     ("output", self.output, self.OUTPUTS)):
            if value not in allowed:
                raise ValueError(f"{what} must be one of {allowed}, got {value!r}")
        if warp[0] % 16 or warp[1] % 16 or warp[0] <= 0 or warp[1] <= 0 or tile[0] % warp[0] or tile[1] % warp[1]:
            raise ValueError(f"warp {warp} must be a multiple of (16, 16) (one m16 MMA row tile, two n8 column "
                             f"tiles per ldmatrix) dividing tile {tile[:2]}")
        if self.warps not in (1, 2, 4, 8):
            raise ValueError(f"tile {tile[:2]} / warp {warp} gives {self.warps} warps; 1, 2, 4 or 8 are allowed")
        if self.accumulators > self.MAX_ACCUMULATORS:
            raise ValueError(f"warp {warp} needs {self.accumulators} int32 and as many FP32 accumulators per thread; "
                             f"at most {self.MAX_ACCUMULATORS} of each (e.g. 64 x 32) fit without spilling")
        if 32 * self.warps % (tile[2] // 16):
            raise ValueError(f"tile K {tile[2]} needs {tile[2] // 16} threads per row copy, more than {32 * self.warps}")
        if self.scheme == "symmetric" and self.WEIGHT_BLOCK_N % tile[1]:
            raise ValueError(f"the symmetric scheme has one weight scale per {self.WEIGHT_BLOCK_N} rows: tile N must "
                             f"divide it, got {tile[1]}")
        _check_stages_and_smem(self)

    @property
    def warps(self) -> int:
        return _warps(self.tile, self.warp)

    @property
    def accumulators(self) -> int:
        """int32 accumulators per thread (and as many FP32 ones)."""
        return (self.warp[0] // 16) * (self.warp[1] // 8) * 4

    @property
    def smem_bytes(self) -> int:
        """Shared memory of all stages (promote_gemm.h's kSmemBytes): the x and weight tiles, and the
        vectors of the K-blocks that may end in a K tile (tile K / 32 of them, blocks of 32)."""
        tm, tn, tk = self.tile
        vec_blocks = tk // 32
        vectors = 3 if self.scheme == "asymmetric" else 1
        row_vecs = vec_blocks * vectors * tm * 4
        col_vecs = vec_blocks * vectors * (tn if self.scheme == "asymmetric" else 4) * 4
        return self.stages * (tm * tk + tn * tk + -(-row_vecs // 16) * 16 + col_vecs)

    def supports_block_size(self, block_size: int) -> bool:
        return block_size in self.BLOCK_SIZES

    @property
    def name(self) -> str:
        tm, tn, tk = self.tile
        scheme = "asym" if self.scheme == "asymmetric" else "sym"
        return (f"qgemm_w8a8_promote_sm{self.arch}_s8s8_{self.output}_{scheme}"
                f"_{tm}x{tn}x{tk}_w{self.warp[0]}x{self.warp[1]}_s{self.stages}")


# --- catalog ---------------------------------------------------------------------------------

# (tile, warp) pairs: a large tile for large M, a small one for parallelism at
# small M, and a 32-row tile for decode-sized M.
_W8A8_SM75_TILES = [
    ((128, 128, 32), (64, 64, 32)),
    ((64, 64, 32), (32, 32, 32)),
    ((32, 128, 32), (32, 64, 32)),
]
_W8A8_SM80_TILES = [
    ((128, 128, 64), (64, 64, 64), 3),
    ((64, 64, 64), (32, 32, 64), 4),
    ((32, 128, 64), (32, 32, 64), 4),
]


def _w8a8(target_sm: int) -> list[KernelSpec]:
    specs: list[KernelSpec] = []
    for output in W8A8GemmSpec.OUTPUTS:
        # Sm75 kernels stay in every catalog: they are the ones with a tile K of 32,
        # so they serve block size 32 on later SMs too.
        specs += [W8A8GemmSpec(75, tile, warp, 2, output) for tile, warp in _W8A8_SM75_TILES]
        if target_sm >= 80:
            specs += [W8A8GemmSpec(80, tile, warp, stages, output) for tile, warp, stages in _W8A8_SM80_TILES]
    return specs


# W8A8 on sm90 (each K-block's int32 product promoted into FP32 registers): what
# qgemm.w8a8.heuristics.w8a8_sm90_choice picks for the symmetric block-INT8 scheme (block 128, FP16 and
# BF16 outputs) and the asymmetric one (every block size, FP16 output): swapped narrow-token tiles
# for decode-sized M, the 128 x 128 cooperative kernel beyond (stream-K when the tiles do not fill
# the GPU). Other outputs and the SiLU epilogue are built on first use.
# (tile, swap_ab, scheduler); the schedule follows from the tile's rows (w8a8_sm90_schedule).
# Up to 64 tokens at block 128: 64-row swapped tiles on the pingpong schedule, each consumer warp
# group on its own weight tile (twice the tiles of the 128-row kernel, so twice the SMs streaming
# a weight of few tiles, and one warp group's promotion runs beside the other's WGMMAs).
_W8A8_SM90_PINGPONG = [((64, 16), True, "persistent"), ((64, 32), True, "persistent")]
# The symmetric scheme also has a 64-token one, for 33-64 rows where the 32-token tiles do not fit the
# SMs but one 64-token tile per weight tile does (8192 x 28672, 7168 x 2048: qgemm.w8a8.heuristics).
_W8A8_SM90_PINGPONG_SYMMETRIC = [((64, 64), True, "persistent")]
_W8A8_SM90_DECODE = [((128, 16), True, "persistent"), ((128, 16), True, "streamk"), ((128, 32), True, "persistent"),
                     ((128, 32), True, "streamk"), ((128, 64), True, "persistent")]
_W8A8_SM90_LARGE = [((128, 128), False, "persistent"), ((128, 128), False, "streamk")]
# The symmetric scheme also has the 256 x 128 tile (each warp group's two 64-row slices in turn), for
# outputs of at least a wave of such tiles, persistent or stream-K (qgemm.w8a8.heuristics.w8a8_sm90_choice).
_W8A8_SM90_PREFILL_SYMMETRIC = [((256, 128), False, "persistent"), ((256, 128), False, "streamk")]


def w8a8_sm90_configs(block_size: int, scheme: str = "asymmetric") -> list[tuple]:
    """The (tile, swap_ab, scheduler) configurations the sm90 catalog holds for a block size and
    scheme (the heuristic chooses among these only, so a plan never builds a kernel on first use for
    its default choice): all of them for block 128 (the 64 x 64 pingpong and the 256 x 128 tiles for
    the symmetric scheme only), the narrow swapped and the 128 x 128 persistent kernel for the other
    block sizes."""
    if block_size == 128:
        if scheme == "symmetric":
            pingpong, prefill = _W8A8_SM90_PINGPONG + _W8A8_SM90_PINGPONG_SYMMETRIC, _W8A8_SM90_PREFILL_SYMMETRIC
        else:
            pingpong, prefill = _W8A8_SM90_PINGPONG, []
        return pingpong + _W8A8_SM90_DECODE + _W8A8_SM90_LARGE + prefill
    return [_W8A8_SM90_DECODE[0], _W8A8_SM90_LARGE[0]]


def w8a8_sm90_schedule(tile: tuple) -> str:
    """The schedule of a catalog configuration: pingpong for 64-row tiles (one warp group per tile),
    cooperative for 128 and 256 rows (both consumer warp groups on one tile), cooperative3 for 192 (three)."""
    return {64: "pingpong", 192: "cooperative3"}.get(tile[0], "cooperative")


def w8a8_sm90_alternate(scheme: str, block_size: int, tile: tuple, swap_ab: bool) -> bool:
    """Whether the kernel of a configuration has its warp groups take turns on the tensor cores
    (W8A8Sm90Spec.alternate): measured faster on the H100 for the asymmetric scheme at block 128 on
    the 128 x 128 tile (2-5% at M = 4096, benchmarks/README.md), slower for the symmetric one; block
    sizes 32, 64 and 256 were not measured."""
    return scheme == "asymmetric" and block_size == 128 and tuple(tile) == (128, 128) and not swap_ab


def w8a8_sm90_blocks_in_flight(block_size: int, tile: tuple, swap_ab: bool) -> int:
    """Blocks each warp group keeps in flight (W8A8Sm90Spec.blocks_in_flight) in a configuration's kernel:
    2 for the swapped 64-row pingpong tiles at block 128, measured 2-10% faster than one at a time on the
    H200 (64 x 16, 64 x 32 and 64 x 64 tokens, both schemes, 1-128 rows, the issue's six shapes; never
    slower beyond noise: benchmarks/README.md), where one warp group's short blocks chain; 1 elsewhere
    (4 in flight and deeper pipelines measured no better; the cooperative tiles were not measured)."""
    return 2 if block_size == 128 and tile[0] == 64 and swap_ab else 1


def _w8a8_sm90(target_sm: int) -> list[KernelSpec]:
    if target_sm < 90:
        return []

    def spec(config, block_size, scheme, output):
        tile, swap_ab, scheduler = config
        return W8A8Sm90Spec(tile, block_size, scheme, output, w8a8_sm90_schedule(tile), scheduler, swap_ab,
                            alternate=w8a8_sm90_alternate(scheme, block_size, tile, swap_ab),
                            blocks_in_flight=w8a8_sm90_blocks_in_flight(block_size, tile, swap_ab))

    specs = [spec(c, 128, "symmetric", output) for output in ("f16", "bf16")
             for c in w8a8_sm90_configs(128, "symmetric")]
    specs += [spec(c, 128, "asymmetric", "f16") for c in w8a8_sm90_configs(128, "asymmetric")]
    specs += [spec(c, block_size, "asymmetric", "f16") for block_size in (32, 64, 256)
              for c in w8a8_sm90_configs(block_size)]
    return specs


def _act_quant(target_sm: int) -> list[KernelSpec]:
    return [ActQuantSpec(dtype, symmetric=symmetric) for symmetric in (False, True) for dtype in ActQuantSpec.INPUTS]


# W8A8 per-K-block GEMM promoting each block's int32 product in registers, Sm80/Sm75
# (qgemm.w8a8.heuristics.w8a8_promote_choice picks): a 128 x 128 tile of eight 64 x 32 warps for large M,
# 64 x 128 of four 32 x 64 warps for middle M, and 16 x 128 of four 16 x 32 warps for decode-sized M
# (stream-K when the tiles do not fill the GPU), both schemes with FP16 output, and the symmetric
# (block-INT8) scheme's BF16 output at both ends. Turing (64 KB of shared memory, two stages): the
# large and decode tiles with FP16 output. Other outputs are built on first use. The sm90 catalog
# holds the sm80 kernels (built for sm_90a): what a plan runs on an H100 when the Sm90 kernels
# cannot take the output alignment, and the benchmark's "sm80 promote" column.
# (tile, warp, sm80 stages)
W8A8_PROMOTE_LARGE = ((128, 128, 64), (64, 32), 4)
W8A8_PROMOTE_MIDDLE = ((64, 128, 64), (32, 64), 4)
W8A8_PROMOTE_DECODE = ((16, 128, 64), (16, 32), 4)


def w8a8_promote_spec(config: tuple, arch: int, scheme: str, output: str) -> W8A8PromoteSpec:
    """The kernel of a (tile, warp, stages) configuration above for an arch (two stages on 75)."""
    tile, warp, stages = config
    return W8A8PromoteSpec(arch, tile, warp, 2 if arch == 75 else stages, scheme, output)


def _w8a8_promote(target_sm: int) -> list[KernelSpec]:
    if target_sm == 75:
        return [w8a8_promote_spec(c, 75, scheme, "f16") for scheme in ("symmetric", "asymmetric")
                for c in (W8A8_PROMOTE_LARGE, W8A8_PROMOTE_DECODE)]
    configs = [(c, scheme, "f16") for scheme in ("symmetric", "asymmetric")
               for c in (W8A8_PROMOTE_LARGE, W8A8_PROMOTE_MIDDLE, W8A8_PROMOTE_DECODE)]
    configs += [(c, "symmetric", "bf16") for c in (W8A8_PROMOTE_LARGE, W8A8_PROMOTE_DECODE)]
    return [w8a8_promote_spec(c, 80, scheme, output) for c, scheme, output in configs]


CATALOGS = {
    W8A8GemmSpec.family: _w8a8,
    W8A8Sm90Spec.family: _w8a8_sm90,
    ActQuantSpec.family: _act_quant,
    W8A8PromoteSpec.family: _w8a8_promote,
}


# --- the fused decode kernel -----------------------------------------------------------------------

# Its slots: the W8A8 GEMMs' operands (one problem layout for every W8A8 kernel), plus two optional
# debug dumps of the quantized x that tests compare with act_quant's output.
W8A8_GEMV_SLOTS = Slots(ptr=W8A8_PTR + ("dump_q", "dump_vec"), ld=W8A8_LD, ext=("block_size", "activation", "slice_blocks",
                                                                     "l2_prefetch"), scalar=W8A8_SCALAR)


@dataclass(frozen=True)
class W8A8GemvSpec(KernelSpec):
    """W8A8 decode kernel (M <= 16) fused with the activation quantization (templates/w8a8_gemv.cu.j2):
    each CTA quantizes the x rows of its K slice into shared memory (act_quant's arithmetic, bit for
    bit), streams its weight columns with 16-byte loads `depth` - 1 chunks of 64 K ahead, multiplies
    with mma.sync m16n8k32 s8 and promotes each K-block's int32 product into FP32 registers; split-K
    over CTAs with a deterministic last-CTA reduction. `warps` x `n_tiles` n8 tiles of columns per
    CTA; `input` is x's dtype. Block size (32..256), activation and the K slice are run-time values;
    a CTA's K slice holds at most `max_slice_k` K and `max_slice_blocks` blocks (shared memory)."""

    family: ClassVar[str] = "w8a8_gemv"
    template: ClassVar[str] = "w8a8_gemv.cu.j2"
    SLOTS: ClassVar[Slots] = W8A8_GEMV_SLOTS
    INPUTS: ClassVar[tuple] = ("f32", "f16", "bf16")
    OUTPUTS: ClassVar[tuple] = ("f16", "bf16", "f32")
    SCHEMES: ClassVar[tuple] = ("asymmetric", "symmetric")
    BLOCK_SIZES: ClassVar[tuple] = (32, 64, 128, 256)
    MAX_M: ClassVar[int] = 16

    input: str
    scheme: str
    output: str
    warps: int = 8
    n_tiles: int = 2
    depth: int = 3
    max_slice_k: int = 2048
    max_slice_blocks: int = 16
    min_ctas: int = 1
    cluster: int = 0
    arch: int = 80

    def __post_init__(self):
        if (self.cluster > 0) != (self.arch == 90):
            raise ValueError(f"cluster > 0 (split-K in a thread block cluster) needs arch 90, and arch 90 a cluster; "
                             f"got cluster={self.cluster!r}, arch={self.arch!r}")
        for what, value, allowed in (("min_ctas", self.min_ctas, (1, 2, 3, 4)), ("input", self.input, self.INPUTS),
                                     ("cluster", self.cluster, (0, 2, 4, 8)), ("scheme", self.scheme, self.SCHEMES),
                                     ("output", self.output, self.OUTPUTS), ("warps", self.warps, (2, 4, 8)),
                                     ("n_tiles", self.n_tiles, (1, 2, 4)), ("depth", self.depth, (2, 3, 4, 5)),
                                     ("max_slice_k", self.max_slice_k, (1024, 2048, 4096)),
                                     ("max_slice_blocks", self.max_slice_blocks, (8, 16, 32)),
                                     ("arch", self.arch, (80, 90))):
            if value not in allowed:
                raise ValueError(f"{what} must be one of {allowed} for {self.family}, got {value!r}")
        if self.smem_bytes > 227 * 1024:
            raise ValueError(f"{self.name} needs {self.smem_bytes} bytes of shared memory at its largest slice, more "
                             f"than the 227 KB an sm90 CTA may have")

    @property
    def tile_n(self) -> int:
        return 8 * self.n_tiles * self.warps

    def max_slice_blocks_for(self, block_size: int) -> int:
        """K-blocks one CTA can hold for this block size."""
        return min(self.max_slice_blocks, self.max_slice_k // block_size)

    def slice_smem_bytes(self, slice_blocks: int, block_size: int) -> int:
        """Dynamic shared memory of a CTA with this slice (the template's Smem::of)."""
        vecs = 3 if self.scheme == "asymmetric" else 1
        row_stride = -(-slice_blocks * block_size // 64) * 64 + 64
        col_floats = 3 * self.tile_n if self.scheme == "asymmetric" else self.tile_n // 4
        total = 16 * row_stride + slice_blocks * vecs * 16 * 4 + slice_blocks * col_floats * 4
        return max(total, 16 * self.tile_n * 4) if self.cluster else total

    @property
    def smem_bytes(self) -> int:
        """The most any slice takes (over the block sizes)."""
        return max(self.slice_smem_bytes(self.max_slice_blocks_for(bs), bs) for bs in self.BLOCK_SIZES)

    def supports_block_size(self, block_size: int) -> bool:
        return block_size in self.BLOCK_SIZES

    @property
    def programmatic_launch(self) -> bool:
        """The kernel waits for the stream's previous kernel itself (griddepcontrol.wait before any
        load, in builds for sm90 and later), so the runtime may launch it with programmatic stream
        serialization; before waiting it may prefetch its weight into L2 (W8A8GemvChoice.l2_prefetch)."""
        return True

    @property
    def name(self) -> str:
        scheme = "asym" if self.scheme == "asymmetric" else "sym"
        return (f"qgemm_w8a8_gemv_sm{self.arch}_{self.input}_s8_{self.output}_{scheme}"
                f"_w{self.warps}n{self.n_tiles}d{self.depth}c{self.min_ctas}_k{self.max_slice_k}b{self.max_slice_blocks}"
                + (f"_cl{self.cluster}" if self.cluster else ""))


# The decode kernel's catalog (sm80 and later): the variants qgemm/w8a8/heuristics.py
# W8A8_GEMV_VARIANTS names, both schemes, FP16 -> FP16 and BF16 -> BF16 (other input/output pairs
# are built on first use); sm90 adds the cluster split-K variants (8 CTAs, reduction through
# distributed shared memory).
W8A8_GEMV_CONFIGS = (dict(warps=8, n_tiles=2, depth=4, min_ctas=2), dict(warps=8, n_tiles=4, depth=2, min_ctas=2),
                     dict(warps=4, n_tiles=4, depth=3, min_ctas=3))
W8A8_GEMV_SM90_CONFIGS = (
    dict(warps=8, n_tiles=2, depth=4, min_ctas=2, cluster=8, arch=90, max_slice_k=4096, max_slice_blocks=32),
    dict(warps=8, n_tiles=4, depth=2, min_ctas=2, cluster=8, arch=90, max_slice_k=4096, max_slice_blocks=32))


def _w8a8_gemv(target_sm: int) -> list[KernelSpec]:
    if target_sm < 80:
        return []
    configs = W8A8_GEMV_CONFIGS + (W8A8_GEMV_SM90_CONFIGS if target_sm >= 90 else ())
    return [W8A8GemvSpec(dtype, scheme, dtype, **config) for scheme in W8A8GemvSpec.SCHEMES
            for dtype in ("f16", "bf16") for config in configs]


CATALOGS[W8A8GemvSpec.family] = _w8a8_gemv
