"""Keep a rollarc-started local Ray cluster on the loopback interface.

Ray 2.60 binds the GCS, the raylet, every worker's gRPC server, the dashboard agent (gRPC, HTTP and
Prometheus metrics) and the runtime-env agent to the *node IP*, which it detects as the machine's
outward address; ``ray.init(_node_ip_address="127.0.0.1")`` does not help, because Ray swaps a
loopback address for the detected one. Ray takes the loopback address as the node IP only when
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` is false (its single-machine mode), and it reads that variable
once, when ``ray`` is first imported. So the ``rollarc`` command sets it before anything imports Ray,
and only for a local cluster: a driver that joins a cluster (``--address``, ``cluster.address``) must
be reachable from the other nodes. A user who sets the variable keeps their value.
"""

from __future__ import annotations

import os
import sys

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def keep_local_ray_on_loopback() -> bool:
    """Ask Ray for a loopback-only node; returns whether it will apply (False once Ray is imported)."""
    if "ray" in sys.modules:
        return os.environ.get(LOOPBACK_ENV, "").lower() in ("0", "false")
    os.environ.setdefault(LOOPBACK_ENV, "0")
    return os.environ[LOOPBACK_ENV].lower() in ("0", "false")
