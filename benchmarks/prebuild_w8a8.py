"""Build, in parallel, the W8A8 kernels of the catalog (act_quant, the chained w8a8_gemm, the Sm90
w8a8_gemm_sm90) and those outside it that the GPU tests use: outputs and epilogues the catalog
leaves to first use (otherwise each is built during the test run, one at a time).

    python benchmarks/prebuild_w8a8.py [-j 16] [--families act_quant,w8a8_gemm,w8a8_gemm_sm90]
"""
from __future__ import annotations

import argparse
import time

from cutlass_gen.build import build_many, find_artifact
from cutlass_gen.catalog import catalog
from cutlass_gen.families.w8a8 import W8A8Sm90Spec, w8a8_sm90_alternate, w8a8_sm90_blocks_in_flight


def test_specs() -> list:
    """tests/test_w8a8_sm90_gpu.py beyond the catalog: bias/activation over every output and both
    epilogues (M = 33: swapped tiles), deep K in FP32 (stream-K 128 x 128), the chained
    path's agreement test (block 64, FP32), stream-K without turns."""
    specs = [W8A8Sm90Spec((128, 16), 128, scheme, output, "cooperative", "persistent", True, epilogue)
             for scheme in ("symmetric", "asymmetric") for output in ("f32", "f16", "bf16")
             for epilogue in ("clamp", "silu")]
    specs += [W8A8Sm90Spec((128, 128), 128, scheme, "f32", "cooperative", "streamk",
                           alternate=w8a8_sm90_alternate(scheme, 128, (128, 128), False))
              for scheme in ("symmetric", "asymmetric")]
    specs += [W8A8Sm90Spec((128, 128), 64, "asymmetric", "f32")]
    # test_stream_k: the asymmetric kernel without turns (the catalog's takes turns).
    specs += [W8A8Sm90Spec((128, 128), 128, "asymmetric", "f16", "cooperative", "streamk")]
    # Plans of small N take the swapped stream-K kernels (a few CTAs): test_bias_activation_outputs (M = 5
    # asymmetric and M = 80, N = 264) and the NaN tests, over every output and epilogue.
    specs += [W8A8Sm90Spec((128, tn), 128, scheme, output, "cooperative", "streamk", True, epilogue)
              for tn in (16, 32) for scheme in ("symmetric", "asymmetric") for output in ("f32", "f16", "bf16")
              for epilogue in ("clamp", "silu")]
    # test_bias_activation_outputs at M = 5, 17 and 33: the 64-row pingpong tiles, every output and epilogue.
    specs += [W8A8Sm90Spec((64, tn), 128, scheme, output, "pingpong", "persistent", True, epilogue,
                           blocks_in_flight=w8a8_sm90_blocks_in_flight(128, (64, tn), True))
              for tn in (16, 32) for scheme in ("symmetric", "asymmetric") for output in ("f32", "f16", "bf16")
              for epilogue in ("clamp", "silu")]
    # test_bias_activation_pingpong_64_tokens: the symmetric 64 x 64 pingpong tile, every output and epilogue.
    specs += [W8A8Sm90Spec((64, 64), 128, "symmetric", output, "pingpong", "persistent", True, epilogue,
                           blocks_in_flight=w8a8_sm90_blocks_in_flight(128, (64, 64), True))
              for output in ("f32", "f16", "bf16") for epilogue in ("clamp", "silu")]
    # test_blocks_in_flight_equal_one_at_a_time: the pingpong tiles with one block at a time.
    specs += [W8A8Sm90Spec((64, tn), 128, scheme, "f16", "pingpong", "persistent", True)
              for tn in (16, 32) for scheme in ("symmetric", "asymmetric")]
    # test_256_row_tile: the 256 x 128 tile and the 128 x 128 one it is compared with, every output and epilogue.
    specs += [W8A8Sm90Spec(tile, 128, "symmetric", output, epilogue=epilogue) for tile in ((256, 128), (128, 128))
              for output in ("f32", "f16", "bf16") for epilogue in ("clamp", "silu")]
    return specs + three_consumer_specs()


def three_consumer_specs() -> list:
    """test_three_consumer_tile*: each 192 x 128 three-consumer kernel and the 128 x 128 cooperative
    kernel its output is compared with, and the 192-row kernel of test_programmatic_launch_chain."""
    from test_w8a8_sm90_gpu import THREE_CONSUMER_CASES
    specs = [W8A8Sm90Spec((192, 128), 128, "symmetric", "f16", "cooperative3", alternate=alternate)
             for alternate in (False, True)]
    specs += [W8A8Sm90Spec((128, 128), 128, "symmetric", "f16")]
    for scheme, block_size, output, activation, alternate in THREE_CONSUMER_CASES:
        epilogue = "silu" if activation == "silu" else "clamp"
        specs += [W8A8Sm90Spec((192, 128), block_size, scheme, output, "cooperative3", epilogue=epilogue,
                               alternate=alternate),
                  W8A8Sm90Spec((128, 128), block_size, scheme, output, epilogue=epilogue)]
    return specs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-j", type=int, default=16)
    ap.add_argument("--sm", type=int, default=90)
    ap.add_argument("--families", default="act_quant,w8a8_gemm,w8a8_gemm_sm90")
    ap.add_argument("--no-tests", action="store_true", help="the catalog only")
    args = ap.parse_args()
    specs = {s for f in args.families.split(",") for s in catalog(args.sm, f)}
    if not args.no_tests and args.sm == 90:
        specs |= set(test_specs())
    missing = [s for s in sorted(specs, key=lambda s: s.name) if find_artifact(s, args.sm) is None]
    t0 = time.time()
    build_many(missing, args.sm, jobs=args.j, progress=lambda line: None)
    print(f"prebuilt {len(missing)} of {len(specs)} W8A8 kernels for sm{args.sm} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
