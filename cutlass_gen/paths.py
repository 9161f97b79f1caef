"""Where the project's templates and its own CUTLASS extensions live.

The top-level `templates/` folder of the source tree is the one source. A wheel or
sdist install carries a copy of it as package data, `cutlass_gen/_templates`, made
at build time by setup.py (never written into the source tree). Lookup order:

1. QGEMM_TEMPLATES, when set (an explicit override is never second-guessed);
2. the packaged copy `cutlass_gen/_templates` (an installed wheel);
3. the source tree's `templates/` (a clone, or an editable install).

The packaged copy comes first because an installed package's parent folder is
site-packages, where an unrelated `templates/` folder may exist.
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
PACKAGED_TEMPLATES = PACKAGE_DIR / "_templates"
SOURCE_TEMPLATES = REPO_ROOT / "templates"

# A folder holds qgemm's templates when it has this file (every family template includes it).
_MARKER = "header.j2"


class TemplatesNotFoundError(RuntimeError):
    """Neither the packaged templates nor a source tree's templates/ can be found."""


def _holds_templates(path: Path) -> bool:
    return (path / _MARKER).is_file() and (path / "include" / "qgemm").is_dir()


def in_source_tree() -> bool:
    """True when running from a clone (or an editable install) rather than an installed wheel."""
    return _holds_templates(SOURCE_TEMPLATES) and (REPO_ROOT / "pyproject.toml").is_file()


def templates_dir() -> Path:
    """The Jinja2 templates (and, under include/, the extension headers)."""
    override = os.environ.get("QGEMM_TEMPLATES")
    if override:
        path = Path(override).expanduser()
        if not _holds_templates(path):
            raise TemplatesNotFoundError(
                f"QGEMM_TEMPLATES={override} does not hold qgemm's templates "
                f"(expected {_MARKER} and include/qgemm/ there); unset it to use the installed copy")
        return path
    for path in (PACKAGED_TEMPLATES, SOURCE_TEMPLATES):
        if _holds_templates(path):
            return path
    raise TemplatesNotFoundError(
        f"qgemm's kernel templates are missing: looked in {PACKAGED_TEMPLATES} (installed package) and "
        f"{SOURCE_TEMPLATES} (source tree). Reinstall qgemm from a wheel or sdist built by its setup.py "
        f"(`pip install qgemm` or `pip install <clone>`), or set QGEMM_TEMPLATES to a clone's templates/ folder. "
        f"Kernels already in the cache still load without templates.")


def extensions_include_dir() -> Path:
    """qgemm's own CUTLASS extensions (#include "qgemm/...")."""
    return templates_dir() / "include"


def generated_dir() -> Path:
    """The committed rendered sources; only a source tree has them."""
    if not in_source_tree():
        raise TemplatesNotFoundError(
            "generated/ belongs to a source tree and this qgemm is an installed package: pass --out FOLDER")
    return REPO_ROOT / "generated"
