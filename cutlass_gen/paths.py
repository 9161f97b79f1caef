"""Where the project's templates and its own CUTLASS extensions live."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def templates_dir() -> Path:
    """The Jinja2 templates; QGEMM_TEMPLATES overrides (for installs outside the repo)."""
    return Path(os.environ.get("QGEMM_TEMPLATES") or REPO_ROOT / "templates")


def extensions_include_dir() -> Path:
    """qgemm's own CUTLASS extensions (#include "qgemm/...")."""
    return templates_dir() / "include"


def generated_dir() -> Path:
    return REPO_ROOT / "generated"
