"""Seeded generator of SWE-bench-like OpenHands sessions in `mars-trace/1`.

Every distribution below is calibrated to published measurements of agent sessions; each constant
names its source. Targets (measured on this generator by `tests/workload/test_synthetic.py` at
n=2000):

==========================  =====================================  ================================
quantity                    target (source)                        model
==========================  =====================================  ================================
turns per session           p50 36, p95 87, mean 41 (15k SWE-agent  lognormal(ln 36, 0.536), clipped
                            / OpenHands sessions, thoughtworks)     to [2, 150]; x ``turns_scale``
initial prompt              4-8k tokens (OpenHands SDK cli-mode     4,100 shared system prompt +
                            prompt + 4 tool schemas ~16k chars)     task lognormal(1,400, 0.5) in
                                                                    [300, 3,900]
per-turn context growth     median a few hundred-1.5k, tail 5-20k   output + observation; the
                            (OpenHands/SWE-agent trajectories)      observation depends on the command
deepest prompt / session    p50 24k, p95 69k, p99 90k               emerges; condensed at
                                                                    ``max_context_tokens``
output per turn             mostly 50-300, some 1-2k (same)         lognormal by kind of next action
tool duration               p50 0.3 s, p90 13.6 s, p99 3.6 min,     per-command class: fast 73 %,
                            mean 18.4 s; 70-80 % fast, 15-25 %      medium 22 %, slow 5 % (TraceLab,
                            medium, 2-5 % slow (TraceLab, 432k)     432k real tool calls)
test runs per task          ~8.8 (SWE-bench agents)                 80 % of medium and of slow calls
                                                                    are pytest runs
==========================  =====================================  ================================

Tool durations: fast calls are lognormal(median 0.2 s, sigma 0.8) clipped to [0.05, 1] s so that
the overall p50 (the 68th percentile of the fast class) is ~0.3 s; medium calls are log-uniform on
[1, 30] s, which puts the overall p90 (the 78th percentile of the medium class) at ~14 s; slow calls
are bounded-Pareto(shape 0.7) on [30 s, 30 min], whose 80th percentile (the overall p99) is ~3.7 min.
The mean comes out at ~11 s, below TraceLab's 18.4 s: with p99 at 3.6 min that mean needs ~1 % of
calls averaging over 20 minutes, which would make sessions tool-bound; we match the quantiles and
the class shares instead and say so here.

Context: each turn's prompt is the previous prompt + the reply + the tool's observation. The
observation size depends on the command (listings and edit acknowledgements are short, file views
longer, full test logs longest; 0.1-3 % of views/test logs are 5-20k token dumps, OpenHands truncates
terminal output near 30k characters) and on a per-session verbosity factor (lognormal sigma 0.9:
big repositories, long logs). The medians were fitted so that the deepest prompt lands on the measured
p50 24k / p95 69k; the p99 ~90k comes from condensation: past ``max_context_tokens`` (92k) the
history is summarised like OpenHands' LLMSummarizingCondenser (system prompt + task kept verbatim,
a 0.8-2k summary, the most recent 40 % of the budget), and that turn's ``shared_prefix_tokens`` is
the kept head only, so the engine must recompute the rest.

Outputs depend on what the reply does: a tool call is lognormal(median 110, sigma 0.45) in
[40, 400] tokens, an edit carries the new code (median 260, up to 2k), the first turn and 4 % of
the others are plans of 1-2k tokens, the final answer is ~250 (about 81 % of replies land in 50-300).

Arrivals (``arrival``): ``poisson`` (exponential gaps, mean 1/rate), ``fixed`` (gap exactly 1/rate,
the MARS runs' default of 0.2 sessions/s) and ``burst`` (``burst_size`` sessions at one instant,
bursts Poisson at rate/burst_size: same mean rate, worst-case queueing). Arrivals draw from a
random stream separate from session contents, so the same seed gives the same sessions at every rate.

Workload-family knobs (all off by default; the defaults above are today's SWE-bench-like sessions,
bit for bit). Their random draws come from a stream of their own, so a knob changes what it names
and what follows from it in the context; only a condensation it moves (the summary size is drawn)
shifts the draws of later sessions:

- ``long_prompt_share`` / ``long_prompt_tokens``: that share of sessions starts with a first prompt
  (system prompt + task) log-uniform in the range (default 30-60k tokens, x ``context_scale``):
  a pasted log, spec or file set. The condenser keeps it verbatim like any task.
- ``max_context_tokens`` is the condensation threshold and ``condense_keep`` the share of it kept
  verbatim as recent history when condensing (default 0.4, OpenHands-like). A low value (0.03 at a
  90k threshold: ~2.7k recent + a 0.8-2k summary) models condensing to a few k tokens.
- ``heavy_cores_scale`` multiplies the cores of medium and slow calls (test runs, installs,
  builds: parallel test runners and compilers); with ``tool_mix``, ``tool_time_scale`` and
  ``slow_cap_s`` it sets the tool-time mix (CPU-heavy: more and longer slow calls on more cores).
- ``obs_scale`` / ``output_scale`` multiply observation / visible reply tokens (chatty sessions:
  many turns via ``turns_scale``, short observations and replies).
- ``reasoning_tokens``: median hidden reasoning tokens per reply (lognormal, sigma 0.6, 0.1-5x the
  median), decoded before the visible reply. Chat templates of reasoning models (Qwen3, DeepSeek-R1)
  drop earlier turns' reasoning from the prompt, so the next prompt shares only the previous
  *prompt* (``shared_prefix_tokens`` = its size) and grows by the visible reply + observation.
- Bursty arrivals: ``arrival="burst"`` with ``burst_size``.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn

#: The tool-duration classes: fast calls take up to `FAST_MAX_S`, slow ones `SLOW_MIN_S` and more,
#: medium ones lie between; `TOOL_MIX` is their measured shares (TraceLab, table above).
FAST_MAX_S, SLOW_MIN_S = 1.0, 30.0
TOOL_MIX: tuple[float, float, float] = (0.73, 0.22, 0.05)

SYSTEM_PROMPT_ID = "openhands-sdk-cli-mode"
#: OpenHands SDK cli-mode system prompt + 4 tool schemas is ~16k characters (measured): ~4.1k tokens.
SYSTEM_PROMPT_TOKENS = 4100
ARRIVALS = ("poisson", "fixed", "burst")

# Turns per session: lognormal through p50 36 and p95 87 (mean then 41.6, the data says 41).
_VERBOSITY_SIGMA = 0.9
_TURNS_MEDIAN, _TURNS_SIGMA, _TURNS_MAX = 36.0, math.log(87 / 36) / 1.645, 150


@dataclass(frozen=True, slots=True)
class _Command:
    """One kind of agent action: what it runs, how long it takes, how much it prints."""

    tool: str
    templates: tuple[str, ...]
    cls: str                   # duration class: fast / medium / slow
    weight: float              # share within its class
    cpu_cores: float
    obs_median: float          # observation tokens appended to the context (median)
    obs_sigma: float
    dump_p: float = 0.0        # chance of a 5-20k token observation (file dump, failing test log)
    is_edit: bool = False


_PATHS = ("src/core", "src/utils", "lib/parser", "pkg/io", "tests", "docs", "src/api")
_FILES = ("models.py", "utils.py", "parser.py", "fields.py", "base.py", "query.py", "core.py",
          "io.py", "formats.py", "validators.py")
_SYMBOLS = ("clamp", "parse_date", "to_dict", "_validate", "Quantity", "resolve", "BaseField",
            "normalize", "QuerySet", "__repr__")

#: Observation sizes are set so that the deepest prompt matches p50 24k / p95 69k (table above);
#: the split between commands follows what OpenHands prints (directory listings and edits are short,
#: file views and test logs long; terminal output truncated at ~30k characters, ~20k tokens).
_COMMANDS: tuple[_Command, ...] = (
    _Command("terminal", ("ls -la {dir}", "find {dir} -name '*.py' | head -50"), "fast", 0.14,
             0.5, 44, 0.7),
    _Command("terminal", ("grep -rn '{sym}' {dir}", "grep -rn 'def {sym}' ."), "fast", 0.18, 1.0,
             88, 0.9, dump_p=0.0015),
    _Command("terminal", ("cat {dir}/{file}", "sed -n '{a},{b}p' {dir}/{file}"), "fast", 0.12, 0.5,
             220, 0.8, dump_p=0.015),
    _Command("file_editor", ("view {dir}/{file}",), "fast", 0.20, 0.2, 208, 0.8, dump_p=0.0125),
    _Command("file_editor", ("str_replace {dir}/{file}", "create reproduce_issue.py",
                             "insert {dir}/{file}"), "fast", 0.28, 0.2, 68, 0.6, is_edit=True),
    _Command("terminal", ("git diff", "git status"), "fast", 0.08, 0.5, 100, 0.8),
    _Command("terminal", ("python -m pytest -q tests/test_{file}::test_{sym}",
                          "python -m pytest -q -x tests/test_{file}"), "medium", 0.80, 1.0,
             152, 0.9, dump_p=0.01),
    _Command("terminal", ("python reproduce_issue.py", "python -m doctest {dir}/{file}"), "medium", 0.20,
             1.0, 64, 0.9),
    _Command("terminal", ("python -m pytest -q tests", "python -m pytest -q -n 0 tests/"), "slow",
             0.80, 1.0, 440, 1.0, dump_p=0.06),
    _Command("terminal", ("pip install -e .", "python setup.py build_ext --inplace"), "slow", 0.20,
             2.0, 180, 0.8),
)
_CLASSES = ("fast", "medium", "slow")
_BY_CLASS = {c: tuple(cmd for cmd in _COMMANDS if cmd.cls == c) for c in _CLASSES}
_WEIGHTS = {c: tuple(cmd.weight for cmd in _BY_CLASS[c]) for c in _CLASSES}


@dataclass(frozen=True, slots=True)
class SyntheticConfig:
    """Knobs of the generator. Defaults reproduce the measured statistics in the table above."""

    n_sessions: int
    rate: float = 0.2                      # sessions/s (MARS runs: 0.2 fixed; sweeps 0.05-0.5)
    seed: int = 0
    arrival: str = "poisson"
    burst_size: int = 8
    turns_scale: float = 1.0               # multiplies the turns-per-session distribution
    context_scale: float = 1.0             # multiplies every token count of prompts and observations
    max_context_tokens: int = 92_000       # condense history beyond this (x context_scale)
    tool_mix: tuple[float, float, float] = TOOL_MIX   # fast / medium / slow shares
    tool_time_scale: float = 1.0           # multiplies every tool duration
    slow_cap_s: float = 1800.0             # longest slow tool call before scaling
    # workload-family knobs (see the module docstring); the defaults leave them off
    long_prompt_share: float = 0.0         # share of sessions with a long first prompt
    long_prompt_tokens: tuple[int, int] = (30_000, 60_000)   # its range (x context_scale)
    condense_keep: float = 0.4             # share of max_context_tokens kept verbatim when condensing
    heavy_cores_scale: float = 1.0         # multiplies the cores of medium and slow tool calls
    obs_scale: float = 1.0                 # multiplies observation tokens
    output_scale: float = 1.0              # multiplies visible reply tokens
    reasoning_tokens: float = 0.0          # median hidden reasoning tokens per reply (0: none)

    def __post_init__(self) -> None:
        checks = [("n_sessions", self.n_sessions >= 1), ("rate", self.rate > 0),
                  ("burst_size", self.burst_size >= 1), ("turns_scale", self.turns_scale > 0),
                  ("context_scale", self.context_scale > 0),
                  ("max_context_tokens",
                   self.max_context_tokens >= 4 * SYSTEM_PROMPT_TOKENS * min(1.0, self.context_scale)),
                  ("tool_time_scale", self.tool_time_scale > 0), ("slow_cap_s", self.slow_cap_s > SLOW_MIN_S),
                  ("tool_mix", len(self.tool_mix) == 3 and min(self.tool_mix) >= 0 and sum(self.tool_mix) > 0),
                  ("long_prompt_share", 0 <= self.long_prompt_share <= 1),
                  ("long_prompt_tokens", len(self.long_prompt_tokens) == 2
                   and SYSTEM_PROMPT_TOKENS < self.long_prompt_tokens[0] <= self.long_prompt_tokens[1]
                   and (self.long_prompt_share == 0
                        or self.long_prompt_tokens[1] <= 0.75 * self.max_context_tokens)),
                  ("condense_keep", 0 < self.condense_keep <= 0.5),
                  ("heavy_cores_scale", self.heavy_cores_scale > 0), ("obs_scale", self.obs_scale > 0),
                  ("output_scale", self.output_scale > 0), ("reasoning_tokens", self.reasoning_tokens >= 0)]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"synthetic workload: bad {name}={getattr(self, name)!r}")
        if self.arrival not in ARRIVALS:
            raise ValueError(f"synthetic workload: unknown arrival {self.arrival!r}; known: {', '.join(ARRIVALS)}")

    @property
    def source(self) -> str:
        knobs = "".join(f" {f}={getattr(self, f)}" for f in _FAMILY_KNOBS
                        if getattr(self, f) != _FAMILY_DEFAULTS[f])
        return (f"synthetic:swebench-like seed={self.seed} rate={self.rate:g} arrival={self.arrival}"
                f" turns_scale={self.turns_scale:g} context_scale={self.context_scale:g}{knobs}")


#: Named in `SyntheticConfig.source` when set (the older knobs are not, so their traces stay identical).
_FAMILY_KNOBS = ("long_prompt_share", "long_prompt_tokens", "condense_keep", "heavy_cores_scale",
                 "obs_scale", "output_scale", "reasoning_tokens")
_FAMILY_DEFAULTS = {f: SyntheticConfig.__dataclass_fields__[f].default for f in _FAMILY_KNOBS}


def arrival_times(cfg: SyntheticConfig) -> list[float]:
    """Session start times (s) for the configured arrival process; the first session starts at 0."""
    rng = random.Random(f"mars-synthetic:{cfg.seed}:arrivals")
    n, gap = cfg.n_sessions, 1.0 / cfg.rate
    if cfg.arrival == "fixed":
        return [round(i * gap, 3) for i in range(n)]
    group = 1 if cfg.arrival == "poisson" else cfg.burst_size
    times, t = [], 0.0
    for i in range(n):
        if i and i % group == 0:
            t += rng.expovariate(1.0 / (gap * group))
        times.append(round(t, 3))
    return times


def _lognormal(rng: random.Random, median: float, sigma: float, lo: float, hi: float) -> float:
    return float(min(hi, max(lo, median * math.exp(rng.gauss(0.0, sigma)))))


def _duration(rng: random.Random, cls: str, cfg: SyntheticConfig) -> float:
    if cls == "fast":
        d = _lognormal(rng, 0.2, 0.8, 0.05, FAST_MAX_S)
    elif cls == "medium":
        d = math.exp(rng.uniform(math.log(FAST_MAX_S), math.log(SLOW_MIN_S)))
    else:   # bounded Pareto on [30, cap], shape a: inverse CDF
        a, lo, hi = 0.7, SLOW_MIN_S, cfg.slow_cap_s
        u = rng.random()
        d = lo / (1.0 - u * (1.0 - (lo / hi) ** a)) ** (1.0 / a)
    return round(d * cfg.tool_time_scale, 3)


def _command_text(rng: random.Random, cmd: _Command) -> str:
    a = rng.randint(1, 400)
    return rng.choice(cmd.templates).format(
        dir=rng.choice(_PATHS), file=rng.choice(_FILES), sym=rng.choice(_SYMBOLS), a=a, b=a + 60)


def _pick_command(rng: random.Random, mix: tuple[float, float, float]) -> _Command:
    cls = rng.choices(_CLASSES, weights=mix)[0]
    return rng.choices(_BY_CLASS[cls], weights=_WEIGHTS[cls])[0]


def _observation(rng: random.Random, cmd: _Command, verbosity: float, scale: float) -> int:
    if rng.random() < cmd.dump_p:
        tokens = math.exp(rng.uniform(math.log(5000), math.log(20000)))
    else:
        tokens = _lognormal(rng, cmd.obs_median * verbosity, cmd.obs_sigma, 20, 20000)
    return max(1, int(tokens * scale))


def _reasoning(krng: random.Random, median: float, scale: float) -> int:
    """Hidden reasoning tokens of one reply (0 when the knob is off)."""
    if median <= 0:
        return 0
    return max(1, int(_lognormal(krng, median, 0.6, 0.1 * median, 5 * median) * scale))


def _output(rng: random.Random, nxt: _Command | None, first: bool, scale: float) -> int:
    """Reply tokens: a short tool call, a longer edit (the new code), a plan, or the final answer."""
    if first or rng.random() < 0.04:          # planning turn
        tokens = rng.uniform(1000, 2000)
    elif nxt is None:                          # finish message
        tokens = _lognormal(rng, 250, 0.5, 60, 1200)
    elif nxt.is_edit:
        tokens = _lognormal(rng, 260, 0.7, 60, 2000)
    else:
        tokens = _lognormal(rng, 110, 0.45, 40, 400)
    return max(1, int(tokens * scale))


@dataclass(slots=True)
class _Context:
    """The prompt of the next turn; condensed (OpenHands' summarizing condenser) when too long."""

    head: int                 # system prompt + task: kept verbatim by the condenser
    tokens: int
    limit: int
    keep: float = 0.4         # share of `limit` kept verbatim as recent history
    shared: int | None = None

    def grow(self, rng: random.Random, added: int, scale: float) -> None:
        self.shared = None
        self.tokens += added
        if self.tokens > self.limit:
            summary = int(rng.uniform(800, 2000) * scale)
            recent = min(self.tokens - self.head, int(self.keep * self.limit))
            self.tokens = min(self.limit, self.head + summary + recent)
            self.shared = self.head


def _session(rng: random.Random, krng: random.Random, idx: int, arrival: float, cfg: SyntheticConfig,
             mix: tuple[float, float, float], width: int) -> SessionTrace:
    scale = cfg.context_scale
    n_turns = int(round(_TURNS_MEDIAN * cfg.turns_scale * math.exp(rng.gauss(0.0, _TURNS_SIGMA))))
    n_turns = min(max(2, n_turns), max(2, int(round(_TURNS_MAX * cfg.turns_scale))))
    system = int(SYSTEM_PROMPT_TOKENS * scale)
    task = int(_lognormal(rng, 1400, 0.5, 300, 3900) * scale)
    if cfg.long_prompt_share and krng.random() < cfg.long_prompt_share:
        lo, hi = cfg.long_prompt_tokens
        task = int(math.exp(krng.uniform(math.log(lo), math.log(hi))) * scale) - system
    # Sessions differ in how much they read (big repos, long test logs): spreads the deepest prompt.
    verbosity = math.exp(rng.gauss(0.0, _VERBOSITY_SIGMA))
    ctx = _Context(head=system + task, tokens=system + task, limit=int(cfg.max_context_tokens * scale),
                   keep=cfg.condense_keep)
    cmds = [_pick_command(rng, mix) for _ in range(n_turns - 1)] + [None]
    turns = []
    for k, cmd in enumerate(cmds):
        out = _output(rng, cmd, k == 0, scale * cfg.output_scale)
        hidden = _reasoning(krng, cfg.reasoning_tokens, scale)
        tool = None if cmd is None else ToolCall(
            name=cmd.tool, command=_command_text(rng, cmd), duration_s=_duration(rng, cmd.cls, cfg),
            cpu_cores=cmd.cpu_cores * (cfg.heavy_cores_scale if cmd.cls != "fast" else 1.0))
        turns.append(Turn(input_tokens=ctx.tokens, output_tokens=out + hidden, tool=tool,
                          shared_prefix_tokens=ctx.shared))
        if cmd is not None:
            prompt = ctx.tokens
            ctx.grow(rng, out + _observation(rng, cmd, verbosity, scale * cfg.obs_scale), scale)
            if hidden and ctx.shared is None:     # the reasoning is dropped: only the prompt is shared
                ctx.shared = prompt
    return SessionTrace(session_id=f"swe-{idx:0{width}d}", arrival_s=arrival, turns=tuple(turns),
                        system_prompt_id=SYSTEM_PROMPT_ID, system_prompt_tokens=system, source=cfg.source)


def generate(cfg: SyntheticConfig) -> list[SessionTrace]:
    """The sessions of `cfg`, identical for identical configs (contents do not depend on the rate)."""
    rng = random.Random(f"mars-synthetic:{cfg.seed}:sessions")
    krng = random.Random(f"mars-synthetic:{cfg.seed}:knobs")
    width = max(4, len(str(cfg.n_sessions - 1)))
    return [_session(rng, krng, i, t, cfg, cfg.tool_mix, width) for i, t in enumerate(arrival_times(cfg))]


def synthetic_sessions(n_sessions: int, **knobs: Any) -> list[SessionTrace]:
    """Shorthand: `generate(SyntheticConfig(n_sessions, **knobs))`."""
    return generate(SyntheticConfig(n_sessions, **knobs))
