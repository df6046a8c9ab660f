"""What MARS instrumentation costs the agent per tool call: `python -m mars_openhands.openhands.bench_overhead`.

Measures the real patched path: `Agent._execute_action_event` of a real `LocalConversation`, run on
the SDK's built-in `think` tool (its executor does no work, so the instrumentation is all that
differs), with instrumentation off and on, in interleaved blocks. When on, the emitter really posts
every event to an events sink in a separate process on 127.0.0.1, so its sender thread competes for
the GIL as in a real run. Prints the per-call overhead and exits 1 above 1 ms. The headline uses
the best block of each mode (what other processes on a busy host cannot inflate); the median is
printed next to it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

_SINK = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
        self.wfile.write(b"{}")
    do_GET = do_POST
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""

LIMIT_S = 1e-3


def _sink() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", _SINK], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None  # stdout=PIPE
    port = int(proc.stdout.readline())
    url = f"http://127.0.0.1:{port}/mars/v1/events"
    urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=5)
    return proc, url


def _conversation(workdir: str):
    from openhands.sdk import LLM, Agent, Conversation

    agent = Agent(llm=LLM(model="openai/bench", base_url="http://127.0.0.1:9/v1", api_key="x",
                          usage_id="bench"), tools=[])
    conv = Conversation(agent=agent, workspace=workdir, visualizer=None, persistence_dir=None)
    conv._ensure_agent_ready()  # what the first send_message() does: builds the agent's tools
    return conv


def _action_event(i: int):
    from openhands.sdk.event import ActionEvent
    from openhands.sdk.llm import MessageToolCall
    from openhands.sdk.tool.builtins.think import ThinkAction

    call = MessageToolCall(id=f"call_{i}", name="think", arguments='{"thought": "x"}', origin="completion")
    return ActionEvent(source="agent", thought=[], action=ThinkAction(thought="x"), tool_name="think",
                       tool_call_id=call.id, tool_call=call, llm_response_id=f"resp_{i}")


def measure(calls_per_block: int, blocks: int) -> dict[str, float]:
    from mars_openhands.openhands import importhook, instrument
    from mars_openhands.openhands.config import EmitterConfig

    importhook.apply_patch(importhook.SDK)
    sink, url = _sink()
    try:
        with tempfile.TemporaryDirectory() as wd:
            conv = _conversation(wd)
            agent = conv.agent
            events = [_action_event(i) for i in range(calls_per_block)]
            per_call: dict[bool, list[float]] = {False: [], True: []}
            for block in range(2 * blocks + 2):
                on = block % 2 == 1
                if on:
                    inst = instrument.enable(EmitterConfig(events_url=url))
                t0 = time.perf_counter()
                for ev in events:
                    agent._execute_action_event(conv, ev)
                dt = (time.perf_counter() - t0) / calls_per_block
                if on:
                    assert inst.emitter is not None  # enabled with an events_url
                    inst.emitter.flush(10.0)
                    stats = inst.emitter.stats
                    instrument.disable()
                if block >= 2:  # first pair warms caches and the connection
                    per_call[on].append(dt)
            conv.close()
    finally:
        sink.terminate()
        sink.wait()
    off, on_ = min(per_call[False]), min(per_call[True])
    median = statistics.median(per_call[True]) - statistics.median(per_call[False])
    return {"off_s": off, "on_s": on_, "overhead_s": on_ - off, "median_overhead_s": median,
            "sent": stats.sent, "dropped": stats.dropped}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mars_openhands.openhands.bench_overhead", description=__doc__)
    p.add_argument("--calls", type=int, default=500, help="tool calls per block")
    p.add_argument("--blocks", type=int, default=5, help="blocks per mode (on / off)")
    args = p.parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    r = measure(args.calls, args.blocks)
    print(f"tool call without MARS events: {r['off_s'] * 1e6:8.1f} us  (best of {args.blocks} blocks "
          f"of {args.calls} calls)")
    print(f"tool call with MARS events:    {r['on_s'] * 1e6:8.1f} us  "
          f"(last block: {r['sent']} events sent, {r['dropped']} dropped)")
    print(f"overhead per tool call:        {r['overhead_s'] * 1e6:8.1f} us  (limit {LIMIT_S * 1e6:.0f} us; "
          f"median of blocks: {r['median_overhead_s'] * 1e6:.1f} us)")
    return 0 if r["overhead_s"] < LIMIT_S else 1


if __name__ == "__main__":
    sys.exit(main())
