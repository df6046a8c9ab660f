"""`mars-openhands cluster serve|stats`: N MARS replicas behind vllm-router, and their stats.

    mars-openhands cluster serve --replicas 2 --policy mars --model models/small [vLLM args...]
    mars-openhands cluster stats --router http://127.0.0.1:8000 [--session ID] [--json]

Arguments `cluster serve` does not know go to every replica's `vllm serve` unchanged.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mars_openhands.cluster.router import DEFAULT_POLICY, PROGRAM, ROUTER_POLICIES, RouterError, router_executable
from mars_openhands.cluster.stats import StatsError, aggregate, discover, fetch, format_session, format_table
from mars_openhands.stopping import stop_on_signals

PROG = "mars-openhands cluster"


class UsageError(ValueError):
    """Bad input: one `error:` line, exit status 2."""


def _ports(text: str) -> list[int]:
    try:
        ports = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ports, got {text!r}") from None
    if not ports or any(not 0 < p < 65536 for p in ports):
        raise argparse.ArgumentTypeError(f"expected ports in 1-65535, got {text!r}")
    return ports


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="N MARS engines behind vllm-router with session "
                                                       "affinity (docs/cluster.md).")
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    s = sub.add_parser("serve", help="start N replicas and vllm-router; Ctrl-C / SIGTERM stops them all",
                       description="Start N `mars-openhands serve` replicas and vllm-router in front of them. "
                                   "Arguments not listed here go to every replica's `vllm serve`.")
    s.add_argument("--replicas", type=int, required=True, help="engines to start (one per GPU on GPU hosts)")
    s.add_argument("--policy", required=True, help="scheduling policy of every replica, e.g. mars")
    s.add_argument("--model", type=Path, required=True, help="local model directory")
    s.add_argument("--host", default="127.0.0.1", help="router bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="router port (default 8000)")
    s.add_argument("--replica-ports", type=_ports, default=None, metavar="P1,P2,...",
                   help="replica ports (default: the router's port + 1, + 2, ...)")
    s.add_argument("--router-policy", choices=ROUTER_POLICIES, default=DEFAULT_POLICY, metavar="POLICY",
                   help=f"vllm-router's routing: one of {', '.join(ROUTER_POLICIES)} (default {DEFAULT_POLICY}: "
                        "a new session to the replica with the fewest, then affinity on X-Session-ID until it "
                        f"ends; {PROGRAM}: consistent_hash with the router's --enable-program-scheduling)")
    s.add_argument("--router-arg", action="append", default=[], metavar="ARG",
                   help="one more vllm-router argument, e.g. --router-arg=--enable-program-scheduling "
                        "(repeatable)")
    s.add_argument("--router-metrics-port", type=int, default=None,
                   help="the router's Prometheus port (vllm-router --prometheus-port; default: a free port)")
    s.add_argument("--gpus-per-replica", type=_non_negative, default=0,
                   help="GPUs per replica: replica i gets CUDA_VISIBLE_DEVICES [i*g, (i+1)*g) (default 0: unset)")
    s.add_argument("--cpu-cores-per-replica", type=_non_negative, default=0,
                   help="CPU engines: replica i binds its threads to cores [i*c, (i+1)*c) (default 0: vLLM's own)")
    s.add_argument("--log-dir", type=Path, default=Path("runs/cluster"), help="replica and router logs")
    s.add_argument("--start-timeout", type=float, default=900.0, help="seconds for every replica to be healthy")
    s.add_argument("--dry-run", action="store_true", help="print the commands and exit")

    st = sub.add_parser("stats", help="every replica's /mars/v1/stats, side by side and summed")
    where = st.add_mutually_exclusive_group(required=True)
    where.add_argument("--router", help="the router's URL (its replicas come from /list_workers)")
    where.add_argument("--replicas", help="comma-separated replica URLs")
    st.add_argument("--session", help="instead: which replica keeps this session's history")
    st.add_argument("--json", action="store_true", help="print JSON (per replica and total)")
    return p


def serve(args: argparse.Namespace, vllm_args: list[str]) -> int:
    from mars_openhands.cluster.launch import Cluster, ClusterSpec
    from mars_openhands.core import policy_names
    from mars_openhands.procs import StartError

    if args.policy not in policy_names():
        raise UsageError(f"--policy: unknown policy {args.policy!r}; known: {', '.join(policy_names())}")
    if not (args.model / "config.json").is_file():
        raise UsageError(f"--model: {args.model} is not a model directory (no config.json)")
    if any(a == "--scheduler-cls" or a.startswith("--scheduler-cls=") for a in vllm_args):
        raise UsageError("--scheduler-cls is set per replica from --policy")
    try:
        router_executable()
        spec = ClusterSpec(args.replicas, args.policy, args.model, args.log_dir, host=args.host,
                           port=args.port, replica_ports=args.replica_ports or [],
                           router_policy=args.router_policy, vllm_args=vllm_args, router_args=args.router_arg,
                           gpus_per_replica=args.gpus_per_replica,
                           cpu_cores_per_replica=args.cpu_cores_per_replica,
                           prometheus_port=args.router_metrics_port)
        cluster = Cluster(spec)
    except (ValueError, RouterError) as e:
        raise UsageError(str(e)) from None
    if args.dry_run:
        for r in cluster.replicas:
            print(" ".join(r.command))
        print(" ".join(cluster.router.command))
        return 0

    rc = 1
    with stop_on_signals(cluster.stop):
        try:
            cluster.start(args.start_timeout)
            print(f"cluster: {spec.replicas} x {spec.policy} behind vllm-router ({spec.router_policy}) at "
                  f"{cluster.url}\n  replicas: {' '.join(cluster.replica_urls)}\n"
                  f"  router metrics: port {cluster.metrics_port} (/metrics)\n  logs: {spec.log_dir}\n"
                  f"  stats: mars-openhands cluster stats --router {cluster.url}", file=sys.stderr, flush=True)
            rc = cluster.run()
        except KeyboardInterrupt:
            rc = 0
        except StartError as e:
            print(f"{PROG} serve: error: {e}", file=sys.stderr)
    return rc


def stats(args: argparse.Namespace) -> int:
    try:
        urls = discover(args.router) if args.router else [u for u in args.replicas.split(",") if u]
    except StatsError as e:
        print(f"{PROG} stats: error: {e}", file=sys.stderr)
        return 2
    per = fetch(urls, session=args.session)
    if args.session is not None:
        print(json.dumps(per, indent=2) if args.json else format_session(args.session, per))
        return 0 if any(isinstance(h, dict) for h in per.values()) else 1
    total = aggregate(per)
    print(json.dumps({"replicas": per, "total": total}, indent=2) if args.json else format_table(per, total))
    return 0 if total["replicas_up"] else 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv[:1] != ["serve"]:
        return stats(parser.parse_args(argv))
    args, rest = parser.parse_known_args(argv)
    try:
        return serve(args, rest)
    except UsageError as e:
        print(f"{PROG} serve: error: {e}", file=sys.stderr)
        return 2
