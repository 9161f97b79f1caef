"""qgemm.wq_format on the CPU: round-to-nearest quantization, GPTQ (v1/v2, act-order) and AWQ
checkpoints into IntWeight and back, hand-checked packed words, and argument errors."""
from __future__ import annotations

import pytest
import torch

from qgemm import wq_format
from qgemm.fpaintb.wq_format import AWQ_ORDER, IntWeight, from_awq, from_gptq, pack_awq, pack_gptq, quantize_rtn


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=torch.float32):
    return (torch.randn(*shape, generator=gen(seed)) * 1.5 + 0.3).to(dtype)


def randint(high, *shape, seed=0, low=0, dtype=torch.uint8):
    return torch.randint(low, high, shape, generator=gen(seed)).to(dtype)


def rand_scales(groups, n, seed=0, dtype=torch.float16):
    return (torch.rand(groups, n, generator=gen(seed)) * 0.1 + 0.01).to(dtype)


def as_int32(word: int) -> int:
    """An unsigned 32-bit pattern as the signed int32 a checkpoint stores."""
    return word - 2 ** 32 if word >= 2 ** 31 else word


def random_int_weight(k, n, bits, g, seed=0, zero_low=0, symmetric=False, dtype=torch.float16):
    top = 2 ** bits
    u = randint(top, k, n, seed=seed)
    zero = None if symmetric else randint(top, k // g, n, seed=seed + 1, low=zero_low)
    return IntWeight(u, rand_scales(k // g, n, seed=seed + 2, dtype=dtype), zero, bits, g)


def per_row(groupwise: torch.Tensor, g: int) -> torch.Tensor:
    return groupwise.double().repeat_interleave(g, dim=0)


def stored_order_dequant(w: IntWeight) -> torch.Tensor:
    """(u - zero) * scale with rows as stored (perm NOT undone)."""
    g = w.group_size
    return (w.u.double() - per_row(w.zero_or_default(), g)) * per_row(w.scale, g)


def assert_same_weight(a: IntWeight, b: IntWeight):
    assert (a.bits, a.group_size, a.k, a.n) == (b.bits, b.group_size, b.k, b.n)
    assert torch.equal(a.u, b.u)
    assert torch.equal(a.zero_or_default(), b.zero_or_default())
    assert a.scale.dtype == b.scale.dtype and torch.equal(a.scale, b.scale)
    assert torch.equal(a.dequantize(), b.dequantize())


# --- IntWeight ---------------------------------------------------------------------------------

def test_int_weight_properties_and_default_zero():
    w = random_int_weight(64, 16, 4, 32, symmetric=True)
    assert (w.k, w.n) == (64, 16)
    z = w.zero_or_default()
    assert z.dtype == torch.uint8 and z.shape == (2, 16) and bool((z == 8).all())
    w8 = random_int_weight(64, 16, 8, 64, symmetric=True)
    assert bool((w8.zero_or_default() == 128).all())
    deq = w.dequantize()
    assert deq.dtype == torch.float64 and deq.shape == (64, 16)
    assert torch.equal(deq, stored_order_dequant(w))


def test_int_weight_dequantize_undoes_perm():
    w = random_int_weight(64, 8, 4, 16, seed=3)
    perm = torch.randperm(64, generator=gen(4))
    wp = IntWeight(w.u, w.scale, w.zero, 4, 16, perm)
    stored = stored_order_dequant(wp)
    original = wp.dequantize()
    assert torch.equal(original[perm], stored)


# --- round-to-nearest --------------------------------------------------------------------------

@pytest.mark.parametrize("scale_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("group_size", [32, 64, 128, 256, -1])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("bits", [4, 8])
def test_quantize_rtn_error_within_half_step(bits, symmetric, group_size, scale_dtype):
    n, k = 24, 512
    weight = randn(n, k, seed=bits + group_size)
    w = quantize_rtn(weight, bits, group_size, symmetric, scale_dtype)
    g = k if group_size == -1 else group_size
    assert isinstance(w, IntWeight) and (w.bits, w.group_size, w.k, w.n) == (bits, g, k, n)
    assert w.u.dtype == torch.uint8 and w.u.shape == (k, n)
    assert int(w.u.max()) <= 2 ** bits - 1
    assert w.scale.dtype == scale_dtype and w.scale.shape == (k // g, n)
    assert bool((w.scale > 0).all()) and bool(torch.isfinite(w.scale).all())
    assert w.perm is None
    if symmetric:
        assert w.zero is None
        # The largest |w| of each group lands on the outermost symmetric code.
        q = w.u.int().reshape(k // g, g, n) - 2 ** (bits - 1)
        assert bool((q.abs().amax(dim=1) == 2 ** (bits - 1) - 1).all())
    else:
        assert w.zero.dtype == torch.uint8 and w.zero.shape == (k // g, n)
        # Each group's minimum (negative in this data) lands on code 0.
        assert bool((w.u.reshape(k // g, g, n).amin(dim=1) == 0).all())
    err = (w.dequantize() - weight.double().t()).abs()
    half_step = per_row(w.scale, g) / 2
    assert bool((err <= half_step * (1 + 1e-6) + 1e-12).all()), float((err - half_step).max())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_quantize_rtn_default_scale_dtype(dtype):
    w = quantize_rtn(randn(8, 64, dtype=dtype), 4, 32)
    assert w.scale.dtype == (dtype if dtype != torch.float32 else torch.float16)


@pytest.mark.parametrize("symmetric", [True, False])
def test_quantize_rtn_zero_groups_do_not_divide_by_zero(symmetric):
    weight = randn(8, 64, seed=5)
    weight[3, :] = 0          # a whole output channel of zeros
    weight[5, 32:] = 0        # one group of zeros
    w = quantize_rtn(weight, 4, 32, symmetric)
    assert bool(torch.isfinite(w.scale).all()) and bool((w.scale > 0).all())
    deq = w.dequantize()
    assert bool((deq[:, 3] == 0).all()) and bool((deq[32:, 5] == 0).all())


# --- GPTQ --------------------------------------------------------------------------------------

@pytest.mark.parametrize("zero_offset", [1, 0])
@pytest.mark.parametrize("g", [32, 64, 256])
@pytest.mark.parametrize("bits", [4, 8])
def test_gptq_round_trip(bits, g, zero_offset):
    k, n = 256, 64
    # GPTQ v1 stores zero - 1, so a zero of 0 is not storable there.
    w = random_int_weight(k, n, bits, g, seed=bits + g, zero_low=zero_offset)
    qweight, qzeros, scales, g_idx = pack_gptq(w, zero_offset)
    assert qweight.dtype == torch.int32 and qweight.shape == (k * bits // 32, n)
    assert qzeros.dtype == torch.int32 and qzeros.shape == (k // g, n * bits // 32)
    assert torch.equal(g_idx.long(), torch.arange(k) // g)
    for gi in (None, g_idx):
        back = from_gptq(qweight, qzeros, scales, gi, bits, zero_offset)
        assert back.perm is None
        assert_same_weight(back, w)


@pytest.mark.parametrize("bits", [4, 8])
def test_gptq_symmetric_weight_round_trip(bits):
    w = random_int_weight(128, 32, bits, 32, seed=9, symmetric=True)
    back = from_gptq(*pack_gptq(w), bits=bits)
    assert bool((back.zero == 2 ** (bits - 1)).all())
    assert_same_weight(back, w)


def test_gptq_hand_checked_words_int4():
    # 0x89ABCDEF is negative as int32; its nibbles from the low end are F, E, D, C, B, A, 9, 8.
    word = as_int32(0x89ABCDEF)
    assert word < 0
    qweight = torch.zeros(4, 8, dtype=torch.int32)          # K = 32, N = 8
    qweight[1, 2] = word
    qzeros = torch.tensor([[as_int32(0xE1234567)]], dtype=torch.int32)   # v1: zstored nibbles 7..1, 0xE
    w = from_gptq(qweight, qzeros, torch.ones(1, 8, dtype=torch.float16), bits=4, zero_offset=1)
    assert w.u[8:16, 2].tolist() == [15, 14, 13, 12, 11, 10, 9, 8]   # rows 1 * 8 + j
    assert int(w.u.sum()) == sum(range(8, 16))
    assert w.zero[0].tolist() == [8, 7, 6, 5, 4, 3, 2, 15]          # zstored + 1
    # And the packer writes the same word from the same codes.
    qw, qz, _, _ = pack_gptq(w, zero_offset=1)
    assert torch.equal(qw, qweight) and torch.equal(qz, qzeros)


def test_gptq_hand_checked_words_int8():
    word = as_int32(0x89ABCDEF)                              # bytes from the low end: EF, CD, AB, 89
    qweight = torch.zeros(2, 4, dtype=torch.int32)          # K = 8, N = 4
    qweight[1, 3] = word
    qzeros = torch.tensor([[as_int32(0x807F0100)]], dtype=torch.int32)
    w = from_gptq(qweight, qzeros, torch.ones(1, 4, dtype=torch.bfloat16), bits=8, zero_offset=0)
    assert w.u[4:8, 3].tolist() == [0xEF, 0xCD, 0xAB, 0x89]
    assert w.zero[0].tolist() == [0x00, 0x01, 0x7F, 0x80]
    qw, qz, _, _ = pack_gptq(w, zero_offset=0)
    assert torch.equal(qw, qweight) and torch.equal(qz, qzeros)


@pytest.mark.parametrize("bits", [4, 8])
def test_gptq_act_order(bits):
    k, n, g = 256, 32, 32
    groups = k // g
    u_orig = randint(2 ** bits, k, n, seed=11)
    zstored = randint(2 ** bits - 1, groups, n, seed=12)     # v1: stored zero - 1, never the top code
    scales = rand_scales(groups, n, seed=13)
    g_idx = (torch.randperm(k, generator=gen(14)) // g).to(torch.int32)
    # The checkpoint's definition, in original row order.
    gi = g_idx.long()
    expected = (u_orig.double() - (zstored.double()[gi] + 1)) * scales.double()[gi]

    # Checkpoint tensors: the packer takes stored order, so sort rows by group first.
    perm = torch.argsort(gi, stable=True)
    stored = IntWeight(u_orig[perm], scales, zstored + 1, bits, g, perm)
    qweight, qzeros, scales_ck, g_idx_ck = pack_gptq(stored)
    assert torch.equal(g_idx_ck, g_idx)
    # qweight holds u in original order: the same words as packing u_orig without a perm.
    plain = IntWeight(u_orig, scales, zstored + 1, bits, g)
    assert torch.equal(qweight, pack_gptq(plain)[0])

    w = from_gptq(qweight, qzeros, scales_ck, g_idx, bits)
    assert w.perm is not None and w.perm.dtype == torch.int64
    assert torch.equal(w.perm, perm)
    # Stored row r belongs to group r // g.
    assert torch.equal(gi[w.perm], torch.arange(k) // g)
    assert torch.equal(w.dequantize(), expected)
    x = torch.randn(5, k, generator=gen(15), dtype=torch.float64)
    torch.testing.assert_close(x[:, w.perm] @ stored_order_dequant(w), x @ expected, rtol=1e-12, atol=1e-12)


def test_gptq_g_idx_in_plain_order_gives_no_perm():
    w = random_int_weight(128, 16, 4, 32, seed=16, zero_low=1)
    qweight, qzeros, scales, _ = pack_gptq(w)
    back = from_gptq(qweight, qzeros, scales, torch.arange(128) // 32)
    assert back.perm is None
    assert_same_weight(back, w)


def test_gptq_unequal_groups_raise():
    w = random_int_weight(128, 16, 4, 32, seed=17, zero_low=1)
    qweight, qzeros, scales, g_idx = pack_gptq(w)
    bad = g_idx.clone()
    bad[0] = 1                                               # group 0 has 31 rows, group 1 has 33
    with pytest.raises(ValueError, match="g_idx"):
        from_gptq(qweight, qzeros, scales, bad)
    bad = g_idx.clone()
    bad[5] = 4                                               # only groups 0..3 exist
    with pytest.raises(ValueError, match="g_idx"):
        from_gptq(qweight, qzeros, scales, bad)


# --- AWQ ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("g", [32, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_awq_round_trip(g, dtype):
    k, n = 128, 64
    w = random_int_weight(k, n, 4, g, seed=g, dtype=dtype)
    qweight, qzeros, scales = pack_awq(w)
    assert qweight.dtype == torch.int32 and qweight.shape == (k, n // 8)
    assert qzeros.dtype == torch.int32 and qzeros.shape == (k // g, n // 8)
    back = from_awq(qweight, qzeros, scales)
    assert back.perm is None
    assert_same_weight(back, w)


def test_awq_hand_checked_words():
    assert AWQ_ORDER == (0, 2, 4, 6, 1, 3, 5, 7)
    qweight = torch.zeros(4, 2, dtype=torch.int32)          # K = 4, N = 16
    qweight[1, 1] = 0x76543210                              # nibble i holds the value i
    qweight[2, 0] = as_int32(0xFEDCBA98)                    # nibble i holds 8 + i; negative int32
    qzeros = torch.tensor([[0x76543210, as_int32(0xFEDCBA98)]], dtype=torch.int32)
    w = from_awq(qweight, qzeros, torch.ones(1, 16, dtype=torch.float16))
    # Nibble i is column 8c + AWQ_ORDER[i], so columns 8c..8c+7 read nibbles 0, 4, 1, 5, 2, 6, 3, 7.
    assert w.u[1, 8:16].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    assert w.u[2, 0:8].tolist() == [8, 12, 9, 13, 10, 14, 11, 15]
    assert w.zero[0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]
    assert int(w.u.sum()) == sum(range(16))

    # Packing columns 0..7 holding 0..7 writes nibbles 0, 2, 4, 6, 1, 3, 5, 7 from the low end.
    u = torch.zeros(32, 8, dtype=torch.uint8)
    u[0] = torch.arange(8)
    u[1] = torch.arange(8, 16)
    qw, _, _ = pack_awq(IntWeight(u, torch.ones(1, 8, dtype=torch.float16), None, 4, 32))
    assert qw[0, 0].item() == 0x75316420
    assert qw[1, 0].item() == as_int32(0xFDB9ECA8)


# --- argument errors ---------------------------------------------------------------------------

def gptq_tensors(k=128, n=16, g=32, bits=4):
    return pack_gptq(random_int_weight(k, n, bits, g, seed=21, zero_low=1))


def test_quantize_rtn_errors():
    weight = randn(8, 128)
    with pytest.raises(ValueError, match="group_size"):
        quantize_rtn(weight, 4, 48)
    with pytest.raises(ValueError, match="group_size"):
        quantize_rtn(weight, 4, 0)
    with pytest.raises(ValueError, match="bits"):
        quantize_rtn(weight, 3)
    with pytest.raises(TypeError, match="weight"):
        quantize_rtn(weight.to(torch.int32))
    with pytest.raises(TypeError, match="weight"):
        quantize_rtn(weight.numpy())
    with pytest.raises(ValueError, match="weight"):
        quantize_rtn(weight[0])
    with pytest.raises(TypeError, match="scale_dtype"):
        quantize_rtn(weight, scale_dtype=torch.float32)


def test_from_gptq_errors():
    qweight, qzeros, scales, g_idx = gptq_tensors()
    with pytest.raises(TypeError, match="scales"):
        from_gptq(qweight, qzeros, None)
    with pytest.raises(TypeError, match="qzeros"):
        from_gptq(qweight, None, scales)
    with pytest.raises(TypeError, match="qweight"):
        from_gptq(qweight.float(), qzeros, scales)
    with pytest.raises(TypeError, match="qzeros"):
        from_gptq(qweight, qzeros.long(), scales)
    with pytest.raises(TypeError, match="scales"):
        from_gptq(qweight, qzeros, scales.float())
    with pytest.raises(ValueError, match="qzeros"):
        from_gptq(qweight, qzeros[:, :1], scales)
    with pytest.raises(ValueError, match="qzeros"):
        from_gptq(qweight, qzeros[:3], scales)
    with pytest.raises(ValueError, match="scales"):
        from_gptq(qweight, qzeros, scales[:, :8])
    with pytest.raises(ValueError, match="scales"):
        from_gptq(qweight, qzeros[:3], scales[:3])          # 3 groups do not divide K = 128
    with pytest.raises(ValueError, match="qweight"):
        from_gptq(qweight[:, :12], qzeros, scales[:, :12])  # N = 12 does not fill int32 zero words
    with pytest.raises(ValueError, match="qweight"):
        from_gptq(qweight[0], qzeros, scales)
    with pytest.raises(ValueError, match="bits"):
        from_gptq(qweight, qzeros, scales, bits=2)
    with pytest.raises(ValueError, match="zero_offset"):
        from_gptq(qweight, qzeros, scales, zero_offset=2)
    with pytest.raises(ValueError, match="g_idx"):
        from_gptq(qweight, qzeros, scales, g_idx[:-1])
    with pytest.raises(TypeError, match="g_idx"):
        from_gptq(qweight, qzeros, scales, g_idx.float())


@pytest.mark.parametrize("bits", [4, 8])
def test_from_gptq_v1_zero_overflow(bits):
    qweight, qzeros, scales, _ = gptq_tensors(bits=bits)
    qzeros = qzeros.clone()
    qzeros[1, 0] = 2 ** bits - 1                             # zstored = top code in field 0: zero 2**bits
    with pytest.raises(ValueError, match="qzeros"):
        from_gptq(qweight, qzeros, scales, bits=bits, zero_offset=1)
    # The same tensors are fine as GPTQ v2, where the stored value is the zero.
    w = from_gptq(qweight, qzeros, scales, bits=bits, zero_offset=0)
    assert int(w.zero[1, 0]) == 2 ** bits - 1


def test_pack_gptq_v1_rejects_zero_zero():
    w = random_int_weight(64, 8, 4, 32, seed=22)
    w = IntWeight(w.u, w.scale, torch.zeros_like(w.zero), 4, 32)
    with pytest.raises(ValueError, match="zero"):
        pack_gptq(w, zero_offset=1)
    pack_gptq(w, zero_offset=0)


def test_from_awq_errors():
    qweight, qzeros, scales = pack_awq(random_int_weight(128, 16, 4, 32, seed=23))
    with pytest.raises(TypeError, match="scales"):
        from_awq(qweight, qzeros, None)
    with pytest.raises(TypeError, match="qzeros"):
        from_awq(qweight, None, scales)
    with pytest.raises(TypeError, match="qweight"):
        from_awq(qweight.to(torch.int16), qzeros, scales)
    with pytest.raises(ValueError, match="qzeros"):
        from_awq(qweight, qzeros[:2], scales)
    with pytest.raises(ValueError, match="scales"):
        from_awq(qweight, qzeros, scales[:, :8])
    with pytest.raises(ValueError, match="scales"):
        from_awq(qweight, qzeros[:3], scales[:3])
    with pytest.raises(ValueError, match="bits"):
        pack_awq(random_int_weight(128, 16, 8, 32))


def test_int_weight_errors():
    w = random_int_weight(64, 16, 4, 32)
    with pytest.raises(TypeError, match="IntWeight.u"):
        IntWeight(w.u.to(torch.int8), w.scale, w.zero, 4, 32)
    with pytest.raises(ValueError, match="IntWeight.u"):
        IntWeight(w.u[0], w.scale, w.zero, 4, 32)
    with pytest.raises(TypeError, match="IntWeight.scale"):
        IntWeight(w.u, w.scale.float(), w.zero, 4, 32)
    with pytest.raises(ValueError, match="IntWeight.scale"):
        IntWeight(w.u, w.scale[:1], w.zero, 4, 32)
    with pytest.raises(TypeError, match="IntWeight.zero"):
        IntWeight(w.u, w.scale, w.zero.int(), 4, 32)
    with pytest.raises(ValueError, match="IntWeight.zero"):
        IntWeight(w.u, w.scale, w.zero[:, :8], 4, 32)
    with pytest.raises(ValueError, match="IntWeight.bits"):
        IntWeight(w.u, w.scale, w.zero, 3, 32)
    with pytest.raises(ValueError, match="IntWeight.group_size"):
        IntWeight(w.u, w.scale, w.zero, 4, 48)
    with pytest.raises(ValueError, match="IntWeight.group_size"):
        IntWeight(w.u, w.scale, w.zero, 4, -1)
    with pytest.raises(TypeError, match="IntWeight.perm"):
        IntWeight(w.u, w.scale, w.zero, 4, 32, torch.arange(64, dtype=torch.int32))
    with pytest.raises(ValueError, match="IntWeight.perm"):
        IntWeight(w.u, w.scale, w.zero, 4, 32, torch.arange(63))


def test_module_exports():
    for name in ("IntWeight", "quantize_rtn", "from_gptq", "from_awq", "pack_gptq", "pack_awq"):
        assert hasattr(wq_format, name)


def test_from_signed_adds_the_bias():
    g = torch.Generator().manual_seed(5)
    for bits in (4, 8):
        half = 2 ** (bits - 1)
        q = torch.randint(-half, half, (16, 256), generator=g, dtype=torch.int8)
        scale = torch.rand(2, 16, generator=g).half() + 0.01
        w = wq_format.from_signed(q, scale, bits)
        assert w.zero is None and w.group_size == 128
        assert torch.equal(w.u.to(torch.int16) - half, q.t().to(torch.int16))
        expected = q.t().double() * scale.double().repeat_interleave(128, dim=0)
        assert torch.equal(w.dequantize(), expected)
    per_channel = wq_format.from_signed(q, torch.ones(16, dtype=torch.half))
    assert per_channel.group_size == 256
    with pytest.raises(ValueError, match="outside \\[-8, 7\\]"):
        wq_format.from_signed(torch.full((16, 256), 9, dtype=torch.int8), scale, bits=4)
    with pytest.raises(ValueError, match="scale must have shape"):
        wq_format.from_signed(q, torch.ones(3, 16, dtype=torch.half))


# --- compressed-tensors pack-quantized ---------------------------------------------------------------

def test_compressed_tensors_hand_checked_word():
    """pack_to_int32's definition by hand: row n's word c holds q[n, 8c + i] + 8 in nibble i (int4),
    zero points packed the same way along N."""
    k, n = 8, 8
    q = torch.tensor([[-8, -1, 0, 1, 2, 3, 4, 7]] * n, dtype=torch.int64)    # signed codes [N, K]
    word = sum(((v + 8) & 0xF) << (4 * i) for i, v in enumerate([-8, -1, 0, 1, 2, 3, 4, 7]))
    packed = torch.full((n, 1), as_int32(word), dtype=torch.int32)
    scale = torch.full((n, 1), 0.5, dtype=torch.float16)
    zp = torch.arange(-4, 4, dtype=torch.int64)                                # one group, per row n
    zp_word = sum(((v + 8) & 0xF) << (4 * i) for i, v in enumerate(zp.tolist()))
    w = wq_format.from_compressed_tensors(packed, scale, torch.tensor([[as_int32(zp_word)]], dtype=torch.int32),
                                          num_bits=4, weight_shape=torch.tensor([n, k]))
    assert (w.k, w.n, w.group_size) == (8, 8, 8)
    expected = (q.double() - zp.double().view(n, 1)) * 0.5                    # [N, K]
    assert torch.equal(w.dequantize(), expected.t())
    sym = wq_format.from_compressed_tensors(packed, scale, num_bits=4)
    assert sym.zero is None and torch.equal(sym.dequantize(), (q.double() * 0.5).t())


@pytest.mark.parametrize("bits,g,zeros,act_order,k", [(4, 32, True, False, 128), (4, 64, False, True, 128),
                                                      (8, 128, True, False, 256), (8, 256, False, False, 256),
                                                      (4, 20, True, False, 40)])
def test_compressed_tensors_round_trip(bits, g, zeros, act_order, k):
    n = 12
    w = random_int_weight(k, n, bits, g, seed=7, symmetric=not zeros)
    if act_order:
        # act-order as checkpoints make it: rows sorted stably by a random group assignment
        perm = torch.argsort(torch.randperm(k, generator=gen(8)) // g, stable=True)
        w = IntWeight(w.u, w.scale, w.zero, bits, g, perm)
    tensors = wq_format.pack_compressed_tensors(w)
    assert tensors["weight_packed"].shape == (n, -(-k // (32 // bits)))
    assert ("weight_zero_point" in tensors) == zeros and ("weight_g_idx" in tensors) == act_order
    if zeros:
        assert tensors["weight_zero_point"].shape == (-(-n // (32 // bits)), k // g)
    back = wq_format.from_compressed_tensors(tensors["weight_packed"], tensors["weight_scale"],
                                             tensors.get("weight_zero_point"), tensors.get("weight_g_idx"), bits,
                                             tensors["weight_shape"])
    assert_same_weight(back, w)
    if act_order:
        assert torch.equal(back.perm, w.perm)
    # an unpacked int8 zero point (older writers) means the same
    if zeros:
        signed = (w.zero.t().to(torch.int16) - 2 ** (bits - 1)).to(torch.int8)
        again = wq_format.from_compressed_tensors(tensors["weight_packed"], tensors["weight_scale"], signed, None,
                                                  bits, tensors["weight_shape"])
        assert torch.equal(again.zero, w.zero)


def test_compressed_tensors_rejects():
    packed = torch.zeros(8, 4, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"weight_scale must be \[N, K / group_size\] with N=8"):
        wq_format.from_compressed_tensors(packed, torch.ones(4, 1, dtype=torch.float16))
    with pytest.raises(ValueError, match="weight_shape must be"):
        wq_format.from_compressed_tensors(packed, torch.ones(8, 1, dtype=torch.float16), weight_shape=[8, 64])
    with pytest.raises(ValueError, match="weight_zero_point must have shape"):
        wq_format.from_compressed_tensors(packed, torch.ones(8, 1, dtype=torch.float16),
                                          torch.zeros(2, 1, dtype=torch.int32))
    with pytest.raises(ValueError, match="num_bits must be one of"):
        wq_format.from_compressed_tensors(packed, torch.ones(8, 1, dtype=torch.float16), num_bits=2)
