"""The suite's budget (docs/development.md): an integration module that starts a Ray cluster of its own says why.

Runs join the suite's shared cluster (tests/integration/shared_ray.py); a module that calls ``ray.init`` other than
on that address, ``init_local_ray`` or ``ray.cluster_utils.Cluster`` starts one of its own, which costs the suite
5-7 s a start. Its module docstring must name the shared cluster's file and say why it cannot join."""

from __future__ import annotations

import ast
import re
from pathlib import Path

INTEGRATION = Path(__file__).parent.parent / "integration"
OWN_CLUSTER = re.compile(r"ray\.init\((?!address=shared_ray\.address\(\))|init_local_ray\(|\bCluster\(")


def own_cluster_modules() -> dict[str, str]:
    """Integration modules that start a cluster of their own, with their module docstrings."""
    found = {}
    for path in sorted(INTEGRATION.glob("test_*.py")):
        source = path.read_text()
        if OWN_CLUSTER.search(source):
            found[path.name] = ast.get_docstring(ast.parse(source)) or ""
    return found


def test_every_module_with_a_cluster_of_its_own_says_why():
    modules = own_cluster_modules()
    assert "test_multinode_placement.py" in modules and "test_runtime.py" not in modules  # the rule sees both kinds
    silent = [name for name, doc in modules.items() if "shared_ray.py" not in doc]
    assert silent == [], f"say in the module docstring why it cannot join tests/integration/shared_ray.py: {silent}"


def test_the_rule_tells_a_shared_join_from_a_cluster_of_its_own():
    assert OWN_CLUSTER.search("ray.init(num_cpus=1)") and OWN_CLUSTER.search("cluster = Cluster(initialize_head=True)")
    assert not OWN_CLUSTER.search("ray.init(address=shared_ray.address())")
