"""`--engine-cores`: the engine's cores and the tools' cores of one host, disjoint."""
import pytest

from mars_openhands.replay.cores import CoreSplit, parse_cores


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
