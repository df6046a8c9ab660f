"""`cluster stats`: every replica's `/mars/v1/stats`, side by side and summed.

Stats and metrics stay per replica (each engine schedules alone); this view adds them up: sessions,
requests and blocks are summed, the KV usage is recomputed from the summed blocks, counters are
summed key by key, and each replica's admission window is listed (windows do not add up: each bounds
its own engine). The replicas come from the router (`/list_workers`) or are named directly.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from mars_openhands.protocol import STATS_PATH

#: Top-level and `engine` fields that add up across replicas.
SUMMED = ("admitted_sessions", "known_sessions", "pinned_sessions", "pinned_blocks", "tools_in_flight")
ENGINE_SUMMED = ("running", "waiting", "parked_requests", "parked_sessions", "overflow_requests",
                 "free_blocks", "total_blocks")


class StatsError(RuntimeError):
    """The router could not be asked for its replicas."""


def discover(router_url: str, timeout_s: float = 5.0) -> list[str]:
    """The replica URLs the router routes to (vllm-router's `GET /list_workers`)."""
    try:
        r = httpx.get(router_url.rstrip("/") + "/list_workers", timeout=timeout_s)
        r.raise_for_status()
        urls = r.json()["urls"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
        raise StatsError(f"--router {router_url}: cannot list its replicas ({e})") from None
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise StatsError(f"--router {router_url}: /list_workers answered {urls!r}, not a list of URLs")
    return urls


def fetch(urls: Sequence[str], session: str | None = None, timeout_s: float = 5.0) -> dict[str, dict | str]:
    """url -> its stats (or the session's history), or a string saying why there is none."""
    out: dict[str, dict | str] = {}
    params = {"session": session} if session is not None else None
    with httpx.Client(timeout=timeout_s) as client:
        for url in urls:
            try:
                r = client.get(url.rstrip("/") + STATS_PATH, params=params)
            except httpx.HTTPError as e:
                out[url] = f"unreachable ({type(e).__name__})"
                continue
            if r.status_code == 404 and session is not None:
                out[url] = "no history of this session"
            elif r.status_code != 200:
                out[url] = f"HTTP {r.status_code}: {r.text[:200]}"
            else:
                out[url] = r.json()
    return out


def aggregate(per_replica: Mapping[str, dict | str]) -> dict[str, Any]:
    """The cluster's totals from each replica's stats (unreachable replicas are counted as down)."""
    up = {u: s for u, s in per_replica.items() if isinstance(s, dict)}
    total: dict[str, Any] = {"replicas": len(per_replica), "replicas_up": len(up)}
    for key in SUMMED:
        total[key] = sum(s.get(key) or 0 for s in up.values())
    engine = {k: sum((s.get("engine") or {}).get(k) or 0 for s in up.values()) for k in ENGINE_SUMMED}
    engine["kv_usage"] = 1.0 - engine["free_blocks"] / engine["total_blocks"] if engine["total_blocks"] else 0.0
    total["engine"] = engine
    total["windows"] = {u: (s.get("admission") or {}).get("window") for u, s in up.items()}
    for part in ("counters", "boundaries"):
        summed: Counter[str] = Counter()
        for s in up.values():
            summed.update({k: v for k, v in (s.get(part) or {}).items() if isinstance(v, (int, float))})
        total[part] = dict(sorted(summed.items()))
    return total


def format_table(per_replica: Mapping[str, dict | str], total: Mapping[str, Any]) -> str:
    head = ("replica", "policy", "window", "admitted", "known", "running", "waiting", "parked",
            "pinned blk", "kv use", "events")
    rows: list[tuple[str, ...]] = [head]
    for url, s in per_replica.items():
        if not isinstance(s, dict):
            rows.append((url, s, *[""] * (len(head) - 2)))
            continue
        e = s.get("engine") or {}
        rows.append((url, str(s.get("policy")), str((s.get("admission") or {}).get("window")),
                     str(s.get("admitted_sessions")), str(s.get("known_sessions")), str(e.get("running")),
                     str(e.get("waiting")), str(e.get("parked_requests")), str(s.get("pinned_blocks")),
                     f"{e.get('kv_usage', 0.0):.2f}", str((s.get("counters") or {}).get("events", 0))))
    e = total["engine"]
    rows.append((f"total ({total['replicas_up']}/{total['replicas']} up)", "", "", str(total["admitted_sessions"]),
                 str(total["known_sessions"]), str(e["running"]), str(e["waiting"]), str(e["parked_requests"]),
                 str(total["pinned_blocks"]), f"{e['kv_usage']:.2f}", str(total["counters"].get("events", 0))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def format_session(session: str, per_replica: Mapping[str, dict | str]) -> str:
    """Which replica holds the session, with how much of its history each keeps."""
    lines = [f"session {session}:"]
    for url, h in per_replica.items():
        if isinstance(h, dict):
            kinds = Counter(entry["event"] for entry in h.get("history", []))
            lines.append(f"  {url}: {sum(kinds.values())} entries ("
                         + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ")")
        else:
            lines.append(f"  {url}: {h}")
    return "\n".join(lines)
