"""Timing for `qgemm bench` and the benchmarks/ scripts.

Every figure the benchmarks report is GPU time per call under CUDA-graph replay (bench_graph,
bench_graph_rotating): small GEMMs are shorter than one call's host work, so eager event timings
would measure the host. The main figure rotates the layer's weights through at least
ROTATION_FACTOR times the L2 size (rotation_count): a model's consecutive layers never find their
weights in L2, so a benchmark that calls one layer over and over reads its weights from L2 and
flatters every contender that is bound by weight bandwidth. The L2-warm figure (one copy, called
over and over) is reported beside it on request.

Importing this module needs no GPU; the functions need one.
"""
from __future__ import annotations

import math
import statistics
import time

import torch


def bench(fn, min_reps=10, budget_s=0.3, max_reps=200) -> float:
    """Median microseconds of fn() by CUDA events."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    one = max(start.elapsed_time(end) / 1e3, 1e-6)
    reps = int(min(max_reps, max(min_reps, budget_s / one)))
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def copy_bandwidth() -> float:
    """Bytes/s of a large device-to-device copy, counting read + write."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = bench(lambda: dst.copy_(src), min_reps=5)
    return 2 * src.numel() / (us * 1e-6)


def bench_graph(fn, calls=20, replays=15) -> float:
    """Median microseconds per fn() call with the host taken out: `calls` calls captured in one
    CUDA graph and replayed. Small GEMMs are shorter than one call's host work (argument checks,
    Params, the launch), so event timings of eager calls would measure the host instead. Falls
    back to eager timing where fn cannot be captured."""
    fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.stream(stream):
            fn()  # warm-up on the capture stream (allocations, lazy init)
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except RuntimeError:
        torch.cuda.synchronize()
        return bench(fn)
    return _replay_median(graph, calls, replays)


# Copies of a layer's weights together span at least this many times the L2 size (issue 17).
ROTATION_FACTOR = 4.0


def l2_bytes() -> int:
    """The current GPU's L2 cache size in bytes."""
    return torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size


def rotation_count(weight_bytes: int, factor: float = ROTATION_FACTOR, l2: int | None = None) -> int:
    """How many copies of a layer's weights make at least `factor` times the L2 size together: timed
    in turn, no call finds its weights in L2, as a model's consecutive layers do not. `l2` defaults to
    the current GPU's L2 size (l2_bytes)."""
    if weight_bytes <= 0:
        raise ValueError(f"weight_bytes must be positive, got {weight_bytes}")
    l2 = l2_bytes() if l2 is None else l2
    return max(1, math.ceil(factor * l2 / weight_bytes))


def bench_graph_rotating(fns, min_calls=20, replays=15) -> float:
    """Median microseconds per call of calls cycling over `fns` (each with its own copy of the
    weights, see rotation_count), captured in one CUDA graph and replayed: the L2-cold time of a
    layer inside a model. With one fn this is bench_graph."""
    fns = list(fns)
    rounds = max(1, math.ceil(min_calls / len(fns)))
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        for fn in fns:
            fn()  # warm-up on the capture stream (allocations, lazy init)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        for _ in range(rounds):
            for fn in fns:
                fn()
    return _replay_median(graph, rounds * len(fns), replays)


def timed_rotating(fns) -> float:
    """bench_graph_rotating(fns), or NaN (with the reason printed) when a call raises."""
    try:
        return bench_graph_rotating(fns)
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:
        print(f"  (failed: {str(e)[:100]})")
        return math.nan


def host_us(fn, calls=200, rounds=7, warmup=0) -> float:
    """Host time of one warm fn() call (after `warmup` calls). Bursts of `calls` stay well under the
    driver's launch queue depth, so the host never waits for the GPU and the time is the host's alone."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(samples)


def timed(fn) -> float:
    """bench_graph(fn), or NaN (with the reason printed) when the call raises: one failing kernel
    leaves a gap in a table instead of ending the run."""
    try:
        return bench_graph(fn)
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:
        print(f"  (failed: {str(e)[:100]})")
        return math.nan


def geomean(values) -> float:
    """Geometric mean of the values that are not NaN (NaN when none are)."""
    values = [v for v in values if not math.isnan(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def rotated_and_warm(fns, warm: bool) -> tuple[float, float | None]:
    """(timed_rotating(fns), the L2-warm time of fns[0] if `warm` else None): the two figures a
    benchmark column reports."""
    fns = list(fns)
    return timed_rotating(fns), (timed(fns[0]) if warm else None)


def _replay_median(graph, calls: int, replays: int) -> float:
    """Median microseconds per call over `replays` replays of a graph holding `calls` calls (one
    replay first, untimed)."""
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)
