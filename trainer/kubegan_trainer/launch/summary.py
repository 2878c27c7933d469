"""What `kubegan run` prints while and after training: the progress bar, the summary table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubegan_trainer.worker.worker_metrics import usable_rows


def progress_bar(epoch: int, epochs: int, step: int, steps: int, width: int = 30) -> str:
    frac = 0.0 if steps <= 0 else min(1.0, step / steps)
    filled = round(frac * width)
    return f"epoch {epoch}/{epochs} [{'#' * filled}{'.' * (width - filled)}] {step}/{steps} steps"


def progress_bar_for(progress: dict[str, Any]) -> str | None:
    """The bar for rank 0's progress.json while it is running, or None when it is not
    running or its fields are not what the trainer writes (a file left by someone else)."""
    if progress.get("state") != "running":
        return None
    fields = [progress.get(k) for k in ("epoch", "epochs", "step", "steps")]
    if fields[2] is None:
        fields[2] = 0
    if not all(type(v) is int and 0 <= v <= 10**12 for v in fields) or not fields[3]:
        return None
    return progress_bar(*fields)


def summary_table(records: Sequence[object], unreadable_lines: int = 0) -> str:
    """Epoch table with totals; `records` are metrics.jsonl rows, of any shape: rows that
    are not usable epochs (a hand-edited or older file) are left out and counted in one
    note line under the table, with `unreadable_lines` (lines that were not JSON objects)."""
    usable = usable_rows(records, unreadable_lines)
    table = _table(usable.rows)
    note = usable.note()
    return f"{table}\n{note}" if note else table


def _table(records: Sequence[dict[str, Any]]) -> str:
    """The table of rows already checked by metrics.usable_rows."""
    # One column per quality metric the run reported (quality.py; none for older runs).
    metrics = list(dict.fromkeys(k for r in records for k in r.get("quality") or {}))
    head = ("epoch", "seconds", "samples/s", "g_loss", "d_loss", "cost $", *metrics)
    rows = [
        (
            str(r["epoch"]),
            f"{r['epoch_seconds']:.2f}",
            f"{r['samples_per_second']:.1f}",
            f"{r['g_loss']:.4f}",
            f"{r['d_loss']:.4f}",
            f"{r['cost_dollars']:.4f}",
            *(_quality(r, m) for m in metrics),
        )
        for r in records
    ]
    if records:
        total_s = sum(r["epoch_seconds"] for r in records)
        total_c = sum(r["cost_dollars"] for r in records)
        mean_sps = sum(r["samples_per_second"] for r in records) / len(records)
        blank = ("",) * len(metrics)
        rows.append(
            ("total", f"{total_s:.2f}", f"{mean_sps:.1f}", "", "", f"{total_c:.4f}", *blank)
        )
    # A list, not max(a, *b): with no rows (every row malformed) that was max(int).
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in rows]
    return "\n".join(lines)


def _quality(rec: dict[str, Any], metric: str) -> str:
    value = (rec.get("quality") or {}).get(metric)
    return "" if value is None else f"{value:.4g}"
