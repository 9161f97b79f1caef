"""qgemm.checkpoint and qgemm.safetensors_io on the CPU. Each format's checkpoint is written here
from the format's own definition (wq_format's packers, the FP8 / block-INT8 quantizers), as a
sharded folder with config.json; load_quantized must build modules whose buffers are the
checkpoint's tensors (no requantization) and whose outputs are the format's dequantized weights
applied to x. Unsupported variants must name the field and the value."""
from __future__ import annotations

import json
import struct

import pytest
import torch
from torch import nn

import qgemm
from qgemm import reference, safetensors_io, wq_format
from qgemm.checkpoint import CheckpointError, load_quantized, parse_quantization_config
from qgemm.nn import Fp8Linear, QuantLinear, W8A8Linear
from qgemm.fpaintb.wq_format import IntWeight

LAYERS = {"model.layers.0.up_proj": (256, 128, False), "model.layers.0.down_proj": (128, 256, True)}  # K, N, bias


def gen(seed):
    return torch.Generator().manual_seed(seed)


class Tiny(nn.Module):
    """Names as a Hugging Face decoder has them: quantized projections, unquantized embedding, norm, head."""

    def __init__(self):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(16, 256)
        layer = nn.Module()
        layer.up_proj = nn.Linear(256, 128, bias=False)
        layer.down_proj = nn.Linear(128, 256, bias=True)
        self.model.layers = nn.ModuleList([layer])
        self.model.norm = nn.LayerNorm(256)
        self.lm_head = nn.Linear(256, 16, bias=False)


def plain_tensors(dtype=torch.float16):
    g = gen(99)
    return {"model.embed_tokens.weight": torch.randn(16, 256, generator=g).to(dtype),
            "model.norm.weight": torch.randn(256, generator=g).to(dtype),
            "model.norm.bias": torch.randn(256, generator=g).to(dtype),
            "lm_head.weight": torch.randn(16, 256, generator=g).to(dtype)}


def write_folder(path, quantization_config, tensors):
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "quantization_config": quantization_config}))
    names = sorted(tensors)
    half = len(names) // 2  # two shards
    safetensors_io.save_file({k: tensors[k] for k in names[:half]}, path / "model-00001-of-00002.safetensors")
    safetensors_io.save_file({k: tensors[k] for k in names[half:]}, path / "model-00002-of-00002.safetensors",
                             metadata={"format": "pt"})
    return path


