"""Requantization math of the int8 convolution (qgemm/conv/quant.py) against the definition.

The integer path (int32 accumulator with zero padding + border correction + FusedBias, one float32
multiply, round half to even) must match the float64 reference (dequantize, convolve with real
zero padding, bias, activation, requantize) exactly except where the two land on opposite sides of
a rounding tie: there they may differ by 1 LSB. The tests assert |diff| <= 1 everywhere and exact
agreement on at least 99% of the outputs.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from qgemm import reference
from qgemm.conv import quant as conv_quant
from qgemm.conv.quant import ConvInt8Quant


def accumulate(x_q, w_q, stride, padding, dilation):
    """The int32 accumulator the implicit GEMM produces: zero padding in the quantized domain."""
    acc = F.conv2d(x_q.double().permute(0, 3, 1, 2), w_q.double().permute(0, 3, 1, 2), stride=stride,
                   padding=padding, dilation=dilation)
    return acc.permute(0, 2, 3, 1).round().to(torch.int64)


CASES = [  # (N, H, W, Ci, Co, K, stride, padding, dilation)
    (2, 9, 7, 16, 8, 3, 1, 1, 1),
    (1, 11, 11, 8, 24, 7, 2, 3, 1),
    (2, 8, 10, 16, 16, 3, 2, 1, 2),
    (1, 6, 6, 32, 8, 1, 1, 0, 1),
    (1, 5, 9, 8, 8, 3, 1, 3, 1),     # padding wider than half the kernel: taps entirely in the border
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("activation", ("none", "relu", "relu6"))
@pytest.mark.parametrize("input_zero", (-100, 0, 57))
def test_integer_path_matches_the_float_reference(case, activation, input_zero):
    n, h, w, ci, co, k, s, p, d = case
    g = torch.Generator().manual_seed(h * 100 + co + input_zero)
    x_q = torch.randint(-128, 128, (n, h, w, ci), generator=g, dtype=torch.int8)
    w_q = torch.randint(-127, 128, (co, k, k, ci), generator=g, dtype=torch.int8)
    bias = torch.randn(co, generator=g) * 2
    quant = ConvInt8Quant(0.02, input_zero, torch.rand(co, generator=g) * 0.01 + 0.001, 0.5, -7, activation)
    stride, padding, dilation = (s, s), (p, p), (d, d)

    multiplier, fused_bias = conv_quant.requant_params(w_q, bias, quant)
    border = conv_quant.border_correction(w_q, (h, w), stride, padding, dilation, input_zero)
    acc = accumulate(x_q, w_q, stride, padding, dilation)
    assert border.shape == acc.shape[1:]
    got = conv_quant.requantize(acc, multiplier, fused_bias, border, quant)
    ref = reference.conv2d_int8(x_q, w_q, bias, quant, stride, padding, dilation)
    diff = (got.int() - ref.int()).abs()
    assert diff.max() <= 1, "more than 1 LSB from the reference"
    assert (diff == 0).float().mean() >= 0.99
    if input_zero != 0 and p > 0:
        # Without the border correction the padded outputs would be wrong by far more than 1 LSB.
        wrong = conv_quant.requantize(acc, multiplier, fused_bias, torch.zeros_like(border), quant)
        assert (wrong.int() - ref.int()).abs().max() > 1


def test_border_correction_is_zero_inside_and_without_padding():
    w_q = torch.randint(-127, 128, (4, 3, 3, 8), dtype=torch.int8)
    inner = conv_quant.border_correction(w_q, (8, 8), (1, 1), (1, 1), (1, 1), 50)
    assert torch.all(inner[1:-1, 1:-1] == 0) and torch.any(inner[0] != 0)
    assert torch.all(conv_quant.border_correction(w_q, (8, 8), (1, 1), (0, 0), (1, 1), 50) == 0)


def test_clamp_bounds_fold_the_activation():
    q = ConvInt8Quant(0.1, 0, torch.ones(2), 0.05, -20, "relu6")
    assert q.clamp_bounds() == (-20, 100)  # Z_O + round(6 / 0.05) = -20 + 120
    assert ConvInt8Quant(0.1, 0, torch.ones(2), 0.05, -20, "relu").clamp_bounds() == (-20, 127)


@pytest.mark.parametrize("kwargs, exc, fragment", [
    (dict(input_scale=0.0), ValueError, "input_scale must be a positive number"),
    (dict(input_zero=200), ValueError, "input_zero must be an int in \\[-128, 127\\]"),
    (dict(weight_scale=torch.ones(2, 2)), ValueError, "weight_scale must be 1-D"),
    (dict(weight_scale=-torch.ones(3)), ValueError, "weight_scale must be positive"),
    (dict(activation="gelu"), ValueError, "activation must be one of"),
])
def test_quant_rejects(kwargs, exc, fragment):
    args = dict(input_scale=0.1, input_zero=0, weight_scale=torch.ones(3), output_scale=0.1, output_zero=0)
    args.update(kwargs)
    with pytest.raises(exc, match=fragment):
        ConvInt8Quant(**args)


def test_requant_params_checks_shapes():
    quant = ConvInt8Quant(0.1, 3, torch.ones(4), 0.2, 1)
    with pytest.raises(ValueError, match=r"weight_scale must have shape \(5,\)"):
        conv_quant.requant_params(torch.zeros(5, 3, 3, 8, dtype=torch.int8), None, quant)
    with pytest.raises(ValueError, match=r"bias must have shape \(4,\)"):
        conv_quant.requant_params(torch.zeros(4, 3, 3, 8, dtype=torch.int8), torch.zeros(3), quant)
    with pytest.raises(TypeError, match="w_q must have dtype int8"):
        conv_quant.requant_params(torch.zeros(4, 3, 3, 8), None, quant)


# --- the border term: per class of outputs, and the buffer the kernels read ---------------------

def _border_geometries():
    """(H, W, R, S, pad, stride, dilation) over edges of every kind: none, prefix only, both, a row
    in both (a filter wider than the padded image's interior), stride beyond the padding."""
    rng = __import__("random").Random(5)
    out = [(56, 56, 3, 3, (1, 1), (1, 1), (1, 1)), (224, 224, 7, 7, (3, 3), (2, 2), (1, 1)),
           (7, 7, 3, 3, (1, 1), (2, 2), (1, 1)), (3, 2, 5, 4, (2, 2), (1, 1), (1, 1)), (6, 6, 1, 1, (0, 0), (2, 2), (1, 1))]
    while len(out) < 300:
        g = (rng.randint(1, 20), rng.randint(1, 20), rng.randint(1, 7), rng.randint(1, 7),
             (rng.randint(0, 5), rng.randint(0, 5)), (rng.randint(1, 4), rng.randint(1, 4)),
             (rng.randint(1, 3), rng.randint(1, 3)))
        ho, wo = conv_quant.output_hw(g[:2], g[2:4], g[5], g[4], g[6])
        if ho >= 1 and wo >= 1:
            out.append(g)
    return out


@pytest.mark.parametrize("geometry", _border_geometries()[:60])
def test_border_table_applied_per_output_is_border_correction(geometry):
    """Each class's row, computed from its representative output, is the correction of every output
    of the class (and outputs without a class read no padding)."""
    h, w, r, s, pad, stride, dilation = geometry
    w_q = torch.randint(-127, 128, (5, r, s, 3), generator=torch.Generator().manual_seed(h * 31 + w), dtype=torch.int8)
    full = conv_quant.border_correction(w_q, (h, w), stride, pad, dilation, -77)
    table = conv_quant.border_table(w_q, (h, w), stride, pad, dilation, -77)
    classes = conv_quant.BorderClasses.of((h, w), (r, s), stride, pad, dilation)
    assert table.shape == (*classes.shape, 5) and table.dtype == torch.int32
    assert torch.equal(conv_quant.expand_border_table(table, classes), full)


@pytest.mark.parametrize("geometry", _border_geometries()[::5])
def test_border_buffer_applied_per_output_is_border_correction(geometry):
    """The buffer the kernels read (slot ptr[4]): per output pixel an offset into the table behind it,
    or -1 for pixels that read no padding; applied per output it is border_correction. The table
    starts BORDER_TABLE_ALIGN-aligned (the Sm80 epilogue's vector loads) and every offset is a whole
    row of Co entries inside the buffer."""
    h, w, r, s, pad, stride, dilation = geometry
    co = 12
    w_q = torch.randint(-127, 128, (co, r, s, 3), generator=torch.Generator().manual_seed(h * 7 + w), dtype=torch.int8)
    full = conv_quant.border_correction(w_q, (h, w), stride, pad, dilation, 93)
    buffer = conv_quant.border_buffer(w_q, (h, w), stride, pad, dilation, 93)
    ho, wo = full.shape[:2]
    head = -(-ho * wo // conv_quant.BORDER_TABLE_ALIGN) * conv_quant.BORDER_TABLE_ALIGN
    table = conv_quant.border_table(w_q, (h, w), stride, pad, dilation, 93)
    assert buffer.dtype == torch.int32 and buffer.shape == (head + table.numel(),)
    offsets = buffer[:ho * wo]
    inside = offsets >= 0
    assert torch.all(offsets[~inside] == -1)
    assert torch.all((offsets[inside] - head) % co == 0) and torch.all(offsets[inside] + co <= buffer.numel())
    assert torch.equal(conv_quant.expand_border_buffer(buffer, (ho, wo), co), full)
