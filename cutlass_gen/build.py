"""nvcc build driver with an on-disk cache.

One nvcc invocation per kernel makes both halves of the launch ABI: the host
library (.so, CUTLASS's host code building Params) and, kept from the same
compile with --keep, the fatbin the runtime loads with the driver API.

Artifacts live in the cache (QGEMM_CACHE_DIR, default ~/.cache/qgemm, never the
working directory) at <cache>/sm<target>/<kernel name>/<key>/ where key hashes
the rendered source, the flags, our extension headers, and the nvcc and CUTLASS
versions. A build happens in a private temporary folder that is renamed into
place, so concurrent processes never see a half-written artifact; the loser of
a race simply discards its copy.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import re
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .paths import extensions_include_dir
from .render import RenderedKernel, render
from .specs import KernelSpec
from .toolchain import Toolchain, toolchain

SO_NAME = "kernel.so"
FATBIN_NAME = "kernel.fatbin"
META_NAME = "meta.json"

# Peak resident memory of one CUTLASS compile; bounds parallel jobs by RAM.
BYTES_PER_JOB = {75: 1 << 30, 80: 1 << 30, 90: 4 << 30}


class BuildError(RuntimeError):
    """nvcc failed; carries the command and the path of the full log."""

    def __init__(self, name: str, command: list[str], log_path: Path, tail: str):
        self.command = command
        self.log_path = log_path
        super().__init__(
            f"nvcc failed for {name}\n  command: {' '.join(command)}\n  log: {log_path}\n{tail}"
        )


def cache_root() -> Path:
    # An empty variable counts as unset: Path("") would be the working directory.
    return Path(os.environ.get("QGEMM_CACHE_DIR") or Path.home() / ".cache" / "qgemm").expanduser()


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def _hash_included_headers(source: str, root: Path) -> str:
    """Hash of qgemm's own headers (under `root`) that `source` includes, directly or through
    each other: a kernel's key changes with the headers it compiles, not with another family's
    (CUTLASS's headers are covered by the CUTLASS version in build_key)."""
    h = hashlib.sha256()
    seen: set[Path] = set()
    pending = [(source, root)]
    while pending:
        text, here = pending.pop()
        for name in _INCLUDE.findall(text):
            for base in (here, root):
                path = (base / name).resolve()
                if path.is_file() and root.resolve() in path.parents:
                    break
            else:
                continue  # not one of qgemm's headers
            if path in seen:
                continue
            seen.add(path)
            pending.append((path.read_text(), path.parent))
    for path in sorted(seen):
        h.update(str(path.relative_to(root.resolve())).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def source_digest(rendered: RenderedKernel, target_sm: int, tc_flags: list[str]) -> str:
    """Hash of everything that decides the binary except the toolchain versions."""
    h = hashlib.sha256()
    h.update(rendered.source.encode())
    # Include paths differ between machines; their content is hashed instead.
    h.update("\0".join(f for f in tc_flags if not f.startswith("-I")).encode())
    h.update(_hash_included_headers(rendered.source, extensions_include_dir()).encode())
    h.update(str(target_sm).encode())
    return h.hexdigest()


def build_key(digest: str, tc: Toolchain) -> str:
    h = hashlib.sha256()
    for part in (digest, tc.nvcc_version, tc.cutlass_version):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


@dataclass(frozen=True)
class Artifact:
    name: str
    directory: Path
    meta: dict

    @property
    def so_path(self) -> Path:
        return self.directory / SO_NAME

    @property
    def fatbin_path(self) -> Path:
        return self.directory / FATBIN_NAME


def _read_artifact(directory: Path) -> Artifact | None:
    meta_path = directory / META_NAME
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    return Artifact(meta["name"], directory, meta)


def find_artifact(spec: KernelSpec, target_sm: int, root: Path | None = None) -> Artifact | None:
    """A built artifact for this spec and target, if the cache has one.

    With nvcc available the exact build key must match. Without nvcc (a machine
    that only runs prebuilt kernels) an artifact built from the same source and
    flags is accepted whatever nvcc built it.
    """
    root = root or cache_root()
    rendered = render(spec)
    kernel_dir = root / f"sm{target_sm}" / spec.name
    try:
        tc = toolchain()
    except Exception:
        tc = None
    if tc is not None:
        digest = source_digest(rendered, target_sm, tc.flags(target_sm))
        return _read_artifact(kernel_dir / build_key(digest, tc))
    if not kernel_dir.is_dir():
        return None
    for candidate in sorted(kernel_dir.iterdir()):
        if candidate.name.startswith("."):
            continue  # a build still in progress
        art = _read_artifact(candidate)
        if art is None:
            continue
        flags = art.meta.get("flags", [])
        if art.meta.get("source_digest") == source_digest(rendered, target_sm, flags):
            return art
    return None


def build(spec: KernelSpec, target_sm: int, root: Path | None = None) -> Artifact:
    """Build one kernel (or return the cached build)."""
    if not spec.supports_target(target_sm):
        raise ValueError(f"kernel {spec.name} needs sm{spec.arch} or later, got target sm{target_sm}")
    root = root or cache_root()
    tc = toolchain()
    rendered = render(spec)
    flags = tc.flags(target_sm)
    digest = source_digest(rendered, target_sm, flags)
    key = build_key(digest, tc)
    final = root / f"sm{target_sm}" / spec.name / key
    cached = _read_artifact(final)
    if cached is not None:
        return cached

    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=final.parent))
    try:
        src = work / "kernel.cu"
        src.write_text(rendered.source)
        keep = work / "keep"
        keep.mkdir()
        command = [str(tc.nvcc), *flags, "--keep", f"--keep-dir={keep}", "-o", str(work / SO_NAME), str(src)]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            logs = root / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            log_path = logs / f"{spec.name}-{key}.log"
            log_path.write_text(f"$ {' '.join(command)}\n\n{proc.stdout}\n{proc.stderr}")
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise BuildError(spec.name, command, log_path, tail)
        shutil.move(str(keep / "kernel.fatbin"), str(work / FATBIN_NAME))
        shutil.rmtree(keep)
        meta = {
            "name": spec.name,
            "spec": spec.to_dict(),
            "target_sm": target_sm,
            "key": key,
            "source_digest": digest,
            "flags": flags,
            "nvcc_version": tc.nvcc_version,
            "cutlass_version": tc.cutlass_version,
        }
        (work / META_NAME).write_text(json.dumps(meta, indent=1, sort_keys=True))
        try:
            os.rename(work, final)
        except OSError:
            # Another process finished the same build first; its artifact is identical.
            if _read_artifact(final) is None:
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return _read_artifact(final)


