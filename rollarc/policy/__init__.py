"""The pure scheduling core: which group to launch, which groups to train, which replica serves a turn.

No Ray, no SimPy, no I/O: the Ray controller and router (``rollarc.runtime``), the discrete-event
simulator (``rollarc.sim``) and the in-process replay driver (:mod:`rollarc.policy.replay`) all drive
these same objects, so a simulated figure describes the scheduler rollarc really runs.

- :mod:`~rollarc.policy.freshness`: the one staleness rule.
- :mod:`~rollarc.policy.scheduler`: admission, finished groups and batches as one state machine.
- :mod:`~rollarc.policy.step_plan`: the step cycle around it (train, sync, record, evaluate, checkpoint, stop).
- :mod:`~rollarc.policy.task_mix`: which task the next group samples.
- :mod:`~rollarc.policy.redundancy`: which rollouts of a redundant group are kept.
- :mod:`~rollarc.policy.routing` and :mod:`~rollarc.policy.dispatcher`: which replica serves a turn (with the
  hard capacity that borrowed replicas need).
- :mod:`~rollarc.policy.lending`: when a co-serving replica is lent to rollouts and when it is withdrawn.
"""
