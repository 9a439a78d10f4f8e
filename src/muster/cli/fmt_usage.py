"""Usage statistics -> Slurm's text (sacct, sstat, seff). Standard library only.

Input: a step's ``usage`` statistics (muster.controller.usage, docs/records.md): ``user_ms``,
``sys_ms``, ``ntasks``, and ``in``/``out`` maps ``{max, max_node, max_task, min, min_node,
min_task, tot, ave}`` of TRES name -> value (``cpu`` in ms, ``mem``/``vmem``/``fs/disk``/
``gres/gpumem`` in bytes, ``pages``, ``energy``, ``gres/gpuutil`` as counts).

Slurm's renderings, reproduced here:
  sizes       convert_num_unit with CONVERT_NUM_UNIT_EXACT: divide by 1024 while the value
              stays a multiple of 512 (``156688384`` -> ``153016K``, ``1048576`` -> ``1M``);
              ``--noconvert``: the raw number; ``--units=M``: that unit, two decimals when
              not whole
  CPU times   TotalCPU/UserCPU/SystemCPU: ``[DD-]HH:MM:SS`` or ``MM:SS.mmm`` when under an
              hour with a fraction; AveCPU/MinCPU: whole seconds, ``00:MM:SS``/``HH:MM:SS``
  TRES lists  ``cpu=00:00:02,energy=0,fs/disk=2012,mem=153016K,pages=0,vmem=217276K``:
              sorted by name; cpu as ``[D-]HH:MM:SS``; sizes converted as above; ``*Node``
              lists name nodes and ``*Task`` lists task ids instead of values
"""

from __future__ import annotations

UNITS = "KMGTP"
SIZE_TRES = ("mem", "vmem", "fs/disk", "gres/gpumem")
STAT_KINDS = ("max", "max_node", "max_task", "min", "min_node", "min_task", "tot", "ave")


def convert_num(num, units: str | None = None, noconvert: bool = False) -> str:
    """A byte count (or page count) as Slurm's convert_num_unit prints it."""
    if int(num) == 0:
        return "0"
    level = 0
    if units:
        target = UNITS.find(units[0].upper()) + 1
        while level < target:
            num /= 1024
            level += 1
    elif not noconvert:
        while num >= 1024 and int(num) % 512 == 0:
            num /= 1024
            level += 1
    suffix = "KMGTP"[level - 1] if 0 < level <= 5 else ("?" if level else "")
    return f"{int(num)}{suffix}" if num == int(num) else f"{num:.2f}{suffix}"


def elapsed(ms: int) -> str:
    """Slurm's _elapsed_time: TotalCPU, UserCPU, SystemCPU (millisecond precision)."""
    ms = max(0, int(ms))
    secs, sub = divmod(ms, 1000)
    d, h, m, s = secs // 86400, secs // 3600 % 24, secs // 60 % 60, secs % 60
    if d:
        return f"{d:02d}-{h:02d}:{m:02d}:{s:02d}"
    if h:
        return f"{h:02d}:{m:02d}:{s:02d}"
    if sub:
        return f"{m:02d}:{s:02d}.{sub:03d}"
    return f"00:{m:02d}:{s:02d}"


