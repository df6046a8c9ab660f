"""Workspaces: bundled-task repositories, and what real instances without Docker stand on (their sources,
environments, terminals and process groups; the backend that drives them is `runs/local_harness.py`)."""
