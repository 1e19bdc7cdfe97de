"""Which loaders the per-loader table shows, for any number of loaders (a test suite makes
hundreds of short-lived ones): the loaders a finding names first, then the busiest (most
batches seen), at most MAX_SHOWN columns; the rest in one summary line (how many, their
batches, their ids). The terminal and HTML reports render the same choice."""

from __future__ import annotations

MAX_SHOWN = 6  # columns that fit a 110-column terminal beside the row labels
MAX_SHOWN_HTML = 12  # a browser page is wider
LABEL_WIDTH = 32  # the row labels' column, with its padding
COLUMN_WIDTH = 12  # one loader's column ("loader 300", "12.34/56.78"), with its padding


def fits(width: int) -> int:
    """Loader columns a terminal `width` characters wide shows (1 at least)."""
    return max(1, min(MAX_SHOWN, (int(width) - LABEL_WIDTH) // COLUMN_WIDTH))


MAX_RANGES = 8  # id ranges named in the summary line before "..."


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def _ranges(ids: list[int]) -> str:
    out: list[str] = []
    ids = sorted(ids)
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    if len(out) > MAX_RANGES:
        out = out[:MAX_RANGES] + ["..."]
    return ", ".join(out)


def pick(
    loaders: list[dict], findings: list[dict], limit: int = MAX_SHOWN
) -> tuple[list[dict], str | None]:
    """(the loaders to show, at most `limit`, in that order; the line that sums up the others,
    or None)."""
    loaders = list(loaders or [])
    if len(loaders) <= limit:
        return loaders, None
    named = {f.get("loader") for f in findings or () if isinstance(f.get("loader"), int)}
    order = sorted(
        range(len(loaders)),
        key=lambda i: (
            loaders[i].get("id") not in named,
            -_num(loaders[i].get("batches")),
            -_num(loaders[i].get("data_stall_pct")),
            i,
        ),
    )
    shown = [loaders[i] for i in order[:limit]]
    rest = [loaders[i] for i in order[limit:]]
    batches = [int(_num(ld.get("batches"))) for ld in rest]
    ids = [ld["id"] for ld in rest if isinstance(ld.get("id"), int)]
    line = (
        f"{len(rest)} more loaders not shown (the table shows those the findings name, then "
        f"the busiest): {sum(batches)} batches in all, {min(batches)} to {max(batches)} each"
    )
    if ids:
        line += f"; loaders {_ranges(ids)}"
    return shown, line
