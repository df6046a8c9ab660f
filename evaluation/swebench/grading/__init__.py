"""Grading predictions on the host with swebench's own functions, and the patches they grade."""
