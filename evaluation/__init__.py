"""Benchmarks that drive mars-openhands the way users run it (SWE-bench)."""
