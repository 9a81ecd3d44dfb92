"""Hand-built draining maps: which spot workers a Ray node drain notices, and when its deadline falls."""

from rollarc.diffusion.spot_fleet import member_key, split_member_key
from rollarc.spotlight.drain_notice import seconds_left, to_notice


def test_every_worker_on_a_draining_node_is_noticed_once():
    workers = {"spot0-g0": "aa", "spot1-g0": "bb", "spot2-g0": "aa", "spot3-g0": "cc"}
    draining = {"aa": 1_000_000, "dd": 5}  # dd hosts none of ours: ignored
    assert to_notice(draining, workers, set()) == ["spot0-g0", "spot2-g0"]
    assert to_notice(draining, workers, {"spot0-g0"}) == ["spot2-g0"]
    assert to_notice(draining, workers, {"spot0-g0", "spot2-g0"}) == []


def test_no_drain_notices_nobody():
    assert to_notice({}, {"spot0-g0": "aa"}, set()) == []
    assert to_notice({"aa": 0}, {}, set()) == []


def test_a_replacement_on_a_new_node_is_not_noticed_by_the_old_drain():
    workers = {"spot0-g1": "ee"}  # spot0-g0's node aa drained and went; its replacement runs on ee
    assert to_notice({"aa": 7}, workers, {"spot0-g0"}) == []


def test_seconds_left_to_the_deadline():
    assert seconds_left(12_500, 10.0) == 2.5
    assert seconds_left(9_000, 10.0) == 0.0  # past: none left
    assert seconds_left(0, 10.0) is None  # Ray's "no deadline"


def test_a_members_own_node_is_named_apart_from_its_worker_for_the_drain_watcher() -> None:
    assert member_key("spot0-g1", 2) == "spot0-g1#m2"
    assert split_member_key("spot0-g1#m2") == ("spot0-g1", 2)
    assert split_member_key("spot10-g0#m12") == ("spot10-g0", 12)
    assert split_member_key("spot0-g1") == ("spot0-g1", None)  # a worker's own node