def default_jobs(target_sm: int) -> int:
    """As many parallel compiles as cores and available memory allow."""
    cores = os.cpu_count() or 1
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        available = int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        available = 8 << 30
    return max(1, min(cores, available // BYTES_PER_JOB.get(target_sm, 4 << 30)))


def build_many(
    specs: Iterable[KernelSpec],
    target_sm: int,
    jobs: int | None = None,
    root: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Artifact]:
    """Build several kernels in parallel; raises the first BuildError after all finish."""
    specs = list(specs)
    jobs = jobs or default_jobs(target_sm)
    progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    results: dict[str, Artifact] = {}
    errors: list[BaseException] = []
    start = time.monotonic()

    def one(spec: KernelSpec):
        t0 = time.monotonic()
        art = build(spec, target_sm, root)
        return spec, art, time.monotonic() - t0

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(one, s) for s in specs]
        for done, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            try:
                spec, art, secs = fut.result()
                results[spec.name] = art
                progress(f"[{done}/{len(specs)}] sm{target_sm} {spec.name} ({secs:.1f} s)")
            except BaseException as e:  # report and keep building the rest
                errors.append(e)
                progress(f"[{done}/{len(specs)}] FAILED: {str(e).splitlines()[0]}")
    progress(f"built {len(results)}/{len(specs)} kernels for sm{target_sm} in {time.monotonic() - start:.0f} s "
             f"with {jobs} jobs")
    if errors:
        raise errors[0]
    return [results[s.name] for s in specs]


def write_manifest(artifacts: list[Artifact], target_sm: int, root: Path | None = None) -> Path:
    root = root or cache_root()
    path = root / f"manifest-sm{target_sm}.json"
    entries = [
        {"name": a.name, "spec": a.meta["spec"], "key": a.meta["key"], "dir": str(a.directory.relative_to(root))}
        for a in artifacts
    ]
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"target_sm": target_sm, "kernels": entries}, indent=1))
    os.replace(tmp, path)
    return path
