"""KernelSpec, the base of the kernel specs (cutlass_gen/families/: one frozen dataclass per kernel
family, validated on construction), and what several families share.

A spec is everything that changes the generated C++. Its `name` is stable and
self-describing (in the spirit of cutlass_library's procedural names), so a name
identifies a kernel across builds, manifests and profiles.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from typing import ClassVar


def _import_cutlass_library():
    """cutlass_library, imported with an empty command line: its generator module parses sys.argv
    when imported (for --disable-cutlass-package-imports), so `qgemm --help` printed cutlass's usage
    and exited before qgemm's parser ran."""
    argv = sys.argv
    sys.argv = argv[:1]
    try:
        import cutlass_library
    finally:
        sys.argv = argv
    return cutlass_library


_cutlass_library = _import_cutlass_library()
DataType, DataTypeTag = _cutlass_library.DataType, _cutlass_library.DataTypeTag

# Target SMs the build driver compiles for (sm_90 means sm_90a).
SUPPORTED_TARGETS = (75, 80, 90)

def ctype(name: str) -> str:
    """The CUTLASS C++ type of an element type named as in specs and kernel names (f32, f16, bf16,
    e4m3, e5m2: cutlass_library's DataType names)."""
    return DataTypeTag[DataType[name]]


class KernelSpec:
    """Base of all family specs (each a frozen dataclass)."""

    family: ClassVar[str]
    template: ClassVar[str]
    # The QgemmProblem slots the family's template reads (Slots, below).
    SLOTS: ClassVar["Slots"]
    # Lowest CUTLASS ArchTag the kernel uses; a target SM must be at least this.
    arch: int
    # Whether kernels of this family may be compiled several to one translation unit (a bundle,
    # cutlass_gen/render.py): the template keeps everything but the ABI export in `namespace
    # qgemm_kernel`, as every template does today. Most of a compile is the headers and the
    # templates that a family's kernels share, so bundles save most of it.
    bundles: ClassVar[bool] = True

    @property
    def bundle_key(self) -> str:
        """Kernels may share a translation unit only with kernels of the same key: by default those of
        one template. A family whose template also changes something global to the unit (the FpA x IntB
        two-CTA kernels' register split) puts that in its key."""
        return self.template

    # The element types of specs with an `input` or `output` field, for the templates: the CUTLASS
    # C++ type (cutlass_library's tag) and the CUDA device type the plain kernels compute in.
    DEVICE_TYPES: ClassVar[dict] = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float"}

    @property
    def programmatic_launch(self) -> bool:
        """Whether the kernel waits for the stream's previous kernel itself (griddepcontrol.wait
        before any memory access), so the runtime may launch it with programmatic stream
        serialization (qgemm._runtime.Kernel.programmatic_launch). Kernels that do override this."""
        return False

    @property
    def input_ctype(self) -> str:
        return ctype(self.input)

    @property
    def output_ctype(self) -> str:
        return ctype(self.output)

    @property
    def output_device_type(self) -> str:
        return self.DEVICE_TYPES[self.output]

    @property
    def name(self) -> str:
        raise NotImplementedError

    def _as_ints(self, *fields: str):
        """Store each named field (a tile, warp or cluster shape) as a tuple of ints, so that specs
        given lists (JSON) or numpy ints equal the catalog's."""
        for field in fields:
            object.__setattr__(self, field, tuple(int(v) for v in getattr(self, field)))

    def _require_sm90(self):
        """The CUTLASS 3.x specs' check: wgmma and TMA are sm_90a."""
        if self.arch != 90:
            raise ValueError(f"arch must be 90 for {self.family} (wgmma and TMA are sm_90a), got {self.arch!r}")

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


def spec_from_dict(d: dict) -> KernelSpec:
    from .families import FAMILIES

    d = dict(d)
    family = d.pop("family", None)
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {family!r}")
    return FAMILIES[family](**d)


class SlotArray:
    """The names of one QgemmProblem array's slots (ptr, ld, ext or scalar), by index: `.out` is
    the index of the slot named out (a template writes `p.ptr[{{ slot.ptr.out }}]`)."""

    def __init__(self, array: str, names: tuple):
        self.array = array
        self.names = tuple(names)
        self._index = {name: i for i, name in enumerate(self.names) if name}

    def __getattr__(self, name: str) -> int:
        try:
            return self.__dict__["_index"][name]
        except KeyError:
            raise AttributeError(f"no {self.__dict__.get('array')} slot named {name!r}; declared: "
                                 f"{self.__dict__.get('names')}") from None

    def declared(self) -> set[int]:
        return set(self._index.values())


class Slots:
    """The QgemmProblem slots a kernel family reads, named once: the plans write them by name
    (`slots.write(p, x=..., out=...)`), the templates read their indices from the same declaration
    (`{{ slot.ptr.x }}`), and tests/test_slots_cpu.py checks every template's and header's use
    against it. Each argument is a tuple of names by index (None: an index the family leaves
    unused); names are unique across the four arrays."""

    ARRAYS = ("ptr", "ld", "ext", "scalar")

    def __init__(self, *, ptr: tuple = (), ld: tuple = (), ext: tuple = (), scalar: tuple = ()):
        self.ptr, self.ld = SlotArray("ptr", ptr), SlotArray("ld", ld)
        self.ext, self.scalar = SlotArray("ext", ext), SlotArray("scalar", scalar)
        self._where: dict[str, tuple[str, int]] = {}
        for array in self.ARRAYS:
            for name, index in getattr(self, array)._index.items():
                if name in self._where:
                    raise ValueError(f"slot name {name!r} declared twice ({self._where[name][0]} and {array})")
                self._where[name] = (array, index)

    def where(self, name: str) -> tuple[str, int]:
        """(array, index) of the slot `name`."""
        try:
            return self._where[name]
        except KeyError:
            raise KeyError(f"no slot named {name!r}; declared: {sorted(self._where)}") from None

    def write(self, problem, **values):
        """problem.<array>[index] = value for each slot named in `values`."""
        for name, value in values.items():
            array, index = self.where(name)
            getattr(problem, array)[index] = value

    def read(self, problem, name: str):
        array, index = self.where(name)
        return getattr(problem, array)[index]
