from rollarc.runtime.sync_report import sync_span, sync_timings


def test_the_span_is_on_wall_time_and_names_the_replica_and_version() -> None:
    span = sync_span(worker="rollout-1", pool="fast", t0=2.0, t1=2.5, wall_offset=100.0, version=7)
    assert span == {
        "worker": "rollout-1",
        "role": "rollout",
        "kind": "sync",
        "t0": 102.0,
        "t1": 102.5,
        "version": 7,
        "pool": "fast",
    }


def test_the_timings_carry_bytes_as_floats_and_this_process_memory() -> None:
    timings = sync_timings(fetch_s=0.25, apply_s=0.5, total_s=0.75, nbytes=1024, model_bytes=4096)
    assert {k: v for k, v in timings.items() if k != "rss_mb"} == {
        "fetch_s": 0.25,
        "apply_s": 0.5,
        "total_s": 0.75,
        "bytes": 1024.0,
        "model_bytes": 4096.0,
    }
    assert isinstance(timings["bytes"], float) and timings["rss_mb"] > 0
