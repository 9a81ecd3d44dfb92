"""The loopback switch: set before Ray is imported, never over the user's own value, and never too late."""

from __future__ import annotations

import os
import subprocess
import sys

from rollarc.rayproc.loopback import LOOPBACK_ENV

PROGRAM = """
import os, sys
from rollarc.rayproc.loopback import LOOPBACK_ENV, keep_local_ray_on_loopback
if sys.argv[1] == "after-ray":
    import ray
print(keep_local_ray_on_loopback(), os.environ.get(LOOPBACK_ENV))
"""


def run(mode: str, user_value: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != LOOPBACK_ENV}
    if user_value is not None:
        env[LOOPBACK_ENV] = user_value
    done = subprocess.run([sys.executable, "-c", PROGRAM, mode], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_set_before_ray_is_imported():
    assert run("before-ray") == "True 0"


def test_the_users_value_wins():
    assert run("before-ray", user_value="1") == "False 1"


def test_too_late_once_ray_is_imported():
    assert run("after-ray") == "False None"
