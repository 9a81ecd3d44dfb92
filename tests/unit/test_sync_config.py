"""The ``sync:`` config section: defaults, derived bucket size, and errors that name the key."""

from __future__ import annotations

import pytest

from rollarc.config.io import ConfigError, load_config
from rollarc.sync.config import SyncConfig


def test_defaults_and_bucket_bytes():
    config = SyncConfig()
    assert config.method == "full" and config.dtype is None and config.bucket_bytes == 64 << 20
    assert load_config(SyncConfig, None, ["method=delta", "bucket_mb=0.5", "dtype=bfloat16"]).bucket_bytes == 1 << 19


@pytest.mark.parametrize(
    "override, key",
    [
        ("method=sparse", "method"),
        ("bucket_mb=0", "bucket_mb"),
        ("dense_threshold=1.5", "dense_threshold"),
        ("history=-1", "history"),
        ("dtype=int8", "dtype"),
        ("topology=tree", "topology"),  # the fan-out is harvest.fanout, not a sync key
    ],
)
def test_bad_values_are_named(override, key):
    with pytest.raises(ConfigError, match=key):
        load_config(SyncConfig, None, [override])
