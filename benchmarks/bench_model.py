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
g128) through TorchInt4Linear below. The decoder layers' linears are quantized; lm_head stays FP16
(--quantize-lm-head quantizes it too), as is usual for these schemes. torch_int4 runs in bfloat16,
the only activation dtype its CUDA kernel takes (dense bf16 and fp16 run at the same speed).

Measures, per variant:
  decode   tokens/s at each --batch (default 1 and 16): a static KV cache (transformers' StaticCache,
           --cache-len slots), a --prompt-token prefill, then --steps greedy decode steps, each step
           one replay of a CUDA graph captured from the eager step (the argmax feeds the next input
           inside the graph, and the cache position advances inside the graph). Tokens/s =
           batch * steps / time of the replays (CUDA events).
  prefill  the time of a --prefill-token forward at batch 1 (no cache, logits of the last token).
  fidelity cosine of the last layer's logits against the FP16 model's on --fidelity-tokens fixed
           tokens (per position; mean and min); targets >= 0.99 (8-bit), >= 0.98 (4-bit).

Why CUDA graphs of the eager step (not torch.compile mode="reduce-overhead"): both replay the same
kernels without per-launch host cost, and qgemm's modules capture (their plans launch on torch's
current stream; tests/test_nn_gpu.py captures them), but compiling 6 variants x 2 batch sizes of
a 32-layer model with Inductor costs minutes each, which the device budget cannot pay, and eager
kernels keep the FP16 and quantized models identical outside the linears (--compile runs
torch.compile(mode="reduce-overhead") instead, for comparison). If a capture fails the step is
timed eagerly and the row says so ("graph": false).

