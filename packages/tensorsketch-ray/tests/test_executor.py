"""``RayExecutor``: a ``Send`` fan-out across the cluster equals the in-process run, a
batch whose worker is killed is retried without repeating an effect, and a durable subgraph
node sent to the cluster runs its nodes there, checkpointed on its own thread here.

The graph runs in a driver process inside the private network (``fanout_driver.py``): a
driver outside could not reach the cluster, which is the point of the harness. The driver
runs each graph both ways and reports; the assertions are here.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import create_executor
from tensorsketch.ray.testing import LocalRayCluster
from tensorsketch.registry import executors

HERE = Path(__file__).parent


def drive(cluster: LocalRayCluster, *args: str) -> dict[str, Any]:
    driver = cluster.driver(
        [sys.executable, str(HERE / "fanout_driver.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = driver.communicate(timeout=600)
    assert driver.returncode == 0, err[-4000:]
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return report


def test_ray_is_an_executor_name_and_building_one_does_not_connect() -> None:
    assert executors.origin("ray") == "plugin 'ray'"
    executor = create_executor("ray", batch_size=50)
    assert type(executor).__name__ == "RayExecutor"
    assert executor.batch_size == 50  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"batch_size=...\) takes an int >= 1, got 0"):
        create_executor("ray", batch_size=0)
    # A graph compiled with it pickles (the copy is a fresh executor with the same options).
    copy = pickle.loads(pickle.dumps(executor))
    assert copy is not executor and copy.batch_size == 50  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_10k_send_fan_out_across_the_cluster_equals_the_in_process_run(
    ray_cluster: LocalRayCluster,
) -> None:
    report = drive(ray_cluster, "equal", "10000")
    assert report["equal"] and report["json_equal"] and report["in_order"]
    assert report["outs"] == 10_000
    nodes = report["batches_per_node"]
    assert sum(nodes) == 100, "10,000 instances in batches of 100"
    assert len(nodes) == 2, f"both nodes ran batches: {nodes}"


@pytest.mark.slow
@pytest.mark.parametrize("retries", [3, 0], ids=["ray-retries", "out-of-retries-then-resume"])
def test_a_batch_whose_worker_is_killed_is_retried_without_repeating_effects(
    ray_cluster: LocalRayCluster, tmp_path: Path, retries: int
) -> None:
    report = drive(ray_cluster, "kill", "1000", str(tmp_path), str(retries))
    assert report["killed_pid"], "instance 150 killed its worker"
    if retries:
        assert report["failed_first"] is None, "Ray's retry finished the superstep"
    else:
        # No retry left: the superstep fails, the batch's reported effects are journaled
        # with the failure, and invoking the thread again replays them.
        assert report["failed_first"] is not None
    assert report["equal"], "the retried run's state equals the in-process run's"
    # The in-process run and the shipped thread (over both its invocations): each item's
    # effect ran once in each.
    assert report["runs"] == 2
    assert report["items_per_run"] == [1000, 1000]
    print("REPORT", json.dumps(report))
    assert report["max_effects_per_item"] == 1, report
    assert report["killer_journaled"], "the killed attempt's effect reached the journal"


@pytest.mark.slow
def test_a_durable_subgraph_sent_to_the_cluster_runs_its_nodes_there(
    ray_cluster: LocalRayCluster, tmp_path: Path
) -> None:
    report = drive(ray_cluster, "subgraph", str(tmp_path))
    assert report["equal"], "the cluster's end state is the in-process one"
    assert report["found"] == sorted(
        ["ask-a:yes", "b:kept", "c:kept"]
        + [f"dug {t}-{k}" for t in ("ask-a", "b", "c") for k in range(3)]
    )
    # The interrupt on a worker surfaces with the child's location, alike both ways.
    assert report["interrupts"]["ray"] == report["interrupts"]["local"]
    assert report["interrupts"]["ray"] == ["Inquiry#0/2:Review:0:interrupt", ["Inquiry#0"]]
    # Each instance checkpointed on its own child thread of the parent's, in the caller's store.
    local_threads, ray_threads = report["threads"]
    assert ray_threads == ["ray", *(f"ray/1:Inquiry#{k}:0:subgraph" for k in range(3))]
    assert [t.replace("local", "ray") for t in local_threads] == ray_threads
    # Every child node body of the cluster run ran on a cluster node (the in-process run's
    # ran in the driver): 3 instances x (Leads, 3 Digs, Review, Review again on resume).
    for node, count in (("Leads", 3), ("Dig", 9), ("Review", 4)):
        markers = report["where"][node]
        on_cluster = [m for m in markers if not m.endswith("/driver")]
        assert len(on_cluster) == count, (node, markers)
    # Every dig ran once per run, across the suspension and the resume.
    assert set(report["effects"].values()) == {1}, report["effects"]
    assert len(report["effects"]) == 18
