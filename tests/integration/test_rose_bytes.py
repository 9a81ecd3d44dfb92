"""``measured_cross_site_bytes``: a real short ``harvest:`` training run measures the bytes into the borrowed site.

The run starts a Ray cluster of its own, not the suite's shared one (tests/integration/shared_ray.py):
``measured_cross_site_bytes`` runs ``configs/harvest.yaml`` as ``rollarc bench rose`` does and takes no overrides,
so no ``cluster.address`` reaches it.
"""

from __future__ import annotations

import pytest

from rollarc.bench.rose_bytes import measured_cross_site_bytes

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1200)  # SFT warm start, Ray start-up, three RL steps with two co-serving replicas
def test_the_measured_cross_site_bytes_per_step_are_below_one_full_copy():
    result = measured_cross_site_bytes(quick=True)
    print("measured:", result)
    assert result["steps"] == 3 and result["lr"] == 2e-4
    assert result["cross_site_bytes_per_step"] > 0 and result["in_site_bytes_per_step"] > 0
    assert result["full_copy_bytes"] > 0
    assert result["cross_site_bytes_per_step"] < result["full_copy_bytes"]
