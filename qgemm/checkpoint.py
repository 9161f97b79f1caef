"""Load quantized Hugging Face checkpoints straight into qgemm modules: no dequantize and requantize.

    model = load_quantized(model, "path/to/folder")     # replaces the checkpoint's quantized nn.Linear layers
    layers = load_quantized("path/to/folder")           # {layer name: qgemm module}

A folder holds config.json, whose `quantization_config` names the format, and *.safetensors files
(read by qgemm.safetensors_io). Formats (`quant_method`):

  gptq                 qweight/qzeros/scales/g_idx; checkpoint_format "gptq" (v1, stored zero - 1) or
                       "gptq_v2"; bits 4/8; desc_act (act-order) as a permutation of x's columns
  awq                  AutoAWQ GEMM (version "gemm"): qweight/qzeros/scales, int4 with zero points
  fp8                  HF FineGrainedFP8 / DeepSeek-V3: weight (FP8) + weight_scale_inv, weight_block_size
                       [128, 128], dynamic activations
  blockwise_int8       block-INT8 (DeepSeek-V3/R1 INT8 as SGLang runs it): weight (int8) +
                       weight_scale_inv, weight_block_size [128, block], dynamic activations
  compressed-tensors   format pack-quantized (int4/int8 weights, group or channel strategy, optional
                       asymmetric zero points and act-order g_idx, no activation quantization) and
                       float-quantized (FP8 weights in 128 x 128 blocks, dynamic per-group activations)

Anything else is refused with a CheckpointError naming the field and the value. The tensors of a
layer become its module's buffers (qgemm/nn); the checkpoint's other tensors (embeddings, norms,
unquantized layers) are loaded into the model with load_state_dict.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from . import safetensors_io
from . import tp as _tp
from .fuse import refuse_packed
from .nn import Fp8Linear, QuantLinear, W8A8Linear
from .nn.linear import check_fp8_shape

log = logging.getLogger("qgemm.checkpoint")


class CheckpointError(ValueError):
    pass


def _refuse(field_name: str, value, accepted) -> CheckpointError:
    return CheckpointError(f"quantization_config.{field_name} = {value!r} is not supported (accepted: {accepted})")


# --- the format -------------------------------------------------------------------------------------

@dataclass
class LinearScheme:
    """How one quantized linear layer is stored."""

    kind: str                 # "int" (GPTQ/AWQ/pack-quantized), "fp8", "block_int8"
    layout: str = ""          # int: "gptq", "awq", "pack"
    bits: int = 4
    group_size: int | None = None   # None: whatever the tensors say; -1: per output channel
    zero_offset: int = 1      # GPTQ v1 stores zero - 1
    block_k: int = 128        # block_int8: the K extent of a weight block


@dataclass
class CheckpointFormat:
    method: str
    schemes: list[tuple[list[str], LinearScheme]] = field(default_factory=list)  # (targets, scheme)
    ignore: list[str] = field(default_factory=list)

    def scheme_for(self, name: str) -> LinearScheme | None:
        if any(_target_matches(t, name) for t in self.ignore):
            return None
        for targets, scheme in self.schemes:
            if any(_target_matches(t, name) for t in targets):
                return scheme
        return None


def _target_matches(target: str, name: str) -> bool:
    """compressed-tensors targets: "re:<regex>" against the layer name, "Linear" (every linear layer
    here), or a layer name."""
    if target.startswith("re:"):
        return re.match(target[3:], name) is not None
    return target == "Linear" or target == name or name.endswith("." + target)


def _int(cfg: dict, key: str, default=None):
    value = cfg.get(key, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise _refuse(key, value, "an int")
    return value


def parse_quantization_config(cfg: dict) -> CheckpointFormat:
    """A config.json `quantization_config` -> CheckpointFormat (CheckpointError for what qgemm cannot run)."""
    if not isinstance(cfg, dict):
        raise CheckpointError(f"quantization_config must be a JSON object, got {type(cfg).__name__}")
    method = str(cfg.get("quant_method", "")).lower()
    everything = ["Linear"]
    if method == "gptq":
        bits = _int(cfg, "bits", 4)
        if bits not in (4, 8):
            raise _refuse("bits", bits, "4, 8")
        fmt = str(cfg.get("checkpoint_format", "gptq")).lower()
        offsets = {"gptq": 1, "gptq_v2": 0}
        if fmt not in offsets:
            raise _refuse("checkpoint_format", cfg.get("checkpoint_format"), "'gptq', 'gptq_v2'")
        scheme = LinearScheme("int", "gptq", bits, _int(cfg, "group_size", 128), offsets[fmt])
        return CheckpointFormat(method, [(everything, scheme)], list(cfg.get("modules_to_not_convert") or []))
    if method == "awq":
        version = str(cfg.get("version", "gemm")).lower()
        if version != "gemm":
            raise _refuse("version", cfg.get("version"), "'gemm'")
        bits = _int(cfg, "bits", _int(cfg, "w_bit", 4))
        if bits != 4:
            raise _refuse("bits", bits, "4")
        if cfg.get("zero_point", True) is not True:
            raise _refuse("zero_point", cfg.get("zero_point"), "true (AWQ GEMM stores zero points)")
        group = _int(cfg, "group_size", _int(cfg, "q_group_size", 128))
        return CheckpointFormat(method, [(everything, LinearScheme("int", "awq", 4, group))],
                                list(cfg.get("modules_to_not_convert") or []))
    if method in ("fp8", "blockwise_int8"):
        if str(cfg.get("activation_scheme", "dynamic")).lower() != "dynamic":
            raise _refuse("activation_scheme", cfg.get("activation_scheme"), "'dynamic'")
        block = cfg.get("weight_block_size")
        if method == "fp8":
            if block != [128, 128]:
                raise _refuse("weight_block_size", block, "[128, 128] (blockwise FP8)")
            scheme = LinearScheme("fp8")
        else:
            if not (isinstance(block, list) and len(block) == 2 and block[0] == 128 and block[1] in (32, 64, 128, 256)):
                raise _refuse("weight_block_size", block, "[128, 32|64|128|256]")
            scheme = LinearScheme("block_int8", block_k=block[1])
        ignore = list(cfg.get("modules_to_not_convert") or cfg.get("ignored_layers") or [])
        return CheckpointFormat(method, [(everything, scheme)], ignore)
    if method == "compressed-tensors":
        return _parse_compressed_tensors(cfg)
    raise _refuse("quant_method", cfg.get("quant_method"), "'gptq', 'awq', 'fp8', 'blockwise_int8', "
                  "'compressed-tensors'")


def _parse_compressed_tensors(cfg: dict) -> CheckpointFormat:
    status = cfg.get("quantization_status", "compressed")
    if status != "compressed":
        raise _refuse("quantization_status", status, "'compressed'")
    groups = cfg.get("config_groups") or {}
    if not groups:
        raise CheckpointError("quantization_config.config_groups is empty: nothing is quantized")
    out = CheckpointFormat("compressed-tensors", ignore=list(cfg.get("ignore") or []))
    for group_name, group in groups.items():
        where = f"config_groups.{group_name}"
        fmt = group.get("format") or cfg.get("format")
        weights = group.get("weights") or {}
        acts = group.get("input_activations")
        targets = list(group.get("targets") or [])
        kind = weights.get("type")
        bits = weights.get("num_bits")
        strategy = weights.get("strategy")
        if fmt == "pack-quantized":
            if kind != "int":
                raise _refuse(f"{where}.weights.type", kind, "'int'")
            if bits not in (4, 8):
                raise _refuse(f"{where}.weights.num_bits", bits, "4, 8")
            if strategy not in ("group", "channel"):
                raise _refuse(f"{where}.weights.strategy", strategy, "'group', 'channel'")
            if acts is not None:
                raise _refuse(f"{where}.input_activations", acts, "null (weight-only)")
            group_size = weights.get("group_size") if strategy == "group" else -1
            out.schemes.append((targets, LinearScheme("int", "pack", bits, group_size)))
        elif fmt == "float-quantized":
            if kind != "float" or bits != 8:
                raise _refuse(f"{where}.weights", {"type": kind, "num_bits": bits}, "type 'float', num_bits 8")
            if strategy != "block" or list(weights.get("block_structure") or []) != [128, 128]:
                raise _refuse(f"{where}.weights.block_structure", weights.get("block_structure"),
                              "[128, 128] with strategy 'block'")
            if acts is not None and not (acts.get("dynamic") and acts.get("strategy") in ("group", "token")):
                raise _refuse(f"{where}.input_activations", acts, "dynamic per-group activations")
            out.schemes.append((targets, LinearScheme("fp8")))
        else:
            raise _refuse(f"{where}.format" if group.get("format") else "format", fmt,
                          "'pack-quantized', 'float-quantized'")
    return out


# --- reading a folder -----------------------------------------------------------------------------------

def read_config(path) -> dict:
    config_path = Path(path) / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{path} has no config.json")
    with open(config_path) as f:
        config = json.load(f)
    if "quantization_config" not in config:
        raise CheckpointError(f"{config_path} has no quantization_config: not a quantized checkpoint")
    return config


def read_tensors(path) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's *.safetensors files (CPU)."""
    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path} holds no *.safetensors file")
    tensors = {}
    for file in files:
        for name, t in safetensors_io.load_file(file).items():
            if name in tensors:
                raise CheckpointError(f"tensor {name!r} appears in more than one file of {path}")
            tensors[name] = t
    return tensors


