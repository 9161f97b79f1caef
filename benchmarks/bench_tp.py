"""Decode tokens/s of a Llama-3-8B-shaped model with qgemm layers, tensor-parallel (issue 20).

    torchrun --standalone --nproc-per-node 1 benchmarks/bench_tp.py --layers 8     # TP=1
    torchrun --standalone --nproc-per-node 2 benchmarks/bench_tp.py --layers 8     # TP=2 (NCCL)

The model is written here (not transformers') so that one decode step is CUDA-graph capturable with
a static KV cache: Llama-3-8B's shapes (hidden 4096, intermediate 14336, 32 query / 8 key-value heads
of 128, vocab 128256, RMSNorm, RoPE, SwiGLU), --layers of its 32 layers. q/k/v/gate/up are
column-parallel and o/down row-parallel (qgemm.quantize_(..., process_group=...), the default plan);
embedding, norms and lm_head (float16, unquantized) are replicated on every rank. Weights are random
(the same on every rank: one seed), quantized with --config.

Per batch size: one decode step (position --context: attention over a cache of that many tokens)
captured in a CUDA graph with its NCCL all-reduces, replayed --iters times between CUDA events
(after a warm-up); tokens/s = batch * iters / seconds. Eager steps are timed too (host overhead
included). Rank 0 prints a table and appends JSON lines to --json.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

import qgemm

CONFIGS = {
    "int4": lambda: qgemm.Int4WeightOnlyConfig(group_size=128),
    "int8": lambda: qgemm.Int8WeightOnlyConfig(),
    "w8a8": lambda: qgemm.W8A8BlockConfig(),
    "fp8": lambda: qgemm.Fp8BlockwiseConfig(),
    "fp16": None,
}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim):
        super().__init__()
        self.head_dim, self.groups = head_dim, heads // kv_heads
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, x, cos, sin, cache_k, cache_v, pos, mask):
        b = x.shape[0]
        # -1 heads: the local head count under TP (q/k/v are column shards of whole heads)
        q = self.q_proj(x).view(b, 1, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, 1, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, 1, -1, self.head_dim).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        cache_k.index_copy_(2, pos, k)
        cache_v.index_copy_(2, pos, v)
        keys = cache_k.repeat_interleave(self.groups, dim=1)
        values = cache_v.repeat_interleave(self.groups, dim=1)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, 1, -1))


class MLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(a.hidden), RMSNorm(a.hidden)
        self.self_attn = Attention(a.hidden, a.heads, a.kv_heads, a.head_dim)
        self.mlp = MLP(a.hidden, a.inter)

    def forward(self, h, *attn_args):
        h = h + self.self_attn(self.input_layernorm(h), *attn_args)
        return h + self.mlp(self.post_attention_layernorm(h))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab, a.hidden)
        self.layers = nn.ModuleList([Layer(a) for _ in range(a.layers)])
        self.norm = RMSNorm(a.hidden)
        self.lm_head = nn.Linear(a.hidden, a.vocab, bias=False)
        inv = 1.0 / (500000.0 ** (torch.arange(0, a.head_dim, 2).float() / a.head_dim))
        angles = torch.outer(torch.arange(a.max_len).float(), inv)
        self.register_buffer("cos", torch.cat([angles.cos()] * 2, -1), persistent=False)
        self.register_buffer("sin", torch.cat([angles.sin()] * 2, -1), persistent=False)

    def step(self, tokens, pos, caches):
        """One decode step: tokens [B, 1] at position pos (int64 [1], on the GPU) -> logits [B, 1, V]."""
        cos, sin = self.cos[pos].to(torch.float16), self.sin[pos].to(torch.float16)
        mask = (torch.arange(caches[0][0].shape[2], device=pos.device) <= pos).view(1, 1, 1, -1)
        h = self.embed_tokens(tokens)
        for layer, (ck, cv) in zip(self.layers, caches):
            h = layer(h, cos, sin, ck, cv, pos, mask)
        return self.lm_head(self.norm(h))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--config", choices=list(CONFIGS), default="int4")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--context", type=int, default=512, help="tokens in the KV cache at the measured step")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    a = argparse.Namespace(hidden=4096, inter=14336, heads=32, kv_heads=8, head_dim=128, vocab=args.vocab,
                           layers=args.layers, max_len=args.context + 1)

    import torch.distributed as dist
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    group = None
    if world > 1:
        dist.init_process_group("nccl")
        group = dist.group.WORLD

    torch.manual_seed(0)  # the same weights on every rank
    with torch.device("cuda"):
        model = Llama(a).half()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.02)
    t0 = time.perf_counter()
    if CONFIGS[args.config] is not None:
        report = qgemm.quantize_(model, CONFIGS[args.config](), filter_fn=lambda m, n: "lm_head" not in n,
                                 process_group=group)
        assert not report.skipped, report.skipped
    elif group is not None:
        qgemm.tp.parallelize(model, group)
    torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    model.eval()
    kv_local = a.kv_heads // world
    results = []
    for batch in args.batch:
        caches = [(torch.zeros(batch, kv_local, a.max_len, a.head_dim, dtype=torch.float16, device="cuda"),
                   torch.zeros(batch, kv_local, a.max_len, a.head_dim, dtype=torch.float16, device="cuda"))
                  for _ in range(a.layers)]
        tokens = torch.randint(0, a.vocab, (batch, 1), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
        pos = torch.tensor([args.context], device="cuda")
        with torch.no_grad():
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    model.step(tokens, pos, caches)
            torch.cuda.current_stream().wait_stream(s)
            # eager
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            n_eager = max(10, args.iters // 10)
            start.record()
            for _ in range(n_eager):
                model.step(tokens, pos, caches)
            end.record()
            torch.cuda.synchronize()
            eager_ms = start.elapsed_time(end) / n_eager
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                logits = model.step(tokens, pos, caches)
            for _ in range(10):
                graph.replay()
            if group is not None:
                dist.barrier()
            torch.cuda.synchronize()
            start.record()
            for _ in range(args.iters):
                graph.replay()
            end.record()
            torch.cuda.synchronize()
            graph_ms = start.elapsed_time(end) / args.iters
            assert torch.isfinite(logits).all()
        row = {"tp": world, "config": args.config, "layers": a.layers, "batch": batch, "context": args.context,
               "vocab": a.vocab, "graph_ms_per_step": round(graph_ms, 4), "eager_ms_per_step": round(eager_ms, 4),
               "tokens_per_s": round(batch * 1000.0 / graph_ms, 1), "device": torch.cuda.get_device_name(),
               "build_s": round(build_s, 1)}
        results.append(row)
        del graph, caches
    if rank == 0:
        print(f"{'tp':>3} {'config':>6} {'layers':>6} {'batch':>5} {'graph ms/step':>13} {'eager ms/step':>13} "
              f"{'tokens/s':>10}")
        for r in results:
            print(f"{r['tp']:>3} {r['config']:>6} {r['layers']:>6} {r['batch']:>5} {r['graph_ms_per_step']:>13.3f} "
                  f"{r['eager_ms_per_step']:>13.3f} {r['tokens_per_s']:>10.1f}")
        if args.json:
            with open(args.json, "a") as f:
                for r in results:
                    f.write(json.dumps(r) + "\n")
    if group is not None:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
