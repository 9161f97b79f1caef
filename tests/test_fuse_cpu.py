"""qgemm.fuse_projections_ on the CPU (the modules' float64 reference path): packing q/k/v and gate/up
into one layer keeps the weights bit for bit, the packed model computes what the unpacked one does
with one call of the packed layer per group, state_dict round-trips under the packed names, copies
and threads stay independent, and torch.compile(fullgraph=True) sees one op per group."""
from __future__ import annotations

import copy
import threading

import pytest
import torch
from torch import nn

import qgemm
from qgemm.fuse import PackedSlice
from qgemm.nn import QuantLinear, W8A8Linear

K, NQ, NKV, NI = 256, 256, 128, 384


class Attention(nn.Module):
    """HF Llama's calling pattern: q/k/v on one hidden-state tensor, gate/up on one input."""

    def __init__(self, bias=False):
        super().__init__()
        self.q_proj = nn.Linear(K, NQ, bias=bias)
        self.k_proj = nn.Linear(K, NKV, bias=bias)
        self.v_proj = nn.Linear(K, NKV, bias=bias)
        self.o_proj = nn.Linear(NQ, K, bias=False)

    def forward(self, h):
        q, k, v = self.q_proj(h), self.k_proj(h), self.v_proj(h)
        mix = torch.cat([k, v], -1).float().mean(-1, keepdim=True)
        return self.o_proj((q.float() * torch.sigmoid(mix)).to(h.dtype))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(K, NI, bias=False)
        self.up_proj = nn.Linear(K, NI, bias=False)
        self.down_proj = nn.Linear(NI, K, bias=False)

    def forward(self, x):
        return self.down_proj((torch.nn.functional.silu(self.gate_proj(x).float()) * self.up_proj(x).float())
                              .to(x.dtype))


class Block(nn.Module):
    def __init__(self, bias=False):
        super().__init__()
        self.self_attn, self.mlp = Attention(bias), Mlp()

    def forward(self, h):
        h = h + self.self_attn(h)
        return h + self.mlp(h)


CONFIGS = {
    "float": None,
    "int4_g64": qgemm.Int4WeightOnlyConfig(group_size=64),
    "int4_asym": qgemm.Int4WeightOnlyConfig(group_size=128, symmetric=False),
    "int8": qgemm.Int8WeightOnlyConfig(),
    "w8a8_sym": qgemm.W8A8BlockConfig(128, "symmetric"),
    "w8a8_asym": qgemm.W8A8BlockConfig(64, "asymmetric"),
    "fp8": qgemm.Fp8BlockwiseConfig(),
}


def block(seed=0, bias=False, dtype=torch.float16):
    torch.manual_seed(seed)
    model = Block(bias)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
    return model.to(dtype)


def quantized(config, seed=0, bias=False):
    model = block(seed, bias)
    if config is not None:
        report = qgemm.quantize_(model, config)
        assert not report.skipped
    return model


def dequantized(module) -> torch.Tensor:
    """float64 W [N, K] of any packed-able layer."""
    if isinstance(module, nn.Linear):
        return module.weight.detach().double()
    if isinstance(module, QuantLinear):
        return module.dequantize().t()
    return module.dequantize()


def x_of(m=5, seed=1):
    return (torch.randn(m, K, generator=torch.Generator().manual_seed(seed)) * 0.5).half()


