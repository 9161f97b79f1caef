"""MiniLM end to end on the CPU (issue 19 part 6): the float64 fake-quant reference against the
quantizer, qgemm modules' CPU reference path inside a BERT, and, with QGEMM_MINILM_DIR set, the
embedding loss of each scheme on all-MiniLM-L6-v2 (which answers whether asymmetric RTN or smaller
groups recover what symmetric int4 g128 loses).

The GPU version (kernels against these references) is tests/test_minilm_gpu.py.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import qgemm
from minilm_util import (SCHEMES, SKIP_REASON, cosine, embed, fake_quant_rtn, fake_quantized_float64, load_minilm,
                         load_tokens, minilm_dir, quantized_copy, tiny_bert)

WEIGHT_ONLY = [s for s in SCHEMES if s.weight_only]


@pytest.mark.parametrize("scheme", WEIGHT_ONLY, ids=lambda s: s.name)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_fake_quant_is_the_quantizer(scheme, dtype):
    """The reference written from the definition dequantizes to exactly what QuantLinear holds."""
    torch.manual_seed(1)
    linear = nn.Linear(384, 256).to(dtype)
    with torch.no_grad():
        linear.weight[3, :40] = 0            # an all-zero group (asymmetric: zero point 0, smallest scale)
        linear.weight[5] = linear.weight[5].abs() + 0.01  # all positive: lo clamps to 0
    q = qgemm.nn.QuantLinear.from_float(linear, scheme.bits, scheme.group_size, scheme.symmetric)
    ref = fake_quant_rtn(linear.weight.detach(), scheme.bits, scheme.group_size, scheme.symmetric,
                         scale_dtype=dtype if dtype != torch.float32 else torch.float16)
    torch.testing.assert_close(q.dequantize().t(), ref, rtol=0, atol=0)


def _linears(model):
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


@pytest.mark.parametrize("scheme", WEIGHT_ONLY[:3], ids=lambda s: s.name)
def test_tiny_bert_cpu_path_matches_fake_quant(scheme):
    """A random BERT quantized with quantize_ runs on the CPU (the modules' float64 reference with
    float16 activations); its embeddings match the float64 fake-quantized model."""
    pytest.importorskip("transformers")
    model = tiny_bert()
    ids = torch.randint(1, 64, (3, 10), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    q, report = quantized_copy(model, scheme)
    assert len(report.replaced) == len(_linears(model)) and not report.skipped
    got = embed(q, ids, mask)
    ref = embed(fake_quantized_float64(model, scheme), ids, mask)
    assert cosine(got, ref).min() >= 0.999


@pytest.fixture(scope="module")
def minilm():
    path = minilm_dir()
    if path is None:
        pytest.skip(SKIP_REASON)
    pytest.importorskip("transformers")
    ids, mask = load_tokens(path)
    model16 = load_minilm(path, torch.float16)
    base64 = embed(model16.double(), ids, mask)  # the float16 weights, run in float64
    return model16.half(), ids, mask, base64


def test_minilm_fake_quant_loss_per_scheme(minilm):
    """float64 cosine of each weight-only scheme's fake-quantized embeddings against the float64
    model (the loss that belongs to the scheme); printed as a table."""
    model16, ids, mask, base64 = minilm
    rows = {}
    for scheme in WEIGHT_ONLY:
        cos = cosine(embed(fake_quantized_float64(model16, scheme), ids, mask), base64)
        rows[scheme.name] = (cos.mean().item(), cos.min().item())
    print("\nscheme            mean cos   min cos   (fake-quant float64 vs float64)")
    for name, (mean, low) in rows.items():
        print(f"{name:17s} {mean:9.5f} {low:9.5f}")
    assert rows["w8a16"][1] >= 0.99
    # Smaller groups only add scales: the loss can only shrink on average.
    assert rows["w4a16_sym_g32"][0] >= rows["w4a16_sym_g128"][0]


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: s.name)
def test_minilm_cpu_reference_path(minilm, scheme):
    """quantize_ on the CPU: every linear replaced, and the embeddings through the modules' CPU
    path (float16 activations) against the FP16 model: 8-bit >= 0.99, 4-bit within 0.002 of the
    float64 fake-quant loss."""
    model16, ids, mask, base64 = minilm
    q, report = quantized_copy(model16, scheme)
    assert len(report.replaced) == len(_linears(model16)), report.skipped
    got = embed(q, ids, mask)
    base16 = embed(model16, ids, mask)
    cos = cosine(got, base16)
    if scheme.bits == 8:
        assert cos.min() >= 0.99, cos
    else:
        ref = cosine(embed(fake_quantized_float64(model16, scheme), ids, mask), base64)
        assert (cos - ref).abs().max() <= 0.002, (cos, ref)