# Tensor names that mark a quantized linear layer, per scheme kind and layout.
_MARKERS = {("int", "gptq"): "qweight", ("int", "awq"): "qweight", ("int", "pack"): "weight_packed",
            ("fp8", ""): "weight", ("block_int8", ""): "weight"}


def _layer_names(tensors: dict, fmt: CheckpointFormat) -> list[str]:
    names = []
    for key, t in tensors.items():
        prefix, _, leaf = key.rpartition(".")
        scheme = fmt.scheme_for(prefix)
        if scheme is None or leaf != _MARKERS[(scheme.kind, scheme.layout)]:
            continue
        if scheme.kind == "fp8" and t.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
            continue  # an unquantized layer of an FP8 checkpoint
        if scheme.kind == "block_int8" and t.dtype != torch.int8:
            continue
        names.append(prefix)
    return sorted(names)


def _take(tensors: dict, used: set, prefix: str, leaf: str, required: bool = True):
    key = f"{prefix}.{leaf}"
    if key not in tensors:
        if required:
            raise CheckpointError(f"layer {prefix!r}: tensor {key!r} is missing")
        return None
    used.add(key)
    return tensors[key]


def _check_group(prefix: str, scheme: LinearScheme, module: QuantLinear):
    if scheme.group_size is None:
        return
    expected = module.in_features if scheme.group_size == -1 else scheme.group_size
    if module.group_size != expected:
        raise CheckpointError(f"layer {prefix!r}: its scales give group_size {module.group_size}, "
                              f"quantization_config says {scheme.group_size}")


