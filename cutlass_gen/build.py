"""nvcc build driver with an on-disk cache.

One nvcc invocation makes both halves of the launch ABI: the host library (.so,
CUTLASS's host code building Params) and, kept from the same compile with --keep,
the fatbin the runtime loads with the driver API. It compiles one kernel, or a
bundle: several kernels of one CUTLASS 3.x family in one translation unit
(render_bundle), which parses the headers and instantiates the CuTe templates they
share once. build_many bundles those families (plan_bundles); each kernel of a
bundle still gets its own artifact.

Artifacts live in the cache (QGEMM_CACHE_DIR, default ~/.cache/qgemm, never the
working directory) at <cache>/sm<target>/<kernel name>/<key>/ where key hashes
the rendered source, the flags, our extension headers, and the nvcc and CUTLASS
versions. The cache is built to be shared and to survive accidents:

- One builder per kernel. A build holds an flock on <kernel dir>/.<key>.lock, so
  N processes (or threads) that need one kernel compile it once; the others wait,
  then find the finished artifact.
- Atomic artifacts. A build happens in a private dot-folder that is renamed into
  place once complete, so nobody ever sees a half-written artifact, and an
  interrupted build (Ctrl-C, a crash) leaves only a dot-folder that is removed.
- Digests. meta.json records the SHA-256 and size of kernel.so and kernel.fatbin;
  an artifact whose files no longer match (truncated, corrupted) is ignored and
  rebuilt.
- Permissions. Folders are 0755 and files 0644 whatever the umask, so other users
  can load from a cache; a cache folder or file that other users can write is
  refused (UnsafeCacheError), because this process would load code from it.
- Cancellation. nvcc runs in its own process group; Ctrl-C (or build_many's
  cancellation) terminates the group, queued builds are cancelled.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .paths import TemplatesNotFoundError, extensions_include_dir
from .render import RenderedKernel, render, render_bundle
from .spec import KernelSpec
from .toolchain import Toolchain, ToolchainError, toolchain

logger = logging.getLogger("qgemm.build")

SO_NAME = "kernel.so"
FATBIN_NAME = "kernel.fatbin"
META_NAME = "meta.json"
SOURCE_NAME = "kernel.cu"
# Files whose digests meta.json records and every load checks.
DIGESTED = (SO_NAME, FATBIN_NAME)
META_FORMAT = 2

DIR_MODE = 0o755
FILE_MODE = 0o644
# Bits that let users other than the owner write.
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH

# How often a waiting builder looks at its lock and a running nvcc at the cancel flag.
POLL_S = 0.1
# SIGTERM, then SIGKILL after this long, for an nvcc being cancelled.
TERMINATE_GRACE_S = 1.0

# Peak resident memory of one CUTLASS compile; bounds parallel jobs by RAM.
BYTES_PER_JOB = {75: 1 << 30, 80: 1 << 30, 90: 4 << 30}
# What each further kernel of a bundle adds to it (peak resident size of the compile): Sm90 W8A8 one 3.1 GiB,
# three 4.7, ten 7.9; Sm90 FpA x IntB one 4.6 GiB, eight 7.1, eleven 9.4; Sm90 FP8 blockwise ten 9.9: about
# 0.5 GiB a kernel.
BUNDLE_BYTES_PER_KERNEL = 574 << 20  # 0.56 GiB: eleven kernels ask what eight did at 0.8
# Most kernels compiled in one translation unit. The front end (cudafe++ and cicc's parse of CuTe) is most
# of a compile and is shared: Sm90 FpA x IntB one kernel 124 s, four 195-206, eight 278, eleven 361 s
# (cudafe++ 49 s, cicc 240, ptxas 21, the host compile 46: nvcc --time), so ~22 s a kernel more against
# ~120 s for a compile of its own; the ten Sm90 FP8 kernels 316 s in one compile, 2 x 260 s in two. A
# bundle is one job, so a larger one leaves cores idle at the end of a build; at eleven two jobs take what
# two of eight took before (4 + 10 x 0.56 GiB each) and fit a 24 GiB machine.
MAX_BUNDLE = 11


class BuildError(RuntimeError):
    """nvcc failed; carries the command and the path of the full log."""

    def __init__(self, name: str, command: list[str], log_path: Path, tail: str):
        self.command = command
        self.log_path = log_path
        super().__init__(
            f"nvcc failed for {name}\n  command: {' '.join(command)}\n  log: {log_path}\n{tail}"
        )


class BuildCancelled(RuntimeError):
    """The build was cancelled (build_many interrupted) before it finished; nothing was written."""


class UnsafeCacheError(RuntimeError):
    """A cache folder or file is writable by other users, so loading kernels from it is refused."""


def cache_root() -> Path:
    # An empty variable counts as unset: Path("") would be the working directory.
    return Path(os.environ.get("QGEMM_CACHE_DIR") or Path.home() / ".cache" / "qgemm").expanduser()


# --- keys -----------------------------------------------------------------------------------------

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


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- permissions ----------------------------------------------------------------------------------

def _unsafe_message(path: Path, mode: int) -> str:
    return (f"refusing to use the qgemm kernel cache: {path} is writable by other users (mode {mode & 0o7777:04o}), "
            f"so they could replace kernels this process loads. Fix: `chmod go-w {path}` (and its files and "
            f"subfolders: `chmod -R go-w {path}`), or set QGEMM_CACHE_DIR to a folder only you can write.")


def check_cache_safe(root: Path, path: Path | None = None) -> None:
    """Raise UnsafeCacheError if root, or any existing folder from root down to `path`, or a file
    directly in `path`, is writable by group or others. Folders above root are the user's business."""
    root = Path(root)
    chain = [root]
    if path is not None:
        rel = Path(path).relative_to(root)
        for part in rel.parts:
            chain.append(chain[-1] / part)
    for p in chain:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            return
        if st.st_mode & _OTHERS_WRITE:
            raise UnsafeCacheError(_unsafe_message(p, st.st_mode))
    if path is not None and Path(path).is_dir():
        for f in Path(path).iterdir():
            st = os.lstat(f)
            if stat.S_ISREG(st.st_mode) and st.st_mode & _OTHERS_WRITE:
                raise UnsafeCacheError(_unsafe_message(f, st.st_mode))


