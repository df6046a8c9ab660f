"""Record a vLLM release's fingerprint (what the MARS adapter's internals guard relies on).

Reads the release's own Python source, from a wheel or a source tree (a checkout, an unpacked
sdist, or an installed `site-packages/vllm`), and writes its entry into
`mars_openhands/vllm/release/vllm_fingerprints.json`, keyed by the release version. Nothing is imported
from the release and no vLLM source is kept.

    pip download --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 vllm==0.34.0 -d /tmp/vw
    python scripts/vllm_fingerprint.py --wheel /tmp/vw/vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl
    python scripts/vllm_fingerprint.py --source .venv/lib/python3.11/site-packages/vllm
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mars_openhands.vllm.release.fingerprint import (  # noqa: E402
    FINGERPRINTS,
    FingerprintError,
    fingerprint,
    guard_problems,
    read_source,
    read_wheel,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--wheel", type=Path, help="a vllm wheel (.whl)")
    src.add_argument("--source", type=Path, help="a vLLM checkout or installed vllm package")
    parser.add_argument("--out", type=Path, default=FINGERPRINTS, help="fingerprint file to update")
    args = parser.parse_args(argv)
    try:
        read = read_wheel(args.wheel) if args.wheel else read_source(args.source)
        version, fp = fingerprint(read)
    except FingerprintError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    data = json.loads(args.out.read_text()) if args.out.is_file() else {}
    data[version] = fp
    ordered = dict(sorted(data.items(), key=lambda kv: tuple(int(p) for p in kv[0].split("."))))
    args.out.write_text(json.dumps(ordered, indent=1, sort_keys=False) + "\n")
    problems = guard_problems(fp)
    print(f"vllm {version}: written to {args.out}; guard: "
          + ("; ".join(problems) if problems else "every required internal present"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
