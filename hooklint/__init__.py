"""hooklint: find PyTorch hook bugs statically, from the model graph, and at run time.

Importing this package does not import torch; the layers that need torch
(``hooklint.graph``, ``hooklint.runtime``) import it when used.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "instrument"]


def __getattr__(name: str):
    # `hooklint.instrument()` lives in the runtime layer, which needs torch;
    # resolve it lazily so that `import hooklint` stays torch-free.
    if name == "instrument":
        from hooklint.runtime import instrument

        return instrument
    raise AttributeError(f"module 'hooklint' has no attribute {name!r}")
