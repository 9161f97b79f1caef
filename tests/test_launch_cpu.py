"""Launch configuration without a GPU: which kernels get programmatic dependent launch, and the
launch attributes the driver receives."""
from __future__ import annotations

import types

import pytest

from cutlass_gen.families.fpaintb import FpAIntBGemmSpec, FpAIntBGemvSpec, FpAIntBSm90Spec
from cutlass_gen.families.w8a8 import W8A8GemvSpec, W8A8Sm90Spec
from qgemm import _driver, _runtime

DECODE = FpAIntBGemvSpec("f16", 4, arch=80, stream=True, n_tiles=2, warps_k=8, prefetch=2, min_warps_per_sm=16,
                         rows8=True)


@pytest.mark.parametrize("spec, target_sm, expected", [
    (DECODE, 90, True),                                   # waits for the previous kernel itself (sm90 build)
    (DECODE, 80, False),                                  # the sm80 build has no griddepcontrol
    (FpAIntBGemvSpec("f16", 4), 90, False),               # the B-operand small-M kernel does not wait
    (FpAIntBGemmSpec("f16", 4, (16, 128, 128), (16, 32), 4), 90, False),
    (W8A8Sm90Spec((128, 128), 128, "symmetric", "f16"), 90, True),   # CUTLASS's GDC, and its vector warp waits
    (W8A8Sm90Spec((256, 128), 128, "symmetric", "bf16", scheduler="streamk"), 90, True),
    (FpAIntBSm90Spec("f16", 4, (128, 16), tile_k=128, mainloop="ahead", ctas_per_sm=2), 90, True),  # CUTLASS's GDC
    (FpAIntBSm90Spec("bf16", 8, (128, 128)), 90, True),
    (W8A8GemvSpec("f16", "symmetric", "f16"), 90, True),   # the fused W8A8 decode kernel waits too
    (W8A8GemvSpec("f16", "symmetric", "f16"), 80, False),
    (W8A8GemvSpec("f16", "asymmetric", "f16", cluster=8, arch=90, max_slice_k=4096, max_slice_blocks=32), 90, True),
])
def test_programmatic_launch_only_for_kernels_that_wait(monkeypatch, spec, target_sm, expected):
    kernel = types.SimpleNamespace(spec=spec, target_sm=target_sm)
    monkeypatch.setattr(_runtime, "PROGRAMMATIC_LAUNCH", True)
    assert _runtime.Kernel.programmatic_launch.fget(kernel) is expected
    monkeypatch.setattr(_runtime, "PROGRAMMATIC_LAUNCH", False)  # QGEMM_PDL=0
    assert _runtime.Kernel.programmatic_launch.fget(kernel) is False


def test_launcher_attributes(monkeypatch):
    cu = pytest.importorskip("cuda.bindings.driver")
    monkeypatch.setattr(_driver, "driver", lambda: cu)  # the types only: no cuInit
    ids = cu.CUlaunchAttributeID
    plain = _driver.Launcher(None, (256, 1, 1))
    assert plain._config.numAttrs == 0
    pdl = _driver.Launcher(None, (256, 1, 1), programmatic=True)
    assert [a.id for a in pdl._config.attrs] == [ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION]
    assert pdl._config.numAttrs == 1 and pdl._config.attrs[0].value.programmaticStreamSerializationAllowed == 1
    both = _driver.Launcher(None, (384, 1, 1), (2, 1, 1), programmatic=True)
    assert [a.id for a in both._config.attrs] == [ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                                                  ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION]
    assert both._config.numAttrs == 2 and both._config.attrs[0].value.clusterDim.x == 2


def test_l2_prefetch_is_a_decode_knob():
    """FpAIntBChoice.l2_prefetch / W8A8GemvChoice.l2_prefetch: bytes in [0, 1 MiB], and for FpA x IntB
    only on the decode variant (the only FpA x IntB kernel that prefetches)."""
    from qgemm.fpaintb.heuristics import FpAIntBChoice
    from qgemm.w8a8.heuristics import W8A8GemvChoice
    assert FpAIntBChoice(DECODE, l2_prefetch=16384).l2_prefetch == 16384
    for bad in (-1, (1 << 20) + 1, 1.5, "16k"):
        with pytest.raises(ValueError, match="l2_prefetch"):
            FpAIntBChoice(DECODE, l2_prefetch=bad)
    with pytest.raises(ValueError, match="only for the decode variant"):
        FpAIntBChoice(FpAIntBGemvSpec("f16", 4), l2_prefetch=16384)
    gemv = W8A8GemvSpec("f16", "symmetric", "f16")
    assert W8A8GemvChoice(gemv, 4, l2_prefetch=1 << 20).l2_prefetch == 1 << 20
    for bad in (-16, (1 << 20) + 16, 2.0):
        with pytest.raises(ValueError, match="l2_prefetch"):
            W8A8GemvChoice(gemv, 4, l2_prefetch=bad)