def assert_close_fp16(got, want):
    # The packed layer's float64 product runs over a wider N than each member's; BLAS may sum K in
    # another order, a ~1e-16 relative change that at most flips the last fp16 rounding: 1 ulp.
    ulp = torch.finfo(torch.float16).eps * want.double().abs().clamp_min(2 ** -14)
    assert ((got.double() - want.double()).abs() <= ulp).all()


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("order", ["quantize_then_fuse", "fuse_then_quantize"])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_weights_and_outputs_equal_the_members(name, order, bias):
    config = CONFIGS[name]
    if bias and name == "float":
        pytest.skip("covered by the quantized cases' float path")
    reference = quantized(config, bias=bias)
    if order == "quantize_then_fuse":
        model = quantized(config, bias=bias)
        report = qgemm.fuse_projections_(model)
    else:
        model = block(bias=bias)
        report = qgemm.fuse_projections_(model)
        if config is not None:
            q = qgemm.quantize_(model, config)
            assert sorted(q.replaced) == ["mlp.down_proj", "mlp.gate_up_proj", "self_attn.o_proj",
                                          "self_attn.qkv_proj"] and not q.skipped
    assert report.fused == {"self_attn.qkv_proj": ("q_proj", "k_proj", "v_proj"),
                            "mlp.gate_up_proj": ("gate_proj", "up_proj")} and not report.skipped
    attn, ref_attn = model.self_attn, reference.self_attn
    assert isinstance(attn.k_proj, PackedSlice) and type(attn.qkv_proj) is type(ref_attn.q_proj)
    # The packed weight is the members' concatenated, bit for bit (either order: every config
    # quantizes per output column or per 128-row block, and every member is 128-row aligned).
    want = torch.cat([dequantized(ref_attn.q_proj), dequantized(ref_attn.k_proj), dequantized(ref_attn.v_proj)])
    assert torch.equal(dequantized(attn.qkv_proj), want)
    want = torch.cat([dequantized(reference.mlp.gate_proj), dequantized(reference.mlp.up_proj)])
    assert torch.equal(dequantized(model.mlp.gate_up_proj), want)
    if bias:
        assert torch.equal(attn.qkv_proj.bias.float(), torch.cat([ref_attn.q_proj.bias, ref_attn.k_proj.bias,
                                                                  ref_attn.v_proj.bias]).float())
    calls = []
    attn.qkv_proj.register_forward_hook(lambda *a: calls.append("qkv"))
    model.mlp.gate_up_proj.register_forward_hook(lambda *a: calls.append("gate_up"))
    with torch.no_grad():
        for m in (1, 3, 17):
            x = x_of(m, seed=m)
            assert_close_fp16(model(x), reference(x))
    assert calls == ["qkv", "gate_up"] * 3  # one packed GEMM per group per forward


def test_member_calls_on_their_own():
    """Rounds: a member called twice, on another tensor, or on a tensor changed in place recomputes."""
    model, reference = quantized(CONFIGS["int4_g64"]), quantized(CONFIGS["int4_g64"])
    qgemm.fuse_projections_(model)
    attn, ref = model.self_attn, reference.self_attn
    calls = []
    attn.qkv_proj.register_forward_hook(lambda *a: calls.append(1))
    x, y = x_of(3, 1), x_of(3, 2)
    with torch.no_grad():
        assert_close_fp16(attn.k_proj(x), ref.k_proj(x))
        assert_close_fp16(attn.k_proj(x), ref.k_proj(x))  # taken already: a new round
        assert_close_fp16(attn.q_proj(y), ref.q_proj(y))  # another tensor
        x.mul_(-2)                                        # changed in place after the round opened
        assert_close_fp16(attn.v_proj(x), ref.v_proj(x))
        assert len(calls) == 4 and attn.q_proj._round.state is not None   # q and k still to come
        assert_close_fp16(attn.q_proj(x), ref.q_proj(x))
        assert_close_fp16(attn.k_proj(x), ref.k_proj(x))
        assert len(calls) == 4 and attn.q_proj._round.state is None       # taken from it: the round closed
        attn.v_proj(x)
        assert len(calls) == 5
        lead = x_of(6, 3).reshape(2, 3, K)
        assert attn.v_proj(lead).shape == (2, 3, NKV)
    with torch.inference_mode():  # inference tensors have no version counter: rounds work without it
        z = x_of(2, 4)
        assert_close_fp16(model(z), reference(z))
        assert_close_fp16(attn.k_proj(z), ref.k_proj(z))


def test_state_dict_round_trip_and_copies():
    model = quantized(CONFIGS["w8a8_sym"], seed=0, bias=True)
    qgemm.fuse_projections_(model)
    sd = model.state_dict()
    assert "self_attn.qkv_proj.weight" in sd and "mlp.gate_up_proj.weight_scale_inv" in sd
    assert not any(k.startswith(("self_attn.q_proj", "self_attn.k_proj", "mlp.up_proj")) for k in sd)
    other = quantized(CONFIGS["w8a8_sym"], seed=5, bias=True)
    qgemm.fuse_projections_(other)
    x = x_of(4)
    with torch.no_grad():
        before = other(x)
        other.load_state_dict(sd)
        assert not torch.equal(before, model(x))
        assert torch.equal(other(x), model(x))
        twin = copy.deepcopy(model)
        assert twin.self_attn.k_proj._round.owner is twin.self_attn
        assert twin.self_attn.qkv_proj is not model.self_attn.qkv_proj
        twin.self_attn.qkv_proj.weight.neg_()
        assert torch.equal(model(x), other(x)) and not torch.equal(twin(x), model(x))
        # Conversions keep the packed buffers' dtypes, as for any qgemm module.
        model.float().half()
        assert model.self_attn.qkv_proj.weight.dtype == torch.int8 and torch.equal(model(x), other(x))


