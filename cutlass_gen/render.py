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
