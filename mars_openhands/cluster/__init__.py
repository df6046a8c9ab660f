"""N MARS engines behind vLLM's own router (`vllm-router`), with session affinity.

`mars-openhands cluster serve` starts the replicas and the router and stops them all on Ctrl-C /
SIGTERM; `mars-openhands cluster stats` aggregates the replicas' `/mars/v1/stats`. MARS itself runs
unchanged in each replica: the router's `sticky_least_loaded` policy puts a new session on the
replica with the fewest sessions and keeps its calls and events (both carry `X-Session-ID`) there,
and the policy core tolerates the rest (events of sessions not seen yet, sessions that moved,
agents that send no events: `core.boundaries`).
See docs/cluster.md.
"""
