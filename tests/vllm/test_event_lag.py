"""`EventLag`: the late-event summary `/mars/v1/stats` reports."""
import pytest

from mars_openhands.vllm.event_lag import EventLag


def test_quantiles_cover_the_latest_window_and_the_mean_every_event():
    lag = EventLag(window=3)
    for t in (10.0, 0.0, 0.0, 0.0):      # applied at 10: lags 0, 10, 10, 10
        lag.observe(10.0, t)
    s = lag.stats()
    assert s["events"] == 4 and s["mean_s"] == pytest.approx(7.5) and s["max_s"] == 10.0
    assert s["p50_s"] == 10.0 and s["p90_s"] == 10.0     # the first event left the window


def test_a_window_below_one_is_refused():
    with pytest.raises(ValueError, match="window"):
        EventLag(window=0)
