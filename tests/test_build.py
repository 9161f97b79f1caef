"""The nvcc build driver, its cache, and the host half of the launch ABI (no GPU needed).

Compiling tests are marked `nvcc` and skipped without nvcc. The host library of a
built kernel plans launches on the CPU, so the ABI's problem slots are checked here.
"""
from __future__ import annotations

import dataclasses
import json
import math
import shutil
import threading
from pathlib import Path

import pytest
from conftest import requires_nvcc

import cutlass_gen.build as build_mod
from cutlass_gen.build import (
    BuildError,
    build,
    build_key,
    build_many,
    find_artifact,
    source_digest,
    write_manifest,
)
from cutlass_gen.render import RenderedKernel, render
from cutlass_gen.spec import spec_from_dict
from cutlass_gen.families.w8a8 import ActQuantSpec, W8A8GemmSpec
from cutlass_gen.toolchain import Toolchain, ToolchainError, find_nvcc, gencode_flags
from qgemm._abi import PARAMS_CAPACITY, HostLibrary, QgemmProblem

ACT_F32 = ActQuantSpec("f32")
GEMM_SPEC = W8A8GemmSpec(75, (64, 64, 32), (32, 32, 32), 2, "f32")

FAKE_TC = Toolchain(nvcc=Path("/opt/cuda/bin/nvcc"), nvcc_version="Build cuda_13.0.r13.0/compiler.0",
                    include_dirs=("/a/include", "/b/cutlass/include"), cutlass_version="4.2.0.0")


# --- cache key (no nvcc) -------------------------------------------------------------------------

def test_source_digest_tracks_source_and_flags_not_include_paths():
    """The key must change with anything that changes the binary, and not with where headers live."""
    rendered = render(ACT_F32)
    flags = FAKE_TC.flags(75)
    base = source_digest(rendered, 75, flags)
    assert source_digest(rendered, 75, list(flags)) == base
    assert source_digest(RenderedKernel(ACT_F32, rendered.source + "\n// x"), 75, flags) != base
    assert source_digest(rendered, 75, flags + ["-DQGEMM_DEBUG"]) != base
    assert source_digest(rendered, 80, flags) != base
    moved = dataclasses.replace(FAKE_TC, include_dirs=("/elsewhere/include", "/other/cutlass/include"))
    assert source_digest(rendered, 75, moved.flags(75)) == base


def test_source_digest_tracks_extension_headers(tmp_path, monkeypatch):
    """Editing a qgemm/*.h header (not part of the rendered source) must invalidate cached builds."""
    rendered = render(ACT_F32)
    flags = FAKE_TC.flags(75)
    copy = tmp_path / "templates"
    shutil.copytree(build_mod.extensions_include_dir().parent, copy)
    monkeypatch.setenv("QGEMM_TEMPLATES", str(copy))
    base = source_digest(rendered, 75, flags)
    header = copy / "include" / "qgemm" / "abi.h"
    header.write_text(header.read_text() + "\n// changed\n")
    assert source_digest(rendered, 75, flags) != base


def test_build_key_tracks_digest_and_toolchain_versions():
    digest = source_digest(render(ACT_F32), 75, FAKE_TC.flags(75))
    key = build_key(digest, FAKE_TC)
    assert len(key) == 20
    assert build_key(digest, FAKE_TC) == key
    assert build_key(digest[::-1], FAKE_TC) != key
    assert build_key(digest, dataclasses.replace(FAKE_TC, nvcc_version="Build cuda_13.1")) != key
    assert build_key(digest, dataclasses.replace(FAKE_TC, cutlass_version="4.3.0")) != key
    assert build_key(digest, dataclasses.replace(FAKE_TC, nvcc=Path("/usr/bin/nvcc"))) == key


def test_gencode_flags():
    """sm75/sm80 embed PTX for newer GPUs; sm90 means sm_90a."""
    assert gencode_flags(75) == ["-gencode=arch=compute_75,code=[sm_75,compute_75]"]
    assert gencode_flags(80) == ["-gencode=arch=compute_80,code=[sm_80,compute_80]"]
    assert gencode_flags(90) == ["-gencode=arch=compute_90a,code=sm_90a"]
    with pytest.raises(ValueError, match="sm must be one of"):
        gencode_flags(70)


