"""`python -m mars_openhands.sim.bench`: one row per policy, the fastest of `--repeat` runs."""
from __future__ import annotations

import pytest

from mars_openhands.sim import bench


def test_each_policy_gets_one_row_with_its_fastest_and_slowest_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--sessions", "4", "--policies", "fcfs,mars", "--repeat", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    header = out[1].split()
    assert header[:3] == ["policy", "cpu_s", "cpu_max"]
    rows = {line.split()[0]: line.split() for line in out[2:4]}
    assert set(rows) == {"fcfs", "mars"}
    for row in rows.values():
        assert float(row[1]) <= float(row[2])
    assert not any(line.startswith("over target") for line in out)


@pytest.mark.parametrize(("argv", "named"), [(["--repeat", "0"], "--repeat"), (["--sessions", "0"], "--sessions"),
                                              (["--policies", "nope"], "unknown policy nope")])
def test_bad_arguments_are_refused_by_name(argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    assert named in capsys.readouterr().err
