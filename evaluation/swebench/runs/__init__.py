"""Driving a run: K concurrent agents, the engine beside them, and the run directory's files."""
