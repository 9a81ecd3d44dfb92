"""Start a new local Ray cluster, surviving a GCS that never comes up.

Ray's ``ray.init`` starts the GCS server and waits for it to publish its port in a file. On a loaded
2-core machine that start has taken longer than Ray's 30 s default, so a local start waits
``GCS_PORT_WAIT_S`` (Ray reads ``RAY_gcs_server_port_wait_time_s`` at each start; a user's value
wins). Rarely the GCS never starts at all: in one CI run of the test suite, out of about a hundred
local starts in one process, one GCS wrote no log and no port file, and ``ray.init`` raised
``RuntimeError: Timed out waiting for file .../gcs_server_port_...``. A second start in a fresh
session directory is the cure, so :func:`init_local_ray` reaps what the failed session left and
tries again, ``GCS_START_ATTEMPTS`` times in all. Any other error is raised at once.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from typing import Any

import ray

from rollarc.rayproc.reaper import reap

GCS_PORT_WAIT_ENV = "RAY_gcs_server_port_wait_time_s"
GCS_PORT_WAIT_S = 120
GCS_START_ATTEMPTS = 3
_GCS_TIMEOUT = re.compile(r"Timed out waiting for file (?P<session>\S+)/gcs_server_port_\S*")

log = logging.getLogger(__name__)


def gcs_start_timeout_session(error: BaseException) -> str | None:
    """The session directory of a GCS that never published its port, or None for any other error."""
    if not isinstance(error, RuntimeError):
        return None
    found = _GCS_TIMEOUT.search(str(error))
    return found.group("session") if found else None


def init_local_ray(init: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """``ray.init(address="local", **kwargs)`` with a longer GCS wait, retried when the GCS never starts.

    ``init`` replaces ``ray.init`` (tests); the default is looked up at call time.
    """
    start = init or ray.init
    os.environ.setdefault(GCS_PORT_WAIT_ENV, str(GCS_PORT_WAIT_S))
    for attempt in range(1, GCS_START_ATTEMPTS + 1):
        try:
            return start(address="local", **kwargs)
        except RuntimeError as error:
            session = gcs_start_timeout_session(error)
            if session is None or attempt == GCS_START_ATTEMPTS:
                raise
            log.warning(
                "Ray's GCS did not start (attempt %d of %d); starting a new session", attempt, GCS_START_ATTEMPTS
            )
            ray.shutdown()
            reap(session)
    raise AssertionError("unreachable: the last attempt returns or raises")
