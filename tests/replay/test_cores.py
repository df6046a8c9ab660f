"""`--engine-cores`: the engine's cores and the tools' cores of one host, disjoint."""
import os

import pytest

from mars_openhands.replay.cores import AUTOGROUP, CLIENT_NICE, CoreSplit, client_first, parse_cores


@pytest.mark.parametrize("text, cores", [("0", {0}), ("0-3", {0, 1, 2, 3}), ("0,2-3", {0, 2, 3}), (" 1 , 3", {1, 3})])
def test_core_lists_parse_as_vllm_writes_them(text, cores):
    assert parse_cores(text) == cores


@pytest.mark.parametrize("text, msg", [("", "expected core ids"), ("a", "expected core ids"),
                                       ("1-", "expected core ids"), ("3-1", "runs backwards"),
                                       ("-1", "expected core ids")])
def test_malformed_core_lists_are_refused(text, msg):
    with pytest.raises(ValueError, match=msg):
        parse_cores(text)


def test_tools_get_every_usable_core_the_engine_does_not():
    split = CoreSplit.of("0-1", allowed=frozenset(range(4)))
    assert split.engine == {0, 1} and split.tools == {2, 3}
    assert split.engine_env == {"VLLM_CPU_OMP_THREADS_BIND": "0,1"}


def test_a_core_outside_the_host_or_no_core_left_is_refused():
    with pytest.raises(ValueError, match="core.s. 5 are not among this host's usable cores .0,1."):
        CoreSplit.of("0,5", allowed=frozenset({0, 1}))
    with pytest.raises(ValueError, match=r"core.s. 2,3,4,5,\.\.\. are not"):
        CoreSplit.of("0-99", allowed=frozenset({0, 1}))
    with pytest.raises(ValueError, match="no core is left for the tools"):
        CoreSplit.of("0-1", allowed=frozenset({0, 1}))


def test_client_first_raises_the_group_then_gives_its_nice_back(tmp_path):
    group = tmp_path / "autogroup"
    group.write_text("/autogroup-7 nice 3\n")
    with client_first(group) as first:
        inside = group.read_text()
    assert first and inside == str(CLIENT_NICE) and group.read_text() == "3"


def test_client_first_without_autogroup_changes_nothing(tmp_path):
    with client_first(tmp_path / "absent") as first:
        pass
    assert first is False and not (tmp_path / "absent").exists()


@pytest.mark.skipif(not AUTOGROUP.exists() or os.geteuid() != 0, reason="needs Linux autogroup and root")
def test_client_first_on_this_process_group():
    before = AUTOGROUP.read_text()
    with client_first() as first:
        inside = AUTOGROUP.read_text()
    assert AUTOGROUP.read_text() == before
    if not first:  # root in a container may still lack CAP_SYS_NICE: the group must stay as it was
        assert inside == before
        pytest.skip("this host refuses a lower nice for the process' group (no CAP_SYS_NICE)")
    assert inside.split()[-1] == str(CLIENT_NICE)
