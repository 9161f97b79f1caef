"""End-to-end model benchmark (issue 19 part 5): a Llama-architecture model with random weights,
quantized with qgemm.quantize_, against the FP16 model.

    python benchmarks/bench_model.py --config llama3-8b --layers 32 --json out.json --png out.png
    python benchmarks/bench_model.py --config tiny --device cpu --steps 2 --prefill 16    # smoke test

Model: transformers' LlamaForCausalLM built from a config (nothing downloaded), weights from its own
random init (normal, std 0.02) under a fixed seed. Configs: llama3-8b (Llama-3-8B shapes: hidden
4096, FFN 14336, 32 heads, 8 KV heads, vocabulary 128256; --layers N keeps N of its 32 layers),
small (hidden 1024, FFN 2816, 8 layers), tiny (CPU smoke tests).

Variants: fp16 (the baseline), w4a16 (Int4WeightOnlyConfig g128 symmetric), w8a16
(Int8WeightOnlyConfig, per channel), w8a8 (W8A8BlockConfig block-128 symmetric), fp8
(Fp8BlockwiseConfig), and torch_int4: torch's own int4 path (tinygemm, torch._weight_int4pack_mm,
g128) through TorchInt4Linear below. Every nn.Linear is quantized, lm_head included: quantize_'s
default filter, as torchao's quantize_ and gpt-fast do (--lm-head fp16 keeps lm_head FP16, as GPTQ
and AWQ checkpoints do; a Llama-3-8B step then reads 1.05 GB of FP16 lm_head in every variant).
torch_int4 runs in bfloat16, the only activation dtype its CUDA kernel takes (dense bf16 and fp16 run
at the same speed).

Measures, per variant:
  decode   tokens/s at each --batch (default 1 and 16): a static KV cache (transformers' StaticCache,
           --cache-len slots), a --prompt-token prefill, then --steps greedy decode steps (the argmax
           feeds the next input, the cache position advances on the GPU). Tokens/s = batch * steps /
           time of the steps (CUDA events).
  prefill  the time of a --prefill-token forward at batch 1 (no cache, logits of the last token).
  fidelity cosine of the last layer's logits against the FP16 model's on --fidelity-tokens fixed
           tokens (per position; mean and min); targets >= 0.99 (8-bit), >= 0.98 (4-bit).

--mode, the same for every variant:
  compile  (default on a GPU) torch.compile(fullgraph=True): the decode step with
           mode="reduce-overhead" (Inductor's fused kernels replayed as CUDA graphs; the cache's
           tensors and the token buffer are static addresses, and a graph the cudagraph trees skip
           is reported), the prefill in the default mode. qgemm's modules are one opaque custom op
           each (qgemm/nn/_ops.py). This is how a serving stack runs a model: eager transformers
           spends ~60 kernels per layer on norms, RoPE and casts, which at batch 1 take about as
           long as an FP16 layer's GEMMs and hide most of a quantized layer's gain. A 32-layer
           variant compiles in about a minute on the device. The compiled step's greedy tokens
           are compared with the eager step's from the same cache state (first token and 8 steps;
           Inductor's fusions round differently, and on a random model a flip changes the rest).
  graph    CUDA graphs of the eager step and prefill: the same kernels as eager, no host cost.
  eager    (default on the CPU) nothing replayed or compiled.

With --layers below the config's full depth, the rows also give the full-depth equivalent: the time
of the non-layer part (embedding, final norm, lm_head, argmax; timed on its own, compiled or
captured as the step is) plus full_depth / layers times the rest; the prefill the same way, with
the batch-1 head. Few layers make it noisy (the rest is scaled up): 32 layers for the tables.

--profile prints the largest kernels of one eager prefill and decode step per variant.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import sys
import time
import traceback

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import qgemm  # noqa: E402

CONFIGS = {
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                      vocab_size=128256, num_hidden_layers=32, max_position_embeddings=8192, rms_norm_eps=1e-5,
                      rope_theta=500000.0),
    "small": dict(hidden_size=1024, intermediate_size=2816, num_attention_heads=16, num_key_value_heads=4,
                  vocab_size=32000, num_hidden_layers=8, max_position_embeddings=4096, rms_norm_eps=1e-5),
    "tiny": dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                 vocab_size=512, num_hidden_layers=2, max_position_embeddings=512, rms_norm_eps=1e-5),
}

VARIANTS = {
    "fp16": None,
    "w4a16": qgemm.Int4WeightOnlyConfig(group_size=128, symmetric=True),
    "w8a16": qgemm.Int8WeightOnlyConfig(),
    "w8a8": qgemm.W8A8BlockConfig(block_size=128, scheme="symmetric"),
    "fp8": qgemm.Fp8BlockwiseConfig(),
    "torch_int4": "torch_int4",
}
FOUR_BIT = ("w4a16", "torch_int4")

# The targets: (variant, measure) -> speedup over FP16.
TARGETS = {("w4a16", "decode_b1"): 2.5, ("w4a16", "decode_b16"): 2.0, ("w8a16", "decode_b1"): 1.6,
           ("w8a8", "decode_b1"): 1.6, ("fp8", "prefill"): 1.3, ("w8a8", "prefill"): 1.3}


# --- torch's int4 path -------------------------------------------------------------------------------

class TorchInt4Linear(nn.Module):
    """nn.Linear through torch's int4 kernel (tinygemm): torch._weight_int4pack_mm on CUDA,
    torch._weight_int4pack_mm_for_cpu on the CPU. The quantizer is gpt-fast's / torchao's for this
    kernel: per (output channel, group of g input features), over [min, max] of the group,
    scale = (max - min) / 15, zero = min + 8 * scale (the value of code 8), codes
    q = clamp(round((w - min) / scale), 0, 15), and the kernel computes w' = (q - 8) * scale + zero.
    Scales and zeros in bfloat16; activations bfloat16 (cast here if they are not)."""

    def __init__(self, linear: nn.Linear, group_size: int = 128, inner_k_tiles: int = 8):
        super().__init__()
        w = linear.weight.detach().float()
        n, k = w.shape
        if k % group_size or k % (inner_k_tiles * 16) or n % 8:
            raise ValueError(f"TorchInt4Linear: K={k} must be a multiple of group_size={group_size} and of "
                             f"{inner_k_tiles * 16}, N={n} of 8")
        self.in_features, self.out_features, self.group_size = k, n, group_size
        g = w.reshape(n, k // group_size, group_size)
        lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
        scale = (hi - lo).clamp(min=1e-6) / 15
        zero = lo + 8 * scale
        scale, zero = scale.to(torch.bfloat16), zero.to(torch.bfloat16)
        q = ((g - (zero.float() - 8 * scale.float())) / scale.float()).round().clamp(0, 15).to(torch.int32)
        q = q.reshape(n, k)
        if w.is_cuda:
            packed = torch.ops.aten._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8),
                                                                inner_k_tiles)
        else:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, inner_k_tiles)
        self.register_buffer("weight_int4", packed)
        # [K / g, N, 2]: (scale, zero) per group and output channel
        sz = torch.cat([scale.reshape(n, -1, 1), zero.reshape(n, -1, 1)], dim=2).transpose(0, 1).contiguous()
        self.register_buffer("scales_and_zeros", sz)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().to(torch.bfloat16))

    def forward(self, x):
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if x2.dtype != torch.bfloat16:
            x2 = x2.to(torch.bfloat16)
        mm = torch.ops.aten._weight_int4pack_mm if x2.is_cuda else torch.ops.aten._weight_int4pack_mm_for_cpu
        y = mm(x2.contiguous(), self.weight_int4, self.group_size, self.scales_and_zeros)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features).to(x.dtype)


def to_torch_int4(model: nn.Module, filter_fn) -> list[str]:
    replaced = []
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear) and filter_fn(module, name):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, TorchInt4Linear(module))
            replaced.append(name)
    return replaced


# --- the model -------------------------------------------------------------------------------------

@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_model(name: str, layers: int | None, dtype: torch.dtype, device: str, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    fields = dict(CONFIGS[name])
    full_depth = fields["num_hidden_layers"]
    if layers:
        fields["num_hidden_layers"] = layers
    config = LlamaConfig(**fields, tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with default_dtype(dtype), torch.device(device):
        model = LlamaForCausalLM(config)
    return model.to(dtype).eval(), full_depth


def make_variant(base: nn.Module, variant: str, quantize_lm_head: bool, dtype: torch.dtype):
    """(model, dtype, replaced, skipped) for `variant`, a copy of `base` (base itself for fp16)."""
    def filter_fn(module, name):
        return quantize_lm_head or not name.endswith("lm_head")

    if variant == "fp16":
        return base, dtype, [], {}
    model = copy.deepcopy(base)
    if variant == "torch_int4":
        model = model.to(torch.bfloat16)
        return model, torch.bfloat16, to_torch_int4(model, filter_fn), {}
    report = qgemm.quantize_(model, VARIANTS[variant], filter_fn=filter_fn)
    return model, dtype, report.replaced, report.skipped


def quant_plans(model: nn.Module, dtype: torch.dtype) -> list:
    """Make every qgemm module's plan now (the first forward would), for qgemm.prebuild."""
    return [m.plan(dtype) for m in model.modules() if isinstance(m, qgemm.nn.QuantModule)]


