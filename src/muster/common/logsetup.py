"""Daemon logging: Slurm's debug levels and DebugFlags, and log files that reopen on a signal.

Levels. Slurm names ten levels (0 quiet ... 9 debug5); each maps to a Python logging level,
the ones below DEBUG as DEBUG-1 ... DEBUG-4 (registered under Slurm's names, so a record
shows ``DEBUG3`` as its level). ``quiet`` is above CRITICAL: nothing is written.

DebugFlags. A flag turns on the debug records of one subsystem: each subsystem logs through
its own named logger (``<daemon>.<subsystem>``); the flag lets all of that logger's records
through (debug5 included), and without the flag it inherits the daemon's level. Only flags
with a subsystem in Muster are accepted; their names and spelling are Slurm's.

Rotation. :class:`ReopeningFileHandler` reopens its file at the same path on request, so
``logrotate`` (rename, then signal) works: records written before the request are in the
renamed file, the ones after it in a new file at the original path, none in both. The
request comes from a signal handler, which may interrupt a record being written: then the
reopen waits until that record is complete (the old stream is never closed under a write).
"""

from __future__ import annotations

import logging
import signal

# Slurm's level names, index = Slurm's number
LEVEL_NAMES = ("quiet", "fatal", "error", "info", "verbose", "debug", "debug2", "debug3",
               "debug4", "debug5")
_PY_LEVELS = (logging.CRITICAL + 10, logging.CRITICAL, logging.ERROR, logging.INFO, 15,
              logging.DEBUG, logging.DEBUG - 1, logging.DEBUG - 2, logging.DEBUG - 3,
              logging.DEBUG - 4)

# Slurm's DebugFlags that have a subsystem in Muster -> that subsystem's logger suffix
DEBUG_FLAGS = {"Agent": "agent", "Backfill": "backfill", "Priority": "priority",
               "Protocol": "protocol", "Reservation": "reservation", "Steps": "steps",
               "TraceJobs": "tracejobs"}
_FLAG_BY_LOWER = {k.lower(): k for k in DEBUG_FLAGS}
DEBUG2 = logging.DEBUG - 1  # per-message records (every RPC, every agent frame)

for _num in range(4, 10):
    logging.addLevelName(_PY_LEVELS[_num], LEVEL_NAMES[_num].upper())


def parse_level(text: str) -> int | None:
    """Slurm's level number (0-9) for a name (any case) or a number; None if it is neither.
    As scontrol: a number must be 0-9, a name must be whole ("debug6" is not a level)."""
    t = text.strip().lower()
    if t.isdigit():
        n = int(t)
        return n if n < len(LEVEL_NAMES) else None
    return LEVEL_NAMES.index(t) if t in LEVEL_NAMES else None


def py_level(slurm_level: int) -> int:
    return _PY_LEVELS[slurm_level]


def level_name(py: int) -> str:
    """The Slurm name of a Python level (the nearest one at or above it)."""
    for num in range(len(_PY_LEVELS) - 1, -1, -1):
        if _PY_LEVELS[num] >= py:
            return LEVEL_NAMES[num]
    return LEVEL_NAMES[0]


def flag_name(text: str) -> str | None:
    """The canonical name of a DebugFlag (case-insensitive, as Slurm), or None."""
    return _FLAG_BY_LOWER.get(text.strip().lower())


def parse_flags(text: str | None) -> list[str]:
    """DebugFlags of slurm.conf (comma list): the known ones, canonical; the rest ignored."""
    out: list[str] = []
    for item in (text or "").split(","):
        name = flag_name(item)
        if name and name not in out:
            out.append(name)
    return out


