"""Chunk shrinking and preemption-victim rules (docs/policies.md "MARS" and "Baselines")."""
from __future__ import annotations

from mars_openhands.core import EngineShape, PinOffer, Request, build_policy
from mars_openhands.core.chunking import NoShrink, ShrinkToRoom

SHAPE = EngineShape(total_blocks=10_000, block_size=16, tool_workers=4)


def req(rid: str, session: str, arrival: float, prompt: int, computed: int, blocks: int,
        level: int = 0) -> Request:
    return Request(rid, session, arrival, prompt, computed_tokens=computed, kv_blocks=blocks, level=level)


def test_shrink_without_a_room_halves_block_aligned_down_to_one_block_then_gives_up():
    h, tries, n = ShrinkToRoom(), [], 2048
    while (n := h.shrink(n, 16)) is not None:
        tries.append(n)
    assert tries == [1024, 512, 256, 128, 64, 32, 16]
    assert h.shrink(100, 16) == 48 and h.shrink(16, 16) is None and h.shrink(20, 16) == 16
    assert NoShrink().shrink(2048, 16) is None and NoShrink().shrink(2048, 16, 100) is None


def test_shrink_goes_to_the_room_in_one_step_and_gives_up_below_one_block():
    h = ShrinkToRoom()
    assert h.shrink(2048, 16, room_tokens=1500) == 1500           # halving would stop at 1024
    assert h.shrink(2048, 16, room_tokens=16) == 16 and h.shrink(2048, 16, room_tokens=15) is None
    assert h.shrink(2048, 16, room_tokens=0) is None and h.shrink(2048, 16, room_tokens=-40) is None
    # An engine estimate that proved too high (the room-sized chunk failed): halve instead.
    assert h.shrink(1500, 16, room_tokens=1500) == 736 and h.shrink(1500, 16, room_tokens=4000) == 736
    assert build_policy("mars", SHAPE).shrink(512) == 256 and build_policy("mars", SHAPE).shrink(512, 300) == 300
    assert build_policy("mars-no-chunk-shrink", SHAPE).shrink(512, 300) is None
    assert build_policy("fcfs", SHAPE).shrink(512, 300) is None


def test_mars_victim_is_lowest_priority_then_least_kv_then_newest_prefill_and_spares_decode():
    p = build_policy("mars", SHAPE)
    decoder = req("dec", "a", 5.0, 50_000, 50_000, 4000)           # decode: level -1
    small = req("small", "b", 1.0, 1000, 0, 10)                     # L0
    big_old = req("big_old", "c", 1.0, 40_000, 0, 300)              # L3 by remaining prefill
    big_new = req("big_new", "d", 2.0, 40_000, 0, 300)
    bigger = req("bigger", "e", 0.5, 40_000, 0, 900)
    # among the lowest level, the one holding the least KV: the least work to compute again
    assert p.choose_victim([decoder, small, big_old, big_new, bigger]) is big_new
    assert p.choose_victim([decoder, small, big_old, bigger]) is big_old
    assert p.choose_victim([decoder, small, bigger]) is bigger
    assert p.choose_victim([decoder, small]) is small
    assert p.choose_victim([decoder]) is decoder
    fed_back = req("fb", "f", 0.1, 1000, 0, 5, level=3)            # demoted by feedback to L3
    assert p.choose_victim([small, fed_back]) is fed_back


def test_mars_victim_spares_the_long_prefill_nearly_built_and_autellix_does_not():
    """Two long prefills in the lowest level: MARS preempts the one that has computed less (its
    loss is recomputed), Autellix the larger one, whatever it has built."""
    built = req("built", "a", 1.0, 68_000, 60_000, 3750, level=3)
    fresh = req("fresh", "b", 2.0, 45_000, 8_000, 500, level=3)
    assert build_policy("mars", SHAPE).choose_victim([built, fresh]) is fresh
    assert build_policy("autellix", SHAPE).choose_victim([built, fresh]) is built


def test_autellix_victim_ranks_decoders_by_their_level_too():
    p = build_policy("autellix", SHAPE)
    decoder = req("dec", "a", 5.0, 500, 500, 4000, level=2)
    prefill = req("pre", "b", 1.0, 9000, 0, 10, level=1)
    assert p.choose_victim([decoder, prefill]) is decoder


def test_fcfs_victim_is_the_newest_request():
    p = build_policy("fcfs", SHAPE)
    a, b = req("a", "a", 1.0, 10, 10, 1), req("b", "b", 2.0, 10, 10, 1)
    assert p.choose_victim([b, a]) is b


def test_continuum_victim_is_the_request_of_the_latest_session():
    p = build_policy("continuum", SHAPE)
    for sid, t in (("early", 0.0), ("late", 10.0)):
        p.on_request_arrival(Request(f"{sid}0", sid, t, 100), t)
    late_call = Request("late1", "late", 11.0, 100)
    early_call = Request("early1", "early", 20.0, 100)               # newer call, older session
    assert p.choose_victim([early_call, late_call]) is late_call


def continuum_with_pins(name: str):
    p = build_policy(name, SHAPE)
    for i, sid in enumerate(("a", "b", "c")):
        p.on_request_arrival(Request(sid, sid, float(i), 100), float(i))
        d = p.on_request_finished(Request(sid, sid, float(i), 100, computed_tokens=100), 5, 10.0 + i)
        assert d.pin is not None
        p.record_pin(sid, 5, d.pin, 10.0 + i)
    return p


def test_continuum_drops_pins_only_when_at_most_one_request_runs_latest_expiry_first():
    p = continuum_with_pins("continuum")
    busy = [(Request(f"r{i}", "x", 0.0, 10, computed_tokens=10), 1) for i in range(2)]
    p.on_step(busy, [], 12.5)
    assert p.revocation_order() == []                       # preempt running requests instead
    p.on_step(busy[:1], [], 12.6)
    assert [x.session_id for x in p.revocation_order()] == ["c", "b", "a"]


def test_continuum_revocation_uses_the_ttl_expiry_not_the_hold_while_resumed():
    p = continuum_with_pins("continuum")
    p.on_request_arrival(Request("a2", "a", 10.5, 200), 10.5)   # a's next call is in: held
    assert p.resume_pin("a") is None and p.ctx.pins.get("a").expires_s == float("inf")
    assert [x.session_id for x in p.revocation_order()] == ["c", "b", "a"]


def test_mars_revokes_lowest_value_density_first():
    p = build_policy("mars", SHAPE)
    for sid, density in (("a", 3.0), ("b", 1.0), ("c", 2.0)):
        p.record_pin(sid, 5, PinOffer(100.0, density), 0.0)
    assert [x.session_id for x in p.revocation_order()] == ["b", "c", "a"]