def prebuild(model: nn.Module, variant: str, dtype: torch.dtype, m_values, jobs: int):
    if not torch.cuda.is_available() or variant in ("fp16", "torch_int4"):
        return
    kernels = quant_plans(model, dtype)
    kernels += {"w8a8": ["act_quant"], "fp8": ["fp8_act_quant"]}.get(variant, [])
    t0 = time.perf_counter()
    qgemm.prebuild(kernels, m_values=sorted(set(m_values)), jobs=jobs, progress=lambda line: None)
    print(f"  [{variant}] kernels ready in {time.perf_counter() - t0:.1f} s", flush=True)


def layer_shapes(name: str, fuse: bool = False) -> list[tuple[int, int]]:
    """(in_features, out_features) of a decoder layer's linears: q/o, k/v, gate/up, down; with fuse,
    the packed q/k/v and gate/up (qgemm.fuse_projections_) in place of their members."""
    c = CONFIGS[name]
    h, f = c["hidden_size"], c["intermediate_size"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
    if fuse:
        return [(h, h + 2 * kv), (h, h), (h, 2 * f), (f, h)]
    return [(h, h), (h, kv), (h, f), (f, h)]


def prebuild_only(args, batches, variants, m_values, dtype):
    """Build, in one parallel qgemm.prebuild, the kernels the benchmark's variants need at its M
    values and (with --minilm-m) those of tests/test_minilm_gpu.py, from one quantized layer of
    each shape (plans choose kernels from N, K, M, bias and dtype)."""
    device = torch.device(args.device)
    jobs = []  # (config, in, out, bias, m_values)
    for variant in variants:
        if isinstance(VARIANTS[variant], str) or VARIANTS[variant] is None:
            continue
        shapes = layer_shapes(args.config, args.fuse)
        if args.lm_head == "quantized":
            shapes.append((CONFIGS[args.config]["hidden_size"], CONFIGS[args.config]["vocab_size"]))
        jobs += [(VARIANTS[variant], k, n, False, m_values) for k, n in shapes]
    if args.minilm_m:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
        from minilm_util import SCHEMES  # the MiniLM test's schemes

        for scheme in SCHEMES:
            jobs += [(scheme.config, k, n, True, [args.minilm_m]) for k, n in ((384, 384), (384, 1536), (1536, 384))]
    import importlib

    # A plan's kernels at its own M values (so that MiniLM's layers are not asked about the Llama
    # batch sizes): qgemm.prebuild's helper where it has one, else the plans at every M value.
    plan_specs = getattr(importlib.import_module("qgemm.prebuild"), "_plan_specs", None)
    all_m = sorted({m for *_, ms in jobs for m in ms})
    kernels, extra = [], set()
    for config, k, n, bias, ms in jobs:
        linear = nn.Linear(k, n, bias=bias, device=device, dtype=dtype)
        plan = config.convert(linear).plan(dtype)
        kernels += (plan_specs(plan, ms) or []) if plan_specs else [plan]
        if isinstance(config, qgemm.W8A8BlockConfig):
            extra.add("act_quant")
        if isinstance(config, qgemm.Fp8BlockwiseConfig):
            extra.add("fp8_act_quant")
    t0 = time.perf_counter()
    lines = []
    qgemm.prebuild(kernels + sorted(extra), m_values=all_m, jobs=args.jobs, progress=lines.append)
    print(f"prebuild: {len(kernels)} plan kernels (with repeats) + families {sorted(extra)}: "
          f"{len(lines)} reported in {time.perf_counter() - t0:.0f} s", flush=True)
    for line in lines:
        print("  " + line)


# --- measurements ------------------------------------------------------------------------------------

def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Timer:
    """CUDA events on a GPU, perf_counter on the CPU; elapsed seconds."""

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        if self.device.type == "cuda":
            self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.start.record()
        else:
            self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.end.record()
            self.end.synchronize()
            self.seconds = self.start.elapsed_time(self.end) / 1e3
        else:
            self.seconds = time.perf_counter() - self.t0


@torch.no_grad()
def fidelity_logits(model, tokens):
    return model(input_ids=tokens, use_cache=False).logits[0].float()


def cosine_rows(a, b):
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1)