With --layers below the config's full depth, the decode rows also give the full-depth equivalent:
the step time of the non-layer part (embedding, final norm, lm_head, argmax; timed on its own as a
graph) plus full_depth / layers times the rest. The prefill time is scaled the same way (its
head is one token's lm_head, negligible).
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


def layer_shapes(name: str) -> list[tuple[int, int]]:
    """(in_features, out_features) of a decoder layer's linears: q/o, k/v, gate/up, down."""
    c = CONFIGS[name]
    h, f = c["hidden_size"], c["intermediate_size"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
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
        shapes = layer_shapes(args.config)
        if args.quantize_lm_head:
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
def decode_tokens_per_s(model, batch: int, args, device, use_graph: bool, compile_mode: bool):
    """(tokens/s, graph used, error) of greedy decode at `batch` with a static KV cache."""
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
    run_step, graph_used, error = step, False, None
    if compile_mode and device.type == "cuda":
        compiled = torch.compile(step, mode="reduce-overhead", fullgraph=False)
        prefill()
        for _ in range(warm):
            compiled()
        run_step, graph_used = compiled, True
    elif use_graph and device.type == "cuda":
        try:
            s = torch.cuda.Stream(device)
            s.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(s):  # warm-up off the default stream, as torch's capture recipe does
                prefill()
                for _ in range(warm):
                    step()
            torch.cuda.current_stream(device).wait_stream(s)
            prefill()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            run_step, graph_used = graph.replay, True
        except Exception as e:  # noqa: BLE001 - report and time the eager step instead
            error = f"capture failed, eager step timed: {type(e).__name__}: {e}"
            print(f"    {error}", flush=True)
            torch.cuda.synchronize(device)
    prefill()
    for _ in range(warm):
        run_step()
    sync(device)
    with Timer(device) as t:
        for _ in range(args.steps):
            run_step()
    del cache
    return batch * args.steps / t.seconds, graph_used, error


@torch.no_grad()
def head_seconds(model, batch: int, args, device) -> float:
    """The per-step time of what is not a decoder layer: embedding, final norm, lm_head, argmax."""
    tok = torch.zeros(batch, 1, dtype=torch.long, device=device)

    def head():
        h = model.model.norm(model.model.embed_tokens(tok))
        tok.copy_(model.lm_head(h)[:, -1].argmax(-1, keepdim=True))

    run = head
    if device.type == "cuda":
        s = torch.cuda.Stream(device)
        s.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(s):
            for _ in range(3):
                head()
        torch.cuda.current_stream(device).wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            head()
        run = graph.replay
    for _ in range(3):
        run()
    sync(device)
    with Timer(device) as t:
        for _ in range(args.steps):
            run()
    return t.seconds / args.steps


@torch.no_grad()
def prefill_seconds(model, args, device) -> float:
    g = torch.Generator(device="cpu").manual_seed(99)
    tokens = torch.randint(0, model.config.vocab_size, (1, args.prefill), generator=g).to(device)
    for _ in range(2):
        model(input_ids=tokens, use_cache=False, logits_to_keep=1)
    times = []
    for _ in range(args.prefill_reps):
        sync(device)
        with Timer(device) as t:
            model(input_ids=tokens, use_cache=False, logits_to_keep=1)
        times.append(t.seconds)
    return sorted(times)[len(times) // 2]


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
        if "error" in row and not row.get("decode_b%d" % batches[0]):
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
    ap.add_argument("--batch", type=int, action="append", help="decode batch sizes (default 1 and 16)")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens before decoding")
    ap.add_argument("--steps", type=int, default=64, help="timed decode steps")
    ap.add_argument("--cache-len", type=int, default=512, help="static KV cache slots")
    ap.add_argument("--prefill", type=int, default=2048, help="prefill tokens (0: skip)")
    ap.add_argument("--prefill-reps", type=int, default=5)
    ap.add_argument("--fidelity-tokens", type=int, default=128)
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quantize-lm-head", action="store_true")
    ap.add_argument("--no-graph", action="store_true", help="time eager decode steps")
    ap.add_argument("--compile", action="store_true", help='torch.compile(mode="reduce-overhead") decode steps')
    ap.add_argument("--jobs", type=int, default=16, help="parallel kernel builds (qgemm.prebuild)")
    ap.add_argument("--prebuild-only", action="store_true",
                    help="build the kernels the variants need (one layer of each shape) and exit")
    ap.add_argument("--minilm-m", type=int, default=0,
                    help="with --prebuild-only: also tests/test_minilm_gpu.py's kernels at this M (tokens)")
    ap.add_argument("--json")
    ap.add_argument("--png")
    args = ap.parse_args(argv)
    batches = args.batch or [1, 16]
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
              "fidelity_tokens": args.fidelity_tokens, "lm_head_quantized": args.quantize_lm_head,
              "decode_mode": "compile" if args.compile else ("eager" if args.no_graph else "cuda_graph"),
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
            model, vdtype, replaced, skipped = make_variant(base, variant, args.quantize_lm_head, dtype)
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
                tps, graph_used, err = decode_tokens_per_s(model, b, args, device, not args.no_graph, args.compile)
                row[f"decode_b{b}"] = tps
                row["graph"] = graph_used
                if err:
                    row.setdefault("notes", []).append(f"batch {b}: {err}")
            if args.prefill:
                row["prefill_s"] = prefill_seconds(model, args, device)
            if layers < full_depth:
                fd = {}
                for b in batches:
                    head = head_seconds(model, b, args, device)
                    per_step = b / row[f"decode_b{b}"]
                    fd[f"decode_b{b}"] = b / (head + (per_step - head) * full_depth / layers)
                    fd[f"head_s_b{b}"] = head
                if row.get("prefill_s"):
                    fd["prefill_s"] = row["prefill_s"] * full_depth / layers
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
        for row in result["variants"].values():
            fd = row.get("full_depth_equivalent")
            if fd and base_fd:
                fd["speedup"] = {k: (fd[k] / base_fd[k] if k.startswith("decode") else base_fd[k] / fd[k])
                                 for k in fd if k in base_fd and not k.startswith("head") and base_fd[k] and fd[k]}
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
