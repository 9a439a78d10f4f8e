"""Job-step layout: which tasks run where, with which CPUs and GPUs, inside an allocation. Pure.

Input: the job's allocation (per node: CPUs, GPU indices), what other running steps of the job
already use, and the step request. Output: a ``StepLayout`` or a ``StepError`` whose ``code``
tells the shell whether to refuse (``never``: the request can never fit this allocation) or to
wait and retry (``busy``: other steps hold the resources now).

Rules (Slurm 23.11 semantics, simplified where noted):
* nodes: ``-w`` names them (each must be in the allocation); otherwise the first N allocation
  nodes, N = ``-N`` if given (a range ``-N a-b``: as many as the allocation offers, at most
  b, at least a — Slurm's "as many nodes as possible within the range"), else
  min(allocation nodes, ntasks) when ``-n`` is given, else all.
* tasks: ``-n``, else ``--ntasks-per-node`` × N, else N. Without ``--ntasks-per-node`` they are
  balanced: ⌈n/N⌉ on the first n mod N nodes, ⌊n/N⌋ on the rest (``2(x3),1`` for 7 on 4).
* task ids: ``block`` gives each node consecutive ids (default); ``cyclic`` deals them round robin.
* CPUs: tasks × cpus_per_task per node, which must fit the node's allocated CPUs (never) and,
  unless ``--overlap``, the CPUs not held by other steps (busy). ``--overcommit`` (``-O``, or
  the job's SLURM_OVERCOMMIT) lifts the first rule: the tasks are balanced over the nodes
  whatever their CPUs, and a node's step holds at most the job's CPUs there.
* GPUs: ``--gpus-per-task`` → each task its own GPUs; ``--gpus-per-node``/``--gres`` → that many
  per node; neither → the step sees all of the job's GPUs on the node, shared (Slurm: a step
  without GRES options gets all the job's GRES). Explicitly requested GPUs are exclusive to the
  step unless ``--overlap``; the lowest free indices are chosen.
* GPU binding (``--gpu-bind``, :func:`parse_gpu_bind`), per node over the step's GPUs there in
  index order, task k = the k-th task of the node (its ``SLURM_LOCALID``); each task's
  ``CUDA_VISIBLE_DEVICES`` is its list: ``none`` → every task sees all of them (the default,
  except ``--gpus-per-task=N``, which implies ``per_task:N``); ``per_task:N`` → GPUs
  [kN, kN+N); ``single:N`` → the ⌊k/N⌋-th GPU (tasks beyond N × GPUs wrap around);
  ``map_gpu:i,j*2,…`` → the listed GPU for task k (the list repeats; ``x*n`` = n times);
  ``mask_gpu:0x3,…`` → the GPUs whose bits are set; ``closest`` → GPUs that share the task's
  socket, which without CPU binding (Muster does not pin tasks to cores) is all of them.
  Indices in ``map_gpu``/``mask_gpu`` count the step's GPUs on the node from 0 (what the task
  would see under Slurm's ConstrainDevices); one outside that range is an error (never).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AllocNode:
    node: str
    cpus: int
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StepRequest:
    ntasks: int | None = None
    nodes_min: int | None = None
    nodes_max: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int = 1
    gpus_per_task: int | None = None
    gpus_per_node: int | None = None
    gpus: int | None = None
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    distribution: str = "block"
    overlap: bool = False
    overcommit: bool = False  # more tasks than CPUs may share a node's CPUs
    gpu_bind: str | None = None  # --gpu-bind as given (parse_gpu_bind)
    relative: int = 0  # srun -r: the step's nodes are taken from this node of the allocation on


@dataclass(frozen=True, slots=True)
class NodeStep:
    node: str
    tasks: tuple[int, ...]          # global task ids on this node, ascending
    cpus: int
    gpus: tuple[int, ...]           # GPUs the step holds on this node
    task_gpus: tuple[tuple[int, ...], ...] | None  # per task (in ``tasks`` order) when bound


@dataclass(frozen=True, slots=True)
class StepLayout:
    nodes: tuple[NodeStep, ...]
    ntasks: int

    @property
    def tasks_per_node(self) -> list[int]:
        return [len(n.tasks) for n in self.nodes]


class StepError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code          # "never" | "busy"
        self.message = message


def parse_gpu_bind(spec: str | None) -> tuple[str, tuple[int, ...]] | None:
    """``[verbose,]TYPE`` → (type, arguments) or None for no binding; raises StepError
    (never) on anything else. ``map_gpu`` arguments are expanded (``1*3`` → 1, 1, 1)."""
    if spec is None or not spec.strip():
        return None
    s = spec.strip()
    if s.startswith("verbose,"):
        s = s[len("verbose,"):]
    kind, _, arg = s.partition(":")
    bad = StepError("never", f"Invalid --gpu-bind argument: {spec}"[:200])
    if kind in ("none", "closest") and not arg:
        return None if kind == "none" else ("closest", ())
    try:
        if kind in ("per_task", "single"):
            n = int(arg, 10)
            if not 0 < n <= 1 << 16:
                raise ValueError
            return kind, (n,)
        if kind == "map_gpu":
            out: list[int] = []
            for item in arg.split(","):
                idx, star, rep = item.partition("*")
                count = int(rep, 10) if star else 1
                if not 0 < count <= 1 << 16 or len(out) + count > 1 << 16:
                    raise ValueError
                out += [int(idx, 10)] * count
            return kind, tuple(out)
        if kind == "mask_gpu":
            masks = tuple(int(m, 16) for m in arg.split(","))
            if any(m <= 0 or m >= 1 << 64 for m in masks):
                raise ValueError
            return kind, masks
    except ValueError:
        raise bad from None
    raise bad


def bind_gpus(bind: tuple[str, tuple[int, ...]], gpus: tuple[int, ...],
              ntasks: int) -> tuple[tuple[int, ...], ...] | None:
    """Each of ``ntasks`` local tasks' GPUs out of the step's ``gpus`` on one node (module
    doc); None: every task sees all of them."""
    kind, args = bind
    if kind == "closest" or not gpus:
        return None
    n = len(gpus)
    if kind == "per_task":
        k = args[0]
        if k * ntasks > n:
            raise StepError("never", f"--gpu-bind=per_task:{k} needs {k * ntasks} GPUs per "
                                     f"node, the step has {n}")
        return tuple(gpus[i * k:(i + 1) * k] for i in range(ntasks))
    if kind == "single":
        return tuple((gpus[(i // args[0]) % n],) for i in range(ntasks))
    if kind == "map_gpu":
        picks = [args[i % len(args)] for i in range(ntasks)]
        if any(p >= n for p in picks):
            raise StepError("never", f"--gpu-bind=map_gpu names a GPU beyond the step's {n} "
                                     "on a node")
        return tuple((gpus[p],) for p in picks)
    masks = [args[i % len(args)] for i in range(ntasks)]
    if any(m >> n for m in masks):
        raise StepError("never", f"--gpu-bind=mask_gpu names a GPU beyond the step's {n} "
                                 "on a node")
    return tuple(tuple(g for b, g in enumerate(gpus) if m >> b & 1) for m in masks)


def layout(alloc: Sequence[AllocNode], used_cpus: Mapping[str, int],
           used_gpus: Mapping[str, frozenset[int]], req: StepRequest) -> StepLayout:
    bind = parse_gpu_bind(req.gpu_bind)
    by_name = {a.node: a for a in alloc}
    if req.relative and (req.relative >= len(alloc) or req.nodelist or req.exclude):
        raise StepError("never", "Requested node configuration is not available")
    pool = [a for a in alloc[req.relative:] if a.node not in req.exclude]
    if req.nodelist:
        missing = [n for n in req.nodelist if n not in by_name]
        if missing:
            raise StepError("never", "Requested node configuration is not available")
        chosen_names = set(req.nodelist)
        chosen = [a for a in alloc if a.node in chosen_names]
        extra = req.nodes_min - len(chosen) if req.nodes_min else 0
        if extra > 0:
            chosen += [a for a in pool if a.node not in chosen_names][:extra]
    else:
        if req.nodes_min is not None:
            n = req.nodes_min
            if req.nodes_max is not None and req.nodes_max > n:
                n = max(n, min(len(pool), req.nodes_max))
        elif req.ntasks is not None:
            n = min(len(pool), req.ntasks)
        else:
            n = len(pool)
        chosen = pool[:n]
    n_nodes = len(chosen)
    if n_nodes == 0 or (req.nodes_min is not None and n_nodes < req.nodes_min):
        raise StepError("never", "Requested node configuration is not available")
    if req.ntasks is not None:
        ntasks = req.ntasks
    elif req.ntasks_per_node is not None:
        ntasks = req.ntasks_per_node * n_nodes
    else:
        ntasks = n_nodes
    if ntasks < 1:
        raise StepError("never", "Invalid task count")
    if ntasks < n_nodes:
        chosen = chosen[:ntasks]
        n_nodes = ntasks
    if req.ntasks_per_node is not None:
        if ntasks > req.ntasks_per_node * n_nodes:
            raise StepError("never", "Requested node configuration is not available")
        counts = [min(req.ntasks_per_node, ntasks - req.ntasks_per_node * i) for i in range(n_nodes)]
        counts = [c for c in counts if c > 0]
        chosen = chosen[:len(counts)]
        n_nodes = len(chosen)
    else:
        caps = [a.cpus // max(1, req.cpus_per_task) for a in chosen]
        counts = _balance(ntasks, [ntasks] * n_nodes if req.overcommit else caps)
    ids = _assign_ids(counts, req.distribution)
    cpt = max(1, req.cpus_per_task)
    out = []
    for a, cnt, tids in zip(chosen, counts, ids):
        cpus = min(cnt * cpt, a.cpus) if req.overcommit else cnt * cpt
        if cpus > a.cpus:
            raise StepError("never", "More processors requested than permitted")
        if not req.overlap and cpus > a.cpus - used_cpus.get(a.node, 0):
            raise StepError("busy", "Requested nodes are busy")
        gpus, task_gpus = _gpus(a, cnt, used_gpus.get(a.node, frozenset()), req, n_nodes)
        if bind is not None:
            task_gpus = bind_gpus(bind, gpus, cnt)
        out.append(NodeStep(a.node, tuple(tids), cpus, gpus, task_gpus))
    return StepLayout(tuple(out), ntasks)


def _balance(ntasks: int, caps: list[int]) -> list[int]:
    """Balanced counts (⌈n/N⌉ first), then overflow of nodes over their CPU capacity moved, in
    node order, to nodes with room. If nothing has room, the excess stays (and the caller
    reports "More processors requested than permitted")."""
    n = len(caps)
    base, rem = divmod(ntasks, n)
    counts = [base + (1 if i < rem else 0) for i in range(n)]
    excess = 0
    for i in range(n):
        if counts[i] > caps[i]:
            excess += counts[i] - max(caps[i], 1)
            counts[i] = max(caps[i], 1)
    for i in range(n):
        if not excess:
            break
        room = caps[i] - counts[i]
        if room > 0:
            take = min(room, excess)
            counts[i] += take
            excess -= take
    counts[-1] += excess
    return counts


def _assign_ids(counts: list[int], distribution: str) -> list[list[int]]:
    ids: list[list[int]] = [[] for _ in counts]
    if distribution.startswith("cyclic"):
        left = list(counts)
        t = 0
        while any(left):
            for i in range(len(counts)):
                if left[i]:
                    ids[i].append(t)
                    t += 1
                    left[i] -= 1
    else:
        t = 0
        for i, c in enumerate(counts):
            ids[i] = list(range(t, t + c))
            t += c
    return ids


def _gpus(a: AllocNode, ntasks: int, used: frozenset[int], req: StepRequest, n_nodes: int
          ) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...] | None]:
    if req.gpus_per_task:
        want = req.gpus_per_task * ntasks
    elif req.gpus_per_node:
        want = req.gpus_per_node
    elif req.gpus:
        want = -(-req.gpus // n_nodes)
    else:
        return a.gpus, None  # all of the job's GPUs here, shared with other steps
    if want > len(a.gpus):
        raise StepError("never", "Requested node configuration is not available")
    free = [g for g in a.gpus if req.overlap or g not in used]
    if want > len(free):
        raise StepError("busy", "Requested GPUs are busy")
    mine = tuple(free[:want])
    if req.gpus_per_task:
        k = req.gpus_per_task
        return mine, tuple(mine[i * k:(i + 1) * k] for i in range(ntasks))
    return mine, None