def build_layer(prefix: str, scheme: LinearScheme, tensors: dict, used: set, device=None) -> nn.Module:
    """The qgemm module of one quantized layer from its checkpoint tensors (moved to `device` first)."""
    def take(leaf, required=True):
        t = _take(tensors, used, prefix, leaf, required)
        return t if t is None or device is None else t.to(device)

    bias = take("bias", False)
    if scheme.kind == "int":
        if scheme.layout == "gptq":
            module = QuantLinear.from_gptq(take("qweight"), take("qzeros"), take("scales"), take("g_idx", False),
                                           bias, scheme.bits, scheme.zero_offset)
        elif scheme.layout == "awq":
            module = QuantLinear.from_awq(take("qweight"), take("qzeros"), take("scales"), bias)
        else:
            module = QuantLinear.from_compressed_tensors(take("weight_packed"), take("weight_scale"),
                                                         take("weight_zero_point", False), take("weight_g_idx", False),
                                                         scheme.bits, take("weight_shape", False), bias)
        _check_group(prefix, scheme, module)
        return module
    weight = take("weight")
    if scheme.kind == "fp8":
        scale = take("weight_scale_inv", False)
        if scale is None:
            scale = take("weight_scale")  # compressed-tensors' name for the same multiplier
        check_fp8_shape(weight.shape[1], weight.shape[0])
        return Fp8Linear.from_deepseek(weight, scale, bias)
    return W8A8Linear.from_block_int8(weight, take("weight_scale_inv"), bias, block_size=scheme.block_k)


@dataclass
class LoadReport:
    replaced: list[str] = field(default_factory=list)
    missing_keys: list[str] = field(default_factory=list)
    unexpected_keys: list[str] = field(default_factory=list)


