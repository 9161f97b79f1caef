"""The kernel cache under stress, with tests/fake_nvcc.py standing in for nvcc (no GPU, no real compile):
one compile for many concurrent builders, permissions, damaged artifacts, interrupted builds,
unsafe caches, merged manifests, lookups without templates, and `qgemm cache`."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import fake_compiles

import cutlass_gen.build as build_mod
from cutlass_gen import cli
from cutlass_gen.build import (
    BuildError,
    UnsafeCacheError,
    build,
    build_bundle,
    build_many,
    cache_entries,
    disk_bytes,
    find_artifact,
    MAX_BUNDLE,
    plan_bundles,
    write_manifest,
)
from cutlass_gen.catalog import catalog
from cutlass_gen.render import render, render_bundle
from cutlass_gen.paths import REPO_ROOT, TemplatesNotFoundError
from cutlass_gen.families.w8a8 import ActQuantSpec

SPEC = ActQuantSpec("f32")
OTHER = ActQuantSpec("f16")


def subprocess_env(**extra) -> dict:
    """This checkout first on the path (not another editable install), the fake nvcc, the test's cache."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), **extra)
    return env


def modes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): oct(p.stat().st_mode & 0o7777) for p in [root, *root.rglob("*")]}


# --- one compile for many builders ------------------------------------------------------------------

def test_four_processes_compile_one_kernel_once(tmp_cache, fake_nvcc):
    """Four processes started together on an empty cache: one compiles, three wait on the lock and
    load its artifact."""
    code = ("import sys; from cutlass_gen.build import build; from cutlass_gen.families.w8a8 import ActQuantSpec; "
            "print(build(ActQuantSpec('f32'), 75).directory)")
    env = subprocess_env(FAKE_NVCC_SLEEP="1")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [o[1] for o in outs]
    assert len({o[0].strip() for o in outs}) == 1
    assert len(fake_compiles(fake_nvcc)) == 1, fake_compiles(fake_nvcc)
    kernel_dir = tmp_cache / "sm75" / SPEC.name
    assert [p.name for p in kernel_dir.iterdir() if not p.name.endswith(".lock")] == [Path(outs[0][0].strip()).name]


def test_threads_share_one_compile(tmp_cache, fake_nvcc, monkeypatch):
    monkeypatch.setenv("FAKE_NVCC_SLEEP", "0.5")
    barrier = threading.Barrier(3)
    results, errors = [], []

    def worker():
        try:
            barrier.wait()
            results.append(build(SPEC, 75))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len({r.directory for r in results}) == 1
    assert len(fake_compiles(fake_nvcc)) == 1


# --- permissions ------------------------------------------------------------------------------------

def test_folders_0755_files_0644_whatever_the_umask(tmp_cache, fake_nvcc):
    old = os.umask(0o077)  # the umask that made mkdtemp's 0700 folders unreadable to others
    try:
        art = build(SPEC, 75)
        write_manifest([art], 75)
    finally:
        os.umask(old)
    got = modes(tmp_cache)
    for rel, mode in got.items():
        path = tmp_cache / rel
        assert mode == ("0o755" if path.is_dir() else "0o644"), (rel, mode)
    assert "manifest-sm75.json" in got and any(rel.endswith("kernel.fatbin") for rel in got)

    os.umask(0o002)  # group-writable by default must not make our own cache unsafe
    try:
        build(OTHER, 75)
    finally:
        os.umask(old)
    assert all(m in ("0o755", "0o644") for m in modes(tmp_cache).values())


@pytest.mark.parametrize("target", ["root", "kernel_dir", "artifact_dir", "fatbin"])
def test_cache_writable_by_others_is_refused(tmp_cache, fake_nvcc, target, capsys):
    art = build(SPEC, 75)
    path = {"root": tmp_cache, "kernel_dir": art.directory.parent, "artifact_dir": art.directory,
            "fatbin": art.fatbin_path}[target]
    os.chmod(path, 0o777 if path.is_dir() else 0o666)
    with pytest.raises(UnsafeCacheError, match="writable by other users") as exc:
        find_artifact(SPEC, 75)
    assert f"chmod go-w {path}" in str(exc.value) and "QGEMM_CACHE_DIR" in str(exc.value)
    with pytest.raises(UnsafeCacheError):
        build(SPEC, 75)
    if target == "root":
        assert cli.main(["cache", "list"]) == 1
        assert "writable by other users" in capsys.readouterr().err
    os.chmod(path, 0o755 if path.is_dir() else 0o644)
    assert find_artifact(SPEC, 75).directory == art.directory


