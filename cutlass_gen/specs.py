"""Kernel specs: one frozen dataclass per kernel family, validated on construction.

A spec is everything that changes the generated C++. Its `name` is stable and
self-describing (in the spirit of cutlass_library's procedural names), so a name
identifies a kernel across builds, manifests and profiles.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import ClassVar

from . import fpaintb_layout

# Target SMs the build driver compiles for (sm_90 means sm_90a).
SUPPORTED_TARGETS = (75, 80, 90)

# Element type names used in specs and kernel names -> CUTLASS C++ types.
CTYPES = {
    "f32": "float",
    "f16": "cutlass::half_t",
    "bf16": "cutlass::bfloat16_t",
    "e4m3": "cutlass::float_e4m3_t",
    "e5m2": "cutlass::float_e5m2_t",
}


class KernelSpec:
    """Base of all family specs (each a frozen dataclass)."""

    family: ClassVar[str]
    template: ClassVar[str]
    # Lowest CUTLASS ArchTag the kernel uses; a target SM must be at least this.
    arch: int

    @property
    def name(self) -> str:
        raise NotImplementedError

    def to_dict(self) -> dict:
        return {"family": self.family, **dataclasses.asdict(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def supports_target(self, target_sm: int) -> bool:
        return target_sm >= self.arch

    def template_context(self) -> dict:
        """Values the family's template reads besides the spec itself."""
        return {}


def _shape(value, what: str) -> tuple[int, int, int]:
    shape = tuple(int(v) for v in value)
    if len(shape) != 3 or any(v <= 0 for v in shape):
        raise ValueError(f"{what} must be three positive integers (M, N, K), got {value!r}")
    return shape