def test_threads_read_their_own_input():
    model, reference = quantized(CONFIGS["int8"]), quantized(CONFIGS["int8"])
    qgemm.fuse_projections_(model)
    xs = [x_of(3, seed) for seed in range(8)]
    with torch.no_grad():
        want = [reference(x) for x in xs]
    errors = []

    def run(i):
        try:
            with torch.no_grad():
                for _ in range(5):
                    assert_close_fp16(model(xs[i]), want[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_skipped_groups_say_why():
    # Members of different kinds: k_proj left as nn.Linear by the filter.
    model = block()
    qgemm.quantize_(model, CONFIGS["int4_g64"], filter_fn=lambda m, name: not name.endswith("k_proj"))
    report = qgemm.fuse_projections_(model)
    assert "members must all be one of" in report.skipped["self_attn.qkv_proj"]
    assert isinstance(model.self_attn.k_proj, nn.Linear) and report.fused == {"mlp.gate_up_proj": ("gate_proj",
                                                                                                  "up_proj")}
    # Bias on some members only.
    model = block()
    model.self_attn.k_proj.bias = nn.Parameter(torch.zeros(NKV, dtype=torch.float16))
    assert qgemm.fuse_projections_(model).skipped["self_attn.qkv_proj"] == "bias on some members only"
    # Block-scaled members that end inside a 128-row block.
    model = block()
    model.self_attn.q_proj = nn.Linear(K, 192, bias=False).half()
    qgemm.quantize_(model, CONFIGS["fp8"])
    assert "multiple of 128" in qgemm.fuse_projections_(model).skipped["self_attn.qkv_proj"]
    # Different formats, a fused activation.
    model = quantized(CONFIGS["int4_g64"])
    model.mlp.up_proj = QuantLinear.from_float(nn.Linear(K, NI).half(), 4, 128)
    assert "group sizes differ" in qgemm.fuse_projections_(model).skipped["mlp.gate_up_proj"]
    model = quantized(CONFIGS["w8a8_sym"])
    model.mlp.up_proj = W8A8Linear.from_float(nn.Linear(K, NI), 128, activation="relu")
    assert qgemm.fuse_projections_(model).skipped["mlp.gate_up_proj"] == "a member has a fused activation"
    # Packing twice packs nothing more.
    model = block()
    qgemm.fuse_projections_(model)
    again = qgemm.fuse_projections_(model)
    assert not again.fused and "already has an attribute" in again.skipped["self_attn.qkv_proj"]
    with pytest.raises(TypeError, match="packed_modules"):
        qgemm.fuse_projections_(model, {"qkv": "q_proj"})
    with pytest.raises(TypeError, match="model must be"):
        qgemm.fuse_projections_("model")


def test_tensor_parallel_refuses_packed_models():
    model = block()
    qgemm.fuse_projections_(model)
    with pytest.raises(ValueError, match="packed projections"):
        qgemm.quantize_(model, CONFIGS["int4_g64"], process_group=(0, 2))
    with pytest.raises(ValueError, match="packed projections.*after loading"):
        qgemm.load_quantized(model, "no/checkpoint/read/first")  # refused before anything is read
    with pytest.raises(ValueError, match="packed projections"):
        qgemm.tp.parallelize(model, (0, 2))


def test_act_order_members_pack_with_one_permutation():
    torch.manual_seed(3)
    g_idx = torch.randperm(K).int() // 64  # GPTQ act-order: one group per input feature, shuffled
    members = []
    for n in (NQ, NKV, NKV):
        u = torch.randint(0, 16, (K, n), dtype=torch.uint8)
        gptq = qgemm.wq_format.IntWeight(u, torch.rand(K // 64, n).half() + 0.5, None, 4, 64)
        members.append(gptq)
    perm = torch.argsort(g_idx.long(), stable=True)
    model = block()
    ref = block()
    for name, w in zip(("q_proj", "k_proj", "v_proj"), members):
        layer = qgemm.wq_format.IntWeight(w.u, w.scale, None, 4, 64, perm)
        setattr(model.self_attn, name, QuantLinear.from_int_weight(layer))
        setattr(ref.self_attn, name, QuantLinear.from_int_weight(layer))
    report = qgemm.fuse_projections_(model)
    assert "self_attn.qkv_proj" in report.fused
    assert torch.equal(model.self_attn.qkv_proj.g_idx, ref.self_attn.q_proj.g_idx)
    x = x_of(3)
    with torch.no_grad():
        assert_close_fp16(model(x), ref(x))
    # Another permutation on one member: not packed.
    other = block()
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
        p = perm if i else torch.arange(K)
        layer = qgemm.wq_format.IntWeight(members[i].u, members[i].scale, None, 4, 64, p)
        setattr(other.self_attn, name, QuantLinear.from_weight(qgemm.IntBWeight.from_int_weight(layer), act_order=True))
    assert "permutations (g_idx) differ" in qgemm.fuse_projections_(other).skipped["self_attn.qkv_proj"]


def _count_ops(counts):
    def backend(gm, example_inputs):
        counts.append(sum(1 for n in gm.graph.nodes if n.op == "call_function" and "module_forward" in str(n.target)))
        return gm.forward
    return backend


@pytest.mark.parametrize("name", ["int4_g64", "w8a8_sym", "fp8"])
def test_compile_sees_one_op_per_group(name):
    model, reference = quantized(CONFIGS[name]), quantized(CONFIGS[name])
    qgemm.fuse_projections_(model)
    x = x_of(5)
    with torch.no_grad():
        eager = model(x)
        assert_close_fp16(eager, reference(x))
        counts = []
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=_count_ops(counts), fullgraph=True)
        assert torch.equal(compiled(x), eager)
        assert counts == [4]  # qkv, o, gate_up, down
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
        assert torch.equal(compiled(x), eager) and torch.equal(compiled(x_of(5, 9)), model(x_of(5, 9)))
        assert model.self_attn.q_proj._round.state is None  # no round left open by the compiled graph


def test_export_of_a_packed_model():
    model = quantized(CONFIGS["int4_g64"])
    qgemm.fuse_projections_(model)
    x = x_of(3)
    with torch.no_grad():
        exported = torch.export.export(model, (x,))
    ops = [n.target for n in exported.graph.nodes if n.op == "call_function"]
    assert ops.count(torch.ops.qgemm.module_forward.default) == 4
    assert torch.equal(exported.module()(x), model(x))


def test_hf_llama_packed():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=256, intermediate_size=384, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    base = transformers.LlamaForCausalLM(cfg).half().eval()
    reference, model = copy.deepcopy(base), copy.deepcopy(base)
    qgemm.quantize_(reference, CONFIGS["w8a8_sym"])
    report = qgemm.fuse_projections_(model)
    assert len(report.fused) == 4 and not report.skipped
    qgemm.quantize_(model, CONFIGS["w8a8_sym"])
    tokens = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        got, want = model(tokens).logits, reference(tokens).logits
    # Same weights and activations bit for bit; the float64 products may round 1 ulp apart per layer,
    # which the next layers carry: fp16 logits to within a few ulp of their largest value.
    assert (got.double() - want.double()).abs().max() <= 8 * torch.finfo(torch.float16).eps * want.abs().max()


def test_pack_after_loading_a_checkpoint(tmp_path):
    """load_quantized, then fuse_projections_: GPTQ v2 (zero points, g32) q/k/v and gate/up, packed
    without requantizing (the packed codes are the checkpoint's), outputs as the unpacked model's."""
    from test_checkpoint_cpu import int_weight, write_folder

    cfg = {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False, "sym": False,
           "checkpoint_format": "gptq_v2"}
    shapes = {"self_attn.q_proj": NQ, "self_attn.k_proj": NKV, "self_attn.v_proj": NKV, "mlp.gate_proj": NI,
              "mlp.up_proj": NI}
    tensors, expected = {}, {}
    for i, (name, n) in enumerate(shapes.items()):
        w = int_weight(K, n, 4, 32, seed=70 + i)
        qweight, qzeros, scales, g_idx = qgemm.wq_format.pack_gptq(w, zero_offset=0)
        tensors.update({f"{name}.qweight": qweight, f"{name}.qzeros": qzeros, f"{name}.scales": scales,
                        f"{name}.g_idx": g_idx})
        expected[name] = w.dequantize().t()
    folder = write_folder(tmp_path / "gptq", cfg, tensors)
    reference, model = qgemm.load_quantized(block(), folder), qgemm.load_quantized(block(), folder)
    report = qgemm.fuse_projections_(model)
    assert len(report.fused) == 2 and not report.skipped
    assert torch.equal(dequantized(model.self_attn.qkv_proj),
                       torch.cat([expected[f"self_attn.{p}_proj"] for p in "qkv"]))
    assert torch.equal(dequantized(model.mlp.gate_up_proj), torch.cat([expected["mlp.gate_proj"],
                                                                       expected["mlp.up_proj"]]))
    x = x_of(4)
    with torch.no_grad():
        assert_close_fp16(model(x), reference(x))
    with pytest.raises(ValueError, match="after loading"):
        qgemm.load_quantized(model, folder)
