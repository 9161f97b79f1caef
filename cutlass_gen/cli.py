"""`qgemm` command line: render, list, check and build the kernel catalog; inspect the cache; `qgemm bench`
times a family on this GPU against its peers (qgemm/bench/).

Exit codes, the same for every command:
  0    done (for `list`/`cache list`: something was listed, or the cache is simply empty);
  1    failed: a build or toolchain error, templates missing, an unsafe cache, `check` found
       differences, or a selection (--family/--kernels/--sm) that matches nothing;
  2    usage error (argparse; also a malformed `bench --shapes`/`--m`);
  130  interrupted (Ctrl-C); 143 terminated (SIGTERM). Either way no half-built artifact is left.
Messages go to stderr through `logging` (logger "qgemm"); results (names, paths) go to stdout.
"""
from __future__ import annotations

import argparse
import contextlib
import fnmatch
import logging
import signal
import sys
import threading
from pathlib import Path

from .catalog import catalog, families
from .paths import TemplatesNotFoundError, generated_dir, templates_dir
from .render import render
from .spec import SUPPORTED_TARGETS, KernelSpec

logger = logging.getLogger("qgemm")

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143


def _target(value: str):
    """--sm: 'auto' (this machine's GPU, resolved when needed) or one of the supported targets."""
    if value == "auto":
        return value
    try:
        sm = int(value)
    except ValueError:
        sm = None
    if sm not in SUPPORTED_TARGETS:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {value!r} (choose from auto, {', '.join(map(str, SUPPORTED_TARGETS))})")
    return sm


def _resolve_sm(args) -> int:
    if args.sm == "auto":
        from .toolchain import detect_target_sm

        args.sm = detect_target_sm()
        logger.info("--sm auto: this machine's GPU takes the sm%d build", args.sm)
    return args.sm


def _describe(args) -> str:
    parts = [f"sm{args.sm}"] if getattr(args, "sm", None) not in (None, "auto") else []
    parts += [f"family={args.family}"] if getattr(args, "family", None) else []
    parts += [f"kernels={args.kernels}"] if getattr(args, "kernels", None) else []
    return " ".join(parts) or "anything"


def _select(sm: int, family: str | None, pattern: str | None) -> list[KernelSpec]:
    specs = catalog(sm, family)
    if pattern:
        specs = [s for s in specs if fnmatch.fnmatchcase(s.name, pattern)]
    return specs


def _all_catalog_specs() -> list[KernelSpec]:
    seen: dict[str, KernelSpec] = {}
    for sm in SUPPORTED_TARGETS:
        for spec in catalog(sm):
            seen.setdefault(spec.name, spec)
    return [seen[n] for n in sorted(seen)]


def _expected_generated() -> dict[str, str]:
    return {render(s).filename: render(s).source for s in _all_catalog_specs()}


def cmd_list(args) -> int:
    specs = _select(_resolve_sm(args), args.family, args.kernels)
    if not specs:
        logger.error("qgemm list: no kernels match %s", _describe(args))
        return EXIT_FAILURE
    for spec in specs:
        print(spec.name)
    return EXIT_OK


def cmd_render(args) -> int:
    templates_dir()  # missing templates: say so before anything else
    out = Path(args.out) if args.out else generated_dir()
    out.mkdir(parents=True, exist_ok=True)
    expected = _expected_generated()
    for filename, source in expected.items():
        path = out / filename
        if not path.exists() or path.read_text() != source:
            path.write_text(source)
    stale = [p for p in out.glob("*.cu") if p.name not in expected]
    for p in stale:
        p.unlink()
    print(f"rendered {len(expected)} kernels into {out}" + (f", removed {len(stale)} stale" if stale else ""))
    return EXIT_OK


def cmd_check(args) -> int:
    templates_dir()
    out = Path(args.out) if args.out else generated_dir()
    expected = _expected_generated()
    problems = []
    for filename, source in expected.items():
        path = out / filename
        if not path.exists():
            problems.append(f"missing {path}")
        elif path.read_text() != source:
            problems.append(f"out of date {path}")
    problems += [f"stale {p}" for p in out.glob("*.cu") if p.name not in expected]
    if problems:
        for line in problems:
            logger.error("%s", line)
        logger.error("%s is not current: run `qgemm render%s`", out, f" --out {out}" if args.out else "")
        return EXIT_FAILURE
    print(f"{'generated/' if not args.out else out} is current ({len(expected)} kernels)")
    return EXIT_OK


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM unwinds like Ctrl-C, so a killed build still cancels nvcc and removes its folders."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(EXIT_TERMINATED)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_build(args) -> int:
    from .build import build_many, cache_root, write_manifest

    sm = _resolve_sm(args)
    root = Path(args.out).resolve() if args.out else cache_root()
    specs = _select(sm, args.family, args.kernels)
    if not specs:
        logger.error("qgemm build: no kernels match %s", _describe(args))
        return EXIT_FAILURE
    with _sigterm_as_interrupt():
        artifacts = build_many(specs, sm, jobs=args.jobs, root=root)
    manifest = write_manifest(artifacts, sm, root)
    print(f"manifest: {manifest}")
    return EXIT_OK


