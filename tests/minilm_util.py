"""all-MiniLM-L6-v2 for the end-to-end tests (issue 19 part 6): loading the compact copy that
benchmarks/prepare_minilm.py writes, sentence embeddings, the quantization schemes, and a float64
fake-quantized reference written from the quantizer's definition (not by calling it).

QGEMM_MINILM_DIR names the folder (model.safetensors, tokens.safetensors, config.json,
sentences.json). Needs transformers (BertModel).
"""
from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass

import torch
from torch import nn

import qgemm
from qgemm import safetensors_io


def minilm_dir() -> str | None:
    path = os.environ.get("QGEMM_MINILM_DIR")
    if path and os.path.isfile(os.path.join(path, "model.safetensors")):
        return path
    return None


SKIP_REASON = ("QGEMM_MINILM_DIR is not set or holds no model.safetensors: run "
               "`python benchmarks/prepare_minilm.py` (it writes .minilm/) and set QGEMM_MINILM_DIR")


# --- the model ---------------------------------------------------------------------------------

def load_minilm(path: str, dtype: torch.dtype = torch.float16, device="cpu") -> nn.Module:
    """The BertModel (no pooler) with the prepared weights, in `dtype`, eval mode."""
    from transformers import BertConfig, BertModel

    config = BertConfig(**{k: v for k, v in json.load(open(os.path.join(path, "config.json"))).items()
                           if not k.startswith("qgemm_")})
    config._attn_implementation = "sdpa"
    model = BertModel(config, add_pooling_layer=False)
    state = safetensors_io.load_file(os.path.join(path, "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(("position_ids", "token_type_ids"))]
    if missing or unexpected:
        raise ValueError(f"{path}: missing {missing}, unexpected {unexpected}")
    return model.to(device=device, dtype=dtype).eval()


def load_tokens(path: str, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    t = safetensors_io.load_file(os.path.join(path, "tokens.safetensors"))
    return t["input_ids"].to(device), t["attention_mask"].to(device)


def tiny_bert(seed: int = 0, dtype: torch.dtype = torch.float16) -> nn.Module:
    """A small random BertModel whose linears the kernels take (hidden 128, 4 heads, FFN 256)."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=64, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=256, max_position_embeddings=64)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return BertModel(config, add_pooling_layer=False).to(dtype).eval()


@torch.no_grad()
def embed(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """sentence-transformers' all-MiniLM-L6-v2 pipeline: mean of the last hidden states over the
    unpadded tokens, L2-normalized; returned in float64 on the CPU."""
    hidden = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state.double()
    m = attention_mask.unsqueeze(-1).double()
    pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1).cpu()


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-row cosine similarity in float64."""
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1)


# --- schemes -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scheme:
    name: str
    config: object            # the qgemm.quantize_ config
    bits: int                 # weight bits
    group_size: int = -1      # weight-only schemes: input features per scale (-1: per output channel)
    symmetric: bool = True
    weight_only: bool = True  # False: activations quantized too (W8A8, FP8)
    needs_sm90: bool = False  # kernels that exist for sm90 only


SCHEMES = [
    Scheme("w4a16_sym_g128", qgemm.Int4WeightOnlyConfig(128, True), 4, 128, True),
    Scheme("w4a16_asym_g128", qgemm.Int4WeightOnlyConfig(128, False), 4, 128, False),
    Scheme("w4a16_sym_g64", qgemm.Int4WeightOnlyConfig(64, True), 4, 64, True),
    Scheme("w4a16_sym_g32", qgemm.Int4WeightOnlyConfig(32, True), 4, 32, True),
    Scheme("w4a16_asym_g32", qgemm.Int4WeightOnlyConfig(32, False), 4, 32, False),
    Scheme("w8a16", qgemm.Int8WeightOnlyConfig(), 8, -1, True),
    Scheme("w8a8_block128", qgemm.W8A8BlockConfig(128, "symmetric"), 8, weight_only=False, needs_sm90=True),
    Scheme("fp8_block128", qgemm.Fp8BlockwiseConfig(), 8, weight_only=False, needs_sm90=True),
]
SCHEMES_BY_NAME = {s.name: s for s in SCHEMES}


def quantized_copy(model: nn.Module, scheme: Scheme):
    """A deep copy of `model` through qgemm.quantize_ (on the model's device); (copy, report)."""
    q = copy.deepcopy(model)
    report = qgemm.quantize_(q, scheme.config)
    return q, report


# --- the float64 fake-quantized reference --------------------------------------------------------

def fake_quant_rtn(weight: torch.Tensor, bits: int, group_size: int, symmetric: bool,
                   scale_dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """Round-to-nearest weight-only quantization of an nn.Linear weight [N, K], dequantized, in
    float64, written from the definition in qgemm.wq_format.quantize_rtn's docstring:

    per (group of `group_size` input features, output channel), in float32, with the scale rounded
    to scale_dtype before the codes are made
      symmetric:  scale = max|w| / (2^(bits-1) - 1) (rounded to nearest), zero = 2^(bits-1)
      asymmetric: lo = min(w, 0), hi = max(w, 0), scale = (hi - lo) / (2^bits - 1) rounded UP to
                  scale_dtype, zero = round(-lo / scale) clamped to the codes
      u = clamp(round(w / scale) + zero, 0, 2^bits - 1) (round half to even)
    and w' = (u - zero) * scale. Scales are kept in [smallest normal, largest finite] of scale_dtype.
    """
    n, k = weight.shape
    g = k if group_size == -1 else group_size
    top = 2 ** bits - 1
    w = weight.float().reshape(n, k // g, g)                         # [N, G, g]
    info = torch.finfo(scale_dtype)
    if symmetric:
        scale = (w.abs().amax(-1) / (2 ** (bits - 1) - 1)).clamp(info.tiny, info.max).to(scale_dtype)
        zero = torch.full_like(scale, 2 ** (bits - 1), dtype=torch.float32)
    else:
        lo = w.amin(-1).clamp(max=0)
        hi = w.amax(-1).clamp(min=0)
        exact = ((hi - lo) / top).clamp(info.tiny, info.max)
        scale = exact.to(scale_dtype)
        # round up: where rounding to nearest went below the exact value, take the next float up
        below = (scale.float() < exact) & (scale < info.max)
        scale = torch.where(below, _next_up(scale), scale)
        zero = torch.round(-lo / scale.float()).clamp(0, top)
    u = (torch.round(w / scale.float().unsqueeze(-1)) + zero.unsqueeze(-1)).clamp(0, top)
    return ((u.double() - zero.double().unsqueeze(-1)) * scale.double().unsqueeze(-1)).reshape(n, k)


def _next_up(x: torch.Tensor) -> torch.Tensor:
    """The next representable value above each (positive, finite) element, in x's dtype."""
    try:
        return torch.nextafter(x, torch.full_like(x, float("inf")))
    except RuntimeError:  # a torch without nextafter for this dtype on this device
        return (x.view(torch.int16) + 1).view(x.dtype)


def fake_quantized_float64(model: nn.Module, scheme: Scheme) -> nn.Module:
    """A float64 CPU copy of `model` whose nn.Linear weights are fake-quantized per `scheme`
    (weight-only schemes), from the model's own (16-bit) weights."""
    if not scheme.weight_only:
        raise ValueError(f"scheme {scheme.name} quantizes activations: no weight-only fake-quant reference")
    ref = copy.deepcopy(model).cpu()
    for module in ref.modules():
        if isinstance(module, nn.Linear):
            module.weight.data = fake_quant_rtn(module.weight.data, scheme.bits, scheme.group_size,
                                                scheme.symmetric, scale_dtype=model_scale_dtype(module))
    return ref.double()


def model_scale_dtype(linear: nn.Linear) -> torch.dtype:
    """quantize_'s default scale dtype: the weight's if 16-bit, else float16."""
    return linear.weight.dtype if linear.weight.dtype in (torch.float16, torch.bfloat16) else torch.float16
