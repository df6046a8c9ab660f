"""Verdicts from repeated, paired runs: on a busy host one run is not a measurement.

Every round runs each policy once; the order rotates (round r starts at policy r mod P), so no
policy always runs first on a cold host or last on a hot one. For each baseline, each round gives
the ratio baseline / MARS on mean and on p95 E2E (> 1: MARS is faster, as `metrics.speedups`),
and `best` is the round's best baseline (lowest mean, resp. lowest p95) over MARS. Over the rounds
we report the median ratio and a 90 % bootstrap interval of that median (rounds resampled with a
fixed seed, so the same rounds always give the same interval), and a verdict (`RULE`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mars_openhands.core.registry import is_mars_variant

LEVEL = 0.90
RESAMPLES = 4000
SEED = 20261205
#: MARS' median ratio must reach this on mean and p95 ...
PAR = 1.00
#: ... and no interval may lie wholly below this.
FLOOR = 0.95
BEST = "best"
RULE = (f"verdict: ahead = the {LEVEL:.0%} interval's low end >= {PAR:.2f} on mean and p95; behind = a median "
        f"ratio < {PAR:.2f} or an interval wholly below {FLOOR:.2f}, on mean or p95; tie = otherwise "
        f"(ratio = baseline / MARS latency, > 1: MARS faster)")


def rotation(policies: Sequence[str], rounds: int) -> list[list[str]]:
    """Each round's run order: round r starts at policy r mod P, in the given cyclic order."""
    p = list(policies)
    return [p[r % len(p):] + p[:r % len(p)] for r in range(rounds)] if p else [[] for _ in range(rounds)]


@dataclass(frozen=True)
class RatioStats:
    """One comparison on one metric over the rounds."""

    rounds: tuple[float | None, ...]     # each round's ratio (None: a run without a value)
    median: float
    low: float                           # the bootstrap interval of the median
    high: float

    def as_dict(self) -> dict[str, Any]:
        return {"rounds": [None if r is None else round(r, 4) for r in self.rounds],
                "median": round(self.median, 4), "low": round(self.low, 4), "high": round(self.high, 4)}


def bootstrap_interval(values: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES,
                       seed: int = SEED) -> tuple[float, float]:
    """The `level` percentile interval of the median of `values` resampled with replacement."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError("bootstrap_interval: no values")
    idx = np.random.default_rng(seed).integers(0, arr.size, size=(resamples, arr.size))
    medians = np.median(arr[idx], axis=1)
    tail = (1.0 - level) / 2
    low, high = np.quantile(medians, [tail, 1.0 - tail])
    return float(low), float(high)


def ratio_stats(ratios: Sequence[float | None]) -> RatioStats | None:
    """Median and interval over the rounds that have a ratio (None if none has)."""
    values = [r for r in ratios if r is not None]
    if not values:
        return None
    low, high = bootstrap_interval(values)
    return RatioStats(tuple(ratios), float(np.median(values)), low, high)


def verdict(mean: RatioStats | None, p95: RatioStats | None) -> str:
    """`RULE`: 'ahead', 'tie' or 'behind' ('-' without ratios on both metrics)."""
    if mean is None or p95 is None:
        return "-"
    both = (mean, p95)
    if any(s.median < PAR or s.high < FLOOR for s in both):
        return "behind"
    if all(s.low >= PAR for s in both):
        return "ahead"
    return "tie"


@dataclass(frozen=True)
class Comparison:
    """MARS against one baseline (or `best`) over the rounds."""

    baseline: str
    mean: RatioStats | None
    p95: RatioStats | None

    @property
    def verdict(self) -> str:
        return verdict(self.mean, self.p95)

    def as_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.as_dict() if self.mean else None,
                "p95": self.p95.as_dict() if self.p95 else None, "verdict": self.verdict}


def _ratio(base: float | None, x: float | None) -> float | None:
    return None if base is None or not x else base / x


def _best(summaries: Mapping[str, Mapping[str, Any]], baselines: Sequence[str], key: str) -> float | None:
    vals = [summaries[b][key] for b in baselines if b in summaries and summaries[b].get(key) is not None]
    return min(vals) if vals else None


def reference_policy(policies: Sequence[str]) -> str | None:
    """The policy the baselines are compared with: `mars` if it ran, else the first MARS variant."""
    return "mars" if "mars" in policies else next((p for p in policies if is_mars_variant(p)), None)


def compare(rounds: Sequence[Mapping[str, Mapping[str, Any]]], reference: str,
            baselines: Sequence[str]) -> list[Comparison]:
    """`reference` against each baseline and against each round's best baseline (with two or more).

    `rounds`: per round, {policy: summary} with `mean_e2e_s` and `p95_e2e_s` (None: not completed)."""
    out = []
    for b in list(baselines) + ([BEST] if len(baselines) > 1 else []):
        stats = []
        for key in ("mean_e2e_s", "p95_e2e_s"):
            ratios = [_ratio(_best(r, baselines, key) if b == BEST else r.get(b, {}).get(key),
                             r.get(reference, {}).get(key)) for r in rounds]
            stats.append(ratio_stats(ratios))
        out.append(Comparison(b, stats[0], stats[1]))
    return out


def median_summary(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per field, the median over the rounds of a policy's summaries (numbers only; else the first)."""
    out: dict[str, Any] = {}
    for key, first in summaries[0].items():
        vals = [s.get(key) for s in summaries]
        nums = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if nums and len(nums) == len(vals):
            m = float(np.median(nums))
            out[key] = int(round(m)) if all(isinstance(v, int) for v in nums) else round(m, 4)
        else:
            out[key] = first if len(set(map(repr, vals))) == 1 else None
    return out


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max) of `values`."""
    arr = np.asarray(values, dtype=float)
    return float(np.median(arr)), float(arr.min()), float(arr.max())


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def verdict_table(comparisons: Sequence[Comparison], reference: str) -> str:
    """One row per baseline: every round's ratio, the median and interval on mean and p95, the verdict."""
    header = ["baseline / " + reference, "rounds (mean)", "median [90% CI] mean",
              "rounds (p95)", "median [90% CI] p95", "verdict"]

    def cells(s: RatioStats | None) -> list[str]:
        if s is None:
            return ["-", "-"]
        return [" ".join(_fmt(r) for r in s.rounds), f"{s.median:.2f}x [{s.low:.2f}, {s.high:.2f}]"]

    rows = [[c.baseline, *cells(c.mean), *cells(c.p95), c.verdict] for c in comparisons]
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]

    def line(cs: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cs, widths)))

    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows] + [RULE])
