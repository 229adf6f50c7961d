"""When the cycle collector runs during the analysis of a file.

The analysis links every node of a syntax tree to its parent and scope, and
its caches point back at the model: once a file is done, its tree and
everything computed about it are cyclic garbage, which only the cycle
collector frees.  Left to run as allocations come, the collector traversed
the young objects of a big file again and again as they aged into older
generations: a quarter of the CPU of a run over the corpus of
bench/corpus.py.  Switched off while a file is analysed, everything the file
allocates stays in the youngest generation, and one collection of that
generation afterwards frees it, traversing each object once.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collected_after() -> Iterator[bool]:
    """The collector off for the block, then one collection of the youngest
    generation.  Yields False when the collector was already off (a caller
    managing it, or another thread inside this block): the block's garbage is
    then left to whoever turns it back on.  (A thread that finds it off does
    not turn it on; the one that turned it off does, so it ends up on.)"""
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    try:
        yield collecting
    finally:
        if collecting:
            gc.enable()
            gc.collect(0)
