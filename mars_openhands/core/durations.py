"""Online per-tool duration prediction for KV retention (our rule; MARS' preview has none).

A tool call is keyed by its tool name and the class of its command (test, build, read, edit,
other) plus the program it runs. Each key keeps a log-spaced histogram of observed durations;
a key with few samples borrows from its parents (tool+class -> class -> all tools -> prior), so
the prediction is usable from the first call and sharpens as calls finish:

    F_key(t) = (count_key(d <= t) + w * F_parent(t)) / (n_key + w)

(a parent holding exactly its child's samples is skipped, so one sample is not counted twice).
The prior is a log-normal through the workload's global tool-time statistics (p50 0.3 s,
p90 13.6 s, TraceLab via docs/workload.md). A declared hint (`ToolStarted.expected_duration_s`, e.g. a
timeout or a class estimate) adds a log-normal around it with a fixed pseudo-count. Histograms
halve their counts past `max_samples` so old behaviour fades. Everything is O(bins) per query.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from itertools import accumulate

from mars_openhands.events import Event, SessionEnded, ToolCancelled, ToolFinished, ToolStarted

#: Tool-call durations measured on TraceLab's 432k coding-agent calls (docs/workload.md): the
#: predictor's prior and the synthetic generator's target (`mars_openhands.workload.synthetic`).
TOOL_P50_S, TOOL_P90_S, TOOL_P99_S = 0.3, 13.6, 216.0

#: What a tool call does, from its tool name and command text (`command_class`): the one vocabulary
#: of the duration predictor and of the recorded runs' tool statistics (evaluation/swebench).
COMMAND_CLASSES = ("test", "build", "read", "edit", "other")

_EDITOR_TOOLS = {"file_editor", "str_replace_editor", "str_replace_based_edit_tool", "edit_file",
                 "editor", "apply_patch"}
_NO_COMMAND_TOOLS = {"think", "finish", "task_tracker"}
_TEST = re.compile(r"\b(py\.?test|pytest|tox|nox|nosetests|unittest|runtests|bin/test|doctest|go test|"
                   r"cargo test|(npm|yarn|pnpm)( run)? test|make (check|test)|manage\.py test|"
                   r"ctest|mvn test|gradle test|jest|mocha)\b")
_BUILD = re.compile(r"\b(pip3? install|uv (pip|sync|add)|poetry (install|add|lock)|conda "
                    r"(install|create)|apt(-get)? install|(npm|yarn|pnpm) (install|ci|add)|make|"
                    r"cmake|cargo build|setup\.py|python3? -m build|mvn|gradle|gcc|g\+\+|"
                    r"go build|tsc)\b")
_EDIT = re.compile(r"(\bsed -i|\bperl -[a-z]*i|\btee\b|\bpatch\b|\bgit (apply|checkout|stash|"
                   r"restore|commit|add)\b|^\s*(mv|cp|rm|mkdir|touch)\b|\b(str_replace|create|"
                   r"insert|undo_edit|write)\b|(\becho|\bprintf|\bcat)\b[^|]*>)")
_READ = re.compile(r"^\s*(cat|ls|head|tail|grep|rg|ag|find|wc|tree|less|more|sed -n|awk|pwd|"
                   r"which|file|stat|du|view|git (diff|status|log|show|grep|blame))\b")
_SETUP_WORDS = {"cd", "export", "source", "set", "pushd", "popd"}
_PREFIX_WORDS = {"sudo", "env", "timeout", "time", "nice"}
_SEGMENTS = re.compile(r"&&|\|\||;|\n")


def command_class(tool_name: str, command: str | None) -> str:
    """One of COMMAND_CLASSES from what a real engine/agent sees: the tool name and command. Setup
    steps (`cd DIR &&`, `export`) are skipped: a workspace path such as `.../pytest-dev__pytest-1`
    says nothing about the command."""
    tool = tool_name.lower()
    cmd = (command or "").strip().lower()
    if tool in _NO_COMMAND_TOOLS:
        return "other"
    if tool in _EDITOR_TOOLS:
        return "read" if cmd.startswith("view") else "edit"
    if not cmd:
        return "other"
    segments = [s for s in _SEGMENTS.split(cmd) if s.strip()]
    work = " ; ".join(s for s in segments if s.split()[0] not in _SETUP_WORDS)
    if _TEST.search(work):
        return "test"
    if _BUILD.search(work):
        return "build"
    if _EDIT.search(work):
        return "edit"
    if segments and all(_READ.match(s) or s.split()[0] in _SETUP_WORDS for s in segments):
        return "read"
    return "other"


def program_of(command: str | None) -> str:
    """The program a command runs, skipping `cd`/`export` steps and `sudo`/`timeout N`/`VAR=x`
    prefixes (`cd r && python -m pytest x` -> `pytest`); targeted test runs (`::`, `-k`) are told
    apart from whole suites."""
    if not command:
        return ""
    for seg in _SEGMENTS.split(command.strip().lower()):
        words = seg.split()
        if not words or words[0] in _SETUP_WORDS:
            continue
        while words and (words[0] in _PREFIX_WORDS or "=" in words[0]
                         or words[0].replace(".", "").isdigit()):
            words = words[1:]
        if not words:
            continue
        prog = words[0].rsplit("/", 1)[-1]
        if prog.startswith("python") and len(words) > 2 and words[1] == "-m":
            prog = words[2]
        if "::" in seg or " -k " in seg:
            prog += ":targeted"
        return prog
    return ""


def _lognormal_cdf(t: float, median: float, sigma: float) -> float:
    if t <= 0:
        return 0.0
    return 0.5 * (1.0 + math.erf(math.log(t / median) / (sigma * math.sqrt(2.0))))


#: A histogram's key, most general first: ("*",), (class,), (tool, class), (tool, class, program).
_Key = tuple[str, ...]


class _Histogram:
    """Counts per log-spaced bin; bin i holds durations in (edge[i-1], edge[i]]."""

    __slots__ = ("counts", "n", "_cum")

    def __init__(self, bins: int) -> None:
        self.counts = [0.0] * bins
        self.n = 0.0
        self._cum: list[float] | None = None

    def add(self, i: int, max_samples: float) -> None:
        if self.n >= max_samples:
            self.counts = [c * 0.5 for c in self.counts]
            self.n *= 0.5
        self.counts[i] += 1.0
        self.n += 1.0
        self._cum = None

    def cum(self) -> list[float]:
        """Cumulative counts at each edge (the last bin is the overflow past the last edge)."""
        if self._cum is None:
            self._cum = list(accumulate(self.counts[:-1]))
        return self._cum


@dataclass(frozen=True, slots=True)
class DurationConfig:
    lo_s: float = 0.01
    hi_s: float = 3600.0
    bins_per_decade: int = 8
    prior_median_s: float = TOOL_P50_S
    prior_p90_s: float = TOOL_P90_S
    parent_weight: float = 4.0       # pseudo-samples a key borrows from its parent
    hint_weight: float = 4.0         # pseudo-samples of a declared duration hint
    hint_sigma: float = 0.7          # spread (log space) around a hint
    max_samples: float = 400.0       # past this a histogram halves (recency)


class DurationPredictor:
    """P(tool call returns within t) and quantiles per (tool, command class, program)."""

    def __init__(self, config: DurationConfig = DurationConfig()) -> None:
        c = config
        if not 0 < c.lo_s < c.hi_s or c.bins_per_decade <= 0:
            raise ValueError(f"DurationConfig: need 0 < lo_s < hi_s and bins_per_decade > 0, got {c}")
        self.config = c
        n_edges = int(math.ceil(math.log10(c.hi_s / c.lo_s) * c.bins_per_decade)) + 1
        self._log_lo = math.log10(c.lo_s)
        self.edges: list[float] = [c.lo_s * 10 ** (i / c.bins_per_decade) for i in range(n_edges)]
        self._bins = n_edges + 1
        sigma = math.log(c.prior_p90_s / c.prior_median_s) / 1.2815515655446004
        self._prior = [_lognormal_cdf(t, c.prior_median_s, sigma) for t in self.edges]
        self._hists: dict[_Key, _Histogram] = {}
        self._hint_cache: dict[float, list[float]] = {}
        #: `cdf_at_edges` results since the last observation (every pin's pricing asks again)
        self._cdf_cache: dict[tuple[str | None, str | None, float | None], list[float]] = {}
        self._keys: dict[tuple[str, str | None], tuple[_Key, ...]] = {}

    # ---- learning ----------------------------------------------------------------------------

    def _bin(self, seconds: float) -> int:
        if seconds <= self.edges[0]:
            return 0
        i = int(math.ceil((math.log10(seconds) - self._log_lo) * self.config.bins_per_decade - 1e-9))
        return min(i, self._bins - 1)

    def keys(self, tool_name: str, command: str | None) -> tuple[_Key, ...]:
        """Keys from the most general to the most specific (memoised: a call is classified at
        its start, its repricing and its finish)."""
        keys = self._keys.get((tool_name, command))
        if keys is None:
            if len(self._keys) >= 4096:
                self._keys.clear()
            cls = command_class(tool_name, command)
            keys = self._keys[(tool_name, command)] = (
                ("*",), (cls,), (tool_name, cls), (tool_name, cls, program_of(command)))
        return keys

    def observe(self, tool_name: str, command: str | None, seconds: float) -> None:
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"DurationPredictor.observe: seconds must be finite and >= 0, got {seconds!r}")
        i, cap = self._bin(seconds), self.config.max_samples
        self._cdf_cache.clear()
        for key in self.keys(tool_name, command):
            h = self._hists.get(key)
            if h is None:
                h = self._hists[key] = _Histogram(self._bins)
            h.add(i, cap)

    def samples(self, tool_name: str, command: str | None) -> float:
        h = self._hists.get(self.keys(tool_name, command)[-1])
        return h.n if h is not None else 0.0

    # ---- prediction --------------------------------------------------------------------------

    def _hint_cdf(self, hint: float) -> list[float]:
        key = round(hint, 2)
        cdf = self._hint_cache.get(key)
        if cdf is None:
            if len(self._hint_cache) > 1024:
                self._hint_cache.clear()
            median = max(key, self.config.lo_s)
            cdf = self._hint_cache[key] = [_lognormal_cdf(t, median, self.config.hint_sigma)
                                           for t in self.edges]
        return cdf

    def cdf_at_edges(self, tool_name: str | None, command: str | None = None,
                     hint: float | None = None) -> list[float]:
        """P(duration <= edges[i]) for every edge; `tool_name=None`: no tool known yet (global).
        The list is shared until the next observation: read it, do not change it."""
        cached = self._cdf_cache.get((tool_name, command, hint))
        if cached is not None:
            return cached
        w = self.config.parent_weight
        cdf = self._prior
        keys = self.keys(tool_name, command) if tool_name else (("*",),)
        hists = [h for h in map(self._hists.get, keys) if h is not None]
        for i, h in enumerate(hists):
            if i + 1 < len(hists) and hists[i + 1].n == h.n:
                continue          # same samples as the more specific key: count them once
            n = h.n + w
            cdf = [(c + w * f) / n for c, f in zip(h.cum(), cdf)]
        if hint is not None and hint > 0:
            wh = self.config.hint_weight
            n = (self._hists[keys[-1]].n if keys[-1] in self._hists else 0.0) + w + wh
            cdf = [((n - wh) * f + wh * g) / n for f, g in zip(cdf, self._hint_cdf(hint))]
        if len(self._cdf_cache) >= 1024:
            self._cdf_cache.clear()
        self._cdf_cache[(tool_name, command, hint)] = cdf
        return cdf

    def cdf(self, tool_name: str | None, command: str | None, t: float,
            hint: float | None = None) -> float:
        """P(duration <= t), interpolated linearly in log-time between edges."""
        return self.interpolate(self.cdf_at_edges(tool_name, command, hint), t) if t > 0 else 0.0

    def interpolate(self, cdf: list[float], t: float) -> float:
        """Value at `t` of a CDF given at the edges (linear in log-time)."""
        edges = self.edges
        if t <= 0:
            return 0.0
        if t <= edges[0]:
            return cdf[0] * t / edges[0]
        x = (math.log10(t) - self._log_lo) * self.config.bins_per_decade
        i = int(x)
        if i >= len(edges) - 1:
            return cdf[-1]
        return cdf[i] + (cdf[i + 1] - cdf[i]) * (x - i)

    def quantile(self, tool_name: str | None, command: str | None, q: float,
                 hint: float | None = None) -> float:
        """Smallest t with P(duration <= t) >= q (log-interpolated); hi_s if never reached."""
        if not 0.0 < q < 1.0:
            raise ValueError(f"DurationPredictor.quantile: q must be in (0, 1), got {q!r}")
        cdf, edges = self.cdf_at_edges(tool_name, command, hint), self.edges
        prev_t, prev_f = 0.0, 0.0
        for t, f in zip(edges, cdf):
            if f >= q:
                if prev_t <= 0.0:
                    return t * q / f
                return prev_t * math.pow(t / prev_t, (q - prev_f) / (f - prev_f))
            prev_t, prev_f = t, f
        return edges[-1]


@dataclass(frozen=True, slots=True)
class ToolTime:
    """A finished tool call as the retention rules learn from it."""

    tool_name: str
    command: str | None
    seconds: float      # queue wait + run: how long the session's KV waited on the tool


class ToolCalls:
    """The running tool call of each session, so a finished call is measured against its start.

    A `tool_finished` may omit the command its `tool_started` carried; the start supplies it.
    """

    def __init__(self) -> None:
        self._started: dict[str, ToolStarted] = {}

    def running(self, session_id: str) -> ToolStarted | None:
        return self._started.get(session_id)

    def observe(self, event: Event) -> ToolTime | None:
        """Track starts and ends; a `ToolTime` when `event` finishes a call."""
        if isinstance(event, ToolStarted):
            self._started[event.session_id] = event
        elif isinstance(event, ToolFinished):
            started = self._started.pop(event.session_id, None)
            command = event.command if event.command is not None else (
                started.command if started is not None else None)
            return ToolTime(event.tool_name, command, event.duration_s + event.queue_wait_s)
        elif isinstance(event, (ToolCancelled, SessionEnded)):
            self._started.pop(event.session_id, None)
        return None
