"""What the per-family benchmark modules share: shape parsing, building plans that may not apply to
this GPU, prebuilding their kernels, ratios."""
from __future__ import annotations

import logging
import math
from typing import Callable

logger = logging.getLogger("qgemm")


def parse_ints(text: str, what: str, count: int | None = None, minimum: int = 1) -> tuple[int, ...]:
    """'4096,4096' -> (4096, 4096); ValueError naming `what` and the text otherwise."""
    try:
        values = tuple(int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        values = ()
    if not values or any(v < minimum for v in values) or (count is not None and len(values) != count):
        kind = "positive integers" if minimum == 1 else f"integers >= {minimum}"
        need = f"{count} {kind}" if count else kind
        raise ValueError(f"{what}: expected {need} separated by ',' (e.g. '4096,4096'), got {text!r}")
    return values


def ratio(num, den) -> float:
    """num / den, NaN where either is missing or NaN (a peer or a kernel that did not run)."""
    if num is None or den is None or not den or math.isnan(num) or math.isnan(den):
        return math.nan
    return num / den


def try_make(what: str, make: Callable):
    """make(), or None (with the reason logged) where the plan does not apply to this GPU or shape:
    its columns are then left empty instead of ending the run."""
    try:
        return make()
    except Exception as e:  # noqa: BLE001 -- any failure of one contender leaves a gap, not a crash
        logger.warning("  (%s unavailable: %s)", what, str(e).splitlines()[0][:160] if str(e) else type(e).__name__)
        return None


def prebuild(plans, ms) -> None:
    """Build the kernels `plans` will pick at `ms` up front, in parallel, so no timing waits on nvcc
    one kernel at a time. Failures are logged; the plans' calls then fail and leave NaN."""
    import qgemm

    plans = [p for p in plans if p is not None]
    if not plans:
        return
    try:
        qgemm.prebuild(plans, m_values=tuple(ms), progress=lambda line: logger.debug("%s", line))
    except Exception as e:  # noqa: BLE001
        logger.warning("  (prebuild: %s)", str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