def load_quantized(model_or_path, path=None, *, device=None, strict: bool = False, process_group=None,
                   tp_plan=None):
    """Build qgemm modules from a quantized checkpoint folder (module docstring).

    load_quantized(path) -> {layer name: module}. load_quantized(model, path) replaces each quantized
    layer's nn.Linear in `model` (same in/out features) with its module, loads the checkpoint's other
    tensors into the model, and returns the model; `model.qgemm_load_report` says what was replaced
    and which keys were missing or unexpected (strict=True raises on either). device: where the
    modules' buffers go (default: the tensors stay on the CPU; the model's own device otherwise).
    process_group (tensor parallelism, qgemm/tp.py): each layer tp_plan matches (default
    qgemm.tp.DEFAULT_TP_PLAN) becomes this rank's shard of the checkpoint's quantized tensors, the
    matching unquantized nn.Linear layers are sliced after loading; the rest is replicated.
    """
    model = None
    if isinstance(model_or_path, nn.Module):
        model = model_or_path
        if path is None:
            raise TypeError("path must be given with a model: load_quantized(model, path)")
    else:
        if path is not None:
            raise TypeError("load_quantized takes (path) or (model, path)")
        path = model_or_path
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if model is not None:
        # The checkpoint names the members (q_proj, ...): load into the unpacked model, then pack.
        refuse_packed(model, "load_quantized reads checkpoints into the unpacked model; call "
                             "fuse_projections_ after loading")
    config = read_config(path)
    fmt = parse_quantization_config(config["quantization_config"])
    tensors = read_tensors(path)
    used: set = set()
    on_meta = False
    if model is not None and device is None:
        device = next((t.device for t in model.state_dict().values()), None)
        on_meta = device is not None and device.type == "meta"
        if on_meta:
            device = None  # a model built on the meta device takes the checkpoint's tensors as they are
    layers = {}
    # Shard on load, one parent module at a time (an MLP's shards are planned together, qgemm/tp.py):
    # the full layers are dropped once their shards are cut. The names are sorted: siblings are adjacent.
    for _, names in itertools.groupby(_layer_names(tensors, fmt), key=lambda n: n.rpartition(".")[0]):
        built = {name: build_layer(name, fmt.scheme_for(name), tensors, used, device) for name in names}
        layers.update(built if process_group is None else _tp.shard_layers(built, process_group, tp_plan))
    if model is None:
        return layers

    report = LoadReport()
    for name, module in layers.items():
        try:
            old = model.get_submodule(name)
        except AttributeError:
            raise CheckpointError(f"the checkpoint quantizes layer {name!r}, which the model does not have") from None
        if not isinstance(old, (nn.Linear, QuantLinear, Fp8Linear, W8A8Linear, *_tp.PARALLEL_MODULES)) or \
                (old.in_features, old.out_features) != (module.in_features, module.out_features):
            raise CheckpointError(f"layer {name!r}: the checkpoint holds a {module.in_features} -> "
                                  f"{module.out_features} linear layer, the model has {old}")
        has_bias = getattr(module, "has_bias", module.bias is not None)  # a TP row shard: rank 0 holds it
        if (old.bias is not None) != has_bias:
            raise CheckpointError(f"layer {name!r}: bias={old.bias is not None} in the model, "
                                  f"{has_bias} in the checkpoint")
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, module)
        report.replaced.append(name)
    rest = {k: v for k, v in tensors.items() if k not in used}
    result = model.load_state_dict(rest, strict=False, assign=on_meta)
    replaced = tuple(name + "." for name in report.replaced)
    report.missing_keys = [k for k in result.missing_keys if not k.startswith(replaced)]
    report.unexpected_keys = list(result.unexpected_keys)
    if strict and (report.missing_keys or report.unexpected_keys):
        raise CheckpointError(f"loading {path}: missing keys {report.missing_keys}, unexpected keys "
                              f"{report.unexpected_keys}")
    for key in report.missing_keys:
        log.warning("load_quantized: %s is not in the checkpoint", key)
    if process_group is not None:
        with torch.no_grad():
            _tp.parallelize(model, process_group, tp_plan)  # the matching layers left as nn.Linear
    model.qgemm_load_report = report
    return model