def secs2time(secs: int) -> str:
    """Slurm's secs2time_str: the cpu= of TRES lists."""
    secs = max(0, int(secs))
    d, h, m, s = secs // 86400, secs // 3600 % 24, secs // 60 % 60, secs % 60
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def tres_list(u: dict | None, side: str, kind: str, noconvert: bool = False) -> str:
    """``TRESUsage{In,Out}{Ave,Max,MaxNode,MaxTask,Min,MinNode,MinTask,Tot}``."""
    if not u:
        return ""
    values = (u.get(side) or {}).get(kind) or {}
    parts = []
    for name in sorted(values):
        v = values[name]
        if kind.endswith(("_node", "_task")):
            text = str(v)
        elif name == "cpu":
            text = secs2time(int(v) // 1000)
        elif name in SIZE_TRES:
            text = convert_num(v, noconvert=noconvert)
        else:
            text = str(int(v))
        parts.append(f"{name}={text}")
    return ",".join(parts)


def _stat(u: dict | None, side: str, kind: str, name: str):
    if not u:
        return None
    return ((u.get(side) or {}).get(kind) or {}).get(name)


def _size(side, kind, name):
    def get(u, c):
        v = _stat(u, side, kind, name)
        return "" if v is None else convert_num(v, c.get("units"), c.get("noconvert", False))
    return get


def _where(side, kind, name):
    def get(u, c):
        v = _stat(u, side, kind, name)
        return "" if v is None else str(v)
    return get


def _cpu(kind):
    def get(u, c):
        v = _stat(u, "in", kind, "cpu")
        return "" if v is None else elapsed(int(v) // 1000 * 1000)
    return get


def _tres(side, kind):
    return lambda u, c: tres_list(u, side, kind, c.get("noconvert", False))


def _total(key):
    def get(u, c):
        if not u:
            return elapsed(0)
        return elapsed(sum(u.get(k, 0) for k in key))
    return get


# name -> (sacct width, getter(usage, ctx)); sstat uses the same names and getters
FIELDS = {
    "AveCPU": (10, _cpu("ave")),
    "AveDiskRead": (12, _size("in", "ave", "fs/disk")),
    "AveDiskWrite": (12, _size("out", "ave", "fs/disk")),
    "AvePages": (10, _size("in", "ave", "pages")),
    "AveRSS": (10, _size("in", "ave", "mem")),
    "AveVMSize": (10, _size("in", "ave", "vmem")),
    "AveCPUFreq": (10, lambda u, c: "0" if u else ""),  # no CPU frequency plugin
    "ConsumedEnergy": (14, lambda u, c: "0" if u else ""),  # no energy plugin
    "ConsumedEnergyRaw": (17, lambda u, c: "0" if u else ""),
    "MaxDiskRead": (12, _size("in", "max", "fs/disk")),
    "MaxDiskReadNode": (15, _where("in", "max_node", "fs/disk")),
    "MaxDiskReadTask": (15, _where("in", "max_task", "fs/disk")),
    "MaxDiskWrite": (12, _size("out", "max", "fs/disk")),
    "MaxDiskWriteNode": (16, _where("out", "max_node", "fs/disk")),
    "MaxDiskWriteTask": (16, _where("out", "max_task", "fs/disk")),
    "MaxPages": (8, _size("in", "max", "pages")),
    "MaxPagesNode": (12, _where("in", "max_node", "pages")),
    "MaxPagesTask": (14, _where("in", "max_task", "pages")),
    "MaxRSS": (10, _size("in", "max", "mem")),
    "MaxRSSNode": (10, _where("in", "max_node", "mem")),
    "MaxRSSTask": (10, _where("in", "max_task", "mem")),
    "MaxVMSize": (10, _size("in", "max", "vmem")),
    "MaxVMSizeNode": (14, _where("in", "max_node", "vmem")),
    "MaxVMSizeTask": (14, _where("in", "max_task", "vmem")),
    "MinCPU": (10, _cpu("min")),
    "MinCPUNode": (10, _where("in", "min_node", "cpu")),
    "MinCPUTask": (10, _where("in", "min_task", "cpu")),
    "SystemCPU": (10, _total(("sys_ms",))),
    "TotalCPU": (10, _total(("user_ms", "sys_ms"))),
    "UserCPU": (10, _total(("user_ms",))),
}
for _side, _dir in (("in", "In"), ("out", "Out")):
    for _kind, _suffix in (("ave", "Ave"), ("max", "Max"), ("max_node", "MaxNode"),
                           ("max_task", "MaxTask"), ("min", "Min"), ("min_node", "MinNode"),
                           ("min_task", "MinTask"), ("tot", "Tot")):
        _w = 14 + (_dir == "Out") + (4 if _kind.endswith(("_node", "_task")) else 0)
        FIELDS[f"TRESUsage{_dir}{_suffix}"] = (_w, _tres(_side, _kind))

# Job rows (the allocation): only the CPU totals, summed over its steps; the rest is blank
JOB_TOTALS = {"SystemCPU": ("sys_ms",), "TotalCPU": ("user_ms", "sys_ms"),
              "UserCPU": ("user_ms",)}


def job_total(name: str, steps: list[dict]) -> str:
    """A job row's TotalCPU/UserCPU/SystemCPU: the sum over its steps' final usage."""
    keys = JOB_TOTALS[name]
    return elapsed(sum((s.get("usage") or {}).get(k, 0) for s in steps for k in keys))


def mem_str(kbytes: float) -> str:
    """seff's kbytes2str: ``149.43 MB``, ``0.00 MB`` for nothing."""
    if kbytes <= 0:
        return "0.00 MB"
    exp = 0
    while kbytes >= 1024 ** (exp + 1) and exp < 5:
        exp += 1
    return f"{kbytes / 1024 ** exp:.2f} {'KMGTPE'[exp]}B"
