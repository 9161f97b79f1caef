"""Shared test helpers.

Nothing here is autouse: GPU tests (pytest.mark.gpu) decide for themselves when to skip.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch


def nvcc_available() -> bool:
    """True where cutlass_gen.toolchain.find_nvcc has something to look at."""
    return bool(shutil.which("nvcc") or os.environ.get("QGEMM_NVCC") or os.environ.get("CUDA_HOME"))


def gpu_available() -> bool:
    return torch.cuda.is_available()


# Skip tests that compile kernels on machines without nvcc.
requires_nvcc = pytest.mark.skipif(
    not nvcc_available(), reason="needs nvcc (on PATH, or QGEMM_NVCC / CUDA_HOME set)"
)


# The run's own kernel cache, read once at import: tmp_cache (below) changes the variable per test.
_RUN_CACHE = os.environ.get("QGEMM_CACHE_DIR")


@pytest.fixture(scope="session")
def kernel_cache(tmp_path_factory):
    """Where tests that compile real kernels put them: the run's QGEMM_CACHE_DIR when it sets one, so
    that CI (.ci/run sets a fresh one) builds a catalog kernel once, for the tests and its `qgemm
    build` alike; else a folder of this session, so tests never write to ~/.cache/qgemm."""
    return Path(_RUN_CACHE) if _RUN_CACHE else tmp_path_factory.mktemp("qgemm-kernels")


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """A private kernel cache (QGEMM_CACHE_DIR) so tests never write to ~/.cache/qgemm."""
    root = tmp_path / "qgemm-cache"
    monkeypatch.setenv("QGEMM_CACHE_DIR", str(root))
    return root


# Opt-in suites (issue 18): fuzz and large run only when the -m expression names them (`-m fuzz`,
# `-m "gpu and large"`); a plain `pytest` or `pytest -m gpu` skips them.
OPT_IN_MARKERS = ("fuzz", "large")


def pytest_collection_modifyitems(config, items):
    expression = config.getoption("markexpr", "") or ""
    for marker in OPT_IN_MARKERS:
        if marker in expression:
            continue
        skip = pytest.mark.skip(reason=f"opt-in suite: run with -m {marker}")
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


FAKE_NVCC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_nvcc.py")


@pytest.fixture
def fake_nvcc(tmp_path, monkeypatch):
    """tests/fake_nvcc.py as the toolchain's nvcc (no compile, ~0.1 s a kernel); returns the path of the
    log it appends "<pid> start|done <source>" lines to (FAKE_NVCC_LOG), for counting compiles."""
    from cutlass_gen import toolchain

    log = tmp_path / "fake-nvcc.log"
    monkeypatch.setenv("QGEMM_NVCC", FAKE_NVCC)
    monkeypatch.setenv("FAKE_NVCC_LOG", str(log))
    monkeypatch.delenv("FAKE_NVCC_SLEEP", raising=False)
    monkeypatch.delenv("FAKE_NVCC_FAIL", raising=False)
    toolchain.toolchain.cache_clear()
    yield log
    toolchain.toolchain.cache_clear()


def fake_compiles(log, event: str = "start") -> list[str]:
    """The fake nvcc's log lines for one event ("start" or "done")."""
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [line for line in f.read().splitlines() if line.split()[1] == event]
