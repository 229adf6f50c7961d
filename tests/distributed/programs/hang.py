"""Every rank ignores SIGTERM, starts a grandchild that leaves its session (only
its environment still marks it), says it is ready, then hangs.  Nothing may
survive `hooklint run --nproc 2 --timeout`, nor Ctrl-C."""

import os
import signal
import subprocess
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
with open(os.path.join(sys.argv[1], f"ready{dist.get_rank()}"), "w"):
    pass
time.sleep(600)
