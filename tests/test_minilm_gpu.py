"""all-MiniLM-L6-v2 end to end on the GPU (issue 19 part 6): the real model quantized with each
scheme through qgemm.quantize_, its sentence embeddings (mean pooling, normalized) against the FP16
model's.

  8-bit schemes (W8A16, W8A8 block-128, FP8 block-128): cosine >= 0.99 for every sentence.
  4-bit schemes: the cosine of every sentence is within 0.002 of the same scheme's loss in float64
  on the CPU (fake-quantized weights, written from the quantizer's definition: minilm_util), and
  the kernels' embeddings are within cosine 0.998 of that float64 model itself. The loss of
  symmetric int4 at g128 (~0.06) belongs to the scheme, not to the kernels.

Needs QGEMM_MINILM_DIR (benchmarks/prepare_minilm.py); skipped with the reason otherwise. Layers that
quantize_ skips are logged and listed; MiniLM's are all kernel-legal (K 384/1536, N 384/1536), so
none is expected. With QGEMM_MINILM_JSON set, the per-scheme results are written there.
"""
from __future__ import annotations

import json
import logging
import os

import pytest
import torch

from minilm_util import (SCHEMES, SKIP_REASON, cosine, embed, fake_quantized_float64, load_minilm, load_tokens,
                         minilm_dir, quantized_copy)

pytestmark = pytest.mark.gpu
log = logging.getLogger("qgemm.test_minilm")
RESULTS: dict[str, dict] = {}


@pytest.fixture(scope="module")
def minilm():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    path = minilm_dir()
    if path is None:
        pytest.skip(SKIP_REASON)
    pytest.importorskip("transformers")
    ids, mask = load_tokens(path, "cuda")
    model16 = load_minilm(path, torch.float16, "cuda")
    base16 = embed(model16, ids, mask)
    base64 = embed(load_minilm(path, torch.float64, "cpu"), ids.cpu(), mask.cpu())
    yield model16, ids, mask, base16, base64
    out = os.environ.get("QGEMM_MINILM_JSON")
    if out and RESULTS:
        with open(out, "w") as f:
            json.dump(RESULTS, f, indent=1)


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: s.name)
def test_minilm_embeddings(minilm, scheme):
    model16, ids, mask, base16, base64 = minilm
    if scheme.needs_sm90 and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip(f"{scheme.name}: the kernels are sm90 only")
    # The FP16 model on the GPU against float64 on the CPU: the floor under every comparison below.
    assert cosine(base16, base64).min() >= 0.9999
    q, report = quantized_copy(model16, scheme)
    for name, why in report.skipped.items():
        log.warning("%s: %s left in FP16: %s", scheme.name, name, why)
    assert report.replaced, report.skipped
    got = embed(q, ids, mask)
    assert torch.isfinite(got).all()
    cos = cosine(got, base16)
    result = {"replaced": len(report.replaced), "skipped": report.skipped, "cos_mean": cos.mean().item(),
              "cos_min": cos.min().item()}
    print(f"\n{scheme.name}: cosine vs FP16 mean {cos.mean():.5f} min {cos.min():.5f} "
          f"({len(report.replaced)} layers, {len(report.skipped)} skipped)")
    if scheme.bits == 8:
        RESULTS[scheme.name] = result
        assert cos.min() >= 0.99, cos
        return
    fq = embed(fake_quantized_float64(model16, scheme), ids.cpu(), mask.cpu())
    ref = cosine(fq, base64)
    to_fake = cosine(got, fq)
    result.update(fake_quant_cos_mean=ref.mean().item(), fake_quant_cos_min=ref.min().item(),
                  max_gap=(cos - ref).abs().max().item(), kernels_vs_fake_quant_min=to_fake.min().item())
    RESULTS[scheme.name] = result
    print(f"  float64 fake-quant loss: mean {ref.mean():.5f} min {ref.min():.5f}; largest gap "
          f"{(cos - ref).abs().max():.5f}; kernels vs fake-quant min {to_fake.min():.6f}")
    assert (cos - ref).abs().max() <= 0.002, (cos, ref)
    assert to_fake.min() >= 0.998, to_fake
