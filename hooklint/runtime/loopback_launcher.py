"""``python -m hooklint.runtime.loopback_launcher ARGS``: torch's launcher
(``torch.distributed.run ARGS``), with every store it serves bound to the
loopback interface.

The launcher of ``hooklint run --nproc`` serves two TCP stores (the
rendezvous and the ranks' store), which torch binds to every interface: for
the length of a run, anyone who can reach the machine could read and write
the ranks' coordination data (TCPStore has no authentication).  All ranks of
a ``--nproc`` run are local, so here each store is handed a socket bound to
127.0.0.1 (TCPStore's ``master_listen_fd``): other machines cannot connect.
Processes of the same machine still can, as with any torchrun; the store
has no authentication to offer."""

from __future__ import annotations

import socket
import sys


def _loopback_stores() -> None:
    import torch.distributed as dist

    real = dist.TCPStore

    def tcp_store(host_name, port, world_size=None, is_master=False, *args, **kwargs):
        if is_master and kwargs.get("master_listen_fd") is None and len(args) < 4:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", int(port)))
            listener.listen(socket.SOMAXCONN)
            port = listener.getsockname()[1]
            kwargs["master_listen_fd"] = listener.detach()  # the store owns the socket now
            host_name = "127.0.0.1"
        return real(host_name, port, world_size, is_master, *args, **kwargs)

    dist.TCPStore = tcp_store  # type: ignore[assignment,misc]
    # modules that imported the name before this ran
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

    c10d_rendezvous_backend.TCPStore = tcp_store  # type: ignore[attr-defined]


def main() -> None:
    _loopback_stores()
    from torch.distributed.run import main as torch_run

    torch_run(sys.argv[1:])


if __name__ == "__main__":
    main()