def _check_int8_tensorop(spec):
    """What the CUTLASS 2.x int8 TensorOp kernels (W8A8 GEMM, int8 conv) need of spec.tile, .warp,
    .instruction, .arch and .stages."""
    tile, warp = spec.tile, spec.warp
    if any(t % w for t, w in zip(tile, warp)) or warp[2] != tile[2]:
        raise ValueError(f"warp {warp} must divide tile {tile} in M and N and equal it in K")
    if any(w % i for w, i in zip(warp, spec.instruction)):
        raise ValueError(f"instruction {spec.instruction} must divide warp {warp} on sm{spec.arch}")
    warps = (tile[0] // warp[0]) * (tile[1] // warp[1])
    if warps not in (1, 2, 4, 8):
        raise ValueError(f"tile {tile} / warp {warp} gives {warps} warps; 1, 2, 4 or 8 are allowed")
    # CUTLASS's global->shared thread maps give every thread whole 16-byte vectors of the A and B
    # tiles (narrower accesses split a vector, they do not change the map); a tile too small for
    # the warps fails to compile.
    loads = 32 * warps * 16
    if (tile[0] * tile[2]) % loads or (tile[1] * tile[2]) % loads:
        raise ValueError(
            f"tile {tile} with {warps} warps: the A and B tiles ({tile[0]}x{tile[2]} and {tile[1]}x{tile[2]} int8) "
            f"must split into 16-byte vectors: one or more 16-byte loads per thread"
        )
    allowed_stages = (2,) if spec.arch == 75 else (3, 4, 5)
    if spec.stages not in allowed_stages:
        raise ValueError(f"stages must be one of {allowed_stages} on sm{spec.arch}, got {spec.stages}")


@dataclass(frozen=True)
class W8A8GemmSpec(KernelSpec):
    """int8 x int8 -> int32 TensorOp GEMM, one K-block per threadblock, dequant epilogue.

    arch 75 uses the Turing 8x8x16 int8 MMA with a two-stage mainloop; arch 80 the
    Ampere 16x8x32 MMA with a cp.async multistage mainloop (tile K of 64, so block
    sizes of 64 and up).
    """

    family: ClassVar[str] = "w8a8_gemm"
    template: ClassVar[str] = "w8a8_gemm.cu.j2"
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
    def output_ctype(self) -> str:
        return CTYPES[self.output]

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
    block)). `epilogue`: "clamp" (bounds at run time: none, ReLU, ReLU6) or "silu".
    """

    family: ClassVar[str] = "w8a8_gemm_sm90"
    template: ClassVar[str] = "w8a8_gemm_sm90.cu.j2"
    SCHEMES: ClassVar[tuple] = ("asymmetric", "symmetric")
    BLOCK_SIZES: ClassVar[tuple] = (32, 64, 128, 256)
    OUTPUTS: ClassVar[tuple] = ("f16", "bf16", "f32")
    EPILOGUES: ClassVar[dict] = {"clamp": "Clamp", "silu": "SiLu"}
    SCHEDULES: ClassVar[tuple] = ("cooperative", "pingpong")
    SCHEDULERS: ClassVar[tuple] = ("persistent", "streamk")
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
    arch: int = 90

    def __post_init__(self):
        tile = tuple(int(v) for v in self.tile)
        cluster = tuple(int(v) for v in self.cluster)
        object.__setattr__(self, "tile", tile)
        object.__setattr__(self, "cluster", cluster)
        if self.arch != 90:
            raise ValueError(f"arch must be 90 for {self.family} (wgmma and TMA are sm_90a), got {self.arch!r}")
        if len(tile) != 2:
            raise ValueError(f"tile is an (M, N) pair, got {self.tile!r}")
        for what, value, allowed in (("block_size", self.block_size, self.BLOCK_SIZES), ("scheme", self.scheme, self.SCHEMES),
                                     ("output", self.output, self.OUTPUTS), ("epilogue", self.epilogue, tuple(self.EPILOGUES)),
                                     ("schedule", self.schedule, self.SCHEDULES),
                                     ("scheduler", self.scheduler, self.SCHEDULERS), ("cluster", cluster, self.CLUSTERS)):
            if value not in allowed:
                raise ValueError(f"{what} must be one of {allowed}, got {value!r}")
        if not isinstance(self.swap_ab, bool):
            raise ValueError(f"swap_ab must be a bool, got {self.swap_ab!r}")
        if self.scheme == "symmetric" and self.block_size != 128:
            raise ValueError(f"the symmetric (block-INT8) scheme has 128 x 128 weight blocks: block_size 128, "
                             f"got {self.block_size}")
        tm, tn = tile
        # WGMMA M is 64 per warp group: cooperative splits the tile's rows over two warp groups,
        # ping-pong gives each warp group a whole tile. Beside the FP32 accumulators each thread
        # holds as many int32 block temporaries: 128 x 128 per tile (64 + 64 registers per thread
        # over 256 threads) leaves room for the rest; wider tiles would spill.
        rows = {"cooperative": (128,), "pingpong": (64,)}[self.schedule]
        if tm not in rows:
            raise ValueError(f"tile M must be one of {rows} with the {self.schedule} schedule, got {tm}")
        if tn % 8 or not 8 <= tn <= 128:
            raise ValueError(f"tile N must be a multiple of 8 in [8, 128] (WGMMA N; accumulators and block "
                             f"temporaries in registers), got {tn}")
        if self.schedule == "pingpong" and self.scheduler == "streamk":
            raise ValueError("the pingpong schedule has no stream-K scheduler in CUTLASS; use cooperative")

    @property
    def output_ctype(self) -> str:
        return CTYPES[self.output]

    @property
    def activation_functor(self) -> str:
        return self.EPILOGUES[self.epilogue]

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
        return (f"qgemm_w8a8_gemm_sm90_s8s8_{self.output}_{scheme}_b{self.block_size}"
                f"_{tm}x{tn}x{self.TILE_K}_c{cm}x{cn}_{self.schedule}_{self.scheduler}{swap}{epilogue}")


@dataclass(frozen=True)
class ActQuantSpec(KernelSpec):
    """Per-row, per-K-block int8 quantization of activations (plain CUDA): asymmetric (scale,
    offset and the sum of q per block) or, with `symmetric`, one scale per block (block-INT8)."""

    family: ClassVar[str] = "act_quant"
    template: ClassVar[str] = "act_quant.cu.j2"
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
    def input_ctype(self) -> str:
        return CTYPES[self.input]

    @property
    def name(self) -> str:
        return f"qgemm_act_quant_sm{self.arch}_{self.input}_s8{'_sym' if self.symmetric else ''}"


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
        tile = tuple(int(v) for v in self.tile)
        cluster = tuple(int(v) for v in self.cluster)
        object.__setattr__(self, "tile", tile)
        object.__setattr__(self, "cluster", cluster)
        if self.arch != 90:
            raise ValueError(f"arch must be 90 for {self.family} (wgmma and TMA are sm_90a), got {self.arch!r}")
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
    def output_ctype(self) -> str:
        return CTYPES[self.output]

    @property
    def act_ctype(self) -> str:
        return CTYPES[self.act]

    @property
    def weight_ctype(self) -> str:
        return CTYPES[self.weight]

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
    def input_ctype(self) -> str:
        return CTYPES[self.input]

    @property
    def output_ctype(self) -> str:
        return CTYPES[self.output]

    @property
    def name(self) -> str:
        return f"qgemm_fp8_act_quant_sm{self.arch}_{self.input}_{self.output}"


ACT_TYPES = ("f16", "bf16")


# What qgemm's own 2.x-style threadblock MMAs (FpAIntBGemmSpec, W8A8PromoteSpec) share: warps per
# CTA, and the pipeline depth and shared memory each architecture allows.
def _warps(tile: tuple, warp: tuple) -> int:
    return (tile[0] // warp[0]) * (tile[1] // warp[1])


def _check_stages_and_smem(spec) -> None:
    """sm75 runs two stages through registers, sm80 a cp.async pipeline 2-6 deep; all stages must
    fit the architecture's shared memory (spec.SMEM_LIMIT)."""
    allowed_stages = (2,) if spec.arch == 75 else (2, 3, 4, 5, 6)
    if spec.stages not in allowed_stages:
        raise ValueError(f"stages must be one of {allowed_stages} on sm{spec.arch}, got {spec.stages}")
    if spec.smem_bytes > spec.SMEM_LIMIT[spec.arch]:
        raise ValueError(f"tile {spec.tile} with {spec.stages} stages needs {spec.smem_bytes} bytes of shared memory; "
                         f"sm{spec.arch} kernels may use {spec.SMEM_LIMIT[spec.arch]}")


