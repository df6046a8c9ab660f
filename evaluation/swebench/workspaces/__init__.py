"""Workspace backends: bundled-task repositories, and real instances without Docker (their environments,
terminals and process groups)."""
