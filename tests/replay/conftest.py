import pytest

from tests.replay.replay_fake_engine import FakeEngine, ServedFake


@pytest.fixture
def fake_engine():
    with ServedFake(FakeEngine()) as engine:
        yield engine