class _FpAIntBSpec(KernelSpec):
    """What the FpA x IntB specs share: activation and weight types, and the packed layout the
    templates read (cutlass_gen/fpaintb_layout.py)."""

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
        return CTYPES[self.act]

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
    n_tiles (16-column MMA tiles); rows8 makes it one 8-token MMA tile, else two (M up to 16 per CTA)."""

    family: ClassVar[str] = "fpaintb_gemv"
    template: ClassVar[str] = "fpaintb_gemv.cu.j2"

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

    def __post_init__(self):
        self._check_types()
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
                f"{'_s' if self.stream else ''}")


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
        tile = tuple(int(v) for v in self.tile)
        warp = tuple(int(v) for v in self.warp)
        object.__setattr__(self, "tile", tile)
        object.__setattr__(self, "warp", warp)
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
class FpAIntBConvSpec(FpAIntBGemmSpec):
    """FP16/BF16 NHWC activations x INT4/INT8 filter [Co, R, S, C] conv2d, as an implicit GEMM on
    the FpAIntBGemmSpec mainloop: x chunks are gathered per filter tap (zero in the padding) and the
    weights carry per-block float offsets, W = q * scale + offset (signed q), one hfma2 per pair.
    The offsets take one more shared-memory row per scale row."""

    family: ClassVar[str] = "fpaintb_conv"
    template: ClassVar[str] = "fpaintb_conv.cu.j2"

    @property
    def smem_bytes(self) -> int:
        tm, tn, tk = self.tile
        return super().smem_bytes + self.stages * (tk // 32) * tn * 2

    @property
    def name(self) -> str:
        tm, tn, tk = self.tile
        return (f"qgemm_fpaintb_conv_sm{self.arch}_{self.act}_int{self.bits}"
                f"_{tm}x{tn}x{tk}_w{self.warp[0]}x{self.warp[1]}_s{self.stages}")


@dataclass(frozen=True)
class FpAIntBDequantSpec(_FpAIntBSpec):
    """Packed INT4/INT8 weight -> FP16/BF16 [N, K] with the GEMM kernels' converters."""

    family: ClassVar[str] = "fpaintb_dequant"
    template: ClassVar[str] = "fpaintb_dequant.cu.j2"

    act: str
    bits: int
    arch: int = 80

    def __post_init__(self):
        self._check_types()

    @property
    def name(self) -> str:
        return f"qgemm_fpaintb_dequant_sm{self.arch}_{self.act}_int{self.bits}"


