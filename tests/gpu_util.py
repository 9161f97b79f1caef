"""Helpers of the GPU tests: relative error, poisoned outputs, fresh random inputs, CUDA-graph capture,
two streams, dependent call chains."""
from __future__ import annotations

import torch


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; a NaN left in out (an unwritten element) fails."""
    out = out.double().cpu()
    ref = ref.double().cpu()
    assert not torch.isnan(out).any(), "NaN in output: an element was not written"
    return ((out - ref).norm() / ref.norm()).item()


def poison_allocator():
    """Fill a large freed block with NaN so fresh torch.empty outputs start poisoned."""
    junk = torch.full((64 << 20,), float("nan"), device="cuda")
    del junk


def randn(*shape, dtype=torch.float32, seed=None):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed if seed is not None else torch.seed() % (1 << 31))
    # A non-zero mean exercises the offset terms; never all zeros.
    return (torch.randn(*shape, generator=g, device="cuda") * 1.5 + 0.3).to(dtype)


def capture_graph(fn, static_x: torch.Tensor):
    """(graph, static output) of fn(static_x) captured in a CUDA graph, run once on a side stream
    first as torch's recipe does (plans make their per-M launches outside the capture). The output
    is poisoned (NaN) after the capture, so a replay must write all of it."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = fn(static_x)
    static_y.fill_(float("nan"))
    return graph, static_y


def assert_graph_replays(call, out: torch.Tensor, expected: torch.Tensor, replays: int = 3):
    """call(out), writing into `out`, captured in a CUDA graph and replayed `replays` times with `out`
    poisoned (NaN) before each: every replay must give exactly `expected`."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(out)
    for _ in range(replays):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, expected)


def on_two_streams(fn, a: torch.Tensor, b: torch.Tensor):
    """(fn(a), fn(b)), issued on two new streams one after the other without waiting in between, so
    that the two calls may overlap on the GPU."""
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(s1):
        ya = fn(a)
    with torch.cuda.stream(s2):
        yb = fn(b)
    torch.cuda.synchronize()
    return ya, yb


def check_dependent_chain(link, x: torch.Tensor, links: int = 12):
    """A chain of `links` calls where each reads the previous call's output, y = link(i, y), with
    torch kernels between every other pair of links (links 2j -> 2j + 1 follow each other directly),
    must equal the same chain with the GPU synchronized after every call: eagerly, and replayed from
    a CUDA graph (outputs poisoned before each replay). Programmatically launched kernels may start
    while the previous kernel runs; a missing wait would read a half-written input."""

    def chain(sync):
        y, outs = x, []
        for i in range(links):
            y = link(i, y)
            if i % 2 == 1:  # torch kernels between the others, keeping the values in range
                y = y / y.abs().amax().clamp_min(1e-3)
            outs.append(y)
            if sync:
                torch.cuda.synchronize()
        return outs

    expected = [o.clone() for o in chain(True)]
    assert all(torch.isfinite(o).all() for o in expected)
    got = chain(False)
    torch.cuda.synchronize()
    for e, g in zip(expected, got):
        assert torch.equal(e, g)
    graph = torch.cuda.CUDAGraph()
    chain(False)  # warm-up off the graph (allocations)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        captured = chain(False)
    for _ in range(3):
        for c in captured:
            c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for e, c in zip(expected, captured):
            assert torch.equal(e, c)
