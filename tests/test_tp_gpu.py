"""Tensor-parallel qgemm layers on two GPUs (issue 20). Run under torchrun, one pytest per rank:

    torchrun --nproc-per-node 2 -m pytest -m gpu tests/test_tp_gpu.py -p no:cacheprovider

Skips unless WORLD_SIZE=2 and two GPUs are visible (NCCL), or QGEMM_TP_ONE_GPU=1: both ranks on
cuda:0 over gloo (NCCL refuses two ranks on one GPU); that smoke run skips the CUDA-graph test
(gloo collectives are not capturable).

Both ranks run the same tests in the same order (every collective has its partner); an assertion
fails only after the collectives of its test.

Bounds, as in the single-GPU tests (tests/test_nn_gpu.py), against the same references:
  * one layer (column- or row-parallel) against the unsharded module's CPU reference path (float64
    from the same quantized operands): BOUND of test_nn_gpu. A row-parallel layer rounds each
    partial to the output dtype before the sum: one more rounding of the output's magnitude
    (2^-11 fp16, 2^-8 bf16 relative), inside the same bounds.
  * a model (MLP, small Llama) against the unsharded quantized model's CPU reference: 1e-2, the bound
    of test_nn_gpu.test_quantize_model_on_gpu; and against the TP=1 GPU model: 1e-2.
"""
from __future__ import annotations

import copy
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import qgemm
from qgemm import tp, wq_format
from qgemm.nn import QuantLinear

from gpu_util import poison_allocator, randn, rel_err

WORLD = int(os.environ.get("WORLD_SIZE", "1"))
ONE_GPU = os.environ.get("QGEMM_TP_ONE_GPU") == "1"
RUNNABLE = torch.cuda.is_available() and WORLD == 2 and (ONE_GPU or torch.cuda.device_count() >= 2)
SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not RUNNABLE, reason="needs torchrun --nproc-per-node 2 with two GPUs "
                                            "(or QGEMM_TP_ONE_GPU=1: two ranks on one GPU over gloo)"),
]
needs_sm90 = pytest.mark.skipif(not SM90, reason="FP8 and symmetric W8A8 kernels need an sm90 GPU")

BOUND = {
    "int": {torch.float16: 2e-3, torch.bfloat16: 1e-2},
    "fp8": {torch.bfloat16: 5e-3, torch.float16: 2e-3},
    "w8a8": {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-4},
}
MODEL_BOUND = 1e-2
ODD_M = (1, 3, 17, 1000)


@pytest.fixture(scope="module")
def group():
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    local = 0 if ONE_GPU else int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("gloo" if ONE_GPU else "nccl")
    yield dist.group.WORLD
    dist.barrier()
    dist.destroy_process_group()


def rank():
    import torch.distributed as dist
    return dist.get_rank()


def float_linear(k, n, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    layer = nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n, k, generator=g) * 0.05 + 0.01)
        if bias:
            layer.bias.copy_(torch.randn(n, generator=g) * 0.1)
    return layer


