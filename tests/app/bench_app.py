"""K conversations started at once through the OpenHands app's REST API, MARS vs FCFS.

`.venv-agent/bin/python -m tests.app.bench_app --policies mars,fcfs -k 4 --out runs/app-bench`

Per policy: a fresh engine (`mars-openhands serve --policy P`, tiny model, scarce KV), the scripted
LLM of the tests in front of it (each turn really served by the engine with `--output-tokens`
decoded), a fresh `mars-openhands app` with process sandboxes, then K conversations POSTed at the
same moment. Each plays the same script (`--turns` terminal calls of `--tool-s` seconds, then
`finish`). Measured per conversation from the host clock: start (POST -> READY: the app starts a
sandbox), run (READY -> the engine's session_ended) and end to end (POST -> session_ended); whether
the engine's per-session history shows every turn and tool call once and in order, session_ended
last, is counted. Writes OUT/<policy>/{result,histories}.json, OUT/summary.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from tests.openhands.doubles import terminal

from .appserver import AppServer, Started, engine_history, http_json
from .conftest import REPO, app_env_built
from .scripted import SessionScriptedLLM


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.app.bench_app")
    p.add_argument("--policies", default="mars,fcfs")
    p.add_argument("-k", type=int, default=4, help="conversations started at once")
    p.add_argument("--turns", type=int, default=5, help="terminal calls per conversation (then finish)")
    p.add_argument("--tool-s", type=float, default=3.0, help="seconds each terminal call sleeps")
    p.add_argument("--output-tokens", type=int, default=32, help="tokens the engine decodes per turn")
    p.add_argument("--kv-cache-bytes", type=int, default=48 << 20, help="engine KV cache (default 48 MiB)")
    p.add_argument("--max-model-len", type=int, default=16384)
    p.add_argument("--model", type=Path, default=REPO / "models" / "tiny")
    p.add_argument("--out", type=Path, default=REPO / "runs" / "app-bench")
    return p.parse_args()


def _wait_ended(engine: str, sessions: list[str], timeout_s: float) -> dict[str, dict[str, Any]]:
    done: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    while len(done) < len(sessions):
        if time.monotonic() > deadline:
            raise RuntimeError(f"sessions without session_ended after {timeout_s:.0f} s: "
                               f"{sorted(set(sessions) - set(done))}")
        for sid in sessions:
            if sid not in done:
                hist = engine_history(engine, sid)
                if hist and any(e["event"] == "session_ended" for e in hist["history"]):
                    done[sid] = hist
        time.sleep(1)
    return done


def _check(hist: dict[str, Any], turns: int) -> tuple[float, str | None]:
    """The engine's time of session_ended, and what is wrong with the history (None: every turn
    and tool call once, in order, session_ended (finished) after them)."""
    events = hist["history"]
    kinds = [e["event"] for e in events]
    end = next(e for e in events if e["event"] == "session_ended")
    turns_seen = [e["turn_index"] for e in events if e["event"] == "turn_submitted"]
    started = [e["call_id"] for e in events if e["event"] == "tool_started"]
    finished = [e["call_id"] for e in events if e["event"] == "tool_finished"]
    expected = [f"call_{k}" for k in range(turns + 1)]
    if turns_seen != list(range(turns + 1)):
        return float(end["t"]), f"turns {turns_seen}"
    if started != expected or finished != expected:
        return float(end["t"]), f"tool events started {started} finished {finished}"
    if end["reason"] != "finished" or kinds.index("session_ended") < len(kinds) - 1 - kinds[::-1].index(
            "tool_finished"):
        return float(end["t"]), f"session_ended {end['reason']} at {kinds.index('session_ended')} of {kinds}"
    return float(end["t"]), None


def run_policy(policy: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from evaluation.swebench.runs.engine_proc import EngineProcess

    out.mkdir(parents=True, exist_ok=True)
    script = [terminal(f"sleep {args.tool_s:g}; echo {k} >> steps.txt") for k in range(args.turns)]
    engine_args = ["--tool-workers", "2", "--max-model-len", str(args.max_model_len),
                   "--kv-cache-memory-bytes", str(args.kv_cache_bytes),
                   "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    with EngineProcess(policy, args.model, out / "engine.log", extra_args=engine_args) as engine, \
            SessionScriptedLLM(script, upstream=engine.url, output_tokens=args.output_tokens) as llm:
        cfg = out / "mars.toml"
        cfg.write_text(f'[llm]\nmodel = "openai/scripted"\nbase_url = "{llm.base_url}"\napi_key = "bench"\n\n'
                       f'[mars]\nevents_url = "{engine.url}/mars/v1/events"\n\n'
                       f'[workspace]\npersistence_dir = "{out / "oh"}"\n')
        before = http_json("GET", f"{engine.url}/mars/v1/stats").get("counters", {})
        with AppServer(cfg, out) as app:
            started: list[Started] = app.start_conversations([f"bench {i}" for i in range(args.k)])
            app.wait_ready(started)
            sessions = [s.session_id or "" for s in started]
            hists = _wait_ended(engine.url, sessions, 900)
        after = http_json("GET", f"{engine.url}/mars/v1/stats").get("counters", {})
    (out / "histories.json").write_text(json.dumps(hists, indent=1) + "\n")
    rows = []
    for s in started:
        assert s.session_id is not None and s.ready_t is not None
        end_t, problem = _check(hists[s.session_id], args.turns)
        rows.append({"session_id": s.session_id, "start_s": s.ready_t - s.posted_t, "run_s": end_t - s.ready_t,
                     "e2e_s": end_t - s.posted_t, "history_problem": problem})
    first = min(s.posted_t for s in started)
    makespan = max(r["e2e_s"] + s.posted_t - first for r, s in zip(rows, started))
    counters = {k: v - before.get(k, 0) for k, v in after.items() if isinstance(v, (int, float))}
    result = {"policy": policy, "conversations": rows, "makespan_s": makespan, "engine_counters": counters}
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _summary_line(res: dict[str, Any]) -> str:
    rows = res["conversations"]

    def mean_max(key: str) -> str:
        values = [r[key] for r in rows]
        return f"{statistics.mean(values):6.1f} / {max(values):6.1f}"
    bad = sum(1 for r in rows if r["history_problem"])
    return (f"| {res['policy']:5s} | {mean_max('start_s')} | {mean_max('run_s')} | {mean_max('e2e_s')} | "
            f"{res['makespan_s']:6.1f} | {len(rows) - bad}/{len(rows)} |")


def main() -> int:
    args = _args()
    args.out = args.out.resolve()  # mars.toml paths are relative to the file
    if not app_env_built():
        raise SystemExit("needs the OpenHands app environment .venv-app (`make setup-app`)")
    results = []
    for policy in args.policies.split(","):
        res = run_policy(policy, args, args.out / policy)
        results.append(res)
        print(_summary_line(res), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                        "results": results}, indent=2) + "\n")
    print("| policy | start mean / max s | run mean / max s | E2E mean / max s | makespan s | histories in order |")
    print("|---|---:|---:|---:|---:|---:|")
    for res in results:
        print(_summary_line(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
