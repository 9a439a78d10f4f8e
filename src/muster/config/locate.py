"""Find the slurm.conf Muster should use.  Imports only ``os``: every CLI call runs this.

Search order (first hit wins):

1. ``$MUSTER_CONF`` -- returned as given, even if the file is missing (an explicit choice
   should fail loudly at load time rather than fall through to another cluster's file);
2. ``$SLURM_CONF`` -- only if that file exists and carries the ``# muster-managed`` marker
   line that :func:`muster.config.render` writes at the top (so a real Slurm install's
   ``SLURM_CONF`` is never picked up by accident);
3. ``$XDG_CONFIG_HOME/muster/slurm.conf`` (``~/.config/muster/slurm.conf`` when unset);
4. ``/etc/muster/slurm.conf``.

Returns ``None`` when nothing is found.
"""

import os

MARKER = "# muster-managed"
SYSTEM_PATH = "/etc/muster/slurm.conf"
_MARKER_SCAN_LINES = 50


def has_marker(path):
    """True if *path* is a readable file with the marker line among its first lines."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for i, line in enumerate(fh):
                if i >= _MARKER_SCAN_LINES:
                    break
                if line.strip() == MARKER:
                    return True
    except OSError:
        return False
    return False


def user_config_path(environ=None):
    """``$XDG_CONFIG_HOME/muster/slurm.conf`` or ``~/.config/muster/slurm.conf``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME")
    if not base:
        home = env.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".config")
    return os.path.join(base, "muster", "slurm.conf")


def find_config_path(environ=None):
    env = os.environ if environ is None else environ
    explicit = env.get("MUSTER_CONF")
    if explicit:
        return explicit
    slurm_conf = env.get("SLURM_CONF")
    if slurm_conf and os.path.isfile(slurm_conf) and has_marker(slurm_conf):
        return slurm_conf
    user = user_config_path(env)
    if os.path.isfile(user):
        return user
    if os.path.isfile(SYSTEM_PATH):
        return SYSTEM_PATH
    return None