def int_weight(k, n, bits, g, seed, zeros=True, act_order=False, zero_low=0):
    gen_ = gen(seed)
    u = torch.randint(0, 2 ** bits, (k, n), generator=gen_, dtype=torch.uint8)
    scale = (torch.rand(k // g, n, generator=gen_) * 0.02 + 0.005).half()
    zero = torch.randint(zero_low, 2 ** bits, (k // g, n), generator=gen_, dtype=torch.uint8) if zeros else None
    perm = None
    if act_order:
        perm = torch.argsort(torch.randperm(k, generator=gen_) // g, stable=True)
    return IntWeight(u, scale, zero, bits, g, perm)


def bias_for(n, seed):
    return (torch.randn(n, generator=gen(seed)) * 0.1).half()


# --- each format: (quantization_config, tensors, expected W^T [K, N] float64 per layer) --------------------------

def gptq(version):
    cfg = {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": version == "v1", "sym": False,
           "checkpoint_format": "gptq" if version == "v1" else "gptq_v2"}
    tensors, expected = {}, {}
    for i, (name, (k, n, bias)) in enumerate(LAYERS.items()):
        w = int_weight(k, n, 4, 32, seed=i, act_order=version == "v1", zero_low=1 if version == "v1" else 0)
        qweight, qzeros, scales, g_idx = wq_format.pack_gptq(w, zero_offset=1 if version == "v1" else 0)
        tensors.update({f"{name}.qweight": qweight, f"{name}.qzeros": qzeros, f"{name}.scales": scales,
                        f"{name}.g_idx": g_idx})
        expected[name] = w.dequantize()
    return cfg, tensors, expected


def awq():
    cfg = {"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemm", "zero_point": True}
    tensors, expected = {}, {}
    for i, (name, (k, n, bias)) in enumerate(LAYERS.items()):
        w = int_weight(k, n, 4, 64, seed=10 + i)
        qweight, qzeros, scales = wq_format.pack_awq(w)
        tensors.update({f"{name}.qweight": qweight, f"{name}.qzeros": qzeros, f"{name}.scales": scales})
        expected[name] = w.dequantize()
    return cfg, tensors, expected


def compressed_int(bits):
    group = {"targets": ["Linear"], "input_activations": None,
             "weights": {"num_bits": bits, "type": "int", "symmetric": bits == 8,
                         "strategy": "group" if bits == 4 else "channel", "group_size": 32 if bits == 4 else None,
                         "actorder": "group" if bits == 4 else None}}
    cfg = {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
           "config_groups": {"group_0": group}, "ignore": ["lm_head"]}
    tensors, expected = {}, {}
    for i, (name, (k, n, bias)) in enumerate(LAYERS.items()):
        w = int_weight(k, n, bits, 32 if bits == 4 else k, seed=20 + i, zeros=bits == 4, act_order=bits == 4)
        tensors.update({f"{name}.{leaf}": t for leaf, t in wq_format.pack_compressed_tensors(w).items()})
        expected[name] = w.dequantize()
    return cfg, tensors, expected


def fp8(method):
    if method == "fp8":
        cfg = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}
        scale_name = "weight_scale_inv"
    else:
        group = {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "block",
                                                    "block_structure": [128, 128], "symmetric": True},
                 "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
                                       "dynamic": True}}
        cfg = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": group},
               "ignore": ["lm_head"]}
        scale_name = "weight_scale"
    tensors, expected = {}, {}
    for i, (name, (k, n, bias)) in enumerate(LAYERS.items()):
        q, scale_inv = reference.quantize_fp8_blocks(torch.randn(n, k, generator=gen(30 + i)) * 0.05)
        tensors.update({f"{name}.weight": q, f"{name}.{scale_name}": scale_inv})
        expected[name] = reference.dequantize_fp8_blocks(q, scale_inv).t()
    return cfg, tensors, expected


def block_int8():
    cfg = {"quant_method": "blockwise_int8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    tensors, expected = {}, {}
    for i, (name, (k, n, bias)) in enumerate(LAYERS.items()):
        q, scale_inv = reference.quantize_weight_blocks_symmetric(torch.randn(n, k, generator=gen(40 + i)) * 0.05, 128)
        tensors.update({f"{name}.weight": q, f"{name}.weight_scale_inv": scale_inv})
        expected[name] = reference.dequantize_weight_blocks_symmetric(q, scale_inv, 128).t()
    return cfg, tensors, expected


FORMATS = {
    "gptq_v1_act_order": (lambda: gptq("v1"), QuantLinear),
    "gptq_v2": (lambda: gptq("v2"), QuantLinear),
    "awq": (awq, QuantLinear),
    "compressed_int4_group_act_order": (lambda: compressed_int(4), QuantLinear),
    "compressed_int8_channel": (lambda: compressed_int(8), QuantLinear),
    "deepseek_fp8": (lambda: fp8("fp8"), Fp8Linear),
    "compressed_fp8_block": (lambda: fp8("compressed-tensors"), Fp8Linear),
    "block_int8": (block_int8, W8A8Linear),
}


def with_biases(tensors):
    for i, (name, (k, n, bias)) in enumerate(LAYERS.items()):
        if bias:
            tensors[f"{name}.bias"] = bias_for(n, 50 + i)
    return tensors


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_load_layers(fmt, tmp_path):
    make, cls = FORMATS[fmt]
    cfg, tensors, expected = make()
    tensors = with_biases(tensors)
    folder = write_folder(tmp_path / fmt, cfg, {**tensors, **plain_tensors()})
    layers = load_quantized(folder)
    assert sorted(layers) == sorted(LAYERS)
    for i, (name, (k, n, bias)) in enumerate(LAYERS.items()):
        module = layers[name]
        assert isinstance(module, cls) and (module.in_features, module.out_features) == (k, n)
        assert (module.bias is not None) == bias
        w = module.dequantize()
        w = w if isinstance(module, QuantLinear) else w.t()
        assert torch.equal(w, expected[name])  # the checkpoint's weight, exactly
        if isinstance(module, QuantLinear):
            x = torch.randn(3, k, generator=gen(60 + i)).half()
            y = x.double() @ expected[name]
            if bias:
                y = y + tensors[f"{name}.bias"].double()
            assert torch.equal(module(x), y.half())
        else:
            assert torch.equal(module.weight, tensors[f"{name}.weight"])  # not requantized
            x = torch.randn(3, k, generator=gen(60 + i))
            y = x.double() @ expected[name] + (tensors[f"{name}.bias"].double() if bias else 0)
            assert ((module(x).double() - y).norm() / y.norm()).item() < 0.06


@pytest.mark.parametrize("fmt", ["gptq_v1_act_order", "compressed_int4_group_act_order", "deepseek_fp8", "block_int8"])
def test_load_into_model(fmt, tmp_path):
    make, cls = FORMATS[fmt]
    cfg, tensors, _ = make()
    plain = plain_tensors()
    folder = write_folder(tmp_path / fmt, cfg, {**with_biases(tensors), **plain})
    model = Tiny()
    assert load_quantized(model, folder, strict=True) is model
    report = model.qgemm_load_report
    assert sorted(report.replaced) == sorted(LAYERS) and report.missing_keys == [] and report.unexpected_keys == []
    assert isinstance(model.model.layers[0].up_proj, cls) and type(model.lm_head) is nn.Linear
    assert torch.equal(model.model.embed_tokens.weight, plain["model.embed_tokens.weight"].float())
    assert torch.equal(model.lm_head.weight, plain["lm_head.weight"].float())
    # the loaded model's state_dict round-trips through safetensors into a second loaded model
    other = load_quantized(Tiny(), folder)
    safetensors_io.save_file(model.state_dict(), tmp_path / "saved.safetensors")
    other.load_state_dict(safetensors_io.load_file(tmp_path / "saved.safetensors"))
    x = torch.randn(2, 256).half()
    up = model.model.layers[0].up_proj
    assert torch.equal(up(x if cls is QuantLinear else x.float()), other.model.layers[0].up_proj(
        x if cls is QuantLinear else x.float()))


def test_load_into_meta_model(tmp_path):
    cfg, tensors, expected = gptq("v2")
    plain = plain_tensors()
    folder = write_folder(tmp_path / "m", cfg, {**with_biases(tensors), **plain})
    with torch.device("meta"):
        model = Tiny()
    load_quantized(model, folder)
    assert model.model.embed_tokens.weight.device.type == "cpu"
    assert torch.equal(model.model.embed_tokens.weight, plain["model.embed_tokens.weight"])
    up = model.model.layers[0].up_proj
    assert up.qweight.device.type == "cpu" and torch.equal(up.dequantize(), expected["model.layers.0.up_proj"])


def test_model_mismatches(tmp_path):
    cfg, tensors, _ = gptq("v2")
    folder = write_folder(tmp_path / "m", cfg, with_biases(tensors))
    model = Tiny()
    model.model.layers[0].up_proj = nn.Linear(256, 64, bias=False)
    with pytest.raises(CheckpointError, match="the checkpoint holds a 256 -> 128 linear layer"):
        load_quantized(model, folder)
    with pytest.raises(CheckpointError, match="missing keys"):
        load_quantized(Tiny(), folder, strict=True)  # no embedding or norm in this checkpoint
    with pytest.raises(CheckpointError, match="which the model does not have"):
        load_quantized(nn.Sequential(nn.Linear(2, 2)), folder)


@pytest.mark.parametrize("cfg, fragment", [
    ({"quant_method": "gptq", "bits": 3}, "quantization_config.bits = 3 is not supported"),
    ({"quant_method": "gptq", "bits": 4, "checkpoint_format": "marlin"}, "checkpoint_format = 'marlin'"),
    ({"quant_method": "awq", "bits": 4, "version": "gemv"}, "quantization_config.version = 'gemv'"),
    ({"quant_method": "awq", "bits": 4, "zero_point": False}, "quantization_config.zero_point = False"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": None},
     "quantization_config.weight_block_size = None"),
    ({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]},
     "quantization_config.activation_scheme = 'static'"),
    ({"quant_method": "blockwise_int8", "weight_block_size": [64, 128]}, "weight_block_size = [64, 128]"),
    ({"quant_method": "bitsandbytes"}, "quantization_config.quant_method = 'bitsandbytes'"),
    ({"quant_method": "compressed-tensors", "format": "int-quantized",
      "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int"}}}},
     "quantization_config.format = 'int-quantized'"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "tensor"}}}},
     "config_groups.g.weights.strategy = 'tensor'"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"g": {"targets": ["Linear"], "input_activations": {"num_bits": 8},
                              "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}},
     "config_groups.g.input_activations"),
    ({"quant_method": "compressed-tensors", "quantization_status": "frozen", "config_groups": {}},
     "quantization_status = 'frozen'"),
])
def test_unsupported_configs(cfg, fragment):
    with pytest.raises(CheckpointError) as e:
        parse_quantization_config(cfg)
    assert fragment in str(e.value)