def _ensure_dir(path: Path, root: Path) -> None:
    """Create `path` and the folders between it and root (root included) as 0755, whatever the umask."""
    path = Path(path)
    if not root.exists():
        root.parent.mkdir(parents=True, exist_ok=True)
    chain = [root] + [root / Path(*path.relative_to(root).parts[:i + 1])
                      for i in range(len(path.relative_to(root).parts))]
    for p in chain:
        try:
            p.mkdir()
        except FileExistsError:
            continue
        os.chmod(p, DIR_MODE)


# --- artifacts ------------------------------------------------------------------------------------

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


def verify_artifact(directory: Path) -> tuple[dict | None, str]:
    """(meta, "ok") for a complete artifact whose files match their recorded digests, else
    (meta or None, why not). Artifacts from before digests were recorded pass if their files exist."""
    meta_path = Path(directory) / META_NAME
    if not meta_path.is_file():
        return None, "no meta.json"
    try:
        meta = json.loads(meta_path.read_text())
        meta["name"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"unreadable meta.json ({e.__class__.__name__})"
    files = meta.get("files")
    if files is None:  # format 1: no digests to check
        missing = [n for n in DIGESTED if not (Path(directory) / n).is_file()]
        return (meta, "ok") if not missing else (meta, f"missing {', '.join(missing)}")
    for name in DIGESTED:
        record = files.get(name)
        path = Path(directory) / name
        if record is None:
            return meta, f"meta.json has no digest for {name}"
        try:
            size = path.stat().st_size
        except OSError:
            return meta, f"missing {name}"
        if size != record["bytes"]:
            return meta, f"{name} has {size} bytes, meta.json recorded {record['bytes']}"
        if file_digest(path) != record["sha256"]:
            return meta, f"{name} does not match its recorded SHA-256"
    return meta, "ok"


def _read_artifact(directory: Path) -> Artifact | None:
    """The artifact in `directory` if it is complete and intact; a damaged one is logged and ignored
    (a build then replaces it)."""
    if not Path(directory).is_dir():
        return None
    meta, why = verify_artifact(directory)
    if why != "ok":
        if meta is not None or why != "no meta.json":
            logger.warning("qgemm: ignoring damaged kernel artifact %s: %s (it is rebuilt when needed)",
                           directory, why)
        return None
    return Artifact(meta["name"], Path(directory), meta)


def _candidates(kernel_dir: Path) -> list[Path]:
    """Finished artifact folders of one kernel, newest first (dot-names are builds and locks)."""
    if not kernel_dir.is_dir():
        return []
    dirs = [p for p in kernel_dir.iterdir() if not p.name.startswith(".") and p.is_dir()]
    return sorted(dirs, key=lambda p: (p / META_NAME).stat().st_mtime if (p / META_NAME).exists() else 0,
                  reverse=True)


def find_artifact(spec: KernelSpec, target_sm: int, root: Path | None = None) -> Artifact | None:
    """A built, intact artifact for this spec and target, if the cache has one.

    With templates and nvcc available the exact build key must match. Without nvcc (a
    machine that only runs prebuilt kernels) an artifact built from the same source and
    flags is accepted whatever nvcc built it. Without the templates or jinja2 (an
    install that only loads kernels) the artifact is found by the spec recorded in its
    meta.json, newest first, and checked against the digests recorded at build time.
    """
    root = Path(root or cache_root())
    kernel_dir = root / f"sm{target_sm}" / spec.name
    check_cache_safe(root)
    try:
        rendered = render(spec)
    except (TemplatesNotFoundError, ImportError) as e:
        logger.debug("qgemm: cannot render %s (%s); looking the kernel up by spec", spec.name, e)
        rendered = None
    tc = None
    if rendered is not None:
        try:
            tc = toolchain()
        except (ToolchainError, TemplatesNotFoundError):
            tc = None

    found = None
    if rendered is not None and tc is not None:
        digest = source_digest(rendered, target_sm, tc.flags(target_sm))
        found = _read_artifact(kernel_dir / build_key(digest, tc))
    else:
        wanted = spec.to_dict()
        for candidate in _candidates(kernel_dir):
            try:
                meta = json.loads((candidate / META_NAME).read_text())
            except (OSError, ValueError):
                continue
            if meta.get("target_sm", target_sm) != target_sm:
                continue
            if rendered is not None:
                if meta.get("source_digest") != source_digest(rendered, target_sm, meta.get("flags", [])):
                    continue
            elif meta.get("spec") != wanted:
                continue
            found = _read_artifact(candidate)
            if found is not None:
                break
    if found is not None:
        check_cache_safe(root, found.directory)
    return found


# --- building -------------------------------------------------------------------------------------

def _terminate(proc: subprocess.Popen) -> None:
    """Stop an nvcc and everything it started (cicc, ptxas, the host compiler): its process group."""
    if proc.poll() is not None:
        return
    for sig, grace in ((signal.SIGTERM, TERMINATE_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _run_nvcc(command: list[str], log_path: Path, cancel: threading.Event | None = None) -> int:
    """Run one nvcc with its output in log_path; its return code. nvcc gets its own process group
    so that cancelling (or Ctrl-C, KeyboardInterrupt in this thread) can stop all its children."""
    with open(log_path, "w") as log:
        log.write(f"$ {' '.join(command)}\n\n")
        log.flush()
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        while True:
            try:
                return proc.wait(timeout=POLL_S if cancel is not None else None)
            except subprocess.TimeoutExpired:
                if cancel.is_set():
                    _terminate(proc)
                    raise BuildCancelled(f"cancelled: {command[-1]}")
    except BaseException:
        _terminate(proc)
        raise


@contextlib.contextmanager
def _exclusive(lock_path: Path, what: str, cancel: threading.Event | None = None) -> Iterator[None]:
    """Hold an flock on lock_path (created 0644). Polls rather than blocks, so that a cancelled or
    interrupted waiter leaves promptly. The file is never unlinked: a waiter may hold it open."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        with contextlib.suppress(OSError):  # 0644 whatever the umask (fails harmlessly on another's file)
            os.fchmod(fd, FILE_MODE)
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if not waited:
                logger.info("qgemm: waiting for another process building %s", what)
                waited = True
            if cancel is not None and cancel.is_set():
                raise BuildCancelled(f"cancelled while waiting for {what}")
            time.sleep(POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _write_file(path: Path, text: str) -> None:
    path.write_text(text)
    os.chmod(path, FILE_MODE)


@dataclass(frozen=True)
class _Job:
    """One kernel's place in the cache for one build."""
    spec: KernelSpec
    rendered: RenderedKernel
    digest: str
    key: str
    kernel_dir: Path
    final: Path

    @property
    def lock(self) -> Path:
        return self.kernel_dir / f".{self.key}.lock"

    def work_dir(self, what: str = "build") -> Path:
        return self.kernel_dir / f".{self.key}-{what}-{os.getpid()}-{threading.get_ident()}"


def _job(spec: KernelSpec, target_sm: int, root: Path, tc: Toolchain) -> _Job:
    if not spec.supports_target(target_sm):
        raise ValueError(f"kernel {spec.name} needs sm{spec.arch} or later, got target sm{target_sm}")
    rendered = render(spec)
    digest = source_digest(rendered, target_sm, tc.flags(target_sm))
    key = build_key(digest, tc)
    kernel_dir = root / f"sm{target_sm}" / spec.name
    return _Job(spec, rendered, digest, key, kernel_dir, kernel_dir / key)


def _cached(job: _Job, root: Path) -> Artifact | None:
    check_cache_safe(root, job.kernel_dir)
    cached = _read_artifact(job.final)
    if cached is not None:
        check_cache_safe(root, job.final)
    return cached


def _clear_leftovers(job: _Job) -> None:
    """Holding the kernel's lock, no one else is building its key: a build folder left here is from a
    builder that was killed outright (SIGKILL, power loss), whose nvcc may have written into it afterwards;
    a damaged artifact is moved out of the way (atomically), then deleted."""
    for leftover in job.kernel_dir.glob(f".{job.key}-build-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    if job.final.exists():
        trash = job.work_dir("damaged")
        os.rename(job.final, trash)
        shutil.rmtree(trash, ignore_errors=True)


def _new_work_dir(path: Path) -> Path:
    path.mkdir(mode=DIR_MODE)
    os.chmod(path, DIR_MODE)
    return path


def _compile(source: str, work: Path, label: str, log_stem: str, target_sm: int, tc: Toolchain, root: Path,
             cancel: threading.Event | None) -> None:
    """nvcc `source` in `work`, leaving kernel.so and kernel.fatbin there (0644). A failure raises
    BuildError naming `label`, with the log saved as <cache>/logs/<log_stem>.log."""
    src = work / SOURCE_NAME
    _write_file(src, source)
    keep = work / "keep"
    keep.mkdir()
    log_path = work / "nvcc.log"
    command = [str(tc.nvcc), *tc.flags(target_sm), "--keep", f"--keep-dir={keep}", "-o", str(work / SO_NAME),
               str(src)]
    returncode = _run_nvcc(command, log_path, cancel)
    if returncode != 0:
        if cancel is not None and cancel.is_set():
            raise BuildCancelled(f"cancelled: {label}")
        output = log_path.read_text(errors="replace")
        logs = root / "logs"
        _ensure_dir(logs, root)
        saved = logs / f"{log_stem}.log"
        _write_file(saved, output)
        tail = "\n".join(output.strip().splitlines()[-15:])
        raise BuildError(label, command, saved, tail)
    if not (keep / "kernel.fatbin").is_file():
        raise BuildError(label, command, log_path, "nvcc --keep left no kernel.fatbin")
    os.replace(keep / "kernel.fatbin", work / FATBIN_NAME)
    shutil.rmtree(keep)
    log_path.unlink()
    for name in DIGESTED:
        os.chmod(work / name, FILE_MODE)


def _publish(job: _Job, work: Path, target_sm: int, tc: Toolchain, bundle: list[str] | None = None) -> Artifact:
    """Record meta.json in `work` (which holds the job's kernel.so and kernel.fatbin) and rename it into
    place: the artifact appears complete or not at all."""
    files = {name: {"sha256": file_digest(work / name), "bytes": (work / name).stat().st_size} for name in DIGESTED}
    meta = {
        "format": META_FORMAT,
        "name": job.spec.name,
        "spec": job.spec.to_dict(),
        "target_sm": target_sm,
        "key": job.key,
        "source_digest": job.digest,
        "flags": tc.flags(target_sm),
        "nvcc_version": tc.nvcc_version,
        "cutlass_version": tc.cutlass_version,
        "files": files,
        "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if bundle:
        meta["bundle"] = bundle  # the kernels compiled with it, whose code its kernel.so and fatbin also hold
    _write_file(work / META_NAME, json.dumps(meta, indent=1, sort_keys=True))
    os.rename(work, job.final)
    artifact = _read_artifact(job.final)
    if artifact is None:
        raise BuildError(job.spec.name, [str(tc.nvcc)], job.final,
                         "the artifact failed its digest check right after the build")
    return artifact


def _build_locked(job: _Job, target_sm: int, tc: Toolchain, root: Path, cancel: threading.Event | None) -> Artifact:
    """Compile and publish one kernel; the caller holds its lock and found no intact artifact."""
    _clear_leftovers(job)
    work = _new_work_dir(job.work_dir())
    try:
        _compile(job.rendered.source, work, job.spec.name, f"{job.spec.name}-{job.key}", target_sm, tc, root, cancel)
        return _publish(job, work, target_sm, tc)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
        os.chmod(dst, FILE_MODE)


def _build_bundle_locked(jobs: list[_Job], target_sm: int, tc: Toolchain, root: Path,
                         cancel: threading.Event | None) -> dict[str, Artifact | BaseException]:
    """Compile several kernels in one nvcc (render_bundle) and publish each as its own artifact; the
    caller holds all their locks. Each artifact gets the bundle's kernel.so and kernel.fatbin (hard
    links where the file system allows). If the bundle fails to compile, the kernels are compiled one
    at a time, so that each failure names its own kernel and the others still land."""
    for job in jobs:
        _clear_leftovers(job)
    names = [job.spec.name for job in jobs]
    lead = jobs[0]
    work = _new_work_dir(lead.work_dir("build-bundle"))
    results: dict[str, Artifact | BaseException] = {}
    try:
        try:
            _compile(render_bundle([job.rendered for job in jobs]), work, f"the bundle of {', '.join(names)}",
                     f"bundle-{lead.spec.name}-{lead.key}", target_sm, tc, root, cancel)
        except BuildError as e:
            logger.warning("qgemm: a bundle of %d kernels failed to compile (%s); compiling them one at a time",
                           len(jobs), e.log_path)
            for job in jobs:
                try:
                    results[job.spec.name] = _build_locked(job, target_sm, tc, root, cancel)
                except BuildError as err:
                    results[job.spec.name] = err
            return results
        for job in jobs:
            member = _new_work_dir(job.work_dir())
            try:
                _write_file(member / SOURCE_NAME, job.rendered.source)
                for name in DIGESTED:
                    _link_or_copy(work / name, member / name)
                results[job.spec.name] = _publish(job, member, target_sm, tc, bundle=names)
            finally:
                if member.exists():
                    shutil.rmtree(member, ignore_errors=True)
        return results
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def build(spec: KernelSpec, target_sm: int, root: Path | None = None,
          cancel: threading.Event | None = None) -> Artifact:
    """Build one kernel (or return the cached build). `cancel`, when set, stops the build."""
    result = _build_group([spec], target_sm, Path(root or cache_root()), cancel)[spec.name]
    if isinstance(result, BaseException):
        raise result
    return result


def _build_group(specs: list[KernelSpec], target_sm: int, root: Path,
                 cancel: threading.Event | None = None) -> dict[str, Artifact | BaseException]:
    """Build kernels that may share a translation unit (KernelSpec.bundles), or one kernel: the cached
    ones are taken as they are, the rest compile as one bundle (a single kernel compiles alone). Returns
    each kernel's artifact, or the BuildError that its compile raised."""
    tc = toolchain()
    jobs = [_job(spec, target_sm, root, tc) for spec in specs]
    results: dict[str, Artifact | BaseException] = {}
    pending = []
    for job in jobs:
        cached = _cached(job, root)
        if cached is not None:
            results[job.spec.name] = cached
        else:
            pending.append(job)
    if not pending:
        return results
    with contextlib.ExitStack() as stack:
        # Every builder takes the locks in one order (by path), so two bundles sharing kernels cannot deadlock.
        for job in sorted(pending, key=lambda j: str(j.lock)):
            _ensure_dir(job.kernel_dir, root)
            stack.enter_context(_exclusive(job.lock, f"{job.spec.name} for sm{target_sm}", cancel))
        todo = []
        for job in pending:
            cached = _read_artifact(job.final)  # built by whoever held a lock before us
            if cached is not None:
                results[job.spec.name] = cached
            else:
                todo.append(job)
        if len(todo) == 1:
            try:
                results[todo[0].spec.name] = _build_locked(todo[0], target_sm, tc, root, cancel)
            except BuildError as e:
                results[todo[0].spec.name] = e
        elif todo:
            results.update(_build_bundle_locked(todo, target_sm, tc, root, cancel))
    return results


def build_bundle(specs: Iterable[KernelSpec], target_sm: int, root: Path | None = None,
                 cancel: threading.Event | None = None) -> list[Artifact]:
    """Build several kernels of bundle-safe families with one nvcc (or return their cached builds);
    raises the first BuildError after publishing the kernels that did compile."""
    specs = list(specs)
    for spec in specs:
        if not spec.bundles:
            raise ValueError(f"specs: {spec.name} cannot share a translation unit "
                             f"({type(spec).__name__}.bundles is False); build it alone")
    keys = sorted({spec.bundle_key for spec in specs})
    if len(keys) > 1:
        raise ValueError(f"specs: a bundle takes kernels of one bundle_key, got {keys}")
    results = _build_group(specs, target_sm, Path(root or cache_root()), cancel)
    for spec in specs:
        if isinstance(results[spec.name], BaseException):
            raise results[spec.name]
    return [results[spec.name] for spec in specs]


def default_jobs(target_sm: int, kernels_per_job: int = 1) -> int:
    """As many parallel compiles as cores and available memory allow (a bundle of n kernels takes
    BUNDLE_BYTES_PER_KERNEL more per extra kernel)."""
    cores = os.cpu_count() or 1
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        available = int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        available = 8 << 30
    per_job = BYTES_PER_JOB.get(target_sm, 4 << 30) + (kernels_per_job - 1) * BUNDLE_BYTES_PER_KERNEL
    return max(1, min(cores, available // per_job))


def plan_bundles(specs: list[KernelSpec], jobs: int) -> list[list[KernelSpec]]:
    """How build_many compiles `specs` with `jobs` parallel compiles: kernels of a bundle-safe family
    (KernelSpec.bundles) in groups of one bundle_key (one template), each kernel of another family alone.
    Groups hold at most MAX_BUNDLE kernels and no more than it takes to give every job work (with as
    many jobs as kernels, nothing is bundled); a key's kernels are split into groups of even size. The long
    compiles first (the CUTLASS 3.x kernels of sm90, then larger groups), so that none starts last."""
    bundled = [s for s in specs if s.bundles]
    size = max(1, min(MAX_BUNDLE, -(-len(bundled) // max(1, jobs))))
    by_key: dict[str, list[KernelSpec]] = {}
    for spec in bundled:
        by_key.setdefault(spec.bundle_key, []).append(spec)
    groups = []
    for key_specs in by_key.values():
        count = -(-len(key_specs) // size)
        bounds = [len(key_specs) * i // count for i in range(count + 1)]  # catalog order: neighbours share most
        groups += [key_specs[a:b] for a, b in zip(bounds, bounds[1:])]
    groups += [[s] for s in specs if not s.bundles]
    return sorted(groups, key=lambda g: (g[0].arch, len(g)), reverse=True)


def build_many(
    specs: Iterable[KernelSpec],
    target_sm: int,
    jobs: int | None = None,
    root: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Artifact]:
    """Build several kernels in parallel, bundling those of the CUTLASS 3.x families (plan_bundles);
    raises the first BuildError after all finish.

    Ctrl-C (KeyboardInterrupt in the calling thread) cancels the queued builds, terminates
    the running nvcc process groups, removes their half-done folders and re-raises, within
    about a second."""
    specs = list(specs)
    root = Path(root or cache_root())
    jobs_given = jobs
    jobs = jobs or default_jobs(target_sm)
    progress = progress or (lambda line: logger.info("%s", line))
    results: dict[str, Artifact] = {}
    errors: list[BaseException] = []
    start = time.monotonic()
    cancel = threading.Event()
    done = 0

    # Bundle only what the cache lacks: a kernel built before (by a test, a plan) is not compiled again.
    tc = toolchain()
    missing = [s for s in specs if not s.bundles or _cached(_job(s, target_sm, root, tc), root) is None]
    missing_names = {s.name for s in missing}
    groups = [[s] for s in specs if s.name not in missing_names] + plan_bundles(missing, jobs)
    if not jobs_given:  # bundles take more memory than one kernel
        jobs = min(jobs, default_jobs(target_sm, max(len(g) for g in groups) if groups else 1))

    def one(group: list[KernelSpec]):
        t0 = time.monotonic()
        return group, _build_group(group, target_sm, root, cancel), time.monotonic() - t0

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    futures = []
    try:
        futures = [pool.submit(one, g) for g in groups]
        for fut in concurrent.futures.as_completed(futures):
            try:
                group, out, secs = fut.result()
            except Exception as e:  # report and keep building the rest
                errors.append(e)
                done += 1
                progress(f"[{done}/{len(specs)}] FAILED: {str(e).splitlines()[0]}")
                continue
            together = f", {len(group)} in one compile" if len(group) > 1 else ""
            for spec in group:
                done += 1
                result = out[spec.name]
                if isinstance(result, BaseException):
                    errors.append(result)
                    progress(f"[{done}/{len(specs)}] FAILED: {str(result).splitlines()[0]}")
                else:
                    results[spec.name] = result
                    progress(f"[{done}/{len(specs)}] sm{target_sm} {spec.name} ({secs:.1f} s{together})")
    except BaseException:
        cancel.set()
        for fut in futures:
            fut.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        progress(f"interrupted: built {len(results)}/{len(specs)} kernels for sm{target_sm}; "
                 f"the rest were cancelled and left nothing behind")
        raise
    pool.shutdown(wait=True)
    progress(f"built {len(results)}/{len(specs)} kernels for sm{target_sm} in {time.monotonic() - start:.0f} s "
             f"with {jobs} jobs")
    if errors:
        raise errors[0]
    return [results[s.name] for s in specs]


def write_manifest(artifacts: list[Artifact], target_sm: int, root: Path | None = None) -> Path:
    """Record artifacts in <cache>/manifest-sm<target>.json, merged with what earlier builds recorded
    (a partial `qgemm build --kernels ...` adds to the manifest instead of replacing it). Entries
    whose folder is gone are dropped."""
    root = Path(root or cache_root())
    _ensure_dir(root, root)
    path = root / f"manifest-sm{target_sm}.json"
    with _exclusive(root / f".manifest-sm{target_sm}.lock", path.name):
        entries: dict[str, dict] = {}
        try:
            old = json.loads(path.read_text())
            for e in old.get("kernels", []):
                if (root / e["dir"] / META_NAME).is_file():
                    entries[e["name"]] = e
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as e:
            logger.warning("qgemm: replacing unreadable manifest %s (%s)", path, e)
        for a in artifacts:
            entries[a.name] = {"name": a.name, "spec": a.meta["spec"], "key": a.meta["key"],
                               "dir": str(a.directory.relative_to(root))}
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        _write_file(tmp, json.dumps({"target_sm": target_sm, "kernels": [entries[n] for n in sorted(entries)]},
                                    indent=1))
        os.replace(tmp, path)
    return path


# --- the cache as a whole (`qgemm cache ...`) -------------------------------------------------------

@dataclass(frozen=True)
class CacheEntry:
    target_sm: int
    name: str
    directory: Path
    meta: dict | None
    status: str  # "ok" or why not

    @property
    def bytes(self) -> int:
        """This artifact's share of the disk: a file hard-linked into several artifacts (a bundle's
        kernel.so and kernel.fatbin) counts its size split evenly among its links, so the entries of
        a bundle add up to what it takes once."""
        return sum(st.st_size // max(1, st.st_nlink) for st in self.file_stats())

    def file_stats(self) -> list[os.stat_result]:
        return [path.stat() for path in self.directory.rglob("*") if path.is_file()]


def disk_bytes(entries: list[CacheEntry]) -> int:
    """Bytes the entries' files take on disk, each file counted once however many links it has."""
    return sum({(st.st_dev, st.st_ino): st.st_size for e in entries for st in e.file_stats()}.values())


def cache_entries(root: Path | None = None, verify: bool = True) -> list[CacheEntry]:
    """Every artifact folder in the cache, sorted by target and name (damaged ones included)."""
    root = Path(root or cache_root())
    out = []
    if not root.is_dir():
        return out
    for sm_dir in sorted(root.glob("sm[0-9]*")):
        if not sm_dir.is_dir() or not sm_dir.name[2:].isdigit():
            continue
        for kernel_dir in sorted(p for p in sm_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            for art_dir in _candidates(kernel_dir):
                if verify:
                    meta, status = verify_artifact(art_dir)
                else:
                    try:
                        meta, status = json.loads((art_dir / META_NAME).read_text()), "ok"
                    except (OSError, ValueError):
                        meta, status = None, "unreadable meta.json"
                out.append(CacheEntry(int(sm_dir.name[2:]), kernel_dir.name, art_dir, meta, status))
    return out


def clean_cache(root: Path | None = None, entries: list[CacheEntry] | None = None) -> int:
    """Remove the given artifacts (default: everything qgemm wrote in the cache) and return how many
    artifacts went. Only qgemm's own layout is removed (sm*/ folders, logs/, manifests, locks): a cache
    variable pointing at a folder that holds other things never deletes them."""
    root = Path(root or cache_root())
    if not root.is_dir():
        return 0
    everything = entries is None
    entries = cache_entries(root, verify=False) if everything else entries
    for e in entries:
        shutil.rmtree(e.directory, ignore_errors=True)
    if everything:
        for sm_dir in root.glob("sm[0-9]*"):
            if sm_dir.is_dir() and sm_dir.name[2:].isdigit():
                shutil.rmtree(sm_dir, ignore_errors=True)
        shutil.rmtree(root / "logs", ignore_errors=True)
        for f in list(root.glob("manifest-sm*.json")) + list(root.glob(".manifest-sm*")):
            f.unlink(missing_ok=True)
    else:
        # Drop kernel folders left empty (their lock files aside) and the manifests' dead entries.
        for kernel_dir in {e.directory.parent for e in entries}:
            if kernel_dir.is_dir() and all(p.name.startswith(".") and p.is_file() for p in kernel_dir.iterdir()):
                shutil.rmtree(kernel_dir, ignore_errors=True)
        for sm in {e.target_sm for e in entries}:
            if (root / f"manifest-sm{sm}.json").exists():
                write_manifest([], sm, root)
    return len(entries)
