"""The pull scheduler's core: exactly-once completion under random kills, with and without notice."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.spotlight.job_queue import Beat, JobQueue, JobSpec, Lease


def job(i: int, steps: int = 4) -> JobSpec:
    return JobSpec(job_id=i, prompt=f"p{i}", seeds=(i, i + 1), version=0, steps=steps)


def step_value(job_id: int, step: int) -> int:
    """A stand-in for one denoising step's contribution: the final result is their sum over 0..steps-1."""
    return (job_id + 1) * 1000 + step * step


def expected(j: JobSpec) -> int:
    return sum(step_value(j.job_id, s) for s in range(j.steps))


def test_pull_complete_once_and_fencing():
    q = JobQueue(lease_s=10)
    q.submit(job(0))
    lease = q.pull("w0", now=0)
    assert lease is not None and lease.progress is None and lease.progress_step == 0
    assert q.pull("w1", now=0) is None
    assert q.complete(0, lease.token, "img")
    assert not q.complete(0, lease.token, "img-again")
    assert q.results == {0: "img"} and q.stats.completions == [0] and q.done()


def test_duplicate_submit_is_refused():
    q = JobQueue(lease_s=1)
    q.submit(job(0))
    with pytest.raises(ValueError, match="already submitted"):
        q.submit(job(0))


def test_notice_commits_in_flight_and_next_worker_resumes_from_it():
    q = JobQueue(lease_s=10)
    q.submit(job(0))
    q.submit(job(1))
    a = q.pull("spot-a", now=0)
    assert a is not None and a.job.job_id == 0
    assert q.heartbeat(0, a.token, step=2, now=1) is Beat.OK
    q.notice("spot-a")
    assert q.heartbeat(0, a.token, step=3, now=2) is Beat.NOTICE
    assert q.commit(0, a.token, progress="latent@3", step=3)
    assert q.pull("spot-a", now=2) is None  # under notice: pulls nothing more
    b = q.pull("spot-b", now=2)
    assert b is not None and b.job.job_id == 0  # the committed job goes first
    assert (b.progress, b.progress_step) == ("latent@3", 3)
    assert q.stats.committed_on_notice == 1 and q.stats.lost_steps == 0 and q.stats.resumed_steps == 3


def test_no_notice_loss_requeues_on_expiry_and_fences_the_zombie():
    q = JobQueue(lease_s=5)
    q.submit(job(0))
    a = q.pull("w0", now=0)
    assert a is not None
    assert q.heartbeat(0, a.token, step=2, now=1) is Beat.OK
    assert q.expire(now=5.9) == []  # the heartbeat at t=1 renewed it to t=6
    assert q.expire(now=6.0) == [0]
    assert q.stats.lost_steps == 2 and q.stats.requeued_on_expiry == 1
    b = q.pull("w1", now=6)
    assert b is not None and b.progress is None and b.token != a.token
    assert q.heartbeat(0, a.token, step=3, now=6) is Beat.LOST
    assert q.stats.heartbeats == 1  # a refused heartbeat renews nothing and is not counted
    assert not q.complete(0, a.token, "late")  # the vanished worker came back: refused
    assert q.complete(0, b.token, "img")
    assert q.results == {0: "img"}


def test_a_gone_worker_is_fenced_under_a_valid_lease_and_its_job_expires_and_is_redone():
    """Regression (CI): a worker that outlived its removed node for a moment handed in its job under a lease still
    valid, so no lease expired. Once the fleet says the worker is gone, nothing more is accepted from it."""
    q = JobQueue(lease_s=5)
    q.submit(job(0))
    zombie = q.pull("w0", now=0)
    assert zombie is not None and q.heartbeat(0, zombie.token, 2, now=1) is Beat.OK  # renewed to t=6
    q.gone("w0")
    assert q.heartbeat(0, zombie.token, 3, now=2) is Beat.LOST  # 4 s of lease left, but fenced: renews nothing
    assert not q.complete(0, zombie.token, "late")
    assert not q.commit(0, zombie.token, "latent", 3)
    assert q.pull("w0", now=2) is None and q.stats.stale_refused == 3
    assert q.pull("w1", now=5.9) is None and q.stats.requeued_on_expiry == 0
    redo = q.pull("w1", now=6.0)
    assert redo is not None and redo.progress is None and redo.token != zombie.token
    assert (q.stats.requeued_on_expiry, q.stats.lost_steps) == (1, 2)
    assert q.complete(0, redo.token, "img") and q.results == {0: "img"}


