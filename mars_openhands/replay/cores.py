"""Which host cores the engine and the replay's tools may use (`bench-engine --engine-cores`).

On a CPU engine the model's steps and the agents' tools compete for the same cores, and vLLM's
OpenMP threads slow down far more than their share when a tool spins on their core (a step waits
for its slowest thread). A GPU host has no such coupling, and the simulator models none. Giving
the engine cores of its own and the tools the rest makes a CPU benchmark measure the planes the
way a GPU host and the simulator see them.

The replay client itself (the agents' loop: tool ends, next calls, events) floats over the cores
with vLLM's scheduler and front end. Linux schedules each session's processes as one group
(autogroup), so the engine's processes together weigh as much as the client: on the 2-core host
its event loop waited 0.2-1.9 s for a core about once a second, and tool calls of 3 ms ended
seconds late, for every policy. `client_first` gives the client's group the lead while it replays.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: This process' scheduling group; it reads "/autogroup-N nice K" (absent without autogroup).
AUTOGROUP = Path("/proc/self/autogroup")
#: The replay client's group nice while it replays (-10: about 9x the weight of a nice 0 group).
CLIENT_NICE = -10


def parse_cores(text: str) -> frozenset[int]:
    """A core list as vLLM writes it ("0", "0-3", "0,2-3") -> the core ids; ValueError if malformed."""
    cores: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"expected core ids like 0 or 0-3 or 0,2-3, got {text!r}")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"core range {part!r} runs backwards")
        cores.update(range(first, last + 1))
    return frozenset(cores)


@dataclass(frozen=True, slots=True)
class CoreSplit:
    """The engine's cores and the tools' cores: disjoint, together within this process's cores."""

    engine: frozenset[int]
    tools: frozenset[int]

    @classmethod
    def of(cls, engine_text: str, allowed: frozenset[int] | None = None) -> CoreSplit:
        """The engine on `engine_text`'s cores, the tools on every other core this process may use."""
        allowed = frozenset(os.sched_getaffinity(0)) if allowed is None else allowed
        engine = parse_cores(engine_text)
        outside = sorted(engine - allowed)
        if outside:
            shown = ",".join(map(str, outside[:4])) + (",..." if len(outside) > 4 else "")
            raise ValueError(f"core(s) {shown} are not among this host's usable cores "
                             f"({','.join(map(str, sorted(allowed)))})")
        tools = allowed - engine
        if not tools:
            raise ValueError(f"no core is left for the tools (usable: {','.join(map(str, sorted(allowed)))})")
        return cls(engine, tools)

    @property
    def engine_env(self) -> dict[str, str]:
        """The engine's environment: vLLM's CPU backend binds its OpenMP threads to these cores."""
        return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, sorted(self.engine)))}


@contextmanager
def client_first(group: Path = AUTOGROUP) -> Iterator[bool]:
    """While inside, this process' scheduling group runs at `CLIENT_NICE`, then at its own nice
    again; yields whether it could (lowering a nice needs CAP_SYS_NICE, autogroup a Linux kernel)."""
    try:
        old = group.read_text().split()[-1]
        group.write_text(str(CLIENT_NICE))
    except (OSError, IndexError):
        yield False
        return
    try:
        yield True
    finally:
        try:
            group.write_text(old)
        except OSError:
            pass
