"""Version-guarded patches of OpenHands / vLLM internals, each small and tested."""
