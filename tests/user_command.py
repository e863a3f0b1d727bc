"""A user's own training command, as the PID 1 tests run it (``python -m launcher -- python
tests/user_command.py MODE ...``), in a PID namespace (tests/launcher/test_pid1.py) and in the
images (tests/images/test_user_command.py). Plain Python 3.7, no project imports.

Modes:
  sleep                  no signal handler; prints "ready", then sleeps (a script that never
                         thought about SIGTERM)
  handler FILE CODE      on SIGTERM writes FILE and exits CODE; prints "ready", then sleeps
  orphans                leaves two grandchildren behind (they outlive their parent, which
                         exits at once) and waits until they have exited; then prints the
                         zombies left in this PID namespace (``zombies: N``) and exits 0
  exit CODE              exits with CODE
  kill                   kills itself with SIGKILL
  init                   prints PID 1's name and resident memory (``init: NAME RSS_KB``) and
                         this process's pid and parent pid (``pid: PID PPID``)
"""

import os
import signal
import subprocess
import sys
import time


def ready():
    print("ready", flush=True)


def sleep_forever():
    while True:
        time.sleep(0.05)


def zombies():
    """Processes of this PID namespace in state Z (what ``ps`` shows as <defunct>)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/{}/stat".format(pid)) as handle:
                stat = handle.read()
        except OSError:  # exited and reaped meanwhile
            continue
        if stat[stat.rindex(")") + 2] == "Z":
            found.append(int(pid))
    return found


def leave_orphans():
    # The shell exits at once; its two background sleeps are reparented to PID 1, and become
    # zombies when they end unless PID 1 reaps them.
    subprocess.run(["sh", "-c", "sleep 0.3 & sleep 0.6 & exit 0"], check=True)
    time.sleep(1.5)
    print("zombies: {}".format(len(zombies())), flush=True)


def show_init():
    with open("/proc/1/comm") as handle:
        name = handle.read().strip()
    with open("/proc/1/status") as handle:
        rss = [line.split()[1] for line in handle if line.startswith("VmRSS:")]
    print("init: {} {}".format(name, rss[0] if rss else "0"), flush=True)
    print("pid: {} {}".format(os.getpid(), os.getppid()), flush=True)


def main(argv):
    mode = argv[0]
    if mode == "sleep":
        ready()
        sleep_forever()
    elif mode == "handler":
        path, code = argv[1], int(argv[2])

        def on_sigterm(signum, frame):
            with open(path, "w") as handle:
                handle.write("checkpoint\n")
            sys.exit(code)

        signal.signal(signal.SIGTERM, on_sigterm)
        ready()
        sleep_forever()
    elif mode == "orphans":
        leave_orphans()
    elif mode == "exit":
        return int(argv[1])
    elif mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "init":
        show_init()
    else:
        raise SystemExit("unknown mode {!r}".format(mode))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
