"""Prefix-cache accounting of a replay: tokens served from cache, and tokens computed again.

A turn "should" get from the cache the whole blocks of what was already computed before it was
sent: its own session's previous context, or, on a first turn, the shared system prompt once
another session carrying it has finished a request. Anything below that was evicted (or never
kept) and had to be recomputed: that shortfall is the replay's recomputed-prefill count, the same
quantity the simulator reports. Recompute after preemption happens inside the engine and is added
from the engine's own counters when it publishes them.
"""
from __future__ import annotations

from dataclasses import dataclass

from mars_openhands.replay.client import SessionRecord
from mars_openhands.replay.engine_costs import EngineCosts
from mars_openhands.workload.trace import SessionTrace


@dataclass(frozen=True, slots=True)
class CacheAccount:
    hit_tokens: int          # prompt tokens the engine served from its prefix cache
    expected_tokens: int     # what a cache that lost nothing would have served
    missed_tokens: int       # computed again although computed before (sum of per-turn shortfalls)
    complete: bool           # every turn reported its hit (else hit/missed cover only those that did)


def account(sessions: list[SessionTrace], records: list[SessionRecord], costs: EngineCosts) -> CacheAccount:
    first_done: dict[str, float] = {}     # system prompt id -> first finish of a request carrying it
    for s, rec in zip(sessions, records):
        if s.system_prompt_id is not None and rec.turns:
            first_done[s.system_prompt_id] = min(first_done.get(s.system_prompt_id, float("inf")),
                                                 rec.turns[0].finished_s)
    hits = expected = missed = 0
    complete = True
    for s, rec in zip(sessions, records):
        prompt_done = (first_done.get(s.system_prompt_id, float("inf")) if s.system_prompt_id is not None
                       else float("inf"))
        for tr in rec.turns:
            warm = costs.warm_hit(tr.shape)
            if tr.turn_index == 0 and prompt_done >= tr.submitted_s:
                warm = 0                  # nobody had computed the system prompt yet
            expected += warm
            if tr.cached_tokens is None:
                complete = False
                continue
            hits += tr.cached_tokens
            missed += max(0, warm - tr.cached_tokens)
    return CacheAccount(hits, expected, missed, complete)
