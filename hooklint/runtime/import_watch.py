"""A meta-path finder that calls back once the program imports a module."""

from __future__ import annotations

import importlib.abc
import sys


class ImportWatcher(importlib.abc.MetaPathFinder):
    """Calls ``callback`` once the program has imported ``name`` (the run-time
    extensions patch torch internals only when the program itself loads them)."""

    def __init__(self, name: str, callback):
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        callback, exec_module = self.callback, loader.exec_module

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                exec_module(module)
                callback()

        spec.loader = _Loader()
        return spec
