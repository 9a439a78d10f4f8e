"""topology.conf reader: topology/tree switches and topology/block blocks.

Pure (reads one file, returns frozen data): :func:`muster.config.slurmconf.load` calls
:func:`load_topology` when ``TopologyPlugin`` is ``topology/tree`` or ``topology/block`` and
keeps the result as ``ClusterConfig.topology``, so ``scontrol reconfigure`` re-reads it with
the rest of the configuration. The file lives next to slurm.conf; every error is
``ConfigError("<file>:<line>: <what>")`` (a missing file names the file alone).

Syntax (as Slurm's parser): one record per line, ``Key=Value`` pairs (no quoting: names
and hostlists have no spaces), key names case-insensitive, ``#`` comments, ``\\``
continuation.

* tree: ``SwitchName=NAME [Nodes=HOSTLIST] [Switches=HOSTLIST] [LinkSpeed=N]`` (LinkSpeed is
  accepted and kept for ``scontrol show topology`` only). A switch with ``Nodes=`` is a leaf.
  Checked: every named node exists in slurm.conf and sits under exactly one leaf; every
  named child switch is defined; no switch has two parents; no cycle.
* block (Slurm 23.11): ``BlockName=NAME Nodes=HOSTLIST`` per base block, in the order the
  blocks are adjacent, and at most one ``BlockSizes=N[,N...]`` line: the planning sizes in
  nodes, the first being the base block size, each later one a power-of-two multiple of
  the first (a job is placed in the smallest aggregate of consecutive blocks that holds
  it). Default: the base block size is the largest block's node count, then its
  power-of-two multiples up to the whole set of blocks. Checked: unknown nodes, a node in
  two blocks, a block larger than the base size.

Nodes of slurm.conf under no switch (no block) are allowed (Slurm warns); the scheduler
treats each as its own fabric (block), so a multi-node job never spans them with others.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from muster.common.errors import ConfigError, InputError
from muster.common.hostlist import expand

__all__ = ["BlockConf", "FILENAME", "SwitchConf", "TopologyConf", "load_topology",
           "parse_topology", "render_tree"]

FILENAME = "topology.conf"
PLUGINS = ("topology/tree", "topology/block")


@dataclass(frozen=True, slots=True)
class SwitchConf:
    """One ``SwitchName=`` line: ``nodes`` (a leaf) and/or child ``switches``; ``level`` is
    0 for a leaf and one more than its highest child otherwise (Slurm's ``Level=``)."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()
    link_speed: int = 1
    level: int = 0


@dataclass(frozen=True, slots=True)
class BlockConf:
    """One ``BlockName=`` line: a base block and its nodes (slurm.conf order)."""

    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TopologyConf:
    """What topology.conf says, for the plugin that read it (``tree`` or ``block``)."""

    plugin: str
    path: str
    switches: tuple[SwitchConf, ...] = ()
    blocks: tuple[BlockConf, ...] = ()
    block_sizes: tuple[int, ...] = ()


def load_topology(conf_dir: str, plugin: str, nodes: Mapping[str, object]) -> TopologyConf:
    """Read ``topology.conf`` in ``conf_dir`` for ``plugin`` (``topology/tree|block``),
    checking node names against ``nodes`` (slurm.conf's, in definition order)."""
    path = os.path.join(conf_dir, FILENAME)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ConfigError(f"{path}: {FILENAME} not found (needed by TopologyPlugin={plugin})"
                          ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    return parse_topology(text, path, plugin, nodes)


def parse_topology(text: str, path: str, plugin: str, nodes: Mapping[str, object]
                   ) -> TopologyConf:
    """:func:`load_topology` on the file's text (``path`` names it in errors)."""
    kind = plugin.rsplit("/", 1)[-1]
    order = {n: i for i, n in enumerate(nodes)}
    records: list[tuple[int, dict[str, str]]] = []
    for lineno, line in _lines(text):
        pairs: dict[str, str] = {}
        for tok in line.split():
            k, eq, v = tok.partition("=")
            if not eq or not k:
                raise ConfigError(f"{path}:{lineno}: '{tok}' is not Key=Value")
            pairs[k.lower()] = v
        records.append((lineno, pairs))
    if kind == "tree":
        return TopologyConf(plugin, path, switches=_tree(records, path, order))
    blocks, sizes = _blocks(records, path, order)
    return TopologyConf(plugin, path, blocks=blocks, block_sizes=sizes)


def _lines(text: str) -> list[tuple[int, str]]:
    """Logical lines: ``#`` comments cut, a trailing ``\\`` joins the next line, blank lines
    dropped; each with its first physical line number."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        code = raw.split("#", 1)[0].rstrip()
        if not buf:
            start = lineno
        if code.endswith("\\"):
            buf += code[:-1] + " "
            continue
        buf += code
        if buf.strip():
            out.append((start, buf))
        buf = ""
    if buf.strip():
        out.append((start, buf))
    return out


def _hosts(path: str, lineno: int, key: str, value: str) -> list[str]:
    try:
        return expand(value)
    except InputError:
        raise ConfigError(f"{path}:{lineno}: invalid {key}={value}") from None


def _known(path: str, lineno: int, names: Iterable[str], order: Mapping[str, int]
           ) -> tuple[str, ...]:
    out = []
    for nm in names:
        if nm not in order:
            raise ConfigError(f"{path}:{lineno}: node '{nm}' is not in slurm.conf")
        out.append(nm)
    return tuple(sorted(set(out), key=order.__getitem__))


_TREE_KEYS = {"switchname", "nodes", "switches", "linkspeed"}
_BLOCK_KEYS = {"blockname", "nodes", "blocksizes"}


def _tree(records: list[tuple[int, dict[str, str]]], path: str, order: Mapping[str, int]
          ) -> tuple[SwitchConf, ...]:
    """SwitchName lines → switches with levels (see the module doc for the checks)."""
    lines: dict[str, tuple[int, tuple[str, ...], list[str], int]] = {}
    leaf_of: dict[str, str] = {}
    for lineno, kv in records:
        bad = set(kv) - _TREE_KEYS
        if "switchname" not in kv or bad:
            what = f"unknown key '{sorted(bad)[0]}'" if bad else "expected SwitchName="
            raise ConfigError(f"{path}:{lineno}: {what} (TopologyPlugin=topology/tree)")
        name = kv["switchname"]
        if not name or name in lines:
            raise ConfigError(f"{path}:{lineno}: {'duplicate' if name else 'empty'} "
                              f"SwitchName '{name}'")
        nodes = _known(path, lineno, _hosts(path, lineno, "Nodes", kv["nodes"]), order) \
            if kv.get("nodes") else ()
        for nm in nodes:
            if nm in leaf_of:
                raise ConfigError(f"{path}:{lineno}: node '{nm}' is under switch "
                                  f"'{leaf_of[nm]}' already")
            leaf_of[nm] = name
        kids = _hosts(path, lineno, "Switches", kv["switches"]) if kv.get("switches") else []
        try:
            speed = int(kv.get("linkspeed", "1"))
        except ValueError:
            raise ConfigError(f"{path}:{lineno}: invalid LinkSpeed={kv['linkspeed']}") from None
        if not nodes and not kids:
            raise ConfigError(f"{path}:{lineno}: switch '{name}' has no Nodes= or Switches=")
        lines[name] = (lineno, nodes, kids, speed)
    parent: dict[str, str] = {}
    for name, (lineno, _, kids, _) in lines.items():
        for c in kids:
            if c not in lines:
                raise ConfigError(f"{path}:{lineno}: switch '{name}' names unknown switch "
                                  f"'{c}'")
            if c in parent or c == name:
                raise ConfigError(f"{path}:{lineno}: switch '{c}' has two parents "
                                  f"('{parent.get(c, name)}' and '{name}')")
            parent[c] = name
    levels: dict[str, int] = {}

    def level(nm: str, seen: tuple[str, ...]) -> int:
        if nm in seen:
            raise ConfigError(f"{path}:{lines[nm][0]}: switch cycle "
                              f"{' -> '.join((*seen, nm))}")
        if nm not in levels:
            kids = lines[nm][2]
            levels[nm] = 1 + max(level(c, (*seen, nm)) for c in kids) if kids else 0
        return levels[nm]

    for nm in lines:
        level(nm, ())
    return tuple(SwitchConf(nm, nodes, tuple(kids), speed, levels[nm])
                 for nm, (_, nodes, kids, speed) in lines.items())


def _blocks(records: list[tuple[int, dict[str, str]]], path: str, order: Mapping[str, int]
            ) -> tuple[tuple[BlockConf, ...], tuple[int, ...]]:
    """BlockName / BlockSizes lines → blocks and planning sizes (module doc)."""
    blocks: list[BlockConf] = []
    where: dict[str, str] = {}
    sizes: tuple[int, ...] = ()
    sizes_line = 0
    for lineno, kv in records:
        bad = set(kv) - _BLOCK_KEYS
        if bad or not ({"blockname", "blocksizes"} & set(kv)):
            what = f"unknown key '{sorted(bad)[0]}'" if bad else "expected BlockName="
            raise ConfigError(f"{path}:{lineno}: {what} (TopologyPlugin=topology/block)")
        if "blocksizes" in kv:
            try:
                sizes = tuple(int(x) for x in kv["blocksizes"].split(","))
            except ValueError:
                sizes = (0,)
            if not sizes or min(sizes) < 1 or any(
                    s % sizes[0] or (s // sizes[0]) & (s // sizes[0] - 1) for s in sizes) \
                    or list(sizes) != sorted(set(sizes)):
                raise ConfigError(f"{path}:{lineno}: invalid BlockSizes={kv['blocksizes']} "
                                  "(ascending, each a power-of-two multiple of the first)")
            sizes_line = lineno
        if "blockname" not in kv:
            continue
        name = kv["blockname"]
        if not name or any(b.name == name for b in blocks):
            raise ConfigError(f"{path}:{lineno}: {'duplicate' if name else 'empty'} "
                              f"BlockName '{name}'")
        if not kv.get("nodes"):
            raise ConfigError(f"{path}:{lineno}: block '{name}' has no Nodes=")
        nodes = _known(path, lineno, _hosts(path, lineno, "Nodes", kv["nodes"]), order)
        for nm in nodes:
            if nm in where:
                raise ConfigError(f"{path}:{lineno}: node '{nm}' is in block '{where[nm]}' "
                                  "already")
            where[nm] = name
        blocks.append(BlockConf(name, nodes))
    if not blocks:
        raise ConfigError(f"{path}: no BlockName= lines (TopologyPlugin=topology/block)")
    base = max(len(b.nodes) for b in blocks)
    if sizes:
        big = [b for b in blocks if len(b.nodes) > sizes[0]]
        if big:
            raise ConfigError(f"{path}:{sizes_line}: block '{big[0].name}' has "
                              f"{len(big[0].nodes)} nodes, more than the base block size "
                              f"{sizes[0]}")
    else:
        sizes = (base,)
        while sizes[-1] < base * len(blocks):
            sizes += (sizes[-1] * 2,)
    return tuple(blocks), sizes


def render_tree(leaves: Iterable[tuple[str, Iterable[str]]], top: str = "top") -> str:
    """A two-level topology.conf: one leaf switch per ``(name, nodes)`` and one ``top``
    switch above them (``muster up --topology tree:N`` writes this)."""
    from muster.common.hostlist import compress
    out, names = [], []
    for name, nodes in leaves:
        out.append(f"SwitchName={name} Nodes={compress(list(nodes))}")
        names.append(name)
    if len(names) > 1:
        out.append(f"SwitchName={top} Switches={compress(names)}")
    return "\n".join(out) + "\n"
