"""One plan called concurrently, every family (issue 18): two CUDA graphs of one plan replayed together
on two streams, eager calls on two streams, and two Python threads.

The hang of issue 18: two graphs captured from one plan (prefill and decode graphs, say) replayed at
once on two streams. Both graphs are captured on torch's default capture stream, so state kept per
stream (stream-K tile counters) was shared by the two replays; each launch's CTAs then waited on tiles
counted by the other launch. Every wait here is polled against a deadline (WATCHDOG_S), so a hang
fails the test instead of the session; the tests after a hang skip (the GPU is still busy), and the
device script runs pytest under `timeout -s KILL`.

Each concurrent result is compared with the same plan's eager, serial result on the same input:
within the family's GPU-test bound (test_*_gpu.py) for floating outputs, equal for int8 ones. A
shared counter or workspace makes tiles lose or double-count partial sums, errors far beyond those
bounds.
"""
from __future__ import annotations

import threading
import time

import pytest
import torch

import qgemm
from qgemm.fp8.heuristics import Fp8Choice
from qgemm.fpaintb.heuristics import FpAIntBChoice, FpAIntBSm90Choice

from gpu_util import randn, rel_err

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
                       reason="needs an sm80 or later GPU"),
]

WATCHDOG_S = 60.0
REPLAYS = 25
_hung: list[str] = []


class Hang(RuntimeError):
    pass


@pytest.fixture(autouse=True)
def _not_after_a_hang():
    if _hung:
        pytest.skip(f"the GPU hung in an earlier test ({_hung[0]}); nothing more can run on it")


def join(threads, errors, what: str):
    """Start the threads and join them within WATCHDOG_S each (else Hang); raise the first error
    they caught (in the test's thread, where pytest reports it)."""
    for t in threads:
        t.start()
    for t in threads:
        t.join(WATCHDOG_S)
        if t.is_alive():
            _hung.append(what)
            raise Hang(f"{what}: a thread calling the plan did not finish within the watchdog")
    if errors:
        raise errors[0]


def wait(streams, what: str):
    """Poll the streams until they are idle or WATCHDOG_S passes (then Hang)."""
    deadline = time.monotonic() + WATCHDOG_S
    while not all(s.query() for s in streams):
        if time.monotonic() > deadline:
            _hung.append(what)
            raise Hang(f"{what}: still running after {WATCHDOG_S:.0f} s: the launches wait on each other")
        time.sleep(0.002)


def _is_sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


class Case:
    """One family's plan with two inputs (two M: a decode-like and a prefill-like call)."""

    def __init__(self, call, inputs, compare):
        self.call = call          # call(x, out=None) -> out, on the current stream
        self.inputs = inputs      # two inputs
        self.compare = compare    # compare(out, expected) asserts


def _float_compare(bound):
    def compare(out, expected):
        assert rel_err(out, expected) < bound
    return compare


def _int_compare(out, expected):
    assert torch.equal(out, expected), f"{int((out != expected).sum())} int8 outputs differ"


def _fp8(streamk: bool) -> Case:
    from cutlass_gen.families.fp8 import Fp8BlockwiseGemmSpec
    w = qgemm.Fp8Weight.from_float(randn(1024, 2048, seed=1) * 0.05)
    plan = qgemm.Fp8GemmPlan(w)
    choice = None
    if streamk:  # the stream-K scheduler's workspace (test_fp8_gpu.py builds the same kernel)
        choice = Fp8Choice(Fp8BlockwiseGemmSpec((128, 64), (1, 1), "cooperative", True, "bf16",
                                                           scheduler="streamk"))

    def call(x, out=None):
        if choice is None:
            return plan(x, out)
        return plan.gemm(qgemm.quantize_activations_fp8(x), out, choice=choice)
    return Case(call, [randn(8, 2048, dtype=torch.bfloat16, seed=2), randn(300, 2048, dtype=torch.bfloat16, seed=3)],
                _float_compare(5e-3))