@dataclass(frozen=True)
class ConvInt8Spec(KernelSpec):
    """Implicit-GEMM conv2d forward: int8 NHWC activations x int8 [K, R, S, C] filters -> int32,
    requantized to int8 NHWC in the epilogue (the math is qgemm/conv_quant.py's).

    The GEMM is M = N*P*Q output pixels by N = output channels over K = R*S*C. arch 75 runs the
    Turing 8x8x16 int8 MMA with a two-stage mainloop of plain loads; arch 80 the Ampere 16x8x32
    MMA with a cp.async multistage mainloop. `alignment` is the int8 elements one global access
    of the activation and filter channels covers: in_channels must be a multiple of it, and
    out_channels of `output_alignment` (the epilogue's access width). cp.async copies 4, 8 or 16
    bytes, so arch 80 needs an alignment of 4 or more; below that the two-stage mainloop serves.

    `iterator` "optimized" is CUTLASS's kOptimized iterators: each filter tap is its own run of
    ceil(C / tile K) iterations, efficient once C fills the tile's K. "few_channels" is
    kFewChannels: K runs over the packed (r, s, c) index, so a 3-channel 7x7 input takes
    ceil(147 / 64) = 3 iterations instead of 49, at the price of per-access address arithmetic.
    """

    family: ClassVar[str] = "conv2d_int8"
    template: ClassVar[str] = "conv2d_int8.cu.j2"
    INSTRUCTIONS: ClassVar[dict] = {75: (8, 8, 16), 80: (16, 8, 32)}
    TILE_K: ClassVar[int] = 64
    ALIGNMENTS: ClassVar[tuple] = (16, 8, 4, 2, 1)
    ITERATORS: ClassVar[dict] = {"optimized": "kOptimized", "few_channels": "kFewChannels"}
    # The epilogue reads int32 accumulators from shared memory 4 at a time (one 128-bit access).
    MAX_OUTPUT_ALIGNMENT: ClassVar[int] = 4

    arch: int
    tile: tuple
    warp: tuple
    stages: int
    alignment: int
    iterator: str = "optimized"

    def __post_init__(self):
        if self.arch not in self.INSTRUCTIONS:
            raise ValueError(f"arch must be one of {sorted(self.INSTRUCTIONS)} for {self.family}, got {self.arch!r}")
        object.__setattr__(self, "tile", _shape(self.tile, "tile"))
        object.__setattr__(self, "warp", _shape(self.warp, "warp"))
        if self.tile[2] != self.TILE_K:
            raise ValueError(f"tile K must be {self.TILE_K} (64 int8 per shared-memory row), got {self.tile[2]}")
        _check_int8_tensorop(self)
        if self.alignment not in self.ALIGNMENTS:
            raise ValueError(f"alignment must be one of {self.ALIGNMENTS}, got {self.alignment!r}")
        if self.arch == 80 and self.alignment < 4:
            raise ValueError(f"alignment {self.alignment} needs arch 75 (two-stage mainloop): cp.async on sm80 "
                             f"copies 4, 8 or 16 bytes")
        if self.iterator not in self.ITERATORS:
            raise ValueError(f"iterator must be one of {tuple(self.ITERATORS)}, got {self.iterator!r}")

    @property
    def instruction(self) -> tuple[int, int, int]:
        return self.INSTRUCTIONS[self.arch]

    @property
    def output_alignment(self) -> int:
        """out_channels must be a multiple of this (int8 elements per epilogue store)."""
        return min(self.alignment, self.MAX_OUTPUT_ALIGNMENT)

    @property
    def iterator_algorithm(self) -> str:
        return self.ITERATORS[self.iterator]

    def supports_channels(self, in_channels: int, out_channels: int) -> bool:
        return in_channels % self.alignment == 0 and out_channels % self.output_alignment == 0

    @property
    def name(self) -> str:
        t, w = self.tile, self.warp
        return (f"qgemm_conv2d_int8_sm{self.arch}_s8s8_s8_{t[0]}x{t[1]}x{t[2]}_w{w[0]}x{w[1]}x{w[2]}"
                f"_s{self.stages}_a{self.alignment}{'_few' if self.iterator == 'few_channels' else ''}")


