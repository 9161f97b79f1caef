"""Render a spec through its family's Jinja2 template into one .cu source.

StrictUndefined makes a template that names a missing spec field fail loudly at
render time rather than emit broken C++.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from .paths import templates_dir
from .spec import KernelSpec


@dataclass(frozen=True)
class RenderedKernel:
    spec: KernelSpec
    source: str

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def filename(self) -> str:
        return f"{self.spec.name}.cu"


def _cpp_string(text: str) -> str:
    # JSON string escaping is valid C++ for ASCII text.
    if not text.isascii():
        raise ValueError(f"C++ string literal must be ASCII, got {text!r}")
    return json.dumps(text)


@functools.lru_cache(maxsize=None)
def _environment(root: str):
    # Imported here, not at module level: loading a kernel that is already built needs
    # neither jinja2 nor the templates (cutlass_gen.build.find_artifact).
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(root),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=False,
    )
    env.filters["cpp_string"] = _cpp_string
    return env


@functools.lru_cache(maxsize=None)
def render(spec: KernelSpec) -> RenderedKernel:
    template = _environment(str(templates_dir())).get_template(spec.template)
    source = template.render(
        spec=spec,
        name=spec.name,
        template=spec.template,
        spec_json=spec.to_json(),
        spec_repr=repr(spec),
        slot=spec.SLOTS,
        **spec.template_context(),
    )
    return RenderedKernel(spec=spec, source=source)


# The namespace every bundle-safe template puts its kernel in (see KernelSpec.bundles and bundle_key).
KERNEL_NAMESPACE = "qgemm_kernel"


def render_bundle(kernels: list[RenderedKernel]) -> str:
    """One translation unit compiling several kernels of one family, so that nvcc parses the
    headers and instantiates the templates they share once (three Sm90 W8A8 kernels: 118 s
    together against 77 s for one alone). Each kernel's source goes in unchanged; a macro renames
    its namespace, so that their Adapters and types do not collide. The exported symbols already
    carry each kernel's name (abi.h), and the library-wide ones come from abi_exports.h once."""
    for k in kernels:
        if not k.spec.bundles:
            raise ValueError(f"kernels: {k.name} cannot share a translation unit "
                             f"({type(k.spec).__name__}.bundles is False)")
        if f"namespace {KERNEL_NAMESPACE} {{" not in k.source:
            raise ValueError(f"kernels: {k.name}'s source has no `namespace {KERNEL_NAMESPACE}`")
    keys = sorted({k.spec.bundle_key for k in kernels})
    if len(keys) > 1:
        raise ValueError(f"kernels: a bundle takes kernels of one bundle_key (template, and what else the "
                         f"family's template makes global to the unit), got {keys}")
    parts = [f"// qgemm bundle: {len(kernels)} kernels in one translation unit (cutlass_gen/render.py).\n"]
    for i, k in enumerate(kernels):
        parts.append(f"\n// ---- {k.name}\n#define {KERNEL_NAMESPACE} {KERNEL_NAMESPACE}_{i}\n")
        parts.append(k.source)
        parts.append(f"\n#undef {KERNEL_NAMESPACE}\n")
    return "".join(parts)