def gptq_act_order(k, n, g=128, seed=7):
    gen = torch.Generator().manual_seed(seed)
    u = torch.randint(0, 16, (k, n), generator=gen, dtype=torch.uint8)
    scale = (torch.rand(k // g, n, generator=gen) * 0.02 + 0.005).half()
    zero = torch.randint(1, 16, (k // g, n), generator=gen, dtype=torch.uint8)
    perm = torch.argsort(torch.randperm(k, generator=gen) // g, stable=True)
    w = wq_format.IntWeight(u, scale, zero, 4, g, perm)
    qweight, qzeros, scales, g_idx = wq_format.pack_gptq(w, zero_offset=1)
    bias = (torch.randn(n, generator=gen) * 0.1).half()
    return QuantLinear.from_gptq(qweight, qzeros, scales, g_idx, bias, 4, 1)


# (builder of the full CPU module, bound family, x dtype); shapes cut evenly by 2, some with padding.
LAYERS = {
    "int4_g128": (lambda: QuantLinear.from_float(float_linear(1024, 528), 4, 128), "int", torch.float16),
    "int4_g32_zero_silu": (lambda: QuantLinear.from_float(float_linear(512, 272), 4, 32, False, "silu"), "int",
                           torch.bfloat16),
    "int8_per_channel": (lambda: QuantLinear.from_float(float_linear(768, 528), 8, -1), "int", torch.float16),
    "int4_cut_group": (lambda: QuantLinear.from_float(float_linear(384, 272), 4, 128), "int", torch.float16),
    "gptq_act_order": (lambda: gptq_act_order(1024, 528), "int", torch.float16),
    "w8a8_asym": (lambda: qgemm.nn.W8A8Linear.from_float(float_linear(512, 264), 64, "asymmetric"), "w8a8",
                  torch.float16),
    "w8a8_sym": (lambda: qgemm.nn.W8A8Linear.from_float(float_linear(512, 384), 128, "symmetric"), "w8a8",
                 torch.bfloat16),
    "fp8": (lambda: qgemm.nn.Fp8Linear.from_float(float_linear(512, 384)), "fp8", torch.bfloat16),
}
SM90_ONLY = {"w8a8_sym", "fp8"}


def layer_cases():
    return [pytest.param(name, marks=needs_sm90) if name in SM90_ONLY else name for name in LAYERS]


@pytest.mark.parametrize("style", ["column", "row"])
@pytest.mark.parametrize("name", layer_cases())
def test_one_layer_against_the_unsharded_reference(group, name, style):
    build, family, dtype = LAYERS[name]
    full = build()
    part = tp.shard(full, style, group, name=f"layer.{name}").cuda()
    r = rank()
    for m in ODD_M:
        x = randn(m, full.in_features, dtype=dtype, seed=100 + m)  # same seed on both ranks: the same x
        x_local = x if style == "column" else x[:, r * part.local_in_features:(r + 1) * part.local_in_features]
        poison_allocator()
        y = part(x_local)
        torch.cuda.synchronize()
        ref = full(x.cpu())
        if style == "column":
            n0 = r * part.local_out_features
            ref = ref[:, n0:n0 + part.local_out_features]
        assert y.shape == ref.shape and y.dtype == ref.dtype
        assert rel_err(y, ref) < BOUND[family][dtype], (name, style, m, rel_err(y, ref))


class MLP(nn.Module):
    def __init__(self, hidden=1024, inter=2816):
        super().__init__()
        self.gate_proj = float_linear(hidden, inter, bias=False, seed=1)
        self.up_proj = float_linear(hidden, inter, bias=False, seed=2)
        self.down_proj = float_linear(inter, hidden, bias=True, seed=3)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def mlp_configs():
    configs = [("int4", qgemm.Int4WeightOnlyConfig(), torch.float16),
               ("int4_asym_bf16", qgemm.Int4WeightOnlyConfig(group_size=64, symmetric=False), torch.bfloat16),
               ("int8", qgemm.Int8WeightOnlyConfig(), torch.float16),
               ("w8a8_asym", qgemm.W8A8BlockConfig(scheme="asymmetric"), torch.float16)]
    sm90 = [("w8a8_sym", qgemm.W8A8BlockConfig(), torch.bfloat16), ("fp8", qgemm.Fp8BlockwiseConfig(), torch.bfloat16)]
    return [pytest.param(*c, id=c[0]) for c in configs] + [pytest.param(*c, id=c[0], marks=needs_sm90) for c in sm90]


@pytest.mark.parametrize("label, config, dtype", mlp_configs())
def test_sharded_mlp_against_tp1(group, label, config, dtype):
    base = MLP().to(dtype)
    full = copy.deepcopy(base)
    qgemm.quantize_(full, config)
    sharded = copy.deepcopy(base)
    qgemm.quantize_(sharded, config, process_group=group)
    assert isinstance(sharded.down_proj, tp.RowParallelLinear)
    full_gpu, sharded = copy.deepcopy(full).cuda(), sharded.cuda()
    for m in ODD_M:
        x = randn(m, 1024, dtype=dtype, seed=200 + m)
        poison_allocator()
        y = sharded(x)
        y1 = full_gpu(x)
        torch.cuda.synchronize()
        ref = full(x.cpu())
        assert rel_err(y, ref) < MODEL_BOUND, (label, m, rel_err(y, ref))
        assert rel_err(y, y1.cpu()) < MODEL_BOUND, (label, m, rel_err(y, y1.cpu()))


@pytest.mark.skipif(ONE_GPU, reason="gloo collectives are not capturable in CUDA graphs")
def test_cuda_graph_and_two_streams(group):
    """The sharded MLP (act-order GPTQ down_proj, regrouped rows and x gather included) captured in a
    CUDA graph with its NCCL all-reduce: replays equal eager on fresh inputs; eager calls on a second
    stream too."""
    base = MLP(1024, 1024).half()
    sharded = copy.deepcopy(base)
    qgemm.quantize_(sharded, qgemm.Int4WeightOnlyConfig(), process_group=group)
    sharded.down_proj = tp.shard(gptq_act_order(1024, 1024), "row", group, name="down_proj")
    assert sharded.down_proj.src is not None
    sharded = sharded.cuda()
    static_x = randn(4, 1024, dtype=torch.float16, seed=1)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            sharded(static_x)  # plans made, NCCL communicator warmed up
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = sharded(static_x)
    for seed in (5, 6):
        x = randn(4, 1024, dtype=torch.float16, seed=seed)
        static_x.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_y, sharded(x)), seed
    s2 = torch.cuda.Stream()
    x = randn(4, 1024, dtype=torch.float16, seed=9)
    expected = sharded(x)
    s2.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s2):
        y2 = sharded(x)
    torch.cuda.current_stream().wait_stream(s2)
    torch.cuda.synchronize()
    assert torch.equal(y2, expected)


def tiny_llama_config():
    transformers = pytest.importorskip("transformers")
    return transformers, transformers.LlamaConfig(
        vocab_size=512, hidden_size=512, intermediate_size=1408, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=4, head_dim=64, max_position_embeddings=256, torch_dtype="float16",
        attn_implementation="sdpa")


@pytest.mark.parametrize("label", ["int4", "gptq_act_order_down"])
def test_sharded_llama_against_tp1(group, label):
    """A small LlamaForCausalLM (GQA: 8 query, 4 key/value heads) with q/k/v/gate/up column- and
    o/down row-parallel: logits against the TP=1 quantized model on the GPU and its CPU reference."""
    transformers, config = tiny_llama_config()
    torch.manual_seed(0)
    base = transformers.LlamaForCausalLM(config).half().eval()
    not_head = lambda m, n: "lm_head" not in n  # noqa: E731
    full = copy.deepcopy(base)
    qgemm.quantize_(full, qgemm.Int4WeightOnlyConfig(), filter_fn=not_head)
    sharded = copy.deepcopy(base)
    if label == "gptq_act_order_down":
        # act-order down_proj layers (as a GPTQ desc_act checkpoint has them), the same in both models
        for i, layer in enumerate(full.model.layers):
            layer.mlp.down_proj = gptq_act_order(1408, 512, seed=40 + i)
            sharded.model.layers[i].mlp.down_proj = gptq_act_order(1408, 512, seed=40 + i)
    qgemm.quantize_(sharded, qgemm.Int4WeightOnlyConfig(), filter_fn=not_head, process_group=group)
    assert isinstance(sharded.model.layers[0].self_attn.o_proj, tp.RowParallelLinear)
    assert isinstance(sharded.model.layers[0].mlp.down_proj, tp.RowParallelLinear)
    ids = torch.randint(0, 512, (2, 33), generator=torch.Generator().manual_seed(3))
    full_gpu, sharded = copy.deepcopy(full).cuda(), sharded.cuda()
    with torch.no_grad():
        y = sharded(ids.cuda()).logits
        y1 = full_gpu(ids.cuda()).logits
        ref = full(ids).logits
    assert rel_err(y, y1.cpu()) < MODEL_BOUND, rel_err(y, y1.cpu())
    assert rel_err(y, ref) < MODEL_BOUND, rel_err(y, ref)
    # a few greedy decode steps through the KV cache
    with torch.no_grad():
        out = sharded.generate(ids[:1].cuda(), max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 41)


def test_load_quantized_gptq_act_order_on_two_gpus(group, tmp_path_factory):
    """A GPTQ desc_act checkpoint loaded with process_group: each rank builds only its shard (on its
    GPU); the MLP matches the TP=1 load."""
    import torch.distributed as dist
    from test_checkpoint_cpu import write_folder
    folder = tmp_path_factory.mktemp(f"ckpt{rank()}") / "gptq"
    tensors = {}
    for name, (k, n, bias) in {"gate_proj": (1024, 2816, False), "up_proj": (1024, 2816, False),
                               "down_proj": (2816, 1024, True)}.items():
        layer = gptq_act_order(k, n, seed=k + n + len(name))
        w = layer.int_weight()
        intw = wq_format.IntWeight(w.codes(), w.scale, w.zero, 4, w.group_size, w.perm)
        qweight, qzeros, scales, g_idx = wq_format.pack_gptq(intw, zero_offset=1)
        tensors.update({f"{name}.qweight": qweight, f"{name}.qzeros": qzeros, f"{name}.scales": scales,
                        f"{name}.g_idx": g_idx})
        if bias:
            tensors[f"{name}.bias"] = layer.bias
    write_folder(folder, {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True}, tensors)
    full = qgemm.load_quantized(MLP(), folder)
    sharded = qgemm.load_quantized(MLP(), folder, device=torch.device("cuda", torch.cuda.current_device()),
                                   process_group=group)
    dist.barrier()
    for m in (1, 17):
        x = randn(m, 1024, dtype=torch.float16, seed=300 + m)
        y = sharded(x)
        ref = full(x.cpu())
        assert rel_err(y, ref) < MODEL_BOUND, (m, rel_err(y, ref))