@dataclass(frozen=True)
class ConvInt8Sm90Spec(KernelSpec):
    """The int8 conv2d forward of ConvInt8Spec (same operation, same QgemmProblem slots) on Sm90:
    CUTLASS 3.x implicit GEMM with TMA im2col loads and WGMMA in a warp-specialized mainloop (one
    producer and one consumer warp group, not persistent: CUTLASS offers no persistent conv
    schedule on Sm90), the requantization as an epilogue visitor tree and a TMA store.

    `tile` is (M, N, K) in the implicit GEMM: M output pixels (64 or 128: one warp group's WGMMA
    rows, 64 at a time), N output channels, K input channels per filter tap (64 or 128 int8: the
    64- and 128-byte shared-memory swizzles). `cluster` (M, N) multicasts a tile's filters or
    activations to neighbouring CTAs. `stages` 0 lets CUTLASS fill shared memory with stages (one
    threadblock per SM). `ctas_per_sm` 2 asks for two resident threadblocks, so one's epilogue runs
    under the other's mainloop (the kernel is not persistent): registers capped at 128 per thread
    (a tile of at most 128 x 64 accumulators per warp group) and a fixed stage count whose
    buffers fit half the shared memory.
    `mainloop` "pingpong" runs only pointwise convolutions (1x1, stride 1, no padding: the implicit
    GEMM is a plain GEMM over the NHWC rows) as a CUTLASS 3.x GEMM with the persistent ping-pong
    schedule: two consumer warp groups on alternate tiles, so one's epilogue runs under the other's
    WGMMAs, which the im2col kernel cannot do and which short K loops need (K = Ci: 64 to 2048).
    TMA moves 16-byte rows, so input and output channels must be multiples of 16.
    """

    family: ClassVar[str] = "conv2d_int8_sm90"
    template: ClassVar[str] = "conv2d_int8_sm90.cu.j2"
    TILE_M: ClassVar[tuple] = (64, 128)
    TILE_N: ClassVar[tuple] = (64, 128, 256)
    TILE_K: ClassVar[tuple] = (64, 128)
    CLUSTERS: ClassVar[tuple] = ((1, 1), (2, 1), (1, 2))
    alignment: ClassVar[int] = 16      # int8 channels per 16-byte TMA row, input and output
    output_alignment: ClassVar[int] = 16
    # TMA im2col (CUTLASS's can_implement for 2-D): the box corners -pad and pad - (R - 1) * dilation
    # are signed 8-bit, the filter offsets (R - 1) * dilation unsigned 8-bit below 255, the traversal
    # stride at most 8.
    CORNER_RANGE: ClassVar[tuple] = (-128, 127)
    MAX_FILTER_SPAN: ClassVar[int] = 254
    MAX_STRIDE: ClassVar[int] = 8
    MAINLOOPS: ClassVar[tuple] = ("im2col", "pingpong")

    # Shared memory per SM for a kernel's blocks (227 KB) less room for the epilogue's buffers.
    MAINLOOP_SMEM_PER_SM: ClassVar[int] = 192 * 1024

    tile: tuple
    cluster: tuple = (1, 1)
    stages: int = 0
    ctas_per_sm: int = 1
    mainloop: str = "im2col"
    arch: int = 90

    def __post_init__(self):
        object.__setattr__(self, "tile", _shape(self.tile, "tile"))
        object.__setattr__(self, "cluster", tuple(int(v) for v in self.cluster))
        if self.mainloop not in self.MAINLOOPS:
            raise ValueError(f"mainloop must be one of {self.MAINLOOPS}, got {self.mainloop!r}")
        if self.mainloop == "pingpong" and (self.ctas_per_sm != 1 or self.cluster != (1, 1)):
            raise ValueError(f"the pingpong mainloop is persistent: ctas_per_sm 1 and cluster (1, 1), got "
                             f"{self.ctas_per_sm} and {self.cluster}")
        if self.arch != 90:
            raise ValueError(f"arch must be 90 for {self.family} (wgmma and TMA are sm_90a), got {self.arch!r}")
        for what, value, allowed in (("tile M", self.tile[0], self.TILE_M), ("tile N", self.tile[1], self.TILE_N),
                                     ("tile K", self.tile[2], self.TILE_K)):
            if value not in allowed:
                raise ValueError(f"{what} must be one of {allowed}, got {value}")
        if self.cluster not in self.CLUSTERS:
            raise ValueError(f"cluster must be one of {self.CLUSTERS}, got {self.cluster}")
        if self.stages != 0 and not 2 <= self.stages <= 8:
            raise ValueError(f"stages must be 0 (as many as fit) or in [2, 8], got {self.stages}")
        if self.ctas_per_sm not in (1, 2):
            raise ValueError(f"ctas_per_sm must be 1 or 2, got {self.ctas_per_sm!r}")
        if self.ctas_per_sm == 2:
            if self.tile[0] * self.tile[1] > 128 * 64:
                raise ValueError(f"ctas_per_sm 2 caps registers at 128 per thread: tile M x N at most 128 x 64 "
                                 f"accumulators, got {self.tile[0]} x {self.tile[1]}")
            stage_bytes = (self.tile[0] + self.tile[1]) * self.tile[2]
            if not self.stages or 2 * self.stages * stage_bytes > self.MAINLOOP_SMEM_PER_SM:
                raise ValueError(f"ctas_per_sm 2 needs a stage count whose buffers ({stage_bytes} bytes each) fit "
                                 f"twice in {self.MAINLOOP_SMEM_PER_SM} bytes, got stages={self.stages}")

    def supports_channels(self, in_channels: int, out_channels: int) -> bool:
        return in_channels % self.alignment == 0 and out_channels % self.output_alignment == 0

    @classmethod
    def supports_geometry(cls, kernel_size, stride, padding, dilation) -> bool:
        """Whether TMA im2col can walk this convolution (pairs of (height, width))."""
        lo, hi = cls.CORNER_RANGE
        spans = [(k - 1) * d for k, d in zip(kernel_size, dilation)]
        return (max(stride) <= cls.MAX_STRIDE and max(spans) <= cls.MAX_FILTER_SPAN
                and all(lo <= -p and lo <= p - span <= hi for p, span in zip(padding, spans)))

    @staticmethod
    def is_pointwise(kernel_size, stride, padding) -> bool:
        """1x1, stride 1, no padding: the convolution is a GEMM over the NHWC rows."""
        return tuple(kernel_size) == (1, 1) and tuple(stride) == (1, 1) and tuple(padding) == (0, 0)

    def runs_geometry(self, kernel_size, stride, padding, dilation) -> bool:
        """Whether this kernel can run the convolution (the pingpong GEMM: pointwise ones only)."""
        if self.mainloop == "pingpong":
            return self.is_pointwise(kernel_size, stride, padding)
        return self.supports_geometry(kernel_size, stride, padding, dilation)

    @property
    def name(self) -> str:
        t, c = self.tile, self.cluster
        stages = f"_s{self.stages}" if self.stages else ""
        ctas = f"_{self.ctas_per_sm}cta" if self.ctas_per_sm > 1 else ""
        mainloop = "_pingpong" if self.mainloop == "pingpong" else ""
        return f"qgemm_conv2d_int8_sm90_s8s8_s8_{t[0]}x{t[1]}x{t[2]}_c{c[0]}x{c[1]}{stages}{ctas}{mainloop}"



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
    ARCHS: ClassVar[tuple] = (75, 80)
    SCHEMES: ClassVar[tuple] = ("asymmetric", "symmetric")
    OUTPUTS: ClassVar[tuple] = ("f16", "bf16", "f32")
    DEVICE_TYPES: ClassVar[dict] = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float"}
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
        tile = tuple(int(v) for v in self.tile)
        warp = tuple(int(v) for v in self.warp)
        object.__setattr__(self, "tile", tile)
        object.__setattr__(self, "warp", warp)
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

    @property
    def output_ctype(self) -> str:
        return CTYPES[self.output]

    @property
    def output_device_type(self) -> str:
        return self.DEVICE_TYPES[self.output]

    def supports_block_size(self, block_size: int) -> bool:
        return block_size in self.BLOCK_SIZES

    @property
    def name(self) -> str:
        tm, tn, tk = self.tile
        scheme = "asym" if self.scheme == "asymmetric" else "sym"
        return (f"qgemm_w8a8_promote_sm{self.arch}_s8s8_{self.output}_{scheme}"
                f"_{tm}x{tn}x{tk}_w{self.warp[0]}x{self.warp[1]}_s{self.stages}")


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
    cutlass_gen/fpaintb_layout.py's Sm90WeightLayout.
    """

    family: ClassVar[str] = "fpaintb_gemm_sm90"
    template: ClassVar[str] = "fpaintb_gemm_sm90.cu.j2"
    SCHEDULES: ClassVar[tuple] = ("cooperative", "pingpong")
    SCHEDULERS: ClassVar[tuple] = ("persistent", "streamk")
    TILE_N: ClassVar[tuple] = (16, 32, 64, 128, 256)
    TILE_K: ClassVar[int] = 64  # 128 bytes of 16-bit activations: the 128-byte swizzle

    act: str
    bits: int
    tile: tuple
    schedule: str = "cooperative"
    scheduler: str = "persistent"
    arch: int = 90

    def __post_init__(self):
        tile = tuple(int(v) for v in self.tile)
        object.__setattr__(self, "tile", tile)
        if self.arch != 90:
            raise ValueError(f"arch must be 90 for {self.family} (wgmma and TMA are sm_90a), got {self.arch!r}")
        if self.act not in ACT_TYPES:
            raise ValueError(f"act must be one of {ACT_TYPES}, got {self.act!r}")
        if self.bits not in fpaintb_layout.BITS:
            raise ValueError(f"bits must be one of {fpaintb_layout.BITS}, got {self.bits!r}")
        if len(tile) != 2:
            raise ValueError(f"tile is a (weight rows, tokens) pair, got {self.tile!r}")
        for what, value, allowed in (("schedule", self.schedule, self.SCHEDULES),
                                     ("scheduler", self.scheduler, self.SCHEDULERS), ("tile N", tile[1], self.TILE_N)):
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

    @property
    def act_ctype(self) -> str:
        return CTYPES[self.act]

    @property
    def layout(self) -> fpaintb_layout.Sm90WeightLayout:
        return fpaintb_layout.sm90_layout(self.bits)

    @staticmethod
    def supports_group_size(group_size: int, k: int) -> bool:
        """The collective reads one scale row per K tile: groups of whole K tiles, or K itself."""
        return group_size == k or (group_size > 0 and group_size % FpAIntBSm90Spec.TILE_K == 0)

    def template_context(self) -> dict:
        return {"layout": self.layout}

    @property
    def name(self) -> str:
        tm, tn = self.tile
        return (f"qgemm_fpaintb_gemm_sm90_{self.act}_int{self.bits}_{tm}x{tn}x{self.TILE_K}_c1x1"
                f"_{self.schedule}_{self.scheduler}")


FAMILIES = {cls.family: cls for cls in (W8A8GemmSpec, W8A8Sm90Spec, ActQuantSpec, Fp8BlockwiseGemmSpec, Fp8ActQuantSpec,
                                        FpAIntBGemvSpec, FpAIntBGemmSpec, FpAIntBDequantSpec, ConvInt8Spec,
                                        FpAIntBConvSpec, ConvInt8Sm90Spec, W8A8PromoteSpec, FpAIntBSm90Spec)}


def spec_from_dict(d: dict) -> KernelSpec:
    d = dict(d)
    family = d.pop("family", None)
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {family!r}")
    return FAMILIES[family](**d)


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
    INPUTS: ClassVar[tuple] = ("f32", "f16", "bf16")
    OUTPUTS: ClassVar[tuple] = ("f16", "bf16", "f32")
    SCHEMES: ClassVar[tuple] = ("asymmetric", "symmetric")
    DEVICE_TYPES: ClassVar[dict] = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float"}
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

    @property
    def input_ctype(self) -> str:
        return CTYPES[self.input]

    @property
    def output_ctype(self) -> str:
        return CTYPES[self.output]

    @property
    def output_device_type(self) -> str:
        return self.DEVICE_TYPES[self.output]

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
    def name(self) -> str:
        scheme = "asym" if self.scheme == "asymmetric" else "sym"
        return (f"qgemm_w8a8_gemv_sm{self.arch}_{self.input}_s8_{self.output}_{scheme}"
                f"_w{self.warps}n{self.n_tiles}d{self.depth}c{self.min_ctas}_k{self.max_slice_k}b{self.max_slice_blocks}"
                + (f"_cl{self.cluster}" if self.cluster else ""))


FAMILIES[W8A8GemvSpec.family] = W8A8GemvSpec
