"""qgemm.quantize_ on the CPU: every config replaces the layers it can take in place (running
their reference paths), records and logs the ones it cannot with the reason, honours filter_fn,
and a quantized model's state_dict loads into another quantized model of the same architecture."""
from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import qgemm
from qgemm.nn import Fp8Linear, IntWeightConv2d, QuantConv2d, QuantLinear, W8A8Linear


def cosine(a, b) -> float:
    return F.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0).item()


class Mlp(nn.Module):
    def __init__(self, dtype=torch.float32, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.up = nn.Linear(256, 512)
        self.down = nn.Linear(512, 256, bias=False)
        self.head = nn.Linear(256, 10)  # N = 10: no kernel takes it
        self.to(dtype)

    def forward(self, x):
        return self.head(self.down(F.silu(self.up(x))))


class Cnn(nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.stem = nn.Conv2d(3, 32, 3, padding=1)       # 3 input channels
        self.body = nn.Conv2d(32, 32, 3, stride=2, padding=1)
        self.grouped = nn.Conv2d(32, 32, 3, padding=1, groups=4)
        self.proj = nn.Conv2d(32, 16, 1)

    def forward(self, x):
        return self.proj(F.relu(self.grouped(F.relu(self.body(F.relu(self.stem(x)))))))


LINEAR_CONFIGS = [
    (qgemm.Int4WeightOnlyConfig(group_size=64), QuantLinear, torch.float16, 0.98),
    (qgemm.Int4WeightOnlyConfig(group_size=32, symmetric=False), QuantLinear, torch.bfloat16, 0.98),
    (qgemm.Int8WeightOnlyConfig(), QuantLinear, torch.float16, 0.999),
    (qgemm.W8A8BlockConfig(), W8A8Linear, torch.float32, 0.995),
    (qgemm.W8A8BlockConfig(block_size=64, scheme="asymmetric"), W8A8Linear, torch.float32, 0.995),
    (qgemm.Fp8BlockwiseConfig(), Fp8Linear, torch.bfloat16, 0.99),
]


@pytest.mark.parametrize("config, cls, dtype, min_cosine", LINEAR_CONFIGS)
def test_linear_configs(config, cls, dtype, min_cosine, caplog):
    model = Mlp(dtype)
    x = torch.randn(4, 256).to(dtype)
    with torch.no_grad():
        expected = model(x)
    with caplog.at_level(logging.WARNING, logger="qgemm.quantize"):
        report = qgemm.quantize_(model, config)
    assert report.replaced == ["up", "down"]
    assert list(report.skipped) == ["head"] and "multiple of" in report.skipped["head"]
    assert "head left unquantized" in caplog.text
    assert isinstance(model.up, cls) and isinstance(model.down, cls) and type(model.head) is nn.Linear
    assert model.down.bias is None
    y = model(x)
    assert y.shape == expected.shape
    assert cosine(y, expected) > min_cosine


def test_filter_fn_and_already_quantized():
    model = Mlp(torch.float16)
    report = qgemm.quantize_(model, qgemm.Int4WeightOnlyConfig(), filter_fn=lambda m, name: name != "down")
    assert report.replaced == ["up"] and type(model.down) is nn.Linear
    report = qgemm.quantize_(model, qgemm.Int8WeightOnlyConfig())   # the int4 layer is left alone
    assert report.replaced == ["down"] and model.up.bits == 4 and model.down.bits == 8


def test_special_cases():
    with pytest.raises(TypeError, match="config must be one of"):
        qgemm.quantize_(Mlp(), "int4")
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        qgemm.quantize_(torch.zeros(1), qgemm.Int4WeightOnlyConfig())
    root = nn.Linear(256, 64)
    report = qgemm.quantize_(root, qgemm.Int4WeightOnlyConfig())
    assert "root module cannot be replaced" in report.skipped[""]
    attention = nn.Sequential(nn.MultiheadAttention(256, 4))
    report = qgemm.quantize_(attention, qgemm.Int8WeightOnlyConfig())
    assert "out_proj.weight directly" in report.skipped["0.out_proj"] and report.replaced == []


def test_quantized_state_dict_loads_into_a_new_quantized_model():
    """Quantize two models with different weights the same way; the first's state_dict makes the
    second compute exactly what the first does."""
    for config in [c for c, *_ in LINEAR_CONFIGS]:
        dtype = torch.bfloat16 if isinstance(config, qgemm.Fp8BlockwiseConfig) else torch.float16
        a, b = Mlp(dtype, seed=1), Mlp(dtype, seed=2)
        qgemm.quantize_(a, config)
        qgemm.quantize_(b, config)
        x = torch.randn(3, 256).to(dtype)
        assert not torch.equal(a(x), b(x))
        b.load_state_dict(a.state_dict())
        assert torch.equal(a(x), b(x)), config


def test_int8_conv_config_with_calibration():
    model = Cnn()
    batches = [torch.rand(2, 3, 12, 12) * 2 - 0.5 for _ in range(3)]
    calibration = qgemm.calibrate_convs(model, batches)
    assert set(calibration) == {"stem", "body", "grouped", "proj"}
    stem = calibration["stem"]
    assert stem.input_min == min(float(b.min()) for b in batches)
    scale, zero, out_scale, out_zero = stem.quant_params()
    lo = min(stem.input_min, 0.0)
    assert scale == pytest.approx((max(stem.input_max, 0.0) - lo) / 255) and zero == round(-128 - lo / scale)
    x = batches[0]
    with torch.no_grad():
        expected = model(x)
    del calibration["proj"]
    report = qgemm.quantize_(model, qgemm.Int8ConvConfig(calibration))
    assert report.replaced == ["stem", "body"]
    assert "groups must be 1" in report.skipped["grouped"]
    assert "no calibration for 'proj'" in report.skipped["proj"]
    assert isinstance(model.stem, QuantConv2d) and model.stem.float_output and model.stem.layout == "nchw"
    y = model(x)
    assert y.dtype == torch.float32 and cosine(y, expected) > 0.99


def test_int_weight_conv_config():
    model = Cnn()
    x = torch.randn(2, 3, 10, 10)
    with torch.no_grad():
        expected = model(x)
    report = qgemm.quantize_(model, qgemm.IntWeightConvConfig(bits=8, block_size=32))
    assert report.replaced == ["body", "proj"]
    assert "in_channels (C) must be a multiple of 8" in report.skipped["stem"]
    assert isinstance(model.body, IntWeightConv2d)
    assert cosine(model(x), expected) > 0.995