class LogControl:
    """The daemon's level and flags, applied to its loggers: ``daemon`` (e.g. musterctld) and
    ``daemon.<subsystem>`` for each flag. Only the daemon's loggers are touched, never the
    root logger's, so a library's own loggers keep their configuration."""

    def __init__(self, daemon: str, level: int = 3, flags: list[str] | tuple = ()):
        self.daemon = daemon
        self.level = level
        self.flags: list[str] = []
        self.set_level(level)
        self.set_flags(list(flags))

    def logger(self, flag: str) -> logging.Logger:
        return logging.getLogger(f"{self.daemon}.{DEBUG_FLAGS[flag]}")

    def set_level(self, slurm_level: int) -> None:
        self.level = slurm_level
        logging.getLogger(self.daemon).setLevel(_PY_LEVELS[slurm_level])

    def set_flags(self, flags: list[str]) -> None:
        """Exactly ``flags`` on (canonical names), every other known flag off."""
        self.flags = [f for f in DEBUG_FLAGS if f in flags]
        for f in DEBUG_FLAGS:  # on: all of the subsystem's records, debug5 included
            self.logger(f).setLevel(1 if f in self.flags else logging.NOTSET)

    def change_flags(self, add: list[str], remove: list[str]) -> None:
        self.set_flags([f for f in self.flags + add if f not in remove])

    def enabled(self, flag: str, level: int = logging.DEBUG) -> bool:
        return self.logger(flag).isEnabledFor(level)

    def level_text(self) -> str:
        return LEVEL_NAMES[self.level]

    def flags_text(self) -> str:
        return ",".join(self.flags) if self.flags else "(null)"


class ReopeningFileHandler(logging.FileHandler):
    """A FileHandler that reopens its path on :meth:`request_reopen` (see the module's
    docstring). ``_busy`` is only ever set by the thread writing a record while it holds the
    handler's lock; the signal handler runs in the main thread. ``_depth`` counts nested
    writes (the signal handler's own record, written while the interrupted one waits): the
    reopen happens when the outermost write is complete."""

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = None):
        super().__init__(filename, mode, encoding)
        self._depth = 0
        self._pending = False

    def emit(self, record: logging.LogRecord) -> None:
        self._depth += 1
        try:
            super().emit(record)
        finally:
            self._depth -= 1
            if self._pending and not self._depth:
                self._pending = False
                self.reopen()

    def request_reopen(self) -> None:
        if self._depth:  # the signal interrupted a write: reopen when it is complete
            self._pending = True
        else:
            self.reopen()

    def reopen(self) -> None:
        self.acquire()
        try:
            old = self.stream
            self.stream = self._open()
            if old is not None:
                old.close()
        finally:
            self.release()


def setup(prog: str, logfile: str | None, level: int) -> None:
    """Root logging for a daemon: records to ``logfile`` (reopenable) or stderr, at ``level``
    (a Python level), in the daemons' one format."""
    fmt = f"%(asctime)s {prog}[%(process)d] %(levelname)s %(message)s"
    handler: logging.Handler = (ReopeningFileHandler(logfile) if logfile
                                else logging.StreamHandler())
    handler.setFormatter(logging.Formatter(fmt))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)


def reopen_logs() -> int:
    """Reopen every reopenable log file of the process; how many. Safe in a signal handler."""
    n = 0
    for h in logging.getLogger().handlers:
        if isinstance(h, ReopeningFileHandler):
            h.request_reopen()
            n += 1
    return n


def install_reopen_signals(prog: str) -> None:
    """SIGUSR2 and SIGHUP reopen the log files (Slurm's daemons: SIGUSR2 reopens, SIGHUP
    reconfigures and reopens). Python runs the handler in the main thread between bytecodes,
    so it also runs while an event loop waits in select(); it touches nothing but the log
    handlers. A reconfigure on SIGHUP must not run here (it would interleave with whatever
    the loop was doing): a daemon that has one adds it on its event loop."""
    log = logging.getLogger(prog)

    def handler(signum, _frame):
        reopen_logs()
        log.info("%s: log file reopened", signal.Signals(signum).name)

    for s in (signal.SIGUSR2, signal.SIGHUP):
        signal.signal(s, handler)
