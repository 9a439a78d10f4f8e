"""Cluster configuration: slurm.conf / gres.conf (conventions in ``slurmconf.py``).

Public names are re-exported lazily (PEP 562) so that ``import muster.config.locate`` -- which
every CLI invocation does to find the config file -- does not pull in the parser.
"""

from muster.config.locate import MARKER, find_config_path

_LAZY = {
    "ACCEPTED_KEYS",
    "ClusterConfig",
    "GresConf",
    "NodeConf",
    "PartitionConf",
    "load",
    "render",
}

__all__ = ["MARKER", "find_config_path", *sorted(_LAZY)]


def __getattr__(name):
    if name in _LAZY:
        from muster.config import slurmconf

        value = getattr(slurmconf, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'muster.config' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _LAZY)