def test_folders_above_the_cache_root_are_not_checked(tmp_path, fake_nvcc, monkeypatch):
    """A cache inside a world-writable sticky folder (/tmp) is fine: only the cache's own folders count."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    monkeypatch.setenv("QGEMM_CACHE_DIR", str(shared / "qgemm-cache"))
    assert find_artifact(SPEC, 75) is None
    assert build(SPEC, 75).so_path.is_file()


# --- damaged artifacts --------------------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["truncate_fatbin", "flip_so_byte", "delete_so", "garble_meta"])
def test_damaged_artifact_is_detected_and_rebuilt(tmp_cache, fake_nvcc, damage, caplog):
    art = build(SPEC, 75)
    good = {p.name: p.read_bytes() for p in art.directory.iterdir()}
    if damage == "truncate_fatbin":
        with open(art.fatbin_path, "r+b") as f:
            f.truncate(10)
    elif damage == "flip_so_byte":
        data = bytearray(art.so_path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        art.so_path.write_bytes(bytes(data))
    elif damage == "delete_so":
        art.so_path.unlink()
    else:
        (art.directory / "meta.json").write_text('{"name": ')
    assert find_artifact(SPEC, 75) is None
    assert any("damaged" in r.getMessage() for r in caplog.records)
    assert cli.main(["cache", "list"]) == 0

    again = build(SPEC, 75)
    assert len(fake_compiles(fake_nvcc)) == 2
    assert again.directory == art.directory
    for name in ("kernel.so", "kernel.fatbin"):
        assert (again.directory / name).read_bytes() == good[name]
    assert find_artifact(SPEC, 75).directory == art.directory
    assert not [p for p in art.directory.parent.iterdir() if p.name.startswith(".") and p.is_dir()]


def test_meta_records_digests(tmp_cache, fake_nvcc):
    art = build(SPEC, 75)
    meta = json.loads((art.directory / "meta.json").read_text())
    for name in ("kernel.so", "kernel.fatbin"):
        assert meta["files"][name]["bytes"] == (art.directory / name).stat().st_size
        assert meta["files"][name]["sha256"] == build_mod.file_digest(art.directory / name)
    assert meta["format"] == 2 and meta["built_at"]


def test_folder_left_by_a_killed_builder_is_removed(tmp_cache, fake_nvcc):
    """A builder killed outright (SIGKILL) leaves its dot-folder; the next builder of the key removes it."""
    art = build(SPEC, 75)
    kernel_dir = art.directory.parent
    leftover = kernel_dir / f".{art.directory.name}-build-99999-1"
    leftover.mkdir()
    (leftover / "kernel.so").write_bytes(b"half")
    (art.directory / "meta.json").unlink()  # so that the next build runs
    build(SPEC, 75)
    assert not leftover.exists()


# --- failures and interruptions ---------------------------------------------------------------------------

def test_compile_error_leaves_nothing_behind(tmp_cache, fake_nvcc, monkeypatch):
    monkeypatch.setenv("FAKE_NVCC_FAIL", "qgemm_act_quant")
    with pytest.raises(BuildError) as exc:
        build(SPEC, 75)
    assert exc.value.log_path == tmp_cache / "logs" / exc.value.log_path.name
    assert "fake compile error" in exc.value.log_path.read_text()
    assert "fake compile error" in str(exc.value)
    kernel_dir = tmp_cache / "sm75" / SPEC.name
    assert [p.name for p in kernel_dir.iterdir() if not p.name.endswith(".lock")] == []


def wait_for(predicate, timeout=30.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose; /proc tells.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def assert_nothing_half_built(root: Path):
    """No artifact folder (complete ones would have meta.json) and no build folder."""
    for kernel_dir in root.glob("sm*/*"):
        leftovers = [p.name for p in kernel_dir.iterdir() if not p.name.endswith(".lock")]
        assert leftovers == [], (kernel_dir, leftovers)


def _sigint_as_ctrl_c():
    """Child processes start with SIGINT at its default: a shell without job control starts background
    jobs (a test run under `cmd &`) with SIGINT ignored, which children inherit and Python keeps."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def sigint_raises():
    """KeyboardInterrupt on SIGINT in this process too, whatever this test run inherited."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_during_qgemm_build_stops_within_3s(tmp_cache, fake_nvcc, sig, code):
    """Ctrl-C (or SIGTERM) during `qgemm build`: queued kernels cancelled, running nvcc process groups
    terminated, their folders removed, exit 130 (143) within 3 s."""
    env = subprocess_env(FAKE_NVCC_SLEEP="60")
    proc = subprocess.Popen([sys.executable, "-m", "cutlass_gen.cli", "build", "--sm", "75", "--family",
                             "act_quant", "-j", "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_sigint_as_ctrl_c)
    try:
        wait_for(lambda: len(fake_compiles(fake_nvcc)) == 2, what="two fake nvcc compiles to start")
        pids = [int(line.split()[0]) for line in fake_compiles(fake_nvcc)]
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=10)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert elapsed < 3.0, elapsed
    assert "interrupted" in err or "terminated" in err
    wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=2, what="fake nvcc processes to end")
    assert len(fake_compiles(fake_nvcc)) == 2, "queued builds should have been cancelled, not started"
    assert fake_compiles(fake_nvcc, "done") == []
    assert_nothing_half_built(tmp_cache)
    assert not (tmp_cache / "manifest-sm75.json").exists()


def test_ctrl_c_during_a_first_use_build(tmp_cache, fake_nvcc):
    """The single build a first call makes (main thread, no pool) also stops at once and cleans up."""
    code = ("from cutlass_gen.build import build; from cutlass_gen.families.w8a8 import ActQuantSpec\n"
            "try:\n    build(ActQuantSpec('f32'), 75)\nexcept KeyboardInterrupt:\n    raise SystemExit(130)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=subprocess_env(FAKE_NVCC_SLEEP="60"),
                            stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_as_ctrl_c)
    try:
        wait_for(lambda: len(fake_compiles(fake_nvcc)) == 1, what="the fake nvcc to start")
        pid = int(fake_compiles(fake_nvcc)[0].split()[0])
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=10)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and elapsed < 3.0
    wait_for(lambda: not pid_alive(pid), timeout=2, what="the fake nvcc to end")
    assert_nothing_half_built(tmp_cache)


def test_build_many_cancels_on_interrupt(tmp_cache, fake_nvcc, monkeypatch, sigint_raises):
    """In-process: a KeyboardInterrupt reaching build_many's wait cancels everything and re-raises."""
    monkeypatch.setenv("FAKE_NVCC_SLEEP", "60")
    specs = [ActQuantSpec(a, symmetric=s) for a in ("f16", "bf16", "f32") for s in (False, True)]
    lines = []

    def progress(line):
        lines.append(line)

    timer = threading.Timer(1.0, lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        build_many(specs, 75, jobs=2, progress=progress)
    assert time.monotonic() - t0 < 4.0
    assert lines[-1].startswith("interrupted: built 0/6")
    assert len(fake_compiles(fake_nvcc)) == 2
    assert_nothing_half_built(tmp_cache)


# --- bundles: several kernels of a CUTLASS 3.x family in one compile -------------------------------------

W8A8_SM90 = [s for s in catalog(90, "w8a8_gemm_sm90") if s.scheme == "symmetric" and s.output == "f16"]


class Alone(ActQuantSpec):
    """A family whose template could not share a translation unit."""
    bundles = False


def test_plan_bundles_groups_one_key_up_to_max_bundle_and_only_as_needed():
    specs = catalog(90) + [Alone("f16")]
    thirds = -(-sum(s.bundles for s in specs) // 3)  # jobs enough for groups of three
    for jobs, biggest in [(1, MAX_BUNDLE), (2, MAX_BUNDLE), (16, MAX_BUNDLE), (thirds, 3), (len(specs), 1)]:
        groups = plan_bundles(specs, jobs)
        assert sorted(s.name for g in groups for s in g) == sorted(s.name for s in specs)  # each once
        assert max(len(g) for g in groups) == biggest
        for g in groups:
            assert len({s.bundle_key for s in g}) == 1 and (len(g) == 1 or all(s.bundles for s in g))
        assert [Alone("f16")] in groups
    # Two jobs (CI): the 206 kernels of sm90 in 25 compiles, the CUTLASS 3.x sm90 kernels' first. The 8 two-CTA
    # FpA x IntB kernels make one bundle of their own (their register split is global to the unit).
    groups = plan_bundles(catalog(90), 2)
    assert MAX_BUNDLE == 11 and len(catalog(90)) == 206 and len(groups) == 25
    assert [len(g) for g in groups[:11]] == [11] * 4 + [10] * 4 + [9, 8, 8]
    two_cta = [g for g in groups if g[0].bundle_key == "fpaintb_gemm_sm90.cu.j2 ctas_per_sm=2"]
    assert len(two_cta) == 1 and len(two_cta[0]) == 8 and all(s.ctas_per_sm == 2 for s in two_cta[0])
    assert {g[0].template for g in groups[:11]} == {"conv2d_int8_sm90.cu.j2", "fpaintb_gemm_sm90.cu.j2",
                                                    "w8a8_gemm_sm90.cu.j2", "fp8_blockwise_gemm.cu.j2"}
    arch = [g[0].arch for g in groups]
    assert arch == sorted(arch, reverse=True)


def test_render_bundle_renames_each_kernels_namespace():
    source = render_bundle([render(s) for s in W8A8_SM90[:2]])
    assert source.count("#define qgemm_kernel qgemm_kernel_") == 2 and source.count("#undef qgemm_kernel") == 2
    for s in W8A8_SM90[:2]:
        assert f"QGEMM_EXPORT_KERNEL({s.name}, qgemm_kernel::Adapter" in source
    with pytest.raises(ValueError, match="kernels: qgemm_act_quant.*cannot share"):
        render_bundle([render(SPEC), render(Alone("f16"))])
    with pytest.raises(ValueError, match="specs: qgemm_act_quant.*cannot share"):
        build_bundle([SPEC, Alone("f16")], 75)
    # One bundle_key per bundle: one template, and the FpA x IntB kernels by their register split.
    one_cta, two_cta = (next(s for s in catalog(90, "fpaintb_gemm_sm90") if s.ctas_per_sm == n) for n in (1, 2))
    with pytest.raises(ValueError, match="kernels: a bundle takes kernels of one bundle_key.*ctas_per_sm=2"):
        render_bundle([render(one_cta), render(two_cta)])
    with pytest.raises(ValueError, match="specs: a bundle takes kernels of one bundle_key"):
        build_bundle([SPEC, W8A8_SM90[0]], 90)
    plain = dataclasses.replace(render(SPEC), source=render(SPEC).source.replace("namespace qgemm_kernel {", "namespace {"))
    with pytest.raises(ValueError, match="kernels: qgemm_act_quant.*'s source has no `namespace qgemm_kernel`"):
        render_bundle([render(SPEC), plain])


def test_every_template_bundles():
    """Every family's template keeps its kernel in the namespace a bundle renames, and every catalog kernel
    bundles. The two-CTA FpA x IntB kernels bundle only with each other (their register split would change
    every kernel of a bundle), and a bundle of them specializes it once."""
    for sm in (75, 80, 90):
        for spec in catalog(sm):
            assert spec.bundles, spec.name
            assert "namespace qgemm_kernel {" in render(spec).source, spec.name
    two_cta = [s for s in catalog(90, "fpaintb_gemm_sm90") if s.ctas_per_sm == 2]
    source = render_bundle([render(s) for s in two_cta])
    assert source.count("#ifndef QGEMM_FPAINTB_TWO_CTA_REGISTER_SPLIT") == len(two_cta) == 8
    assert source.count("template <> CUTLASS_DEVICE void warpgroup_reg_alloc<232>()") == 8  # one compiled, by the guard


def test_a_bundle_compiles_once_and_publishes_each_kernel(tmp_cache, fake_nvcc):
    specs = W8A8_SM90[:3]
    arts = build_bundle(specs, 90)
    assert len(fake_compiles(fake_nvcc)) == 1
    for spec, art in zip(specs, arts):
        assert art.name == spec.name and art.meta["bundle"] == [s.name for s in specs]
        assert art.directory.parent == tmp_cache / "sm90" / spec.name
        assert (art.directory / "kernel.cu").read_text() == render(spec).source  # its own source, to read
        assert find_artifact(spec, 90).directory == art.directory
    # One library and one fatbin, holding all three.
    assert len({a.meta["files"]["kernel.so"]["sha256"] for a in arts}) == 1
    assert_nothing_half_built_but(tmp_cache, {a.directory for a in arts})
    # Built: nothing compiles again, alone or in another bundle.
    assert [a.directory for a in build_bundle(specs[::-1], 90)] == [a.directory for a in arts[::-1]]
    assert build(specs[1], 90).directory == arts[1].directory
    assert len(fake_compiles(fake_nvcc)) == 1


def test_cache_list_counts_a_bundles_shared_library_once(tmp_cache, fake_nvcc, capsys):
    """The members of a bundle share kernel.so and kernel.fatbin (hard links): `qgemm cache list` gives
    each member an even share of them, so the sizes add up to the disk the bundle takes."""
    arts = build_bundle(W8A8_SM90[:3], 90)
    if arts[0].so_path.stat().st_nlink != 3:
        pytest.skip("this file system copied the bundle's library instead of linking it")
    entries = cache_entries(tmp_cache)
    files = {(p.stat().st_ino): p.stat().st_size for e in entries for p in e.directory.rglob("*") if p.is_file()}
    assert sum(e.bytes for e in entries) == pytest.approx(sum(files.values()), abs=len(entries) * 2)
    assert disk_bytes(entries) == sum(files.values())
    assert cli.main(["cache", "list"]) == 0
    printed = capsys.readouterr()
    out = printed.out.splitlines()
    assert len(out) == 3 and all("(1/3 of a bundle)" in line for line in out)
    assert f"3 kernel builds, {cli._size(disk_bytes(entries))} on disk" in printed.err


def test_a_bundle_that_fails_compiles_its_kernels_one_at_a_time(tmp_cache, fake_nvcc, monkeypatch):
    """One kernel's compile error does not cost the others their artifacts, and the error names it."""
    specs = W8A8_SM90[:3]
    monkeypatch.setenv("FAKE_NVCC_FAIL", f"QGEMM_EXPORT_KERNEL({specs[1].name},")
    with pytest.raises(BuildError, match=f"nvcc failed for {specs[1].name}\n"):
        build_bundle(specs, 90)
    assert len(fake_compiles(fake_nvcc)) == 1 + 3  # the bundle, then each alone
    assert find_artifact(specs[0], 90) is not None and find_artifact(specs[2], 90) is not None
    assert find_artifact(specs[1], 90) is None
    assert find_artifact(specs[0], 90).meta.get("bundle") is None


def test_build_many_bundles_what_the_cache_lacks(tmp_cache, fake_nvcc):
    specs = W8A8_SM90[:5] + [SPEC, OTHER]
    build(specs[0], 90)
    lines = []
    arts = build_many(specs, 90, jobs=2, progress=lines.append)
    assert [a.name for a in arts] == [s.name for s in specs]
    # Six missing kernels over two jobs, at most three to a bundle: the four W8A8 kernels in two
    # bundles of two, the two act_quant kernels in a third (a bundle holds one template's kernels).
    compiled = fake_compiles(fake_nvcc)
    assert len(compiled) == 1 + 2 + 1, compiled
    assert sorted(len(a.meta.get("bundle", [a.name])) for a in arts[1:5]) == [2, 2, 2, 2]
    assert len([line for line in lines if line.startswith("[")]) == len(specs)
    assert lines[-1].startswith(f"built {len(specs)}/{len(specs)} kernels for sm90")


def assert_nothing_half_built_but(root: Path, artifacts: set):
    for kernel_dir in root.glob("sm*/*"):
        leftovers = [p for p in kernel_dir.iterdir() if not p.name.endswith(".lock") and p not in artifacts]
        assert leftovers == [], (kernel_dir, leftovers)


# --- manifests ------------------------------------------------------------------------------------------

def test_manifests_are_merged_not_overwritten(tmp_cache, fake_nvcc):
    a, b = build(SPEC, 75), build(OTHER, 75)
    write_manifest([a], 75)
    path = write_manifest([b], 75)
    names = [e["name"] for e in json.loads(path.read_text())["kernels"]]
    assert names == sorted([SPEC.name, OTHER.name])
    # An entry whose artifact was removed drops out at the next write.
    import shutil

    shutil.rmtree(a.directory)
    names = [e["name"] for e in json.loads(write_manifest([], 75).read_text())["kernels"]]
    assert names == [OTHER.name]


def test_qgemm_build_twice_with_different_selections_keeps_both(tmp_cache, fake_nvcc, capsys):
    assert cli.main(["build", "--sm", "75", "--family", "act_quant", "--kernels", "*_f16_*"]) == 0
    assert cli.main(["build", "--sm", "75", "--family", "act_quant", "--kernels", "*_f32_*"]) == 0
    names = [e["name"] for e in json.loads((tmp_cache / "manifest-sm75.json").read_text())["kernels"]]
    assert len(names) == 4 and {n.split("_")[4] for n in names} == {"f16", "f32"}


# --- lookups without templates, jinja2 or nvcc -----------------------------------------------------------

def test_find_artifact_without_templates_uses_the_recorded_spec(tmp_cache, fake_nvcc, monkeypatch):
    art = build(SPEC, 75)
    build(OTHER, 75)

    def no_templates(spec):
        raise TemplatesNotFoundError("templates hidden by the test")

    monkeypatch.setattr(build_mod, "render", no_templates)
    monkeypatch.setenv("QGEMM_NVCC", "/nonexistent/nvcc")
    build_mod.toolchain.cache_clear()
    found = find_artifact(SPEC, 75)
    assert found is not None and found.directory == art.directory
    assert find_artifact(ActQuantSpec("bf16"), 75) is None
    assert find_artifact(SPEC, 80) is None
    # Damaged: not loaded even when it is the only candidate.
    with open(art.fatbin_path, "r+b") as f:
        f.truncate(3)
    assert find_artifact(SPEC, 75) is None


def test_find_artifact_without_nvcc_matches_source(tmp_cache, fake_nvcc, monkeypatch):
    art = build(SPEC, 75)
    monkeypatch.setenv("QGEMM_NVCC", "/nonexistent/nvcc")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    build_mod.toolchain.cache_clear()
    assert find_artifact(SPEC, 75).directory == art.directory
    assert find_artifact(OTHER, 75) is None


def test_get_kernel_without_templates_or_nvcc_names_the_way_out(tmp_cache, monkeypatch):
    from qgemm import KernelUnavailableError, _runtime

    monkeypatch.setattr(_runtime, "_kernels", {})
    monkeypatch.setenv("QGEMM_TEMPLATES", str(tmp_cache / "no-templates"))
    with pytest.raises(KernelUnavailableError, match=r"qgemm build --sm 75") as exc:
        _runtime.get_kernel(SPEC, 75)
    assert "QGEMM_TEMPLATES" in str(exc.value)


# --- `qgemm cache` ----------------------------------------------------------------------------------------

def test_cache_path(tmp_cache, capsys):
    assert cli.main(["cache", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_cache)


def test_cache_list_and_clean(tmp_cache, fake_nvcc, capsys):
    assert cli.main(["cache", "list"]) == 0  # empty: nothing to list is not an error
    assert "holds no kernels" in capsys.readouterr().err
    a, b = build(SPEC, 75), build(OTHER, 80)
    assert cli.main(["cache", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in out] == [["sm75", SPEC.name, a.directory.name],
                                                 ["sm80", OTHER.name, b.directory.name]]
    assert all(line.endswith(" ok") for line in out)

    assert cli.main(["cache", "list", "--sm", "80"]) == 0
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()] == [OTHER.name]
    assert cli.main(["cache", "list", "--kernels", "nomatch*"]) == 1
    assert "no cached kernels match kernels=nomatch*" in capsys.readouterr().err

    a.so_path.write_bytes(b"x")
    assert cli.main(["cache", "list"]) == 0
    assert "DAMAGED (kernel.so has 1 bytes" in capsys.readouterr().out
    assert cli.main(["cache", "clean", "--damaged"]) == 0
    assert "removed 1 kernel builds" in capsys.readouterr().out
    assert [e.name for e in cache_entries(tmp_cache)] == [OTHER.name]

    foreign = tmp_cache / "notes.txt"  # QGEMM_CACHE_DIR pointed at a folder with other files in it
    foreign.write_text("mine")
    assert cli.main(["cache", "clean"]) == 0
    assert "removed 1 kernel builds" in capsys.readouterr().out
    assert cache_entries(tmp_cache) == [] and foreign.read_text() == "mine"
    assert sorted(p.name for p in tmp_cache.iterdir()) == ["notes.txt"]
    assert cli.main(["cache", "clean", "--sm", "75"]) == 1


# --- qgemm.prebuild ---------------------------------------------------------------------------------------

def test_prebuild_specs_families_plans_and_modules(tmp_cache, fake_nvcc):
    import dataclasses

    import torch

    import qgemm

    @dataclasses.dataclass(frozen=True)
    class Choice:  # the shape of heuristics' choices: a spec plus knobs
        spec: object
        splits: int = 0

    class SpecPlan:  # W8A8GemmPlan's interface
        def kernel_spec(self, m):
            return ActQuantSpec("f16" if m < 64 else "bf16")

    class ChoicePlan:  # Fp8GemmPlan's / FpAIntBPlan's interface
        def choice(self, m):
            return Choice(ActQuantSpec("f32", symmetric=True))

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self._plans = {torch.float16: ChoicePlan()}

    lines = []
    arts = qgemm.prebuild([SPEC, SpecPlan(), torch.nn.Sequential(Layer())], 75, m_values=(1, 128),
                          progress=lines.append, jobs=2)
    assert sorted(a.name for a in arts) == sorted(s.name for s in [
        SPEC, ActQuantSpec("f16"), ActQuantSpec("bf16"), ActQuantSpec("f32", symmetric=True)])
    # Four kernels of one family over two jobs: two bundles of two.
    assert len(fake_compiles(fake_nvcc)) == 2 and lines[-1].startswith("built 4/4 kernels for sm75")

    arts = qgemm.prebuild("act_quant", 75, progress=lines.append, jobs=2)  # a family: its catalog
    assert len(arts) == 6 and len(fake_compiles(fake_nvcc)) == 4  # 4 were built already; 2 alone


def test_prebuild_rejects_bad_arguments(tmp_cache, monkeypatch):
    import torch

    import qgemm

    with pytest.raises(TypeError, match="kernels: each item must be a KernelSpec"):
        qgemm.prebuild([object()], 75)
    with pytest.raises(ValueError, match="kernels: unknown family 'nope'"):
        qgemm.prebuild(["nope"], 75)
    with pytest.raises(ValueError, match="target_sm must be 'auto' or one of"):
        qgemm.prebuild([SPEC], 70)
    with pytest.raises(ValueError, match="m_values must be positive ints"):
        qgemm.prebuild([SPEC], 75, m_values=(0,))
    from cutlass_gen.toolchain import TargetDetectionError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(TargetDetectionError, match="no CUDA GPU is visible"):
        qgemm.prebuild([SPEC])


def test_cache_clean_removes_logs_and_manifests_even_without_builds(tmp_cache, fake_nvcc, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_NVCC_FAIL", "qgemm_act_quant")
    with pytest.raises(BuildError):
        build(SPEC, 75)
    assert (tmp_cache / "logs").is_dir()
    assert cli.main(["cache", "clean"]) == 0
    assert "removed 0 kernel builds" in capsys.readouterr().out
    assert list(tmp_cache.iterdir()) == []
