"""qgemm.fuse_projections_ on the GPU: each member's columns of the packed kernel's output against the
member's own float64 reference (a CPU copy of the unpacked quantized layer, the same quantized
operands), at odd M; the packed block in CUDA graphs, on two streams, and under
torch.compile(fullgraph=True, mode="reduce-overhead"), equal to eager bit for bit.

Bounds (||gpu - reference|| / ||reference||): the modules' own, as in tests/test_nn_gpu.py, because a
packed layer is one of those modules with a wider N: 2e-3 for the FpA x IntB kernels (FP32
accumulation of exact products, one fp16 rounding), 2e-3 FP8 and 1e-3 W8A8 in float16 (the
activation quantizers are bit-exact with the reference's; FP32 promotion and the output rounding
differ). Outputs are poisoned (NaN) before each call.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import qgemm
from qgemm.fuse import PackedSlice
from qgemm.nn import QuantModule

from gpu_util import capture_graph, on_two_streams, poison_allocator, randn, rel_err

SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
                       reason="needs an sm80 or later GPU"),
]

K, NQ, NKV, NI = 1024, 1024, 256, 1536


class Block(nn.Module):
    """A Llama decoder layer's linears, called as HF calls them."""

    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(K, NQ, False), nn.Linear(K, NKV, False), nn.Linear(K, NKV, False)
        self.o_proj = nn.Linear(NQ, K, False)
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(K, NI, False), nn.Linear(K, NI, False), nn.Linear(NI, K, False)

    def forward(self, h):
        q, k, v = self.q_proj(h), self.k_proj(h), self.v_proj(h)
        h = h + self.o_proj(q * torch.sigmoid(k.mean(-1, keepdim=True) + v.mean(-1, keepdim=True)))
        return h + self.down_proj(torch.nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))


CONFIGS = {
    "int4_g128": (qgemm.Int4WeightOnlyConfig(128), 2e-3, False),
    "int4_g64_zero": (qgemm.Int4WeightOnlyConfig(64, symmetric=False), 2e-3, False),
    "int8_channel": (qgemm.Int8WeightOnlyConfig(), 2e-3, False),
    "w8a8_sym": (qgemm.W8A8BlockConfig(128, "symmetric"), 1e-3, True),
    "w8a8_asym": (qgemm.W8A8BlockConfig(128, "asymmetric"), 1e-3, False),
    "fp8": (qgemm.Fp8BlockwiseConfig(), 2e-3, True),
}


def block(seed=0):
    g = torch.Generator().manual_seed(seed)
    model = Block()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.03 + 0.002)
    return model.half()


def packed_and_plain(name):
    config, bound, sm90 = CONFIGS[name]
    if sm90 and not SM90:
        pytest.skip("FP8 and symmetric W8A8 kernels need an sm90 GPU")
    plain = block()
    qgemm.quantize_(plain, config)
    packed = copy.deepcopy(plain)
    report = qgemm.fuse_projections_(packed)
    assert len(report.fused) == 2 and not report.skipped
    return packed.cuda(), plain, bound


M_VALUES = (1, 3, 8, 16, 17, 1000)  # what the tests below run


def plans_to_prebuild() -> list:
    """Every plan the tests below make (for qgemm.prebuild, in parallel, before they run:
    benchmarks/device_fuse.sh)."""
    plans = []
    for name, (_, _, sm90) in CONFIGS.items():
        if sm90 and not SM90:
            continue
        packed, _, _ = packed_and_plain(name)
        plans += [m.plan(torch.float16) for m in packed.modules() if isinstance(m, QuantModule)]
    return plans


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("m", (1, 3, 17, 1000))
def test_members_match_their_reference(name, m):
    packed, plain, bound = packed_and_plain(name)
    x = randn(m, K, dtype=torch.float16, seed=m) * 0.5
    for members in (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")):
        poison_allocator()
        with torch.no_grad():
            got = [getattr(packed, n)(x) for n in members]  # one packed call, then its column slices
            torch.cuda.synchronize()
            for n, y in zip(members, got):
                assert isinstance(getattr(packed, n), PackedSlice)
                ref = getattr(plain, n)(x.cpu())  # the unpacked layer's float64 reference on the CPU
                assert y.shape == ref.shape and rel_err(y, ref) < bound, (n, rel_err(y, ref))


@pytest.mark.parametrize("name", ["int4_g128", "w8a8_sym", "fp8"])
def test_cuda_graph_two_streams_and_compile(name):
    packed, _, _ = packed_and_plain(name)
    x = randn(8, K, dtype=torch.float16, seed=5) * 0.5
    other = randn(8, K, dtype=torch.float16, seed=6) * 0.5
    with torch.no_grad():
        expected, expected_other = packed(x), packed(other)
        static_x = x.clone()
        graph, static_y = capture_graph(packed, static_x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_y, expected)
        static_x.copy_(other)  # the same tensor changed: the graph recomputes the packed layers
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_y, expected_other)
        y1, y2 = on_two_streams(packed, x, other)
        assert torch.equal(y1, expected) and torch.equal(y2, expected_other)
        # Compiled, the linears alone: Inductor fuses the block's pointwise ops with float32
        # intermediates where eager rounds each to float16, and the W8A8 / FP8 layers after them
        # quantize those activations again, so a changed rounding may move a code. Without pointwise
        # ops between them, compiled and eager run the same kernels on the same bits.
        projections = Projections(packed)
        torch._dynamo.reset()
        compiled = torch.compile(projections, fullgraph=True, mode="reduce-overhead")
        for m in (1, 16):
            xm = randn(m, K, dtype=torch.float16, seed=m) * 0.5
            for _ in range(3):  # warm-up, recording, replay
                y = compiled(xm)
            assert torch.equal(y, projections(xm)), m
        assert packed.q_proj._round.state is None  # the compiled graph left no round open


class Projections(nn.Module):
    """Every linear of a Block, with no pointwise op between two of them."""

    def __init__(self, block: Block):
        super().__init__()
        self.block = block

    def forward(self, h):
        b = self.block
        q, k, v = b.q_proj(h), b.k_proj(h), b.v_proj(h)
        gate, up = b.gate_proj(h), b.up_proj(h)
        return torch.cat([b.o_proj(q), k, v, b.down_proj(gate), up], dim=-1)