def test_find_nvcc_reports_what_it_tried(tmp_path, monkeypatch):
    monkeypatch.setenv("QGEMM_NVCC", str(tmp_path / "no-nvcc"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match="QGEMM_NVCC: .*no-nvcc"):
        find_nvcc()


def test_cache_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("QGEMM_CACHE_DIR", str(tmp_path / "c"))
    assert build_mod.cache_root() == tmp_path / "c"
    monkeypatch.delenv("QGEMM_CACHE_DIR")
    assert build_mod.cache_root() == Path.home() / ".cache" / "qgemm"


def test_empty_cache_dir_variable_never_means_working_directory(monkeypatch):
    """The cache is documented as never the working directory; `QGEMM_CACHE_DIR= qgemm build` must not
    put artifacts in the current folder."""
    monkeypatch.setenv("QGEMM_CACHE_DIR", "")
    assert build_mod.cache_root() == Path.home() / ".cache" / "qgemm"


def test_build_rejects_target_older_than_spec(tmp_cache):
    with pytest.raises(ValueError, match="needs sm80 or later, got target sm75"):
        build(W8A8GemmSpec(80, (64, 64, 64), (32, 32, 64), 4, "f16"), 75)


# --- real builds -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built_cache(tmp_path_factory):
    """A cache holding ActQuantSpec('f32') for sm75, built once for this module (~5 s)."""
    root = tmp_path_factory.mktemp("qgemm-cache")
    art = build(ACT_F32, 75, root)
    return root, art


@pytest.fixture(scope="module")
def gemm_artifact(tmp_path_factory):
    """The 64x64x32 Turing W8A8 GEMM, built once for this module (~10 s)."""
    return build(GEMM_SPEC, 75, tmp_path_factory.mktemp("qgemm-gemm-cache"))


@requires_nvcc
@pytest.mark.nvcc
def test_build_writes_artifact_and_reuses_it(built_cache, monkeypatch):
    """A build leaves kernel.so, kernel.fatbin and meta.json at <cache>/sm75/<name>/<key>/; the next
    build of the same spec is a cache hit (no nvcc run), and find_artifact finds it."""
    root, art = built_cache
    monkeypatch.setenv("QGEMM_CACHE_DIR", str(root))
    assert art.directory.parent == root / "sm75" / ACT_F32.name
    assert art.so_path.is_file() and art.fatbin_path.is_file()
    meta = json.loads((art.directory / "meta.json").read_text())
    assert meta["name"] == ACT_F32.name and meta["spec"] == ACT_F32.to_dict()
    assert meta["target_sm"] == 75 and meta["key"] == art.directory.name
    assert meta["nvcc_version"] and meta["cutlass_version"]
    assert not [p for p in art.directory.parent.glob(".*") if p.is_dir()], "temporary build folder left behind"

    mtime = art.so_path.stat().st_mtime_ns

    def no_compile(*args, **kwargs):
        raise AssertionError(f"unexpected nvcc run: {args}")

    monkeypatch.setattr(build_mod, "_run_nvcc", no_compile)
    again = build(ACT_F32, 75)  # root from QGEMM_CACHE_DIR
    assert again.directory == art.directory
    assert art.so_path.stat().st_mtime_ns == mtime

    found = find_artifact(ACT_F32, 75)
    assert found is not None and found.directory == art.directory
    assert find_artifact(ActQuantSpec("bf16"), 75) is None


@requires_nvcc
@pytest.mark.nvcc
def test_find_artifact_without_nvcc_accepts_same_source(built_cache, monkeypatch):
    """A machine without nvcc runs prebuilt kernels: matched by source digest, whatever nvcc built them."""
    root, art = built_cache

    def no_toolchain():
        raise ToolchainError("nvcc not found")

    monkeypatch.setattr(build_mod, "toolchain", no_toolchain)
    found = find_artifact(ACT_F32, 75, root)
    assert found is not None and found.directory == art.directory
    assert find_artifact(ActQuantSpec("f16"), 75, root) is None


@requires_nvcc
@pytest.mark.nvcc
def test_write_manifest(built_cache, tmp_path):
    root, art = built_cache
    path = write_manifest([art], 75, root)
    manifest = json.loads(path.read_text())
    assert manifest["target_sm"] == 75
    assert manifest["kernels"] == [{"name": ACT_F32.name, "spec": ACT_F32.to_dict(), "key": art.meta["key"],
                                    "dir": str(art.directory.relative_to(root))}]
    path.unlink()


def act_quant_problem(m: int, k: int, block_size: int) -> QgemmProblem:
    p = QgemmProblem()
    p.m, p.n, p.k = m, 0, k
    p.ext[0] = block_size
    p.ld[0], p.ld[1] = k, k
    return p


@requires_nvcc
@pytest.mark.nvcc
def test_host_library_names_the_kernel_it_lacks(built_cache, tmp_path):
    """A library asked for a kernel it does not hold, or copied away from its meta.json with no kernel
    named, is refused with the argument and what would do."""
    _, art = built_cache
    with pytest.raises(RuntimeError, match="has no kernel 'qgemm_other' \\(no qgemm_other_plan\\); rebuild it"):
        HostLibrary(str(art.so_path), "qgemm_other")
    alone = tmp_path / "kernel.so"
    alone.write_bytes(art.so_path.read_bytes())
    with pytest.raises(ValueError, match="entry: no kernel name given and none readable from .*meta.json"):
        HostLibrary(str(alone))
    assert HostLibrary(str(alone), ACT_F32.name).entry_name == ACT_F32.name


@requires_nvcc
@pytest.mark.nvcc
def test_act_quant_host_library_plans_on_cpu(built_cache):
    """The host library loads without a GPU, reports its entry and spec, and plans one warp per
    (row, K-block) with 8 warps per 256-thread block."""
    _, art = built_cache
    host = HostLibrary(str(art.so_path))
    assert host.entry_name == ACT_F32.name
    assert json.loads(host.spec_json) == ACT_F32.to_dict()

    status, launch = host.plan(act_quant_problem(5, 256, 64))
    assert status == 0, host.status_string(status)
    assert tuple(launch.block) == (256, 1, 1)
    assert tuple(launch.grid) == (math.ceil(5 * (256 // 64) / 8), 1, 1)
    assert launch.smem_bytes == 0 and launch.workspace_bytes == 0
    assert 0 < launch.params_bytes <= PARAMS_CAPACITY

    for bad in (act_quant_problem(5, 240, 48),   # block size not supported
                act_quant_problem(5, 96, 64),    # K not a multiple of the block size
                act_quant_problem(0, 256, 64)):  # no rows
        status, _ = host.plan(bad)
        assert status != 0
        assert host.status_string(status)


@requires_nvcc
@pytest.mark.nvcc
def test_build_error_names_command_and_log(tmp_cache, monkeypatch):
    """A failed compile raises BuildError with the nvcc command and a log file that holds the output,
    and leaves no temporary folder or artifact behind."""
    monkeypatch.setattr(build_mod, "render", lambda spec: RenderedKernel(spec, "#error broken kernel\n"))
    with pytest.raises(BuildError) as exc:
        build(ACT_F32, 75)
    err = exc.value
    assert " ".join(err.command) in str(err)
    assert str(err.log_path) in str(err)
    assert err.log_path.is_file()
    assert "broken kernel" in err.log_path.read_text()
    assert err.log_path.parent == tmp_cache / "logs"
    kernel_dir = tmp_cache / "sm75" / ACT_F32.name
    assert [p for p in kernel_dir.iterdir() if not p.name.endswith(".lock")] == []


@requires_nvcc
@pytest.mark.nvcc
def test_build_many_reports_progress(tmp_cache):
    specs = [ActQuantSpec("f16"), ActQuantSpec("bf16")]
    lines = []
    arts = build_many(specs, 75, jobs=2, progress=lines.append)
    assert [a.name for a in arts] == [s.name for s in specs]
    assert all(a.so_path.is_file() for a in arts)
    assert len(lines) == 3
    assert sorted(line.split()[0] for line in lines[:2]) == ["[1/2]", "[2/2]"]
    assert {line.split()[2] for line in lines[:2]} == {s.name for s in specs}
    assert lines[2].startswith("built 2/2 kernels for sm75") and lines[2].endswith("with 2 jobs")


@requires_nvcc
@pytest.mark.nvcc
def test_build_many_raises_after_building_the_rest(built_cache, monkeypatch):
    """One broken kernel is reported as FAILED and raised, after the others finish."""
    root, _ = built_cache
    real_render = build_mod.render
    broken = ActQuantSpec("f16")

    def render_one_broken(spec):
        if spec == broken:
            return RenderedKernel(spec, "#error broken kernel\n")
        return real_render(spec)

    monkeypatch.setattr(build_mod, "render", render_one_broken)
    lines = []
    with pytest.raises(BuildError):
        build_many([ACT_F32, broken], 75, jobs=2, root=root, progress=lines.append)
    assert any(f"FAILED: nvcc failed for {broken.name}" in line for line in lines)
    assert any(ACT_F32.name in line and "FAILED" not in line for line in lines)
    assert lines[-1].startswith("built 1/2 kernels")


@requires_nvcc
@pytest.mark.nvcc
def test_concurrent_builds_of_one_kernel(tmp_cache, monkeypatch):
    """Two builders racing on an empty cache: the kernel's lock lets one compile while the other waits,
    then both get the same complete artifact and no temporary folder remains. (The cross-process
    version, with a fake nvcc, is in test_cache.py.)"""
    spec = ActQuantSpec("f16")
    barrier = threading.Barrier(2)
    compiles = []
    real_run = build_mod._run_nvcc

    def counting_run(command, *args, **kwargs):
        compiles.append(command)
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(build_mod, "_run_nvcc", counting_run)
    results, errors = [None, None], []

    def worker(i):
        try:
            barrier.wait()
            results[i] = build(spec, 75)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(compiles) == 1, "the lock should let exactly one builder compile"
    assert results[0].directory == results[1].directory
    kernel_dir = tmp_cache / "sm75" / spec.name
    assert [p for p in kernel_dir.iterdir() if not p.name.endswith(".lock")] == [results[0].directory]
    assert [p for p in kernel_dir.glob(".*") if p.is_dir()] == []
    assert (results[0].directory / "meta.json").is_file() and results[0].so_path.is_file()


# --- the W8A8 GEMM template compiles, and its host library plans -----------------------------------

def gemm_problem(m, n, k, block_size, block_begin=0, slices=1) -> QgemmProblem:
    p = QgemmProblem()
    p.m, p.n, p.k = m, n, k
    p.ext[0], p.ext[1], p.ext[2] = block_size, block_begin, slices
    p.ld[0], p.ld[1], p.ld[2], p.ld[3] = k, k, n, n
    p.scalar[0], p.scalar[1] = float("-inf"), float("inf")
    return p


@requires_nvcc
@pytest.mark.nvcc
def test_w8a8_gemm_compiles_and_plans(gemm_artifact):
    """The CUTLASS template compiles for sm75; a 3x256x256 problem with block size 64 gets a
    (tiles_m, tiles_n, slices) grid and one int semaphore per output tile when slices > 1."""
    host = HostLibrary(str(gemm_artifact.so_path))
    assert host.entry_name == GEMM_SPEC.name
    assert spec_from_dict(json.loads(host.spec_json)) == GEMM_SPEC

    tiles = math.ceil(3 / 64) * math.ceil(256 / 64)
    status, launch = host.plan(gemm_problem(3, 256, 256, 64, slices=4))
    assert status == 0, host.status_string(status)
    assert launch.block[0] == 32 * 4  # 64x64 tile / 32x32 warps
    assert launch.grid[0] * launch.grid[1] == tiles and launch.grid[2] == 4
    assert launch.workspace_bytes == 4 * tiles == 16
    assert 0 < launch.smem_bytes <= 48 * 1024
    assert 0 < launch.params_bytes <= PARAMS_CAPACITY

    status, launch = host.plan(gemm_problem(3, 256, 256, 64, block_begin=2, slices=1))
    assert status == 0, host.status_string(status)
    assert launch.grid[2] == 1 and launch.workspace_bytes == 0


@requires_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("problem, why", [
    (gemm_problem(3, 240, 240, 48), "block size not a multiple of tile K"),
    (gemm_problem(3, 256, 256, 64, block_begin=2, slices=3), "blocks past the end of K"),
    (gemm_problem(3, 256, 256, 64, slices=0), "no slices"),
    (gemm_problem(3, 254, 256, 64), "N not a multiple of 4"),
    (gemm_problem(0, 256, 256, 64), "empty M"),
])
def test_w8a8_gemm_plan_rejects(gemm_artifact, problem, why):
    host = HostLibrary(str(gemm_artifact.so_path))
    status, _ = host.plan(problem)
    assert status != 0, why
    assert host.status_string(status)


@requires_nvcc
@pytest.mark.nvcc
def test_w8a8_gemm_make_params_needs_workspace_for_slices(gemm_artifact):
    """Chained launches (slices > 1) need the semaphore workspace; Params fit the ABI buffer."""
    import ctypes

    host = HostLibrary(str(gemm_artifact.so_path))
    buf = ctypes.create_string_buffer(PARAMS_CAPACITY)
    p = gemm_problem(3, 256, 256, 64, slices=4)
    assert host.make_params_fn(ctypes.byref(p), None, ctypes.addressof(buf), PARAMS_CAPACITY) == 101
    workspace = ctypes.create_string_buffer(16)
    assert host.make_params_fn(ctypes.byref(p), ctypes.addressof(workspace), ctypes.addressof(buf),
                               PARAMS_CAPACITY) == 0
    p1 = gemm_problem(3, 256, 256, 64, slices=1)
    assert host.make_params_fn(ctypes.byref(p1), None, ctypes.addressof(buf), PARAMS_CAPACITY) == 0
    assert host.make_params_fn(ctypes.byref(p1), None, ctypes.addressof(buf), 8) == 100  # buffer too small


# --- the Python mirror of abi.h ---------------------------------------------------------------------

def test_abi_version_matches_header():
    from qgemm._abi import ABI_VERSION

    header = (build_mod.extensions_include_dir() / "qgemm" / "abi.h").read_text()
    assert f"#define QGEMM_ABI_VERSION {ABI_VERSION}\n" in header


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a host C++ compiler")
def test_abi_struct_layout_matches_header(tmp_path):
    """qgemm/_abi.py's ctypes structs must have abi.h's field offsets and sizes (a silent mismatch would
    hand kernels garbage problems)."""
    import ctypes
    import subprocess

    from qgemm._abi import QgemmLaunch

    lines = []
    for struct in (QgemmProblem, QgemmLaunch):
        c = struct.__name__
        lines.append(f'  std::printf("{c} sizeof %zu\\n", sizeof({c}));')
        for field, _ in struct._fields_:
            lines.append(f'  std::printf("{c} {field} %zu\\n", offsetof({c}, {field}));')
    src = tmp_path / "layout.cpp"
    src.write_text('#include <cstddef>\n#include <cstdio>\n#include "qgemm/abi.h"\nint main() {\n'
                   + "\n".join(lines) + "\n}\n")
    exe = tmp_path / "layout"
    subprocess.run(["c++", "-std=c++17", f"-I{build_mod.extensions_include_dir()}", str(src), "-o", str(exe)],
                   check=True, capture_output=True)
    reported = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()

    expected = []
    for struct in (QgemmProblem, QgemmLaunch):
        expected.append(f"{struct.__name__} sizeof {ctypes.sizeof(struct)}")
        expected += [f"{struct.__name__} {f} {getattr(struct, f).offset}" for f, _ in struct._fields_]
    assert reported == expected
