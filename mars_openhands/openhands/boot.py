"""Install the OpenHands import hook by importing this module.

For processes that never read this package's `.pth` line: the agent-server binary of the Docker
image is frozen (no site-packages), but it takes `--import-modules mars_openhands.openhands.boot`
and finds this package on `OH_EXTRA_PYTHON_PATH` (see `agent_server_image`). Importing it is
equivalent to the `.pth` line: the SDK patch is applied when `openhands.sdk` is (or was already)
imported, and events start when `MARS_CONFIG` or `MARS_EVENTS_URL` is set.
`MARS_OPENHANDS_PATCH=0` still turns it off.
"""
from __future__ import annotations

from mars_openhands.openhands.importhook import install_import_hook

install_import_hook()