def _w8a8(mode: str, scheme: str) -> Case:
    w = qgemm.W8A8Weight.from_float(randn(512, 1024, seed=4) * 0.05, 128, scheme=scheme)
    plan = qgemm.W8A8GemmPlan(w, launch_mode=mode)  # sm90 decode (M <= 16) runs stream-K
    return Case(plan, [randn(8, 1024, dtype=torch.float16, seed=5), randn(200, 1024, dtype=torch.float16, seed=6)],
                _float_compare(1e-2))


def _fpaintb(streamk: bool) -> Case:
    from cutlass_gen.catalog import catalog
    from cutlass_gen.families.fpaintb import FpAIntBGemmSpec
    weight = qgemm.IntBWeight.from_float(randn(512, 4096, seed=7) * 0.05, bits=4, group_size=128)
    plan = qgemm.FpAIntBPlan(weight)
    target = 90 if _is_sm90() else 80
    spec = next(s for s in catalog(target, FpAIntBGemmSpec.family) if s.act == "f16" and s.bits == 4)
    choice = FpAIntBChoice(spec, 2) if streamk else None
    return Case(lambda x, out=None: plan(x, out, choice=choice),
                [randn(5, 4096, dtype=torch.float16, seed=8), randn(70, 4096, dtype=torch.float16, seed=9)],
                _float_compare(2e-3))


def _fpaintb_sm90() -> Case:
    """The Sm90 FpA x IntB kernel on its stream-K scheduler (each call's workspace flags zeroed in the
    call: in a graph, by the graph's own memset on its own buffer)."""
    from cutlass_gen.families.fpaintb import FpAIntBSm90Spec
    weight = qgemm.IntBWeight.from_float(randn(512, 4096, seed=7) * 0.05, bits=4, group_size=128, symmetric=False)
    plan = qgemm.FpAIntBPlan(weight)
    choice = FpAIntBSm90Choice(FpAIntBSm90Spec("f16", 4, (128, 64), scheduler="streamk"), splits=4)
    return Case(lambda x, out=None: plan(x, out, choice=choice),
                [randn(5, 4096, dtype=torch.float16, seed=8), randn(70, 4096, dtype=torch.float16, seed=9)],
                _float_compare(2e-3))


def _conv_fpaintb() -> Case:
    g = torch.Generator().manual_seed(10)
    q = qgemm.IntConvWeight.from_float(torch.randn(64, 64, 3, 3, generator=g) * 0.1 + 0.02, 4, 32)
    weight = qgemm.IntConvWeight(q.q.cuda(), q.scale.cuda(), q.offset.cuda(), 4, 32)
    plan = qgemm.FpAIntBConvPlan(weight, padding=1)
    spec = plan.choice(1, 14, 14).spec
    choice = FpAIntBChoice(spec, 2)  # stream-K: the counters that conv_fpaintb shared too
    return Case(lambda x, out=None: plan(x, out, choice=choice),
                [randn(1, 14, 14, 64, dtype=torch.float16, seed=11), randn(3, 14, 14, 64, dtype=torch.float16, seed=12)],
                _float_compare(2e-3))


def _conv_int8() -> Case:
    g = torch.Generator().manual_seed(13)
    w_q = torch.randint(-127, 128, (64, 3, 3, 64), generator=g, dtype=torch.int8).cuda()
    quant = qgemm.ConvInt8Quant(0.02, 3, torch.rand(64, generator=g) * 0.01 + 0.001, 0.5, -7)
    plan = qgemm.ConvInt8Plan(w_q, quant, padding=1)
    xs = [torch.randint(-128, 128, (n, 14, 14, 64), generator=g, dtype=torch.int8).cuda() for n in (1, 4)]
    return Case(lambda x, out=None: plan(x, out), xs, _int_compare)


