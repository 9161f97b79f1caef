"""`qgemm` command line: render, list, check and build the kernel catalog."""
from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

from .catalog import catalog, families
from .paths import generated_dir
from .render import render
from .specs import SUPPORTED_TARGETS, KernelSpec


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
    for spec in _select(args.sm, args.family, args.kernels):
        print(spec.name)
    return 0


def cmd_render(args) -> int:
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
    return 0


def cmd_check(args) -> int:
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
        print("\n".join(problems), file=sys.stderr)
        print("generated/ is not current: run `qgemm render`", file=sys.stderr)
        return 1
    print(f"generated/ is current ({len(expected)} kernels)")
    return 0


def cmd_build(args) -> int:
    from .build import build_many, cache_root, write_manifest

    root = Path(args.out).resolve() if args.out else cache_root()
    specs = _select(args.sm, args.family, args.kernels)
    if not specs:
        print(f"no kernels match family={args.family} kernels={args.kernels} for sm{args.sm}", file=sys.stderr)
        return 1
    artifacts = build_many(specs, args.sm, jobs=args.jobs, root=root)
    manifest = write_manifest(artifacts, args.sm, root)
    print(f"manifest: {manifest}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="qgemm", description="Generate and build qgemm's CUTLASS kernels.")
    sub = p.add_subparsers(dest="command", required=True)

    def selection(sp, sm_required=True):
        sp.add_argument("--sm", type=int, choices=SUPPORTED_TARGETS, required=sm_required, help="target SM")
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
    r.add_argument("--out", help="folder (default: generated/)")
    r.set_defaults(func=cmd_render)

    c = sub.add_parser("check", help="exit 1 unless generated/ matches the templates and catalog")
    c.add_argument("--out", help="folder (default: generated/)")
    c.set_defaults(func=cmd_check)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from .build import BuildError
    from .toolchain import ToolchainError

    try:
        return args.func(args)
    except (BuildError, ToolchainError, ValueError) as e:
        print(f"qgemm {args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
