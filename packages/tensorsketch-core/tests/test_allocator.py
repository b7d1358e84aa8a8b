"""Reading a large checkpoint row back must not fault in fresh memory on every read.

Each case runs in a fresh interpreter, where glibc's malloc still has its starting mmap
threshold. The control run skips the allocator setting and shows the cost being removed; on
a platform whose allocator does not map large blocks afresh the test has nothing to prove.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

READS = 20

SCRIPT = """
import asyncio, resource, sys
from tensorsketch.runtime import allocator
if sys.argv[2] == "control":
    allocator._settled = True  # as if done already: the threshold stays where glibc starts it
from tensorsketch.runtime.backends import SqliteBackend
from tensorsketch.runtime.backends.base import StoredCheckpoint

backend = SqliteBackend(sys.argv[1], threaded=False)
row = StoredCheckpoint("t", "c1", None, 0, 0.0, bytes(range(256)) * 2400)  # a 614 kB row
asyncio.run(backend.save_checkpoint(row))
for _ in range(3):  # warm: the statement, the page cache, the blocking path
    assert backend.read_chain_blocking("t")[0].payload == row.payload
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range({reads}):
    backend.read_chain_blocking("t")
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / {reads})
""".replace("{reads}", str(READS))


def _faults_per_read(tmp_path: Path, mode: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / f"{mode}.db"), mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return float(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_reading_a_large_row_reuses_memory_instead_of_faulting_in_new_pages(
    tmp_path: Path,
) -> None:
    control = _faults_per_read(tmp_path, "control")
    if control < 50:
        pytest.skip(f"this allocator does not map large blocks afresh ({control} faults/read)")
    settled = _faults_per_read(tmp_path, "settled")
    # Without the setting every read maps and faults in the row's pages twice (~300 faults
    # for 614 kB); with it the memory comes back from the heap.
    assert settled < control / 10, (settled, control)
    assert settled < 10, settled
