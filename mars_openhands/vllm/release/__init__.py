"""What the adapter knows of vLLM releases: which are verified, the internals it relies on, each
release's fingerprint, and the calls whose form differs between them."""
