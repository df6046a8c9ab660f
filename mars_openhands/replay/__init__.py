"""Real-engine replay of `mars-trace/1` sessions: a host tool pool and an agent-like client."""
