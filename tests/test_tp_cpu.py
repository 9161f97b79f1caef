"""qgemm.tp on the CPU: the shard arithmetic of every format, padding and refusals, quantize_ and
load_quantized with a process group, and a two-process gloo run of the parallel modules over their
reference (CPU) forward.

The central check: a rank's effective weight (what x_local is multiplied with, padding and the
row regrouping undone; ParallelLinear.effective_weight) concatenated over the ranks (column: along
N, row: along K) equals the unsharded layer's dequantized weight bit for bit (torch.equal on
float64): the shards are cut from the quantized tensors, nothing is quantized again. For row
shards the partial products x_r @ W_r, summed in float64, equal x @ W to float64 rounding (the
sum is only reassociated), and each local module's own forward computes x_r @ W_r.
"""
from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F
from torch import nn

import qgemm
from qgemm import tp, wq_format
from qgemm.nn import Fp8Linear, QuantLinear, W8A8Linear
from qgemm.fpaintb.wq_format import IntWeight


def gen(seed):
    return torch.Generator().manual_seed(seed)


def float_linear(k, n, bias=True, seed=0):
    g = gen(seed)
    layer = nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n, k, generator=g) * 0.05 + 0.01)
        if bias:
            layer.bias.copy_(torch.randn(n, generator=g) * 0.1)
    return layer