@torch.no_grad()
def decode_tokens_per_s(model, batch: int, args, device):
    """(tokens/s, graph used, error, info) of greedy decode at `batch` with a static KV cache; info
    holds, under --mode compile, the share of greedy tokens the compiled step gets as the eager one does."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=args.cache_len)
    g = torch.Generator(device="cpu").manual_seed(1234 + batch)
    prompt = torch.randint(0, model.config.vocab_size, (batch, args.prompt), generator=g).to(device)
    tok = torch.zeros(batch, 1, dtype=torch.long, device=device)

    def step():
        out = model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
        tok.copy_(out.logits[:, -1].argmax(-1, keepdim=True))

    def prefill():
        cache.reset()
        out = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
        tok.copy_(out.logits[:, -1].argmax(-1, keepdim=True))

    warm = 3
    if args.prompt + 2 * warm + args.steps > args.cache_len:
        need = args.prompt + 2 * warm + args.steps
        raise ValueError(f"--cache-len {args.cache_len} < prompt + steps + warm-up ({need})")
    run_step, graph_used, error, info = step, False, None, {}
    if args.mode == "compile":
        # An eager prefill first: the cache allocates its tensors lazily, on its first update, and
        # marks them static addresses only outside compilation. The step also writes the next token
        # into `tok`. The cudagraph trees of reduce-overhead replay a graph only if every tensor it
        # mutates is a static address; they skip it otherwise.
        prefill()
        for t in [tok] + cache_tensors(cache):
            torch._dynamo.mark_static_address(t)
        skips = cudagraph_skips()
        compiled, error = compile_fn(step, "reduce-overhead" if device.type == "cuda" else None)
        prefill()
        for _ in range(warm):
            compiled()
        skipped = cudagraph_skips() - skips
        if skipped:
            error = (error + "; " if error else "") + f"cudagraph trees skipped {skipped} graph(s)"
            print(f"    {error}", flush=True)
        run_step, graph_used = compiled, device.type == "cuda" and not skipped
        # The compiled step against the eager one from the same cache state: the greedy tokens of 8
        # steps (Inductor's fused norms may round differently, so a rare flip is not an error).
        def greedy(run, n=8):
            prefill()
            out = []
            for _ in range(n):
                run()
                out.append(tok.clone())
            return torch.cat(out, 1)
        equal = greedy(compiled) == greedy(step)
        first, same = equal[:, 0].float().mean().item(), equal.float().mean().item()
        info.update(compiled_first_token_match=first, compiled_tokens_match_eager=same)
        print(f"    compiled decode step against the eager one: first token equal in {first:.0%} of sequences, "
              f"{same:.0%} of 8 greedy tokens (one flip changes the rest)", flush=True)
    elif args.mode == "graph" and device.type == "cuda":
        prefill()
        run_step, error = capture(step, device)
        graph_used = error is None
    prefill()
    for _ in range(warm):
        run_step()
    sync(device)
    with Timer(device) as t:
        for _ in range(args.steps):
            run_step()
    return batch * args.steps / t.seconds, graph_used, error, info


@torch.no_grad()
def head_seconds(model, batch: int, args, device) -> float:
    """The per-step time of what is not a decoder layer: embedding, final norm, lm_head, argmax
    (compiled as the decode step is under --mode compile, else a CUDA graph on a GPU)."""
    tok = torch.zeros(batch, 1, dtype=torch.long, device=device)

    def head():
        h = model.model.norm(model.model.embed_tokens(tok))
        tok.copy_(model.lm_head(h)[:, -1].argmax(-1, keepdim=True))

    run = head
    if args.mode == "compile":
        torch._dynamo.mark_static_address(tok)
        run, _ = compile_fn(head, "reduce-overhead" if device.type == "cuda" else None)
    elif device.type == "cuda":
        run, _ = capture(head, device)  # replayed under every mode but eager-on-CPU: no host cost
    for _ in range(3):
        run()
    sync(device)
    with Timer(device) as t:
        for _ in range(args.steps):
            run()
    return t.seconds / args.steps


def prefill_tokens(model, args, device) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(99)
    return torch.randint(0, model.config.vocab_size, (1, args.prefill), generator=g).to(device)


@torch.no_grad()
def prefill_seconds(model, args, device) -> tuple[float, str | None]:
    """(median seconds of a --prefill-token forward, error of a failed compile or None)."""
    tokens = prefill_tokens(model, args, device)

    def forward():
        # Returned: a compiled forward whose result nobody reads is dead code to Inductor.
        return model(input_ids=tokens, use_cache=False, logits_to_keep=1).logits

    run, error = forward, None
    if args.mode == "compile":
        run, error = compile_fn(forward, None)
    elif args.mode == "graph" and device.type == "cuda":
        # Replayed as a CUDA graph, as decode is: an eager 2048-token forward is bound by the host
        # (on the device machine's CPU its ~200 launches per 4 layers took as long as the kernels).
        run, error = capture(forward, device)
    for _ in range(2):
        run()
    times = []
    for _ in range(args.prefill_reps):
        sync(device)
        with Timer(device) as t:
            run()
        times.append(t.seconds)
    return sorted(times)[len(times) // 2], error


def capture(fn, device):
    """(replay of a CUDA graph of fn, None), warmed up on a side stream as torch's recipe does; (fn,
    error) where the capture fails."""
    try:
        s = torch.cuda.Stream(device)
        s.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream(device).wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph.replay, None
    except Exception as e:  # noqa: BLE001 - report and time fn eagerly instead
        error = f"capture failed, eager timed: {type(e).__name__}: {e}"
        print(f"    {error}", flush=True)
        torch.cuda.synchronize(device)
        return fn, error


def cache_tensors(cache) -> list:
    """The tensors a StaticCache mutates in place (keys, values, and its position counters)."""
    found = []
    for layer in getattr(cache, "layers", []):
        for value in vars(layer).values():
            if isinstance(value, torch.Tensor):
                found.append(value)
    return found


def cudagraph_skips() -> int:
    """Graphs the cudagraph trees of torch.compile declined to capture so far (torch's counter)."""
    from torch._dynamo.utils import counters
    return int(counters["inductor"]["cudagraph_skips"])


def compile_fn(fn, mode):
    """(torch.compile(fn, mode), None), fullgraph=True so a graph break cannot pass unseen; where
    fullgraph fails to trace, fn compiled with graph breaks allowed and the reason as the error."""
    # A fresh Dynamo state per compile: every variant and batch recompiles the same step function,
    # and past the recompile limit Dynamo would run it eagerly without a word.
    torch._dynamo.reset()
    compiled = torch.compile(fn, mode=mode, fullgraph=True)
    try:
        compiled()
        return compiled, None
    except Exception as e:  # noqa: BLE001 - report it; the graph-break compile still measures
        error = f"fullgraph compile failed, graph breaks allowed: {type(e).__name__}: {str(e)[:300]}"
        print(f"    {error}", flush=True)
        torch._dynamo.reset()
        compiled = torch.compile(fn, mode=mode, fullgraph=False)
        compiled()
        return compiled, error


@torch.no_grad()
def top_kernels(fn, device, top: int = 12) -> dict:
    """One profiled call of fn (after one warm call): its kernels (CPU ops on a CPU device) grouped
    by name, the `top` largest by total time, and the totals."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    fn()
    sync(device)
    with profile(activities=[ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]) as prof:
        fn()
        sync(device)
    rows = []
    for e in prof.key_averages():
        us = e.self_device_time_total if cuda else e.self_cpu_time_total
        if us > 0:
            rows.append((e.key, us, e.count))
    rows.sort(key=lambda r: -r[1])
    total = sum(r[1] for r in rows)
    return {"total_us": total, "launches": sum(r[2] for r in rows),
            "top": [{"name": name[:120], "us": us, "count": count, "share": us / total if total else 0.0}
                    for name, us, count in rows[:top]]}


def profile_variant(model, batch: int, args, device) -> dict:
    """Kernel time of one eager prefill (--prefill tokens, or 128) and of one eager decode step at
    `batch` (the step that the decode measure replays, here unfused and unreplayed)."""
    from transformers import StaticCache

    tokens = prefill_tokens(model, argparse.Namespace(prefill=args.prefill or 128), device)
    out = {"prefill": top_kernels(lambda: model(input_ids=tokens, use_cache=False, logits_to_keep=1), device)}
    cache = StaticCache(config=model.config, max_cache_len=args.cache_len)
    tok = torch.zeros(batch, 1, dtype=torch.long, device=device)
    with torch.no_grad():
        model(input_ids=tok.repeat(1, args.prompt), past_key_values=cache, use_cache=True, logits_to_keep=1)
    out[f"decode_b{batch}"] = top_kernels(
        lambda: model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1), device)
    return out


def print_profile(variant: str, prof: dict):
    for what, p in prof.items():
        print(f"  [{variant}] {what}: {p['total_us'] / 1e3:.2f} ms of kernels in {p['launches']} launches; largest:")
        for r in p["top"]:
            print(f"      {r['us']:10.1f} us {r['share'] * 100:5.1f}% x{r['count']:<5d} {r['name']}")


# --- report ---------------------------------------------------------------------------------------

def speedups(rows: dict, batches) -> None:
    base = rows.get("fp16")
    if not base:
        return
    for row in rows.values():
        sp = {}
        for b in batches:
            key = f"decode_b{b}"
            if row.get(key) and base.get(key):
                sp[key] = row[key] / base[key]
        if row.get("prefill_s") and base.get("prefill_s"):
            sp["prefill"] = base["prefill_s"] / row["prefill_s"]
        row["speedup"] = sp


def versus_torch_int4(result: dict) -> None:
    """qgemm's W4A16 over torch's int4 path, per measure (above 1: qgemm faster)."""
    ours, peer = result["variants"].get("w4a16", {}), result["variants"].get("torch_int4", {})
    vs = {}
    for key in ours:
        if key.startswith("decode_b") and ours.get(key) and peer.get(key):
            vs[key] = ours[key] / peer[key]
    if ours.get("prefill_s") and peer.get("prefill_s"):
        vs["prefill"] = peer["prefill_s"] / ours["prefill_s"]
    if vs:
        result["w4a16_vs_torch_int4"] = vs


def print_table(result: dict, batches):
    rows = result["variants"]
    extrap = result["layers"] < result["full_depth"]
    head = f"{'variant':11s}" + "".join(f" {'dec b' + str(b) + ' tok/s':>16s}" for b in batches)
    head += f" {'prefill ' + str(result['prefill_tokens']) + ' ms':>16s} {'logit cos mean/min':>19s}  graph"
    print(f"\n{result['config']} ({result['layers']} of {result['full_depth']} layers), {result['device_name']}, "
          f"{result['dtype']}; speedups over fp16 in brackets")
    print(head)
    for name, row in rows.items():
        if "error" in row and not (row.get(f"decode_b{batches[0]}") if batches else row.get("prefill_s")):
            print(f"{name:11s} failed: {row['error']}")
            continue
        sp = row.get("speedup", {})
        line = f"{name:11s}"
        for b in batches:
            v = row.get(f"decode_b{b}")
            line += f" {v:9.1f} ({sp.get(f'decode_b{b}', float('nan')):4.2f}x)" if v else f" {'-':>16s}"
        p = row.get("prefill_s")
        line += f" {p * 1e3:9.2f} ({sp.get('prefill', float('nan')):4.2f}x)" if p else f" {'-':>16s}"
        cm, cn = row.get("logits_cos_mean"), row.get("logits_cos_min")
        line += f" {cm:9.5f}/{cn:.5f}" if cm is not None else f" {'-':>19s}"
        line += f"  {row.get('graph', '-')}"
        print(line)
    if extrap:
        print(f"\nfull-depth equivalent ({result['full_depth']} layers; head time measured, layers scaled):")
        for name, row in rows.items():
            fd = row.get("full_depth_equivalent")
            if fd:
                print(f"{name:11s}" + "".join(f" {fd.get(f'decode_b{b}', float('nan')):9.1f} tok/s" for b in batches)
                      + (f" prefill {fd['prefill_s'] * 1e3:9.2f} ms" if fd.get("prefill_s") else ""))
    vs = result.get("w4a16_vs_torch_int4")
    if vs:
        print("\nw4a16 (qgemm) over torch_int4 (tinygemm): " +
              ", ".join(f"{k} {v:.2f}x" for k, v in vs.items()))
    print("\ntargets (issue 19):")
    for (variant, measure), target in TARGETS.items():
        row = rows.get(variant, {})
        got = row.get("speedup", {}).get(measure)
        status = "n/a" if got is None else ("met" if got >= target else "MISSED")
        print(f"  {variant:6s} {measure:10s} >= {target:.1f}x: {'-' if got is None else f'{got:.2f}x'} {status}")
    for name, row in rows.items():
        if name == "fp16" or row.get("logits_cos_mean") is None:
            continue
        target = 0.98 if name in FOUR_BIT else 0.99
        ok = row["logits_cos_mean"] >= target
        print(f"  {name:10s} logits cosine mean >= {target}: {row['logits_cos_mean']:.5f} {'met' if ok else 'MISSED'}")


def plot(result: dict, batches, path: str):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"no plot ({e})")
        return
    rows = {k: v for k, v in result["variants"].items() if v.get("speedup")}
    measures = [f"decode_b{b}" for b in batches] + ["prefill"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / max(1, len(rows))
    for i, (name, row) in enumerate(rows.items()):
        vals = [row["speedup"].get(m, 0.0) for m in measures]
        xs = [j + i * width for j in range(len(measures))]
        bars = ax.bar(xs, vals, width, label=name)
        for x, v in zip(xs, vals):
            if v:
                ax.text(x, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
        del bars
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks([j + width * (len(rows) - 1) / 2 for j in range(len(measures))])
    ax.set_xticklabels([m.replace("decode_b", "decode batch ") if "decode" in m else
                        f"prefill {result['prefill_tokens']}" for m in measures])
    ax.set_ylabel("speedup over FP16")
    ax.set_title(f"{result['config']}, {result['layers']} layers, {result['device_name']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


# --- main -----------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="llama3-8b", choices=sorted(CONFIGS))
    ap.add_argument("--layers", type=int, default=None, help="decoder layers (default: the config's)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {list(VARIANTS)}")
    ap.add_argument("--batch", type=int, action="append", help="decode batch sizes (default 1 and 16; 0: no decode)")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens before decoding")
    ap.add_argument("--steps", type=int, default=64, help="timed decode steps")
    ap.add_argument("--cache-len", type=int, default=512, help="static KV cache slots")
    ap.add_argument("--prefill", type=int, default=2048, help="prefill tokens (0: skip)")
    ap.add_argument("--prefill-reps", type=int, default=5)
    ap.add_argument("--fidelity-tokens", type=int, default=128)
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--lm-head", default="quantized", choices=("quantized", "fp16"),
                    help="quantized: every nn.Linear, quantize_'s default (and torchao's); fp16: lm_head kept, as "
                         "GPTQ/AWQ checkpoints keep it")
    ap.add_argument("--mode", choices=("compile", "graph", "eager"),
                    help="compile (default on a GPU): torch.compile(fullgraph=True), mode='reduce-overhead' for the "
                         "decode step, the default mode for the prefill; graph: CUDA graphs of the eager step and "
                         "prefill; eager (default on the CPU)")
    ap.add_argument("--profile", action="store_true",
                    help="print and keep the largest kernels of one eager prefill and decode step per variant")
    ap.add_argument("--jobs", type=int, default=16, help="parallel kernel builds (qgemm.prebuild)")
    ap.add_argument("--prebuild-only", action="store_true",
                    help="build the kernels the variants need (one layer of each shape) and exit")
    ap.add_argument("--minilm-m", type=int, default=0,
                    help="with --prebuild-only: also tests/test_minilm_gpu.py's kernels at this M (tokens)")
    ap.add_argument("--json")
    ap.add_argument("--png")
    ap.add_argument("--fuse", action="store_true",
                    help="pack q/k/v and gate/up into one linear each (qgemm.fuse_projections_) in every variant, "
                         "the FP16 baseline and torch int4 included")
    ap.add_argument("--l2-prefetch", type=int, default=None, metavar="BYTES",
                    help="the decode kernels' L2 prefetch per CTA before their wait, in place of the heuristics' "
                         "(FPAINTB_STREAM_L2_PREFETCH, W8A8_GEMV_L2_PREFETCH): an A/B knob")
    args = ap.parse_args(argv)
    if args.l2_prefetch is not None:
        from qgemm.fpaintb import heuristics as fpaintb_heuristics
        from qgemm.w8a8 import heuristics as w8a8_heuristics
        fpaintb_heuristics.FPAINTB_STREAM_L2_PREFETCH = args.l2_prefetch
        w8a8_heuristics.W8A8_GEMV_L2_PREFETCH = dict.fromkeys(w8a8_heuristics.W8A8_GEMV_L2_PREFETCH, args.l2_prefetch)
    if args.batch and (0 in args.batch and len(args.batch) > 1 or min(args.batch) < 0):
        ap.error(f"--batch: batch sizes >= 1, or a single 0 for no decode; got {args.batch}")
    batches = [] if args.batch == [0] else (args.batch or [1, 16])
    if args.mode is None:
        args.mode = "compile" if args.device.startswith("cuda") else "eager"
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"--variants: unknown {v!r}; known: {list(VARIANTS)}")
    if "fp16" not in variants:
        variants.insert(0, "fp16")
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)

    # The M values the linears see: decode batches, the prompts' prefill, fidelity, the long prefill.
    m_values = batches + [args.prompt * b for b in batches] + [args.fidelity_tokens]
    m_values += [args.prefill] if args.prefill else []
    if args.prebuild_only:
        prebuild_only(args, batches, variants, m_values, dtype)
        return None

    t_start = time.perf_counter()
    base, full_depth = build_model(args.config, args.layers, dtype, args.device)
    if args.fuse:
        # Before the variants are made from it: the FP16 baseline runs the packed GEMMs too.
        fuse_report = qgemm.fuse_projections_(base)
        print(f"packed {len(fuse_report.fused)} groups of projections ({len(fuse_report.skipped)} skipped)")
    layers = base.config.num_hidden_layers
    print(f"built {args.config} with {layers} layers in {time.perf_counter() - t_start:.1f} s "
          f"({sum(p.numel() for p in base.parameters()) / 1e9:.2f} B parameters)", flush=True)
    g = torch.Generator(device="cpu").manual_seed(7)
    fid_tokens = torch.randint(0, base.config.vocab_size, (1, args.fidelity_tokens), generator=g).to(device)
    ref_logits = fidelity_logits(base, fid_tokens)

    result = {"config": args.config, "layers": layers, "full_depth": full_depth, "dtype": args.dtype,
              "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "batches": batches, "prompt_tokens": args.prompt,
              "decode_steps": args.steps, "cache_len": args.cache_len, "prefill_tokens": args.prefill,
              "fidelity_tokens": args.fidelity_tokens, "lm_head": args.lm_head, "mode": args.mode, "fuse": args.fuse,
              "variants": {}}
    try:
        import transformers
        result["transformers"] = transformers.__version__
    except ImportError:
        pass

    def save():
        speedups(result["variants"], batches)
        versus_torch_int4(result)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)

    for variant in variants:
        t0 = time.perf_counter()
        row = result["variants"][variant] = {}
        model = None
        try:
            model, vdtype, replaced, skipped = make_variant(base, variant, args.lm_head == "quantized", dtype)
            row.update(replaced=len(replaced), skipped=skipped, dtype=str(vdtype).replace("torch.", ""))
            for name, why in skipped.items():
                print(f"  [{variant}] {name} left unquantized: {why}")
            prebuild(model, variant, vdtype, m_values, args.jobs)
            logits = fidelity_logits(model, fid_tokens)
            cos = cosine_rows(logits, ref_logits)
            row.update(logits_cos_mean=cos.mean().item(), logits_cos_min=cos.min().item(),
                       logits_finite=bool(torch.isfinite(logits).all()))
            del logits
            for b in batches:
                tps, graph_used, err, info = decode_tokens_per_s(model, b, args, device)
                row[f"decode_b{b}"] = tps
                row.update({f"{k}_b{b}": v for k, v in info.items()})
                row["graph"] = graph_used
                if err:
                    row.setdefault("notes", []).append(f"batch {b}: {err}")
            if args.prefill:
                row["prefill_s"], err = prefill_seconds(model, args, device)
                if err:
                    row.setdefault("notes", []).append(f"prefill: {err}")
            if args.profile:
                row["profile"] = profile_variant(model, batches[0] if batches else 1, args, device)
                print_profile(variant, row["profile"])
            if layers < full_depth:
                fd = {}
                for b in batches:
                    head = head_seconds(model, b, args, device)
                    per_step = b / row[f"decode_b{b}"]
                    fd[f"decode_b{b}"] = b / (head + (per_step - head) * full_depth / layers)
                    fd[f"head_s_b{b}"] = head
                if row.get("prefill_s"):
                    # The prefill's head is the step's at batch 1 (one token's lm_head; the 2048-token
                    # embedding and final norm are a few us): measured once, the layers scaled.
                    head = fd.get("head_s_b1") or head_seconds(model, 1, args, device)
                    fd["prefill_s"] = head + (row["prefill_s"] - head) * full_depth / layers
                    fd["head_s_b1"] = head
                row["full_depth_equivalent"] = fd
        except Exception as e:  # noqa: BLE001 - one variant failing must not lose the others
            row["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        finally:
            row["wall_s"] = time.perf_counter() - t0
            print(f"  [{variant}] done in {row['wall_s']:.1f} s: " +
                  ", ".join(f"{k}={v:.4g}" for k, v in row.items() if isinstance(v, float) and k != "wall_s"),
                  flush=True)
            if model is not None and model is not base:
                del model
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            save()
    # Decode at full depth from the per-layer rows: equivalents use FP16's too.
    if layers < full_depth:
        base_fd = result["variants"].get("fp16", {}).get("full_depth_equivalent", {})
        for name, row in result["variants"].items():
            fd = row.get("full_depth_equivalent")
            if fd and base_fd:
                fd["speedup"] = {k: (fd[k] / base_fd[k] if k.startswith("decode") else base_fd[k] / fd[k])
                                 for k in fd if k in base_fd and not k.startswith("head") and base_fd[k] and fd[k]}
                if fd["speedup"]:
                    print(f"  [full depth] {name}: " + ", ".join(f"{k} {v:.2f}x" for k, v in fd["speedup"].items()))
    result["wall_s"] = time.perf_counter() - t_start
    save()
    print_table(result, batches)
    if args.png:
        plot(result, batches, args.png)
    if args.json:
        print(f"json: {args.json}")
    return result


if __name__ == "__main__":
    main()
