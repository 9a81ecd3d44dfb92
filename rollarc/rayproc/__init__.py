"""Ray process helpers, below every other layer: the one way a local Ray cluster starts (``local_start``), kept on
the loopback interface (``loopback``) and reaped after it stops (``reaper``); the deadline on every wait for an
actor (``deadline``); and Ray actor options computed as plain dicts from the cluster config (``placement``)."""
