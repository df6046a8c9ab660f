"""Install or remove the `.pth` line that loads the OpenHands runtime patches (see `importhook`).

`python -m mars_openhands.openhands.autopatch install|uninstall|status` (`make setup-agent` runs
`install`). Per process, `MARS_OPENHANDS_PATCH=0` turns the patches off without uninstalling.
"""
from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from mars_openhands.openhands.importhook import DISABLE_ENV, enabled

PTH_NAME = "mars_openhands_patch.pth"
PTH_LINE = "import mars_openhands.openhands.importhook as _m; _m.install_import_hook()\n"


def pth_path() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / PTH_NAME


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in (["install"], ["uninstall"], ["status"]):
        print("usage: python -m mars_openhands.openhands.autopatch {install|uninstall|status}", file=sys.stderr)
        return 2
    path = pth_path()
    if args == ["install"]:
        path.write_text(PTH_LINE)
        print(f"installed {path} (disable per process with {DISABLE_ENV}=0)")
    elif args == ["uninstall"]:
        path.unlink(missing_ok=True)
        print(f"removed {path}")
    else:
        print(f"{path}: {'installed' if path.exists() else 'not installed'}; "
              f"{'enabled' if enabled() else 'disabled by ' + DISABLE_ENV}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