def _cases():
    cases = {"fpaintb": lambda: _fpaintb(False), "fpaintb_stream_k": lambda: _fpaintb(True),
             "conv_fpaintb_stream_k": _conv_fpaintb, "conv_int8": _conv_int8,
             "w8a8_chained": lambda: _w8a8("chained", "asymmetric"),
             # promote: stream-K at both M here (the tiles do not fill the GPU), partials per call
             "w8a8_promote_asymmetric": lambda: _w8a8("promote", "asymmetric"),
             "w8a8_promote_symmetric": lambda: _w8a8("promote", "symmetric")}
    if _is_sm90():
        cases.update({"fp8": lambda: _fp8(False), "fp8_stream_k": lambda: _fp8(True),
                      "w8a8_sm90_asymmetric": lambda: _w8a8("sm90", "asymmetric"),
                      "w8a8_sm90_symmetric": lambda: _w8a8("sm90", "symmetric"),
                      "fpaintb_sm90_stream_k": _fpaintb_sm90})
    return cases


FAMILIES = ["fpaintb", "fpaintb_stream_k", "conv_fpaintb_stream_k", "conv_int8", "w8a8_chained", "fp8",
            "fp8_stream_k", "w8a8_sm90_asymmetric", "w8a8_sm90_symmetric", "w8a8_promote_asymmetric",
            "w8a8_promote_symmetric", "fpaintb_sm90_stream_k"]


@pytest.fixture(params=FAMILIES)
def case(request):
    make = _cases().get(request.param)
    if make is None:
        pytest.skip(f"{request.param} needs an sm90 GPU")
    c = make()
    c.expected = [c.call(x) for x in c.inputs]  # eager, serial; also loads kernels and per-shape state
    torch.cuda.synchronize()
    return c


def test_two_graphs_of_one_plan_replayed_together(case):
    outs = [case.call(x) for x in case.inputs]  # the graphs' outputs, allocated outside them
    torch.cuda.synchronize()
    graphs = []
    for x, out in zip(case.inputs, outs):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # both on torch's default capture stream, as a user would
            case.call(x, out)
        graphs.append(graph)
    for out in outs:
        out.zero_()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for _ in range(REPLAYS):
        for graph, s in zip(graphs, streams):
            with torch.cuda.stream(s):
                graph.replay()
    wait(streams, "two CUDA graphs replayed together")
    for out, expected in zip(outs, case.expected):
        case.compare(out, expected)
    # Replayed again after the other graph finished: the counters a graph owns came back to zero.
    graphs[0].replay()
    wait([torch.cuda.current_stream()], "a graph replayed after the concurrent replays")
    case.compare(outs[0], case.expected[0])


def test_eager_calls_on_two_streams(case):
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    results = [[], []]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for _ in range(REPLAYS):
        for i, s in enumerate(streams):
            with torch.cuda.stream(s):
                results[i].append(case.call(case.inputs[i]))
    wait(streams, "eager calls on two streams")
    for i in range(2):
        for out in results[i]:
            case.compare(out, case.expected[i])


def test_two_python_threads(case):
    results = [[], []]
    errors = []
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())

    def worker(i):
        try:
            with torch.cuda.stream(streams[i]):
                for _ in range(REPLAYS):
                    results[i].append(case.call(case.inputs[i]))
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(2)]
    join(threads, errors, "two Python threads")
    wait(streams, "two Python threads")
    for i in range(2):
        assert len(results[i]) == REPLAYS
        for out in results[i]:
            case.compare(out, case.expected[i])


def test_thread_with_no_current_context(case):
    """A thread whose first CUDA work is a qgemm launch has no current context (torch's device and
    stream bookkeeping need none): the launch makes the primary context current first. Without that,
    building a Sm90 kernel's Params failed to encode its TMA descriptors (CUDA_ERROR_INVALID_CONTEXT)
    and the kernel ran with garbage ones (illegal instruction). The thread pops whatever is current,
    so its first launch always starts from no context."""
    from cuda.bindings import driver as cu

    results, errors = [], []

    def worker():
        try:
            cu.cuCtxPopCurrent()  # fails harmlessly where nothing is current
            _, current = cu.cuCtxGetCurrent()
            assert int(current) == 0, "the worker thread still has a current context"
            results.append(case.call(case.inputs[0]))
            torch.cuda.synchronize()
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    join([threading.Thread(target=worker, daemon=True)], errors, "thread with no current context")
    case.compare(results[0], case.expected[0])
