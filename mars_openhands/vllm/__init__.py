"""vLLM integration: scheduler classes, engine/endpoint plugins and the `serve` launcher.

Importing this package does not import vLLM; the modules that need it do.
"""
