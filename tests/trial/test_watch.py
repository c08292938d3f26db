"""When a request the server took counts as hung: the rule itself, at chosen moments (no clock involved)."""

from __future__ import annotations

from tuner.trial._watch import Limits, hung

# A first gate request after readiness saw a generation: request-timeout 60, first-request-timeout 600, stall 20.
FIRST = Limits(timeout=60, cap=600, stall=20)


def test_silence_for_the_stall_timeout_is_a_hang_whatever_the_request_timeout():
    assert hung(FIRST, sent=0, last_output=-5, now=19.9) is None
    assert hung(FIRST, sent=0, last_output=-5, now=20).startswith("no response and no log output for 20 s")


def test_past_the_request_timeout_only_a_growing_log_keeps_it_waiting():
    slow = Limits(timeout=60, cap=600, stall=900)  # a stall-timeout longer than the request's
    assert hung(slow, sent=0, last_output=59, now=100) is None  # the server logged 41 s ago: still working
    assert "no log output for the last 60.0 s" in hung(slow, sent=0, last_output=40, now=100)
    assert hung(slow, sent=0, last_output=-1, now=60).startswith("not answered after 60.0 s")
    assert hung(slow, sent=0, last_output=599, now=600) == "not answered after 600.0 s (timeout 600 s)"


def test_a_server_never_seen_generating_keeps_the_whole_first_request_timeout():
    silent_compile = Limits(timeout=600, cap=600, stall=None)
    assert hung(silent_compile, sent=0, last_output=-100, now=599) is None
    assert hung(silent_compile, sent=0, last_output=-100, now=600).startswith("not answered after")