def test_expiry_after_a_commit_loses_only_the_steps_since():
    q = JobQueue(lease_s=5)
    q.submit(job(0, steps=8))
    a = q.pull("a", now=0)
    assert a is not None
    q.notice("a")
    q.commit(0, a.token, progress="p3", step=3)
    b = q.pull("b", now=1)
    assert b is not None and b.progress_step == 3
    q.heartbeat(0, b.token, step=6, now=2)
    q.expire(now=100)
    assert q.stats.lost_steps == 3
    c = q.pull("c", now=100)
    assert c is not None and (c.progress, c.progress_step) == ("p3", 3)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n_jobs=st.integers(1, 12), steps=st.integers(1, 5))
def test_random_kills_complete_every_job_exactly_once(data: st.DataObject, n_jobs: int, steps: int) -> None:
    """Workers pull, step, heartbeat and complete; random kills with or without notice, zombies, replacements.

    Each worker's progress is the partial sum of the step values, so a resumed job only gives the
    right result if it really continued from the committed progress.
    """
    lease_s = 3.0
    q = JobQueue(lease_s=lease_s)
    jobs = [job(i, steps) for i in range(n_jobs)]
    for j in jobs:
        q.submit(j)
    now = 0.0
    names = iter(f"w{i}" for i in range(10_000))
    # worker -> (lease, steps done, partial sum) or None when idle
    live: dict[str, tuple[Lease, int, int] | None] = {next(names): None for _ in range(3)}
    zombies: list[tuple[Lease, int]] = []  # (lease, partial) of workers lost without notice
    for _ in range(data.draw(st.integers(0, 120))):
        action = data.draw(st.sampled_from(["pull", "step", "step", "tick", "kill", "notice", "zombie", "join"]))
        if action == "tick":
            now += data.draw(st.sampled_from([0.5, 1.0, 4.0]))
            q.expire(now)
        elif action == "join" and len(live) < 6:
            live[next(names)] = None
        elif not live:
            continue
        else:
            w = data.draw(st.sampled_from(sorted(live)))
            state = live[w]
            if action == "pull" and state is None:
                lease = q.pull(w, now)
                if lease is not None:
                    partial = lease.progress if lease.progress is not None else 0
                    live[w] = (lease, lease.progress_step, int(partial))
            elif action == "step" and state is not None:
                lease, done, partial = state
                jid, token = lease.job.job_id, lease.token
                partial += step_value(jid, done)
                done += 1
                if done == steps:
                    q.complete(jid, token, partial)
                    live[w] = None
                    continue
                beat = q.heartbeat(jid, token, done, now)
                if beat is Beat.NOTICE:
                    assert q.commit(jid, token, partial, done)
                    del live[w]
                elif beat is Beat.LOST:
                    live[w] = None
                else:
                    live[w] = (lease, done, partial)
            elif action == "notice":
                q.notice(w)
                if state is None:
                    del live[w]
            elif action == "kill":  # gone without notice
                del live[w]
            elif action == "zombie" and state is not None:
                del live[w]
                lease, done, partial = state
                for s in range(done, steps):  # it keeps computing, unheard, and finishes the job
                    partial += step_value(lease.job.job_id, s)
                zombies.append((lease, partial))
        if zombies and data.draw(st.booleans()):
            lease, partial = zombies.pop()
            q.complete(lease.job.job_id, lease.token, partial)  # accepted iff still leased
    # Drain: the survivors finish what they hold, then a replacement pulls everything left.
    for state in live.values():
        if state is not None:
            lease, done, partial = state
            for s in range(done, steps):
                partial += step_value(lease.job.job_id, s)
            q.complete(lease.job.job_id, lease.token, partial)
    now += lease_s + 1
    while (lease := q.pull("drain", now)) is not None:
        partial = int(lease.progress) if lease.progress is not None else 0
        for s in range(lease.progress_step, steps):
            partial += step_value(lease.job.job_id, s)
        assert q.complete(lease.job.job_id, lease.token, partial)
    for lease, partial in zombies:
        assert not q.complete(lease.job.job_id, lease.token, partial)
    assert set(q.results) == {j.job_id for j in jobs}
    assert sorted(q.stats.completions) == sorted(set(q.stats.completions))  # no duplicates
    assert q.results == {j.job_id: expected(j) for j in jobs}
