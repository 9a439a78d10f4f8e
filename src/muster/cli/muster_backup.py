"""``muster backup FILE`` / ``muster restore FILE``: the state store to and from the portable
format of muster.store.backup, for SQLite and PostgreSQL alike (a backup of one restores into
the other: ``--to`` names a store other than the configuration's).

Only root, SlurmUser and the owner of StateSaveLocation may run them (a backup holds every
job's script and environment; a restore decides what runs as whom). Imported by
``muster.cli.muster`` only when chosen: it pulls in the store.
"""

from __future__ import annotations

import os
import pwd
import sys

from muster.cli.getopt import CliExit


def _config(path: str | None):
    from muster.common.errors import MusterError
    from muster.config import load
    from muster.config.locate import find_config_path
    try:
        conf = os.path.abspath(path or find_config_path())
        return conf, load(conf)
    except MusterError as exc:
        raise CliExit([f"muster: error: {exc.message}"], 1) from None


def _authorize(cmd: str, cfg) -> None:
    """Root, SlurmUser, or the user whose cluster it is (the owner of StateSaveLocation)."""
    me = os.geteuid()
    allowed = {0}
    try:
        allowed.add(pwd.getpwnam(cfg.slurm_user).pw_uid)
    except KeyError:
        pass
    try:
        allowed.add(os.stat(cfg.state_save_location).st_uid)
    except OSError:
        pass
    if me not in allowed:
        raise CliExit([f"muster: error: {cmd}: only root or SlurmUser ({cfg.slurm_user}) may "
                       "back up or restore the state store"], 1)


def _open(url: str, **kw):
    from muster.common.errors import MusterError
    from muster.store import open_store
    try:
        return open_store(url, **kw)
    except MusterError as exc:
        raise CliExit([f"muster: error: {exc.message}"], 1) from None


def cmd_backup(args) -> int:
    from muster.store import backup, is_postgres
    _conf, cfg = _config(args.config)
    _authorize("backup", cfg)
    url = cfg.store_url
    if not is_postgres(url) and not os.path.isfile(url):
        raise CliExit([f"muster: error: backup: no state store at {url}"], 1)
    store = _open(url, migrate=False)  # read only: no migration, a newer schema refused
    if store.schema_version == 0:
        raise CliExit([f"muster: error: backup: {store.describe()} holds no Muster state"], 1)
    if args.file == "-":
        out, path = sys.stdout.buffer, None
    else:
        path = os.path.abspath(args.file)
        try:  # never through a link, never over an existing file: the file holds secrets
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
        except OSError as exc:
            raise CliExit([f"muster: error: backup: cannot create {path}: {exc.strerror}"], 1) from None
        out = os.fdopen(fd, "wb")
    try:
        counts = backup.dump(store, out)
        out.flush()
        if path:
            os.fsync(out.fileno())
    except BaseException:
        if path:
            os.unlink(path)
        raise
    finally:
        store.close()
        if path:
            out.close()
    msg = (f"Backed up {store.describe()}: {sum(counts.values())} rows, "
           f"{counts.get('jobs', 0)} jobs -> {path or 'standard output'}")
    print(msg, file=sys.stderr if path is None else sys.stdout)
    return 0


def _read_backup(path: str, known: int):
    from muster.store import backup
    try:
        if path == "-":
            return backup.read(sys.stdin.buffer, known)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise CliExit([f"muster: error: restore: cannot open {path}: {exc.strerror}"], 1) from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        # whoever can write the file decides what runs as whom: only root or the caller
        if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
            raise CliExit([f"muster: error: restore: {path} is writable by others or owned by "
                           "another user; refusing to trust it"], 1)
        try:
            return backup.read(fh, known)
        except backup.BadBackup as exc:
            raise CliExit([f"muster: error: restore: {path}: {exc.message}"], 1) from None


def _controller_answers(conf: str) -> bool:
    """Whether a musterctld of this configuration answers a ping (one try, no retries)."""
    from muster.cli import client
    os.environ["MUSTER_CONF"] = conf  # this process only: the client finds the config by it
    try:
        client.call({"op": "ping"}, retry=0)
    except client.TransportError:  # nothing listening: no controller
        return False
    except Exception:  # noqa: BLE001 - it answered, if only with an error
        return True
    return True


def cmd_restore(args) -> int:
    from muster.store.sqlite import MIGRATIONS
    conf, cfg = _config(args.config)
    _authorize("restore", cfg)
    header, tables = _read_backup(args.file, len(MIGRATIONS))
    target = args.to or cfg.store_url
    if not args.to and _controller_answers(conf):
        raise CliExit(["muster: error: restore: musterctld is running on this state store; "
                       "stop it first (muster down)"], 1)
    store = _open(target, migrate=False, claim="muster restore")  # refused while in use
    try:
        jobs = store.max_job_id() if store.schema_version else 0
        if jobs and not args.force:
            raise CliExit([f"muster: error: restore: {store.describe()} already holds jobs "
                           f"(up to id {jobs}); --force replaces its whole content"], 1)
        store.replace_all(header["schema"], tables)
        rows = sum(len(r) for r in tables.values())
        print(f"Restored {rows} rows, {len(tables.get('jobs', ()))} jobs (schema "
              f"{header['schema']}, from {header.get('source', '?')}) into {store.describe()}")
    finally:
        store.close()
    return 0


def add_parsers(sub) -> None:
    b = sub.add_parser("backup", help="write a consistent snapshot of the state store to FILE "
                                      "(while the controller runs)")
    b.add_argument("file", metavar="FILE", help="a new file ('-': standard output)")
    b.add_argument("--config", help="slurm.conf (default: as the commands find it)")
    r = sub.add_parser("restore", help="replace the state store's content with a backup "
                                       "(the controller must be stopped)")
    r.add_argument("file", metavar="FILE", help="a backup ('-': standard input)")
    r.add_argument("--config", help="slurm.conf (default: as the commands find it)")
    r.add_argument("--to", metavar="STORE",
                   help="restore into this store instead (an SQLite path or postgresql:// URL)")
    r.add_argument("--force", action="store_true",
                   help="replace a store that already holds jobs")
