"""Problem slots named once (cutlass_gen.spec.Slots): every template's and header's slot use agrees
with its family's declaration, and the plans write slots only by name.

Each family's spec declares SLOTS; plans write through Plan._set (by name) and the templates read
the indices as `{{ slot.ptr.out }}`. Checked here, from the sources:
* no template indexes a problem array with a literal in code (only through `slot.`), and every
  `slot.<array>.<name>` it names is declared;
* every index a template's slot comment names (`ptr[5]`, `ext[2..4]`, ...) is declared, and every
  slot the rendered kernel reads is named in that comment (the comments document the declaration);
* templates/include/qgemm/conv/slots.h, the int8 convolutions' reader, reads and documents exactly
  the declared ext and scalar slots;
* no module under qgemm/ writes `p.ptr[i]`, `p.ext[i]`, `p.ld[i]` or `p.scalar[i]` (plan_launch's
  fallback in _runtime.py aside).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from cutlass_gen.catalog import catalog
from cutlass_gen.families import FAMILIES
from cutlass_gen.families.conv import CONV_INT8_SLOTS
from cutlass_gen.paths import REPO_ROOT, templates_dir
from cutlass_gen.render import render
from cutlass_gen.spec import Slots

ARRAYS = "ptr|ld|ext|scalar"
TEMPLATES = sorted({cls.template: cls for cls in FAMILIES.values()}.items())


def _comment_indices(text: str) -> set[tuple[str, int]]:
    """(array, index) of every slot a comment names: ptr[5], ptr[2..4], scalar[0..1]."""
    found = set()
    for line in text.splitlines():
        _, sep, comment = line.partition("//")
        if not sep:
            continue
        for array, first, last in re.findall(rf"\b({ARRAYS})\[(\d+)(?:\.\.(\d+))?\]", comment):
            found |= {(array, i) for i in range(int(first), int(last or first) + 1)}
    return found


def _declared(slots: Slots) -> set[tuple[str, int]]:
    return {(array, i) for array in Slots.ARRAYS for i in getattr(slots, array).declared()}


def _code(text: str) -> str:
    return "\n".join(line.partition("//")[0] for line in text.splitlines())


@pytest.mark.parametrize("template,spec_cls", TEMPLATES, ids=[t for t, _ in TEMPLATES])
def test_template_slots_match_the_declaration(template, spec_cls):
    text = (templates_dir() / template).read_text()
    slots = spec_cls.SLOTS
    literal = re.findall(rf"\bp\.({ARRAYS})\[\s*\d", _code(text))
    assert not literal, f"{template} indexes problem arrays with literals: {literal}; use {{{{ slot.<array>.<name> }}}}"
    for array, name in re.findall(rf"\bslot\.({ARRAYS})\.(\w+)", text):
        assert name in getattr(slots, array)._index, f"{template}: slot.{array}.{name} is not declared"
    documented = _comment_indices(text)
    undeclared = documented - _declared(slots)
    assert not undeclared, f"{template} documents slots its family does not declare: {sorted(undeclared)}"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_rendered_kernels_read_documented_slots(family):
    """What each rendered kernel of the catalog reads is declared, and named in the slot comment
    (its template's, or slots.h for the int8 convolutions)."""
    specs = [s for sm in (75, 80, 90) for s in catalog(sm, family)]
    if not specs:
        pytest.skip(f"no catalog kernel of {family}")
    slots = FAMILIES[family].SLOTS
    spec = specs[0]
    source = render(spec).source
    read = {(a, int(i)) for a, i in re.findall(rf"\bp\.({ARRAYS})\[(\d+)\]", _code(source))}
    assert read <= _declared(slots), f"{spec.name} reads undeclared slots {sorted(read - _declared(slots))}"
    # The comments of the template (all its branches: a symmetric kernel's source omits the
    # asymmetric slots' lines, not the code that checks them).
    documented = _comment_indices((templates_dir() / spec.template).read_text())
    if "qgemm/conv/slots.h" in source:
        documented |= _comment_indices((templates_dir() / "include/qgemm/conv/slots.h").read_text())
    assert read <= documented, f"{spec.name} reads slots its comment does not name: {sorted(read - documented)}"


def test_conv_slots_header_reads_the_declaration():
    text = (templates_dir() / "include/qgemm/conv/slots.h").read_text()
    read = {(a, int(i)) for a, i in re.findall(rf"\bp\.({ARRAYS})\[(\d+)\]", _code(text))}
    declared_ext_scalar = {(a, i) for a, i in _declared(CONV_INT8_SLOTS) if a in ("ext", "scalar")}
    assert read == declared_ext_scalar
    assert _comment_indices(text) == _declared(CONV_INT8_SLOTS)


def test_slot_names_resolve_and_write():
    from qgemm._abi import QgemmProblem

    slots = FAMILIES["fp8_blockwise_gemm"].SLOTS
    assert (slots.ptr.out, slots.ld.ld_sx, slots.ext.splits) == (5, 2, 2)
    p = QgemmProblem()
    slots.write(p, out=0x1000, ld_sx=8, splits=3)
    assert (p.ptr[5], p.ld[2], p.ext[2]) == (0x1000, 8, 3)
    with pytest.raises(KeyError, match="no slot named 'nope'"):
        slots.write(p, nope=1)
    with pytest.raises(AttributeError, match="no ptr slot named 'nope'"):
        slots.ptr.nope
    with pytest.raises(ValueError, match="declared twice"):
        Slots(ptr=("x",), ld=("x",))


def test_plans_write_slots_by_name():
    raw = re.compile(rf"\.({ARRAYS})\[")
    offenders = []
    for path in sorted((REPO_ROOT / "qgemm").rglob("*.py")):
        if path.name in ("_runtime.py", "_abi.py"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if raw.search(line.partition("#")[0]):
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    assert not offenders, "raw slot indices in plans:\n" + "\n".join(offenders)
