"""A driver run inside the private network: one actor on each node, reporting pid and node.

``python probe.py`` prints one JSON line ``{"nodes": N, "actors": [{pid, node}...]}``; the
actors stay alive (detached) until the cluster is stopped, so their sockets can be inspected.
"""

from __future__ import annotations

import json
import os

import ray


@ray.remote(num_cpus=0)
class Probe:
    def where(self) -> dict[str, object]:
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}


def main() -> None:
    ray.init(
        address=os.environ["RAY_ADDRESS"],
        namespace="probe",
        logging_level="ERROR",
        _node_ip_address="127.0.0.1",
    )
    alive = [n for n in ray.nodes() if n["Alive"]]
    actors = [
        Probe.options(name=f"probe-{r}", lifetime="detached", resources={r: 0.01}).remote()
        for r in ("node_head", "node_b")
    ]
    places = ray.get([a.where.remote() for a in actors], timeout=120)
    print(json.dumps({"nodes": len(alive), "actors": places}))


if __name__ == "__main__":
    main()
