"""camlib: class activation maps (a src-layout package)."""

from importlib import metadata as _metadata

from .models import SmallResNet

try:
    __version__ = _metadata.version("camlib")
except _metadata.PackageNotFoundError:  # not installed: running from a checkout
    __version__ = "0+unknown"

__all__ = ["SmallResNet", "__version__"]
