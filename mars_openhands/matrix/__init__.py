"""Workload matrix benchmark (`mars-openhands bench-matrix`): every policy on a grid of workload
families x tool workers x KV capacity x load, in the simulator."""
