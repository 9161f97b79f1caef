"""benchmarks/bench_model.py on the CPU (issue 19 part 5): the peer module for torch's int4 path
against its quantizer's definition, and one small end-to-end run (tiny Llama config, every path the
GPU run takes except the CUDA graphs and the kernels; the qgemm modules run their CPU reference)."""
from __future__ import annotations

import json
import os
import sys

import pytest
import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import bench_model  # noqa: E402


def test_torch_int4_linear_is_its_definition():
    torch.manual_seed(0)
    linear = nn.Linear(256, 64, bias=True)
    peer = bench_model.TorchInt4Linear(linear, group_size=128, inner_k_tiles=2)
    w = linear.weight.detach().float().reshape(64, 2, 128)
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).bfloat16().float()
    zero = (lo + 8 * ((hi - lo) / 15)).bfloat16().float()
    q = ((w - (zero - 8 * scale)) / scale).round().clamp(0, 15)
    deq = ((q - 8) * scale + zero).reshape(64, 256).double()
    x = torch.randn(5, 256).bfloat16()
    ref = x.double() @ deq.t() + linear.bias.detach().bfloat16().double()
    got = peer(x).double()
    # bfloat16 output (8 bits of mantissa): 2^-8 of the largest |y|.
    assert (got - ref).abs().max() <= ref.abs().max() * 2 ** -7
    with pytest.raises(ValueError, match="K=100"):
        bench_model.TorchInt4Linear(nn.Linear(100, 64))


def test_bench_model_tiny_cpu(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "bench.json"
    result = bench_model.main(["--config", "tiny", "--layers", "1", "--device", "cpu", "--variants",
                               "w4a16,w8a8,torch_int4", "--batch", "1", "--batch", "2", "--steps", "2",
                               "--prompt", "4", "--cache-len", "16", "--prefill", "32", "--prefill-reps", "1",
                               "--fidelity-tokens", "8", "--json", str(out)])
    saved = json.loads(out.read_text())
    assert saved["variants"].keys() == {"fp16", "w4a16", "w8a8", "torch_int4"}
    for name, row in saved["variants"].items():
        assert "error" not in row, (name, row.get("error"))
        assert row["decode_b1"] > 0 and row["decode_b2"] > 0 and row["prefill_s"] > 0
        # 1 of the tiny config's 2 layers: a full-depth equivalent from the measured head time.
        assert row["full_depth_equivalent"]["decode_b1"] > 0
        if name != "fp16":
            # q, k, v, o, gate, up, down and lm_head: quantize_'s default filter takes every nn.Linear
            assert row["replaced"] == 8 and row["logits_finite"]
    assert saved["variants"]["w8a8"]["logits_cos_mean"] >= 0.99
    for name in ("w4a16", "torch_int4"):
        assert saved["variants"][name]["logits_cos_mean"] >= 0.95
    assert result["variants"]["fp16"]["speedup"]["decode_b1"] == 1.0


def test_bench_model_lm_head_fp16_cpu(tmp_path):
    pytest.importorskip("transformers")
    result = bench_model.main(["--config", "tiny", "--layers", "1", "--device", "cpu", "--variants", "w8a8",
                               "--batch", "1", "--steps", "1", "--prompt", "4", "--cache-len", "16", "--prefill", "0",
                               "--fidelity-tokens", "8", "--lm-head", "fp16"])
    assert result["lm_head"] == "fp16" and result["variants"]["w8a8"]["replaced"] == 7


def test_bench_model_compile_cpu(tmp_path):
    """--mode compile on the CPU (Inductor's C++ backend): the compiled decode step, head and prefill
    run with fullgraph=True (a graph break would be a note), and the step's greedy tokens are
    compared with the eager step's."""
    pytest.importorskip("transformers")
    out = tmp_path / "bench.json"
    bench_model.main(["--config", "tiny", "--layers", "1", "--device", "cpu", "--variants", "w8a8", "--mode",
                      "compile", "--batch", "4", "--steps", "2", "--prompt", "4", "--cache-len", "32",
                      "--prefill", "16", "--prefill-reps", "1", "--fidelity-tokens", "8", "--json", str(out)])
    saved = json.loads(out.read_text())
    assert saved["mode"] == "compile"
    for name, row in saved["variants"].items():
        assert "error" not in row and "notes" not in row, (name, row)
        assert row["decode_b4"] > 0 and row["prefill_s"] > 0
        # The compiled step computes what the eager one does, but Inductor's fused norms round
        # differently, so a near-tie of two logits of the random model may flip: fp16 (nothing
        # re-quantized) must pick the eager first token in at least 3 of the 4 sequences.
        if name == "fp16":
            assert row["compiled_first_token_match_b4"] >= 0.75
        assert 0.0 <= row["compiled_tokens_match_eager_b4"] <= 1.0


@pytest.mark.parametrize("batches", [["0", "1"], ["-1"]])
def test_bench_model_rejects_bad_batches(batches, capsys):
    argv = ["--config", "tiny", "--device", "cpu"]
    for b in batches:
        argv += ["--batch", b]
    with pytest.raises(SystemExit):
        bench_model.main(argv)
    assert "--batch: batch sizes >= 1, or a single 0 for no decode; got" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_bench_model_fused_cpu(tmp_path, mode):
    """--fuse: q/k/v and gate/up packed (qgemm.fuse_projections_) in every variant, the baseline too;
    compiled with fullgraph=True without a note, and the packed model's logits those of the model."""
    pytest.importorskip("transformers")
    out = tmp_path / "bench.json"
    result = bench_model.main(["--config", "tiny", "--layers", "1", "--device", "cpu", "--variants",
                               "w4a16,w8a8,torch_int4", "--mode", mode, "--batch", "2", "--steps", "2", "--prompt",
                               "4", "--cache-len", "32", "--prefill", "16", "--prefill-reps", "1",
                               "--fidelity-tokens", "8", "--json", str(out), "--fuse"])
    saved = json.loads(out.read_text())
    assert saved["fuse"] is True
    for name, row in saved["variants"].items():
        assert "error" not in row and "notes" not in row, (name, row)
        if name != "fp16":
            assert row["replaced"] == 5  # qkv, o, gate_up, down, lm_head
    assert saved["variants"]["w8a8"]["logits_cos_mean"] >= 0.99
    assert result["variants"]["fp16"]["speedup"]["decode_b2"] == 1.0
    assert bench_model.layer_shapes("llama3-8b", fuse=True) == [(4096, 6144), (4096, 4096), (4096, 28672),
                                                                 (28672 // 2, 4096)]