def int_weight(k, n, bits, g, seed, zeros=True, act_order=False):
    gen_ = gen(seed)
    u = torch.randint(0, 2 ** bits, (k, n), generator=gen_, dtype=torch.uint8)
    scale = (torch.rand(k // g, n, generator=gen_) * 0.02 + 0.005).half()
    zero = torch.randint(1, 2 ** bits, (k // g, n), generator=gen_, dtype=torch.uint8) if zeros else None
    perm = torch.argsort(torch.randperm(k, generator=gen_) // g, stable=True) if act_order else None
    return IntWeight(u, scale, zero, bits, g, perm)


def bias_for(n, seed=5):
    return (torch.randn(n, generator=gen(seed)) * 0.1).half()


def weight_t(module) -> torch.Tensor:
    """The unsharded layer's dequantized W^T [K, N], float64."""
    if isinstance(module, QuantLinear):
        return module.dequantize()
    if isinstance(module, (Fp8Linear, W8A8Linear)):
        return module.dequantize().t()
    return module.weight.detach().double().t()


# Every format qgemm loads, as a (builder, K, N) with shapes chosen so that some splits need padding.
def gptq_act_order(k, n, bits, g, zeros=True):
    w = int_weight(k, n, bits, g, seed=k + n + bits, zeros=zeros, act_order=True)
    qweight, qzeros, scales, g_idx = wq_format.pack_gptq(w, zero_offset=0)
    return QuantLinear.from_gptq(qweight, qzeros, scales, g_idx, bias_for(n), bits, zero_offset=0)


def awq(k, n, g):
    w = int_weight(k, n, 4, g, seed=3)
    return QuantLinear.from_awq(*wq_format.pack_awq(w), bias=bias_for(n))


def ct_act_order(k, n, g):
    w = int_weight(k, n, 8, g, seed=4, zeros=False, act_order=True)
    t = wq_format.pack_compressed_tensors(w)
    return QuantLinear.from_compressed_tensors(t["weight_packed"], t["weight_scale"], None, t["weight_g_idx"], 8,
                                               t["weight_shape"])


FORMATS = {
    "rtn_int4_g128_sym": lambda: QuantLinear.from_float(float_linear(512, 256), 4, 128),
    "rtn_int4_g32_asym_silu": lambda: QuantLinear.from_float(float_linear(256, 144), 4, 32, False, "silu"),
    "rtn_int8_per_channel": lambda: QuantLinear.from_float(float_linear(384, 144), 8, -1),
    "gptq_int4_act_order": lambda: gptq_act_order(512, 256, 4, 64),
    "gptq_int8_act_order_g32": lambda: gptq_act_order(256, 144, 8, 32),
    "awq_int4_g64": lambda: awq(512, 256, 64),
    "ct_int8_act_order_sym": lambda: ct_act_order(384, 144, 128),
    "fp8_blocks": lambda: Fp8Linear.from_float(float_linear(512, 384)),
    "w8a8_block_int8": lambda: W8A8Linear.from_float(float_linear(512, 384), 128, "symmetric"),
    "w8a8_block_int8_k64": lambda: W8A8Linear.from_float(float_linear(256, 264), 64, "symmetric"),
    "w8a8_asym_b32": lambda: W8A8Linear.from_float(float_linear(256, 136), 32, "asymmetric", "relu"),
    "float": lambda: float_linear(256, 136),
}


def shards(module, style, world):
    return [tp.shard(module, style, (rank, world), name=f"layer.{style}") for rank in range(world)]


def allowed(module, style, world) -> bool:
    """Whether the split is legal (the refusals are tested separately)."""
    k, n = module.in_features, module.out_features
    if style == "column":
        return n % world == 0
    if k % world:
        return False
    block = {Fp8Linear: 128, W8A8Linear: getattr(module, "block_size", 0)}.get(type(module))
    return block is None or (k // world) % block == 0


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("style", ["column", "row"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_shards_concatenate_to_the_unsharded_weight_bit_for_bit(fmt, style, world):
    module = FORMATS[fmt]()
    if not allowed(module, style, world):
        with pytest.raises(ValueError, match=rf"layer 'layer\.{style}', tensor-parallel size {world}"):
            shards(module, style, world)
        return
    full = weight_t(module)
    parts = shards(module, style, world)
    effective = [p.effective_weight() for p in parts]
    assert torch.equal(torch.cat(effective, dim=1 if style == "column" else 0), full)
    for p in parts:  # each rank's local sizes
        assert (p.in_features, p.out_features) == (module.in_features, module.out_features)
        assert (p.local_in_features, p.local_out_features) == \
            ((module.in_features, module.out_features // world) if style == "column"
             else (module.in_features // world, module.out_features))


def x_for(module, m=5, seed=11):
    dtype = torch.float16 if isinstance(module, QuantLinear) else torch.float32
    return (torch.randn(m, module.in_features, generator=gen(seed)) * 1.5 + 0.3).to(dtype)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_row_partials_sum_to_the_unsharded_product(fmt, world):
    module = FORMATS[fmt]()
    if not allowed(module, "row", world):
        pytest.skip("refused split (tested above)")
    x = x_for(module).double()
    parts = shards(module, "row", world)
    ks = module.in_features // world
    partials = [x[:, r * ks:(r + 1) * ks] @ p.effective_weight() for r, p in enumerate(parts)]
    torch.testing.assert_close(sum(partials), x @ weight_t(module), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("style", ["column", "row"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_local_modules_compute_with_their_effective_weight(fmt, style, world):
    """Each rank's module, its own reference forward (padding, x gather, narrowing and all), against
    x_local @ effective weight: the module computes with the weight the arithmetic test checked."""
    module = FORMATS[fmt]()
    if not allowed(module, style, world):
        pytest.skip("refused split (tested above)")
    x = x_for(module)
    for rank, p in enumerate(shards(module, style, world)):
        ks = p.local_in_features
        x_local = x if style == "column" else x[:, rank * ks:(rank + 1) * ks]
        with torch.no_grad():
            y = p(x_local) if style == "column" else p.local_forward(x_local)
        if isinstance(p.local, (QuantLinear, nn.Linear)):
            expected = x_local.double() @ p.effective_weight()
            bias = p.local.bias  # column: every rank's slice; row: rank 0 only
            assert (bias is not None) == (module.bias is not None and (style == "column" or rank == 0))
            if bias is not None:
                bias = bias.double() if isinstance(p.local, nn.Linear) else bias.to(x.dtype).double()
                offset = getattr(p, "out_offset", None)
                expected = expected + (bias if offset is None else bias[offset:][:p.local_out_features])
            if style == "column" and getattr(p.local, "activation", "none") == "silu":
                expected = F.silu(expected)
            tol = 2e-3 if x.dtype == torch.float16 else 1e-6
            torch.testing.assert_close(y.double(), expected.to(y.dtype).double(), rtol=tol, atol=tol)
        else:
            # FP8 / W8A8 quantize x per block on the fly: compare with the unsharded module's own
            # reference on the same columns (column) or check shape and finiteness (row; the sum is
            # checked in the gloo test).
            assert y.shape == (x.shape[0], p.local_out_features) and torch.isfinite(y).all()
            if style == "column":
                n0 = rank * p.local_out_features
                ref = module(x)[:, n0:n0 + p.local_out_features]
                torch.testing.assert_close(y, ref, rtol=0, atol=0)


def test_world_size_one_is_the_module_itself():
    for fmt in FORMATS:
        module = FORMATS[fmt]()
        x = x_for(module)
        for style in ("column", "row"):
            p = tp.shard(module, style, (0, 1), name="l")
            with torch.no_grad():
                assert torch.equal(p(x), module(x)), (fmt, style)


# --- padding and refusals ------------------------------------------------------------------------------------

def test_padding_cases_are_padded_and_narrowed():
    # int4 column shard of 36 columns (not 8): padded to 40, output narrowed back.
    m = QuantLinear.from_float(float_linear(256, 72), 4, 64)
    p = tp.shard(m, "column", (1, 2), name="mlp.up_proj")
    assert p.local.out_features == 40 and p.out_offset == 0 and p(x_for(m)).shape == (5, 36)
    # A row shard of 192 input features with group 128: the cut group is regrouped (src gathers x).
    m = QuantLinear.from_float(float_linear(384, 64), 4, 128)
    p = tp.shard(m, "row", (0, 2), name="mlp.down_proj")
    assert p.src is not None and p.local.in_features % 64 == 0 and p.local.in_features >= 192
    # FP8 column shard starting mid-block (N=384 over 2 ranks: rank 1 starts at 192): 64 rows of
    # front padding keep every row in its 128-row scale block.
    m = Fp8Linear.from_float(float_linear(256, 384))
    p = tp.shard(m, "column", (1, 2), name="q_proj")
    assert p.out_offset == 64 and p.local.out_features == 256 and p(x_for(m)).shape == (5, 192)
    # Aligned shards are slices: no padding, no gather.
    m = QuantLinear.from_float(float_linear(512, 256), 4, 128)
    assert tp.shard(m, "row", (1, 2)).src is None and tp.shard(m, "column", (1, 2)).out_offset is None


def test_act_order_row_shard_pads_less_than_full_k():
    """Act-order rows of a rank span every group; the regrouped shard pads each group's run to the
    kernel group chosen for the fewest bytes, far less than the full K."""
    m = gptq_act_order(4096, 256, 4, 128)
    for rank in range(2):
        p = tp.shard(m, "row", (rank, 2))
        assert p.src is not None and p.local.group_size in (32, 64) and 2048 <= p.local.in_features < 2048 * 1.5
        # every real row appears once; padding rows read the zero column
        real = p.src[p.src < 2048]
        assert torch.equal(torch.sort(real).values, torch.arange(2048))


class ActOrderMLP(nn.Module):
    """gate/up (RTN int4 or float) feeding an act-order GPTQ down_proj."""

    def __init__(self, hidden=256, inter=1024, float_feeders=False):
        super().__init__()
        make = (lambda k, n, seed: float_linear(k, n, False, seed)) if float_feeders else \
            (lambda k, n, seed: QuantLinear.from_float(float_linear(k, n, False, seed), 4, 128))
        self.gate_proj, self.up_proj = make(hidden, inter, 1), make(hidden, inter, 2)
        self.down_proj = gptq_act_order(inter, hidden, 4, 128)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


@pytest.mark.parametrize("float_feeders", [False, True])
@pytest.mark.parametrize("world", [2, 4])
def test_act_order_mlp_deals_whole_groups(world, float_feeders):
    """plan_features: an act-order down_proj takes whole groups per rank (its stored rows), gate/up
    produce exactly those features: no padding, no gather of x, and the MLP over the ranks sums to
    the unsharded one."""
    full = ActOrderMLP(float_feeders=float_feeders)
    x = x_for(full.gate_proj if not float_feeders else full.down_proj, m=3)[:, :256].double()
    w_gate, w_up, w_down = weight_t(full.gate_proj), weight_t(full.up_proj), weight_t(full.down_proj)
    expected = (F.silu(x @ w_gate) * (x @ w_up)) @ w_down
    total, seen = 0, []
    for rank in range(world):
        model = ActOrderMLP(float_feeders=float_feeders)
        tp.parallelize(model, (rank, world))
        down, gate, up = model.down_proj, model.gate_proj, model.up_proj
        assert down.src is None and down.local.g_idx is None and down.local.group_size == 128
        assert down.local.in_features == 1024 // world
        f = down.features
        assert torch.equal(gate.features, f) and torch.equal(up.features, f)
        assert torch.equal(down.effective_weight(), w_down[f]) and torch.equal(gate.effective_weight(), w_gate[:, f])
        assert torch.equal(up.effective_weight(), w_up[:, f])
        seen.append(f)
        total = total + (F.silu(x @ gate.effective_weight()) * (x @ up.effective_weight())) @ down.effective_weight()
    assert torch.equal(torch.sort(torch.cat(seen)).values, torch.arange(1024))
    torch.testing.assert_close(total, expected, rtol=1e-12, atol=1e-12)


def test_act_order_down_without_its_feeders_is_regrouped():
    """Without gate/up to follow it (another name, or not in the plan), down_proj keeps contiguous
    inputs and is regrouped (padding, x gather)."""
    model = ActOrderMLP()
    plan = {r"down_proj$": "row"}
    tp.parallelize(model, (0, 2), plan)
    assert model.down_proj.src is not None and model.down_proj.features is None
    assert isinstance(model.gate_proj, QuantLinear)


def test_gptq_pre_sharded_row_shard_matches_shard_on_load():
    w = int_weight(512, 128, 4, 64, seed=8, act_order=True)
    qweight, qzeros, scales, g_idx = wq_format.pack_gptq(w, zero_offset=1)
    full = QuantLinear.from_gptq(qweight, qzeros, scales, g_idx, None, 4, 1)
    for rank in range(2):
        ks = 256
        local, src = tp.gptq_row_shard(qweight[rank * ks // 8:(rank + 1) * ks // 8], qzeros, scales,
                                       g_idx[rank * ks:(rank + 1) * ks], bits=4, zero_offset=1)
        p = tp.from_shard(local, "row", (rank, 2), 512, 128, src=src)
        assert torch.equal(p.effective_weight(), full.dequantize()[rank * ks:(rank + 1) * ks])
        assert torch.equal(p.effective_weight(), tp.shard(full, "row", (rank, 2)).effective_weight())


def test_pre_sharded_tensors_wrap_without_the_full_layer():
    """Pre-sharded checkpoints: each rank builds its module from its slice of the checkpoint tensors
    with the ordinary constructors (FP8 column slice, AWQ row slice) and wraps it; the effective
    weights equal shard-on-load's."""
    lin = float_linear(256, 512)
    full = Fp8Linear.from_float(lin)
    for rank in range(2):
        local = Fp8Linear.from_deepseek(full.weight[rank * 256:(rank + 1) * 256],
                                        full.weight_scale_inv[rank * 2:(rank + 1) * 2], full.bias[rank * 256:][:256])
        p = tp.from_shard(local, "column", (rank, 2), 256, 512)
        assert torch.equal(p.effective_weight(), tp.shard(full, "column", (rank, 2)).effective_weight())
    w = int_weight(512, 128, 4, 64, seed=9)
    qweight, qzeros, scales = wq_format.pack_awq(w)
    full = QuantLinear.from_awq(qweight, qzeros, scales, bias=bias_for(128))
    for rank in range(2):
        rows, groups = slice(rank * 256, (rank + 1) * 256), slice(rank * 4, (rank + 1) * 4)
        local = QuantLinear.from_awq(qweight[rows], qzeros[groups], scales[groups],
                                     bias=bias_for(128) if rank == 0 else None)
        p = tp.from_shard(local, "row", (rank, 2), 512, 128, has_bias=True)
        assert p.has_bias and torch.equal(p.effective_weight(), tp.shard(full, "row", (rank, 2)).effective_weight())


def test_refusals_name_the_layer_the_tp_size_and_the_constraint():
    m = QuantLinear.from_float(float_linear(256, 96), 4, 128)
    with pytest.raises(ValueError, match=r"layer 'l.q_proj', tensor-parallel size 5: out_features \(N\)=96 must divide"):
        tp.shard(m, "column", (0, 5), name="l.q_proj")
    m = Fp8Linear.from_float(float_linear(384, 128))
    with pytest.raises(ValueError, match=r"layer 'l.o_proj', tensor-parallel size 2: the K shard .*=192 must be a "
                                         r"multiple of 128 \(the FP8 scale block"):
        tp.shard(m, "row", (0, 2), name="l.o_proj")
    m = W8A8Linear.from_float(float_linear(256, 64), 128, "asymmetric")
    with pytest.raises(ValueError, match=r"tensor-parallel size 4: the K shard in_features/4=64 must be a multiple of 128"):
        tp.shard(m, "row", (3, 4), name="down_proj")
    with pytest.raises(ValueError, match="style must be one of"):
        tp.shard(m, "diagonal", (0, 2))
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, 2\)"):
        tp.shard(m, "column", (2, 2))
    with pytest.raises(TypeError, match="only QuantLinear, Fp8Linear, W8A8Linear and nn.Linear shard"):
        tp.shard(nn.Conv2d(3, 3, 1), "column", (0, 2))
    with pytest.raises(ValueError, match="torch.distributed is not initialized"):
        tp.shard(m, "column", object())


def test_row_shard_without_group_refuses_to_reduce():
    m = QuantLinear.from_float(float_linear(256, 64), 4, 128)
    p = tp.shard(m, "row", (0, 2), name="o_proj")
    with pytest.raises(RuntimeError, match="'o_proj' was sharded without a process group"):
        p(torch.randn(2, 128).half())


# --- model level -------------------------------------------------------------------------------------------------

class Block(nn.Module):
    """A Llama-style decoder block without attention softmax: q/k/v/o and gate/up/down by name."""

    def __init__(self, hidden=256, inter=512, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.self_attn = nn.Module()
        for name, (k, n) in {"q_proj": (hidden, hidden), "k_proj": (hidden, hidden // 2),
                             "v_proj": (hidden, hidden // 2), "o_proj": (hidden, hidden)}.items():
            setattr(self.self_attn, name, float_linear(k, n, bias=name != "o_proj", seed=k + n))
        self.mlp = nn.Module()
        self.mlp.gate_proj = float_linear(hidden, inter, bias=False, seed=1)
        self.mlp.up_proj = float_linear(hidden, inter, bias=False, seed=2)
        self.mlp.down_proj = float_linear(inter, hidden, bias=True, seed=3)
        self.lm_head = float_linear(hidden, 40, bias=False, seed=4)

    def forward(self, x):
        a = self.self_attn
        v = a.v_proj(x)
        h = a.o_proj(a.q_proj(x) * torch.cat([a.k_proj(x) * v, v], dim=-1)) + x  # heads: the GQA repeat of k*v
        m = self.mlp
        return self.lm_head(m.down_proj(F.silu(m.gate_proj(h)) * m.up_proj(h)) + h)


def test_quantize_with_process_group_shards_by_name():
    full = Block()
    qgemm.quantize_(full, qgemm.Int4WeightOnlyConfig(group_size=64), filter_fn=lambda m, n: "lm_head" not in n)
    for rank in range(2):
        model = Block()
        report = qgemm.quantize_(model, qgemm.Int4WeightOnlyConfig(group_size=64),
                                 filter_fn=lambda m, n: "lm_head" not in n, process_group=(rank, 2))
        assert "self_attn.q_proj" in report.replaced and not report.skipped
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            assert isinstance(model.get_submodule(name), tp.ColumnParallelLinear), name
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            assert isinstance(model.get_submodule(name), tp.RowParallelLinear), name
        assert isinstance(model.lm_head, nn.Linear)  # not in the plan: replicated
        p = model.mlp.down_proj
        assert torch.equal(p.effective_weight(), full.mlp.down_proj.dequantize()[rank * 256:(rank + 1) * 256])
        assert p.has_bias and (torch.equal(p.bias, full.mlp.down_proj.bias) if rank == 0 else p.bias is None)


def test_quantize_with_process_group_slices_skipped_layers():
    model = Block()
    plan = dict(tp.DEFAULT_TP_PLAN)
    report = qgemm.quantize_(model, qgemm.Fp8BlockwiseConfig(), process_group=(1, 2), tp_plan=plan,
                             filter_fn=lambda m, n: "mlp" in n)
    assert sorted(report.replaced) == ["mlp.down_proj", "mlp.gate_proj", "mlp.up_proj"]
    q = model.self_attn.q_proj
    assert isinstance(q, tp.ColumnParallelLinear) and isinstance(q.local, nn.Linear)
    assert torch.equal(q.local.weight, Block().self_attn.q_proj.weight[128:])
    o = model.self_attn.o_proj
    assert isinstance(o, tp.RowParallelLinear) and o.local.in_features == 128


def test_head_counts_follow_the_shards():
    """Attention modules that keep their head counts as attributes (older transformers) get them
    divided by the TP size, once; a count that does not divide is refused."""
    model = Block()
    model.self_attn.num_heads, model.self_attn.num_key_value_heads, model.self_attn.hidden_size = 4, 2, 256
    qgemm.quantize_(model, qgemm.Int8WeightOnlyConfig(), process_group=(0, 2))
    assert (model.self_attn.num_heads, model.self_attn.num_key_value_heads, model.self_attn.hidden_size) == (2, 1, 128)
    assert tp.parallelize(model, (0, 2)) == [] and model.self_attn.num_heads == 2  # not twice
    model = Block()
    model.self_attn.num_key_value_heads = 1
    with pytest.raises(ValueError, match=r"layer 'self_attn', tensor-parallel size 2: num_key_value_heads=1 must "
                                         r"divide"):
        qgemm.quantize_(model, qgemm.Int8WeightOnlyConfig(), process_group=(0, 2))


def test_load_quantized_with_process_group(tmp_path):
    """A GPTQ act-order checkpoint loaded on two ranks: each layer is this rank's shard of the
    checkpoint's tensors; the ranks' shards concatenate to the TP=1 load."""
    from test_checkpoint_cpu import write_folder
    tensors = {}
    for name, (k, n, bias) in {"model.layers.0.mlp.up_proj": (256, 128, False),
                               "model.layers.0.mlp.down_proj": (128, 256, True)}.items():
        w = int_weight(k, n, 4, 32, seed=k, act_order=True)
        qweight, qzeros, scales, g_idx = wq_format.pack_gptq(w, zero_offset=1)
        tensors.update({f"{name}.qweight": qweight, f"{name}.qzeros": qzeros, f"{name}.scales": scales,
                        f"{name}.g_idx": g_idx})
        if bias:
            tensors[f"{name}.bias"] = bias_for(n)
    cfg = {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": True}
    folder = write_folder(tmp_path / "ckpt", cfg, tensors)
    full = qgemm.load_quantized(folder)
    for rank in range(2):
        layers = qgemm.load_quantized(folder, process_group=(rank, 2))
        up, down = layers["model.layers.0.mlp.up_proj"], layers["model.layers.0.mlp.down_proj"]
        assert isinstance(up, tp.ColumnParallelLinear) and isinstance(down, tp.RowParallelLinear)
        assert torch.equal(up.effective_weight(), full["model.layers.0.mlp.up_proj"].dequantize()[:, rank * 64:][:, :64])
        assert torch.equal(down.effective_weight(),
                           full["model.layers.0.mlp.down_proj"].dequantize()[rank * 64:(rank + 1) * 64])

        class Tiny(nn.Module):
            def __init__(self):
                super().__init__()
                self.model = nn.Module()
                layer = nn.Module()
                layer.mlp = nn.Module()
                layer.mlp.up_proj = nn.Linear(256, 128, bias=False)
                layer.mlp.down_proj = nn.Linear(128, 256)
                layer.self_attn = nn.Module()
                layer.self_attn.q_proj = nn.Linear(256, 256)  # unquantized: sliced after loading
                self.model.layers = nn.ModuleList([layer])

        model = qgemm.load_quantized(Tiny(), folder, process_group=(rank, 2))
        assert isinstance(model.model.layers[0].mlp.down_proj, tp.RowParallelLinear)
        assert isinstance(model.model.layers[0].self_attn.q_proj, tp.ColumnParallelLinear)


def test_load_quantized_plans_act_order_mlp(tmp_path):
    """GPTQ desc_act checkpoint with gate/up/down: load_quantized shards each MLP together
    (plan_features): down_proj takes whole groups, and the ranks' MLPs sum to the TP=1 load's."""
    from test_checkpoint_cpu import write_folder
    tensors = {}
    for name, (k, n) in {"mlp.gate_proj": (256, 512), "mlp.up_proj": (256, 512), "mlp.down_proj": (512, 256)}.items():
        w = int_weight(k, n, 4, 64, seed=k + n + len(name), act_order=True)
        for leaf, t in zip(("qweight", "qzeros", "scales", "g_idx"), wq_format.pack_gptq(w, zero_offset=1)):
            tensors[f"{name}.{leaf}"] = t
    folder = write_folder(tmp_path / "ckpt", {"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": True},
                          tensors)
    full = qgemm.load_quantized(folder)
    x = torch.randn(3, 256, generator=gen(1), dtype=torch.float64)
    w = {name.split(".")[-1]: full[name].dequantize() for name in full}
    expected = (F.silu(x @ w["gate_proj"]) * (x @ w["up_proj"])) @ w["down_proj"]
    total = 0
    for rank in range(2):
        layers = qgemm.load_quantized(folder, process_group=(rank, 2))
        gate, up, down = (layers[f"mlp.{n}"] for n in ("gate_proj", "up_proj", "down_proj"))
        assert down.src is None and down.features is not None and torch.equal(gate.features, down.features)
        total = total + (F.silu(x @ gate.effective_weight()) * (x @ up.effective_weight())) @ down.effective_weight()
    torch.testing.assert_close(total, expected, rtol=1e-12, atol=1e-12)


# --- two processes, gloo ----------------------------------------------------------------------------------------

def _gloo_worker(rank, world, init_file, results):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        group = dist.group.WORLD
        out = {}
        x = (torch.randn(7, 256, generator=gen(21)) * 1.5 + 0.3)
        for label, config, dtype in [("int4", qgemm.Int4WeightOnlyConfig(group_size=64), torch.float16),
                                     ("int8", qgemm.Int8WeightOnlyConfig(), torch.float16),
                                     ("w8a8_asym", qgemm.W8A8BlockConfig(block_size=64, scheme="asymmetric"),
                                      torch.float32),
                                     ("w8a8_sym", qgemm.W8A8BlockConfig(block_size=128), torch.float32)]:
            full, model = Block(), Block()
            qgemm.quantize_(full, config)
            qgemm.quantize_(model, config, process_group=group)
            with torch.no_grad():
                y_full = full.mlp.down_proj(F.silu(full.mlp.gate_proj(x.to(dtype))) * full.mlp.up_proj(x.to(dtype)))
                m = model.mlp
                y_tp = m.down_proj(F.silu(m.gate_proj(x.to(dtype))) * m.up_proj(x.to(dtype)))
            out[label] = ((y_tp.double() - y_full.double()).norm() / y_full.double().norm()).item()
        # act-order GPTQ through the pre-sharded path, and its all-reduce
        w = int_weight(512, 256, 4, 64, seed=30, act_order=True)
        qweight, qzeros, scales, g_idx = wq_format.pack_gptq(w, zero_offset=0)
        full = QuantLinear.from_gptq(qweight, qzeros, scales, g_idx, bias_for(256), 4, 0)
        xa = (torch.randn(3, 512, generator=gen(22))).half()
        with torch.no_grad():
            y_full = full(xa)
            p = tp.shard(full, "row", group, name="down_proj")
            y_tp = p(xa[:, rank * 256:(rank + 1) * 256])
        out["gptq_act_order"] = ((y_tp.double() - y_full.double()).norm() / y_full.double().norm()).item()
        # an act-order MLP dealt out in whole groups (plan_features)
        full, model = ActOrderMLP(), ActOrderMLP()
        tp.parallelize(model, group)
        assert model.down_proj.features is not None
        xm = x.half()
        with torch.no_grad():
            y_full, y_tp = full(xm), model(xm)
        out["act_order_mlp"] = ((y_tp.double() - y_full.double()).norm() / y_full.double().norm()).item()
        results[rank] = out
    finally:
        dist.destroy_process_group()


def test_two_process_gloo_matches_unsharded(tmp_path):
    """Two ranks (gloo, CPU, the modules' reference forward) against the unsharded model: the
    all-reduced partial products equal the TP=1 output up to the rounding of the partials to the
    output dtype (fp16: each partial rounded once, then summed and rounded once more: a few 2^-11
    relative; float32 W8A8: the activation blocks are the same on both paths, so only float32
    reassociation)."""
    import torch.multiprocessing as mp
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(_gloo_worker, args=(2, str(tmp_path / "init"), results), nprocs=2, join=True)
    bounds = {"int4": 2e-3, "int8": 2e-3, "w8a8_asym": 1e-5, "w8a8_sym": 1e-5, "gptq_act_order": 2e-3,
              "act_order_mlp": 2e-3}
    for rank in range(2):
        for label, err in results[rank].items():
            assert err < bounds[label], (rank, label, err)