def _cache_selection(args):
    from .build import cache_entries

    entries = cache_entries(args.root)
    selected = [e for e in entries
                if (args.sm is None or e.target_sm == args.sm)
                and (not args.kernels or fnmatch.fnmatchcase(e.name, args.kernels))
                and (not args.family or (e.meta or {}).get("spec", {}).get("family") == args.family)
                and (not getattr(args, "damaged", False) or e.status != "ok")]
    filtered = args.sm is not None or args.kernels or args.family or getattr(args, "damaged", False)
    return entries, selected, filtered


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def cmd_cache(args) -> int:
    from .build import cache_root, check_cache_safe, clean_cache

    args.root = cache_root()
    if args.cache_command == "path":
        print(args.root)
        return EXIT_OK
    if args.root.exists():
        check_cache_safe(args.root)
    entries, selected, filtered = _cache_selection(args)
    if args.cache_command == "clean" and not filtered:  # everything, logs and manifests included
        print(f"removed {clean_cache(args.root)} kernel builds from {args.root}")
        return EXIT_OK
    if not selected:
        if filtered and entries:
            logger.error("qgemm cache %s: no cached kernels match %s in %s", args.cache_command,
                         _describe(args), args.root)
            return EXIT_FAILURE
        if filtered:
            logger.error("qgemm cache %s: the cache %s holds no kernels", args.cache_command, args.root)
            return EXIT_FAILURE
        logger.info("the cache %s holds no kernels", args.root)
        return EXIT_OK
    if args.cache_command == "list":
        from .build import disk_bytes

        for e in selected:
            meta = e.meta or {}
            status = "ok" if e.status == "ok" else f"DAMAGED ({e.status})"
            # A bundle's members share one library (hard links): each shows its even share of it.
            shared = f" (1/{len(meta['bundle'])} of a bundle)" if len(meta.get("bundle") or ()) > 1 else ""
            print(f"sm{e.target_sm}  {e.name}  {e.directory.name}  {_size(e.bytes)}{shared}  "
                  f"{meta.get('built_at', '-')}  {status}")
        damaged = sum(e.status != "ok" for e in selected)
        logger.info("%d kernel builds, %s on disk, in %s%s", len(selected), _size(disk_bytes(selected)), args.root,
                    f", {damaged} damaged (rebuilt on next use; `qgemm cache clean --damaged` removes them)"
                    if damaged else "")
        return EXIT_OK
    removed = clean_cache(args.root, selected)
    print(f"removed {removed} kernel builds from {args.root}")
    return EXIT_OK


# `qgemm bench` families (qgemm.bench.FAMILIES, repeated here so that building the parser does not
# import torch; tests/test_bench_cpu.py checks the two agree).
BENCH_FAMILIES = ("w8a8", "fpaintb", "fp8", "conv", "conv_fpaintb")


