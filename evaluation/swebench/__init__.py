"""SWE-bench on mars-openhands: the bundled offline task repo and host-side grading."""
