"""Running a user's script or module as ``__main__``, the way ``python script.py``
and ``python -m module`` do, and reporting how it ended."""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
from dataclasses import dataclass
from types import TracebackType


class ScriptNotFound(Exception):
    """The script or module to run does not exist (a usage error, exit 2)."""


@dataclass
class Outcome:
    exit_code: int
    exception: BaseException | None = None  # an uncaught exception, already printed
    # The script's globals, kept until the caller is done judging (hooks still
    # registered on its models when it ends are judged then).
    namespace: dict | None = None


def check_target(script: str | None, module: str | None) -> None:
    if script is not None:
        if not os.path.exists(script):
            raise ScriptNotFound(f"{script}: no such file or directory")
        if script.lower().endswith(".ipynb"):
            # run as Python, the notebook's JSON fails at its first `null`, in the user's "script"
            raise ScriptNotFound(f"{script}: a Jupyter notebook, not a Python script; export it first "
                                 f"(`jupyter nbconvert --to script {script}`), or check it with `hooklint check`")
        return
    assert module is not None
    # as `python -m` looks: from the working folder first (which hooklint's
    # own start took off sys.path, see hooklint.safe_path)
    saved = sys.path[:]
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise ScriptNotFound(f"{module}: cannot find module ({exc})") from None
    finally:
        sys.path[:] = saved
    if spec is None:
        raise ScriptNotFound(f"No module named {module}")


def run_main(script: str | None, module: str | None, args: list[str]) -> Outcome:
    """Run the script (or module) with ``args`` as its command line.

    ``sys.argv`` and ``sys.path[0]`` are set as Python sets them; ``SystemExit``
    becomes the exit code; another uncaught exception is printed by
    ``sys.excepthook`` without hooklint's frames, and gives exit code 1.
    """
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if script is not None:
            sys.argv = [script, *args]
            _set_path0(os.path.dirname(os.path.abspath(script)))
            namespace = runpy.run_path(script, run_name="__main__")
        else:
            sys.argv = [module or "", *args]  # run_module replaces argv[0] with the module's file
            _set_path0(os.getcwd())
            namespace = runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return Outcome(_exit_code(exc.code))
    except KeyboardInterrupt as exc:
        _print_exception(exc)
        return Outcome(130, exc)
    except BaseException as exc:  # noqa: BLE001 - reported as Python would, then the findings
        _print_exception(exc)
        return Outcome(1, exc)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):  # closed, or replaced by None
                pass
    return Outcome(0, namespace=namespace)


def _set_path0(path: str) -> None:
    # Python puts the script's folder (or, for -m, the working folder) in
    # front of the rest of sys.path; hooklint's own start has no such entry
    # to replace (hooklint.safe_path), so it is added
    sys.path.insert(0, path)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _is_runner_frame(tb: TracebackType) -> bool:
    filename = tb.tb_frame.f_code.co_filename
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return filename.startswith(here + os.sep) or filename == runpy.__file__ or filename.startswith("<frozen runpy")


def _print_exception(exc: BaseException) -> None:
    # as Python prints it: from the script's first frame, without hooklint's
    # (the runner's at the top, the wrappers between a backward and a hook)
    from hooklint.runtime.frames import drop_frames

    drop_frames(exc, _is_runner_frame)
    sys.excepthook(type(exc), exc, exc.__traceback__)