def test_folder_errors(tmp_path):
    with pytest.raises(CheckpointError, match="has no config.json"):
        load_quantized(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(CheckpointError, match="has no quantization_config"):
        load_quantized(tmp_path)
    cfg, tensors, _ = awq()
    del tensors["model.layers.0.up_proj.qzeros"]
    folder = write_folder(tmp_path / "m", cfg, tensors)
    with pytest.raises(CheckpointError, match="tensor 'model.layers.0.up_proj.qzeros' is missing"):
        load_quantized(folder)
    cfg, tensors, _ = gptq("v2")
    cfg["group_size"] = 64  # the scales say 32
    folder = write_folder(tmp_path / "g", cfg, tensors)
    with pytest.raises(CheckpointError, match="its scales give group_size 32, quantization_config says 64"):
        load_quantized(folder)
    with pytest.raises(TypeError, match="path must be given with a model"):
        load_quantized(Tiny())


# --- safetensors_io -----------------------------------------------------------------------------------------

def test_safetensors_reads_a_hand_written_file(tmp_path):
    """A file made from the format's definition byte by byte: u64 LE header length, JSON, raw LE data."""
    header = {"__metadata__": {"format": "pt"},
              "a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]},
              "b": {"dtype": "I32", "shape": [1, 1], "data_offsets": [4, 8]},
              "c": {"dtype": "BF16", "shape": [], "data_offsets": [8, 10]}}
    text = json.dumps(header).encode()
    data = struct.pack("<2e", 1.5, -2.0) + struct.pack("<i", -7) + struct.pack("<H", 0x3F80)  # bf16 1.0
    path = tmp_path / "hand.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    t = safetensors_io.load_file(path)
    assert torch.equal(t["a"], torch.tensor([1.5, -2.0], dtype=torch.float16))
    assert torch.equal(t["b"], torch.tensor([[-7]], dtype=torch.int32))
    assert t["c"].shape == () and t["c"].item() == 1.0 and t["c"].dtype == torch.bfloat16
    assert set(safetensors_io.load_file(path, names={"a"})) == {"a"}


def test_safetensors_round_trip_and_layout(tmp_path):
    g = gen(5)
    tensors = {"f32": torch.randn(3, 5, generator=g), "f16": torch.randn(4, generator=g).half(),
               "bf16": torch.randn(2, 3, generator=g).bfloat16(),
               "e4m3": torch.randn(8, 16, generator=g).to(torch.float8_e4m3fn),
               "e5m2": torch.randn(4, generator=g).to(torch.float8_e5m2),
               "i8": torch.randint(-128, 128, (7,), generator=g, dtype=torch.int8),
               "u8": torch.randint(0, 256, (3, 3), generator=g, dtype=torch.uint8),
               "i32": torch.randint(-2 ** 31, 2 ** 31 - 1, (4,), generator=g, dtype=torch.int32),
               "i64": torch.arange(5), "bool": torch.tensor([True, False]), "f64": torch.randn(2, dtype=torch.float64),
               "empty": torch.zeros(0, 4), "strided": torch.randn(4, 6, generator=g).t()}
    path = tmp_path / "t.safetensors"
    safetensors_io.save_file(tensors, path, metadata={"format": "pt"})
    back = safetensors_io.load_file(path)
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name].view(torch.uint8) if t.dtype.is_floating_point
                                                            and t.element_size() == 1 else back[name], t.view(
            torch.uint8) if t.dtype.is_floating_point and t.element_size() == 1 else t), name
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    assert length % 8 == 0
    header = json.loads(raw[8:8 + length])
    assert header["__metadata__"] == {"format": "pt"} and header["f32"]["dtype"] == "F32"
    begin, end = header["i32"]["data_offsets"]
    assert raw[8 + length + begin:8 + length + end] == tensors["i32"].numpy().tobytes()


def test_safetensors_errors(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(b"\x01\x02")
    with pytest.raises(safetensors_io.SafetensorsError, match="shorter than the 8-byte header length"):
        safetensors_io.load_file(path)
    text = json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(8))
    with pytest.raises(safetensors_io.SafetensorsError, match="needs 16 bytes"):
        safetensors_io.load_file(path)
    text = json.dumps({"a": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(8))
    with pytest.raises(safetensors_io.SafetensorsError, match="bad entry"):
        safetensors_io.load_file(path)
    with pytest.raises(TypeError, match="which safetensors cannot store"):
        safetensors_io.save_file({"c": torch.zeros(2, dtype=torch.complex64)}, path)
