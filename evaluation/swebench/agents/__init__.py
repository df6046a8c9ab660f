"""The agents that work on SWE-bench instances: real OpenHands agents, the oracle harness and its LLM proxy."""
