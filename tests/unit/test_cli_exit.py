"""A command ends without the interpreter's finalisation (muster.cli.client._exit), yet
nothing it wrote is lost: its exit code, its buffered output on both streams and its atexit
functions are all as a normal exit leaves them; one that imported threading exits the
normal way (its non-daemon threads are joined). Each case is a real command process."""

from __future__ import annotations

import os
import subprocess
import sys

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")

PROLOGUE = f"""
import sys, atexit
sys.path.insert(1, {os.path.abspath(SRC)!r})
from muster.cli.client import run_main
atexit.register(lambda: sys.stdout.write("atexit ran\\n"))
"""


def command(body: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-S", "-c", PROLOGUE + body], capture_output=True,
                          text=True, timeout=60)


def test_fast_exit_keeps_code_output_and_atexit():
    r = command("""
def main():
    sys.stdout.write("x" * 100000)  # more than a pipe holds: written at the flush
    sys.stderr.write("partial line on stderr")
    return 3
run_main("t", main)
sys.stdout.write("never reached\\n")
""")
    assert r.returncode == 3
    assert r.stdout == "x" * 100000 + "atexit ran\n"
    assert r.stderr == "partial line on stderr"


def test_command_with_threads_exits_normally_and_joins_them():
    r = command("""
import threading, time
def late():
    time.sleep(0.2)
    sys.stdout.write("thread done\\n")
def main():
    threading.Thread(target=late).start()
    return 0
run_main("t", main)
""")
    assert r.returncode == 0
    assert r.stdout == "thread done\natexit ran\n"


def test_error_exit_code_and_message():
    r = command("""
from muster.common.errors import MusterError
def main():
    raise MusterError("went wrong")
run_main("t", main)
""")
    assert r.returncode == 1
    assert r.stderr == "t: error: went wrong\n"
    assert r.stdout == "atexit ran\n"
