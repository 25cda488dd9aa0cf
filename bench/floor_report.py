"""turngate beside the floor of its turn shape, and the targets measured against it.

Targets (a quiet machine; medians of 3 runs decide, one run prints its own verdict):
API+worker CPU per turn at most 25 ms above the floor's SDK CPU, Temporal server CPU per turn at
most 1.1x the floor's, 8-client throughput at least 0.85x the floor's; with ``--dbl`` also
throughput at least 0.8x the DBL gateway's, an 8-client p99 below its, a sequential p50 at most
0.75x its.
"""

from __future__ import annotations

from typing import Any

SDK_MARGIN_MS = 25.0
SERVER_RATIO = 1.1
THROUGHPUT_RATIO = 0.85
DBL_THROUGHPUT_RATIO = 0.8
DBL_P50_RATIO = 0.75


def _exact(ours: float | None, floor: float | None) -> float | None:
    return ours / floor if ours is not None and floor else None


def _ratio(ours: float | None, floor: float | None) -> float | None:
    exact = _exact(ours, floor)
    return None if exact is None else round(exact, 2)


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _events(history: Any) -> float | None:
    return history.get("median") if isinstance(history, dict) else None


def side_by_side(results: dict[str, Any], shape: str) -> list[tuple[str, Any, Any, Any]]:
    """(figure, turngate, floor, turngate/floor) rows for the floor of ``shape``."""
    floor = results["floor"][shape]
    conc, seq = results.get("concurrent", {}), results.get("sequential", {})
    cpu = conc.get("cpu_ms_per_turn", {})
    rows = [
        ("8-client turns/s", conc.get("turns_per_s"), floor["turns_per_s"]),
        ("8-client p99 ms", conc.get("latency_ms", {}).get("p99"), floor["latency_ms"]["p99"]),
        ("sequential p50 ms", seq.get("latency_ms", {}).get("p50"), floor["sequential_latency_ms"]["p50"]),
        ("CPU ms/turn API+worker | SDK", cpu.get("turngate"), floor["cpu_ms_per_turn"]["sdk"]),
        ("  of it: API (+worker)", cpu.get("api"), None),
        ("  of it: worker processes", cpu.get("workers"), None),
        ("CPU ms/turn Temporal server", cpu.get("temporal"), floor["cpu_ms_per_turn"]["temporal"]),
        (
            "history events/turn",
            _events(seq.get("history_events_per_turn")),
            _events(floor["history_events_per_turn"]),
        ),
    ]
    return [(name, ours, theirs, _ratio(ours, theirs)) for name, ours, theirs in rows]


def targets(results: dict[str, Any], shape: str) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) per target; met is None when a figure is missing."""
    floor = results["floor"][shape]
    conc = results.get("concurrent", {})
    cpu = conc.get("cpu_ms_per_turn", {})
    rows: list[tuple[str, str, bool | None]] = []
    ours, sdk = cpu.get("turngate"), floor["cpu_ms_per_turn"]["sdk"]
    over = None if ours is None else ours - sdk
    rows.append(
        (
            f"API+worker CPU/turn <= floor SDK + {SDK_MARGIN_MS:g} ms",
            "-" if over is None else f"{over:+.1f} ms",
            _le(over, SDK_MARGIN_MS),
        )
    )
    server = _exact(cpu.get("temporal"), floor["cpu_ms_per_turn"]["temporal"])
    rows.append((f"Temporal CPU/turn <= {SERVER_RATIO}x floor", _shown(server), _le(server, SERVER_RATIO)))
    tput = _exact(conc.get("turns_per_s"), floor["turns_per_s"])
    rows.append((f"8-client turns/s >= {THROUGHPUT_RATIO}x floor", _shown(tput), _ge(tput, THROUGHPUT_RATIO)))
    dbl = results.get("dbl_side_by_side", {}).get("figures")
    if dbl:
        tput = dbl["concurrent_turns_per_s"]["ratio"]
        p99 = dbl["concurrent_p99_ms"]["ratio"]
        p50 = dbl["sequential_p50_ms"]["ratio"]
        rows.append(
            (f"8-client turns/s >= {DBL_THROUGHPUT_RATIO}x DBL", f"{tput}x", _ge(tput, DBL_THROUGHPUT_RATIO))
        )
        rows.append(("8-client p99 < DBL", f"{p99}x", None if p99 is None else p99 < 1.0))
        rows.append((f"sequential p50 <= {DBL_P50_RATIO}x DBL", f"{p50}x", _le(p50, DBL_P50_RATIO)))
    return rows


def _le(value: float | None, bound: float) -> bool | None:
    return None if value is None else value <= bound


def _ge(value: float | None, bound: float) -> bool | None:
    return None if value is None else value >= bound


def _cell(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float | int) else str(value)


def render(results: dict[str, Any], shape: str) -> str:
    lines = ["floor shapes (bare workflows, same dev server flags):"]
    lines.append(f"{'shape':<40}{'turns/s':>9}{'p50':>8}{'SDK ms':>8}{'srv ms':>8}{'events':>8}")
    for label, run in results["floor"].items():
        cells = [
            run["turns_per_s"],
            run["sequential_latency_ms"]["p50"],
            run["cpu_ms_per_turn"]["sdk"],
            run["cpu_ms_per_turn"]["temporal"],
            _events(run["history_events_per_turn"]),
        ]
        lines.append(
            f"{label:<40}" + "".join(f"{_cell(c):>{w}}" for c, w in zip(cells, (9, 8, 8, 8, 8), strict=True))
        )
    lines.append("")
    lines.append(f"turngate beside the floor of its shape ({shape}):")
    lines.append(f"{'figure':<32}{'turngate':>10}{'floor':>8}{'ratio':>7}")
    for name, ours, theirs, ratio in side_by_side(results, shape):
        lines.append(f"{name:<32}{_cell(ours):>10}{_cell(theirs):>8}{_cell(ratio):>7}")
    lines.append("")
    for name, measured, met in targets(results, shape):
        verdict = "----" if met is None else "PASS" if met else "FAIL"
        lines.append(f"{verdict}  {name}: {measured}")
    return "\n".join(lines)
