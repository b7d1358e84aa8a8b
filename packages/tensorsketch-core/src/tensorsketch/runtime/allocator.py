"""Keep reads of large checkpoint rows off fresh memory mappings (glibc's malloc).

glibc serves a block above its mmap threshold (128 kB at start) from a fresh mapping and
unmaps it when it is freed; the threshold only rises when a *larger* mapped block is freed.
Reading a state whose snapshot row is, say, 465 kB asks for two blocks of just that size on
every read (the driver's copy of the row and the ``bytes`` handed to the serializer), so every
read maps and faults in ~200 fresh pages: about half a millisecond on a small VM, as much as
decoding the row. Freeing one 8 MiB block once raises the threshold past the rows a state
usually has, as it would be in any process that once handled a large request. Elsewhere (other
allocators, other systems) the one allocation is freed and changes nothing.
"""

from __future__ import annotations

import sys

#: Rows up to this size then reuse heap memory from read to read (glibc caps the adaptive
#: threshold at 32 MiB; the heap keeps up to twice this much free memory before trimming).
HEADROOM = 8 << 20

_settled = False


def settle_for_large_rows() -> None:
    """Once per process, on Linux: raise glibc's adaptive mmap threshold to :data:`HEADROOM`
    (a backend calls this when it is created)."""
    global _settled
    if _settled or not sys.platform.startswith("linux"):
        return
    _settled = True
    # calloc'd from a fresh, untouched mapping and freed at once: glibc's free() then raises
    # its mmap threshold to this block's size.
    bytes(HEADROOM)
