"""A registry of blocks, filled by a decorator at import time."""

BLOCKS = {}
_names = set()


def register_block(cls):
    BLOCKS[cls.__name__] = cls
    _names.add(cls.__name__.lower())
    return cls
