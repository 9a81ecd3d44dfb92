"""Pipelined heartbeats (rollarc/spotlight/heartbeat.py): the loop never waits, at most one is in flight,
and a NOTICE or LOST is acted on once its answer is back."""

from rollarc.spotlight.heartbeat import pipelined_beat
from rollarc.spotlight.job_queue import Beat


class Transport:
    """Heartbeats as numbered handles; ``answers`` holds what has come back so far."""

    def __init__(self):
        self.sent = 0
        self.answers: dict[int, Beat] = {}

    def send(self):
        self.sent += 1
        return self.sent

    def answer(self, handle):
        return self.answers.get(handle)


def test_the_first_point_sends_and_keeps_going():
    t = Transport()
    assert pipelined_beat(None, t.send, t.answer) == (Beat.OK, 1)
    assert t.sent == 1


def test_an_answer_not_back_yet_is_not_waited_for_and_nothing_more_is_sent():
    t = Transport()
    assert pipelined_beat(1, t.send, t.answer) == (Beat.OK, 1)
    assert t.sent == 0


def test_an_ok_answer_is_followed_by_the_next_heartbeat():
    t = Transport()
    t.sent, t.answers[1] = 1, Beat.OK
    assert pipelined_beat(1, t.send, t.answer) == (Beat.OK, 2)


def test_a_notice_or_a_lost_lease_is_acted_on_and_nothing_is_sent_after_it():
    for word in (Beat.NOTICE, Beat.LOST):
        t = Transport()
        t.sent, t.answers[1] = 1, word
        assert pipelined_beat(1, t.send, t.answer) == (word, None)
        assert t.sent == 1


def test_a_loop_of_points_sees_a_notice_one_point_after_the_queue_gave_it():
    """Answers come back one point after they are sent; the queue notices the worker at its 3rd heartbeat."""
    t = Transport()
    words, pending = [], None
    for _ in range(5):
        if pending is not None:  # the answer to the heartbeat sent at the previous point is back now
            t.answers[pending] = Beat.NOTICE if pending >= 3 else Beat.OK
        beat, pending = pipelined_beat(pending, t.send, t.answer)
        words.append(beat)
        if beat is not Beat.OK:
            break
    assert words == [Beat.OK, Beat.OK, Beat.OK, Beat.NOTICE] and t.sent == 3
