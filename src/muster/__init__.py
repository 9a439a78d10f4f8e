"""Muster: a Slurm-compatible workload manager for AI training clusters."""

__version__ = "0.1.0"
SLURM_COMPAT_VERSION = "23.11.0"