def cmd_bench(args) -> int:
    """Time a family on this GPU against its peers: the table on stdout, JSON and PNG into --out."""
    import torch

    from qgemm import bench

    try:
        shapes = bench.parse_shapes(args.family, args.shapes) if args.shapes else None
        ms = bench.parse_ms(args.m) if args.m else None
    except ValueError as e:
        logger.error("qgemm bench: %s", e)
        return EXIT_USAGE
    if not torch.cuda.is_available():
        logger.error("qgemm bench: no CUDA GPU: benchmarks time kernels on the current GPU, and torch %s sees "
                     "none (CUDA build: %s). Run it on a GPU machine.", torch.__version__, torch.version.cuda or "no")
        return EXIT_FAILURE
    if not args.no_plot:
        try:
            import matplotlib  # noqa: F401  -- say so before minutes of timing, not after
        except ImportError:
            logger.error("qgemm bench: the plot needs matplotlib: pip install \"qgemm[plot]\", or pass --no-plot")
            return EXIT_FAILURE
    out = Path(args.out)
    head = bench.preview(args.family, args.dtype, args.warm)
    print(bench.report.format_header(head), flush=True)

    def progress(row):
        print(bench.report.format_row(head, row), flush=True)

    result = bench.run(args.family, shapes, ms, dtype=args.dtype, warm=args.warm, progress=progress)
    print(bench.report.table(result))
    written = [bench.report.write_json(result, out / f"bench_{args.family}.json")]
    if not args.no_plot:
        written.append(bench.report.write_plot(result, out / f"bench_{args.family}.png"))
    for path in written:
        print(f"wrote {path}")
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="qgemm", description="Generate and build qgemm's CUTLASS kernels, and manage their cache.",
        epilog="Exit codes: 0 done, 1 failed or nothing matched, 2 usage error, 130 interrupted.")
    sub = p.add_subparsers(dest="command", required=True)
    targets = ", ".join(map(str, SUPPORTED_TARGETS))

    def selection(sp, sm_default="auto"):
        sp.add_argument("--sm", type=_target, default=sm_default,
                        help=f"target SM: {targets}, or auto (this machine's GPU; the default)")
        sp.add_argument("--family", choices=families(), help="only this kernel family")
        sp.add_argument("--kernels", metavar="GLOB", help="only kernels whose name matches GLOB")

    b = sub.add_parser("build", help="render and compile the catalog for a target SM, write a manifest")
    selection(b)
    b.add_argument("-j", "--jobs", type=int, help="parallel compiles (default: bounded by cores and memory)")
    b.add_argument("--out", help="artifact folder (default: QGEMM_CACHE_DIR or ~/.cache/qgemm)")
    b.set_defaults(func=cmd_build)

    ls = sub.add_parser("list", help="list the catalog's kernel names")
    selection(ls)
    ls.set_defaults(func=cmd_list)

    r = sub.add_parser("render", help="write every catalog kernel's source into generated/ (no nvcc)")
    r.add_argument("--out", help="folder (default: the source tree's generated/)")
    r.set_defaults(func=cmd_render)

    c = sub.add_parser("check", help="exit 1 unless generated/ matches the templates and catalog")
    c.add_argument("--out", help="folder (default: the source tree's generated/)")
    c.set_defaults(func=cmd_check)

    cache = sub.add_parser("cache", help="the kernel cache: path, list, clean")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True)
    cache_sub.add_parser("path", help="print the cache folder (QGEMM_CACHE_DIR or ~/.cache/qgemm)")
    for name, help_text in (("list", "list cached kernel builds with size, build time and digest check"),
                            ("clean", "remove cached kernel builds (all of them unless selected)")):
        sp = cache_sub.add_parser(name, help=help_text)
        selection(sp, sm_default=None)
        if name == "clean":
            sp.add_argument("--damaged", action="store_true", help="only builds that fail their digest check")
    cache.set_defaults(func=cmd_cache)

    bn = sub.add_parser("bench", help="time a kernel family on this GPU against its peers (table, JSON, PNG)",
                        description="Time FAMILY on the current GPU against its peers (cuBLAS, cuBLASLt, "
                        "torch._int_mm, tinygemm, cuDNN, the bandwidth floor) under CUDA graphs, with the weights "
                        "rotated through >= 4x the L2 size; print the table, write bench_FAMILY.json and "
                        "bench_FAMILY.png (speedup against the FP16/BF16 peer versus M) into --out.")
    bn.add_argument("family", choices=BENCH_FAMILIES)
    bn.add_argument("--shapes", metavar="SHAPES", help="';'-separated shapes: 'N,K;N,K' for GEMMs; for conv "
                    "families ResNet-50 layer names or 'size,ci,co,k,stride,padding' (default: the family's set)")
    bn.add_argument("--m", metavar="M,...", help="comma-separated M values (batch sizes for conv families)")
    bn.add_argument("--dtype", choices=("f16", "bf16"), help="activations and the cuBLAS/cuDNN peer "
                    "(default f16; bf16 for fp8)")
    bn.add_argument("--out", default=".", help="folder for bench_FAMILY.json/.png (default: the current one)")
    bn.add_argument("--no-plot", action="store_true", help="skip the PNG (needs no matplotlib)")
    bn.add_argument("--warm", action="store_true", help="also report the L2-warm times (one weight copy)")
    bn.set_defaults(func=cmd_bench)
    return p


class _StderrHandler(logging.Handler):
    """Writes to whatever sys.stderr is at the time (pytest's capture swaps it between tests)."""

    def emit(self, record):
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def _cli_logging():
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    previous_level, previous_propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
        logger.propagate = previous_propagate


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from .build import BuildError, UnsafeCacheError
    from .toolchain import TargetDetectionError, ToolchainError

    with _cli_logging():
        try:
            return args.func(args)
        except (BuildError, ToolchainError, TemplatesNotFoundError, UnsafeCacheError, TargetDetectionError,
                ValueError, OSError) as e:
            logger.error("qgemm %s: %s", args.command, e)
            return EXIT_FAILURE
        except ImportError as e:
            logger.error("qgemm %s: %s (rendering kernels needs jinja2: pip install jinja2)", args.command, e)
            return EXIT_FAILURE
        except KeyboardInterrupt:
            logger.error("qgemm %s: interrupted", args.command)
            return EXIT_INTERRUPTED
        except SystemExit as e:
            if e.code == EXIT_TERMINATED:
                logger.error("qgemm %s: terminated", args.command)
            raise


if __name__ == "__main__":
    sys.exit(main())
