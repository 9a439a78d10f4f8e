"""scontrol show job/node/partition/config formatting (Slurm 23.11 key layout: the job's
``ReqTRES=``/``AllocTRES=`` lines replace 22.05's single ``TRES=``; all else as the
22.05 captures).  Each record ends with a blank line; ``one_liner`` joins the
``Key=Value`` lines of a record with single spaces."""
from __future__ import annotations

from muster.common.hostlist import compress, int_ranges
from muster.common.units import fmt_mem
from muster.common.timefmt import fmt_duration_long, fmt_iso, fmt_limit_long

__all__ = ["show_job", "show_step", "show_node", "show_partition", "show_config"]


def _mem(mb):
    return fmt_mem(mb)


def _n(v, null="(null)"):
    return null if v is None or v == "" else str(v)


def _finish(lines: list[str], one_liner: bool) -> str:
    if one_liner:
        return " ".join(ln.strip() for ln in lines if ln.strip()) + " \n"
    return "\n".join(lines) + "\n\n"


def _run_time(j, now):
    st = j.get("start_time")
    if not st or j.get("state") == "PENDING":
        return 0
    if j.get("state") in ("RUNNING", "SUSPENDED"):
        return max(0, now - st)
    return max(0, (j.get("end_time") or now) - st)


def _detail_lines(j):
    """``-d`` per-node lines; consecutive nodes with identical details are merged."""
    out = []
    groups: list[tuple[list[str], tuple]] = []
    for a in j.get("alloc") or []:
        gpus = a.get("gpus") or []
        cpu_ids = a.get("cpu_ids") or (f"0-{a['cpus'] - 1}" if a.get("cpus", 0) > 1 else "0")
        gres = ""
        if gpus:
            gtype = f"{j['gpu_type']}:" if j.get("gpu_type") else ""
            gres = f"gpu:{gtype}{len(gpus)}(IDX:{compress_ints(gpus)})"
        key = (cpu_ids, a.get("mem", 0), gres)
        if groups and groups[-1][1] == key:
            groups[-1][0].append(a["node"])
        else:
            groups.append(([a["node"]], key))
    total_gpus = sum(len(a.get("gpus") or []) for a in j.get("alloc") or [])
    if total_gpus:
        gtype = f"{j['gpu_type']}:" if j.get("gpu_type") else ""
        out.append(f"   JOB_GRES=gpu:{gtype}{total_gpus}")
    for names, (cpu_ids, mem, gres) in groups:
        out.append(f"     Nodes={compress(names)} CPU_IDs={cpu_ids} Mem={mem} GRES={gres}")
    return out


def compress_ints(vals) -> str:
    return int_ranges(vals)


def show_job(job: dict, now: int, one_liner: bool = False, details: bool = False) -> str:
    j = job
    first = f"JobId={j['job_id']} "
    if j.get("array_job_id") is not None:
        if j.get("array_task_id") is not None:
            task = str(j["array_task_id"])
        else:
            task = j.get("array_task_str") or ""
            if j.get("array_max_tasks"):
                task += f"%{j['array_max_tasks']}"
        first += f"ArrayJobId={j['array_job_id']} ArrayTaskId={task} "
        if j.get("array_max_tasks"):
            first += f"ArrayTaskThrottle={j['array_max_tasks']} "
    first += f"JobName={j.get('name', '')}"
    reason = (j.get("reason_desc") or j.get("reason") or "None").replace(" ", "_")
    state = j.get("state", "")
    running_or_done = state != "PENDING" and bool(j.get("start_time"))
    nodes = str(j.get("num_nodes", 1))
    if state == "PENDING" and j.get("nodes_max") is not None:
        nodes = f"{j.get('nodes_min', 1)}-{j['nodes_max']}"
    ntpn = j.get("ntasks_per_node") or 0
    if j.get("mem_per_node") is not None:
        mem_line = f"MinMemoryNode={_mem(j['mem_per_node'])}"
    elif j.get("mem_per_cpu") is not None:
        mem_line = f"MinMemoryCPU={_mem(j['mem_per_cpu'])}"
    else:
        mem_line = "MinMemoryNode=0"
    min_cpus = max((j.get("cpus_per_task") or 1) * max(1, ntpn), j.get("min_cpus_node") or 0)
    lines = [
        first,
        f"   UserId={j.get('user')}({j.get('uid')}) GroupId={j.get('group')}({j.get('gid')}) MCS_label=N/A",
        f"   Priority={j.get('priority', 0)} Nice={j.get('nice', 0)} Account={j.get('account')}"
        f" QOS={j.get('qos')}",
        f"   JobState={state} Reason={reason} Dependency={_n(j.get('dependency'))}",
        f"   Requeue={1 if j.get('requeue') else 0} Restarts={j.get('restarts', 0)} "
        f"BatchFlag={1 if j.get('batch') else 0} Reboot=0"
        f" ExitCode={j.get('exit_code', 0)}:{j.get('exit_signal', 0)}",
    ]
    if details:
        lines.append(f"   DerivedExitCode={j.get('derived_exit_code', 0)}:{j.get('derived_exit_signal', 0)}")
    lines += [
        f"   RunTime={fmt_duration_long(_run_time(j, now))} TimeLimit={fmt_limit_long(j.get('time_limit'))} "
        f"TimeMin={fmt_limit_long(j['time_min']) if j.get('time_min') else 'N/A'}",
        f"   SubmitTime={fmt_iso(j.get('submit_time'))} EligibleTime={fmt_iso(j.get('eligible_time'))}",
        f"   AccrueTime={fmt_iso(j.get('eligible_time'))}",
        f"   StartTime={fmt_iso(j.get('start_time'))} EndTime={fmt_iso(j.get('end_time'))} "
        f"Deadline={fmt_iso(j['deadline']) if j.get('deadline') else 'N/A'}",
        f"   SuspendTime=None SecsPreSuspend=0 LastSchedEval={fmt_iso(j.get('last_sched_eval'))} "
        f"Scheduler={j.get('scheduler') or 'Main'}",
        f"   Partition={j.get('partition')} AllocNode:Sid={j.get('submit_host', '')}:{j.get('alloc_sid', 0)}",
        f"   ReqNodeList={_n(j.get('req_nodes'))} ExcNodeList={_n(j.get('exc_nodes'))}",
        f"   NodeList={j.get('node_list') or ''}",
    ]
    if running_or_done and j.get("batch_host"):
        lines.append(f"   BatchHost={j['batch_host']}")
    lines += [
        f"   NumNodes={nodes} NumCPUs={j.get('num_cpus', 1)} NumTasks={j.get('num_tasks', 1)} "
        f"CPUs/Task={j.get('cpus_per_task') or 1} ReqB:S:C:T=0:0:*:*",
        f"   ReqTRES={j.get('tres_req') or ''}",
        f"   AllocTRES={j.get('tres_alloc') or '(null)'}",
        f"   Socks/Node=* NtasksPerN:B:S:C={ntpn}:0:*:* CoreSpec=*",
    ]
    if details and j.get("alloc"):
        lines += _detail_lines(j)
    lines += [
        f"   MinCPUsNode={min_cpus} {mem_line} "
        f"MinTmpDiskNode={_mem(j['min_tmp_disk']) if j.get('min_tmp_disk') else 0}",
        f"   Features={_n(j.get('features'))} DelayBoot=00:00:00",
        f"   OverSubscribe={'NO' if j.get('exclusive') else 'OK'} "
        f"Contiguous={1 if j.get('contiguous') else 0} Licenses=(null) Network=(null)",
        f"   Command={_n(j.get('command'))}",
        f"   WorkDir={j.get('work_dir', '')}",
    ]
    if j.get("system_comment"):  # why the run could not launch (a container that did not start)
        lines.append(f"   SystemComment={j['system_comment']} ")
    if j.get("comment"):
        lines.append(f"   Comment={j['comment']} ")
    if j.get("wckey"):
        lines.append(f"   WCKey={j['wckey']}")
    lines += [
        f"   StdErr={j.get('std_err') or ''}",
        f"   StdIn={j.get('std_in') or '/dev/null'}",
        f"   StdOut={j.get('std_out') or ''}",
    ]
    if j.get("req_switch"):  # --switches=N[@wait]: the wait shown is the one that applies
        wait = j.get("wait4switch")
        lines.append(f"   Switches={j['req_switch']}@"
                     f"{fmt_duration_long(300 if wait is None else wait)}")
    lines += [
        "   Power=",
    ]
    if j.get("tres_per_node"):
        lines.append(f"   TresPerNode={j['tres_per_node']}")
    if j.get("gpus_per_task"):
        lines.append(f"   TresPerTask=gres/gpu:{j['gpus_per_task']}")
    if j.get("cpus_per_gpu"):
        lines.append(f"   CpusPerTres=gres:gpu:{j['cpus_per_gpu']}")
    if j.get("mem_per_gpu"):
        lines.append(f"   MemPerTres=gres:gpu:{j['mem_per_gpu']}")
    if j.get("mail_type"):
        lines.append(f"   MailUser={j.get('mail_user') or j.get('user')} MailType={j['mail_type']}")
    if one_liner:
        return " ".join(ln.strip() for ln in lines) + " \n"
    # 22.05 prints a last line of three spaces, then the blank separator line
    return "\n".join(lines) + "\n   \n\n"


def step_id_str(s: dict) -> str:
    """``N.S``, or ``A_T.S`` for a task of an array (Slurm's log_build_step_id_str)."""
    if s.get("array_job_id") is not None and s.get("array_task_id") is not None:
        return f"{s['array_job_id']}_{s['array_task_id']}.{s['step_id']}"
    return f"{s['job_id']}.{s['step_id']}"


_DIST = {"block": "Block", "cyclic": "Cyclic", "plane": "Plane", "arbitrary": "Arbitrary"}


def show_step(s: dict, one_liner: bool = False) -> str:
    """One step as Slurm's slurm_sprint_job_step_info prints it: seven lines (one with
    ``-o``); ``Dist=`` only for steps laid out by srun; the batch step has no srun."""
    cpufreq = "CPUFreqReq=Default"
    if s.get("dist"):
        cpufreq += f" Dist={_DIST.get(s['dist'], s['dist'].capitalize())}"
    lines = [
        f"StepId={step_id_str(s)} UserId={s.get('uid')} StartTime={fmt_iso(s.get('start_time'))} "
        f"TimeLimit={fmt_limit_long(s.get('time_limit'))}",
        f"State={s.get('state')} Partition={s.get('partition')} NodeList={s.get('node_list')}",
        f"Nodes={s.get('num_nodes')} CPUs={s.get('num_cpus')} Tasks={s.get('num_tasks')} "
        f"Name={s.get('name')} Network=(null)",
        f"TRES={s.get('tres') or '(null)'}",
        f"ResvPorts={_n(s.get('resv_ports'))}",
        cpufreq,
        f"SrunHost:Pid={_n(s.get('srun_host'))}:{s.get('srun_pid') or 0}",
    ]
    if one_liner:
        return " ".join(lines) + "\n"
    return "\n   ".join(lines) + "\n\n"


def _node_state(n):
    return "+".join([n.get("state", "UNKNOWN")] + list(n.get("flags") or []))


def show_node(node: dict, now: int = 0, one_liner: bool = False, details: bool = False) -> str:
    n = node
    load = n.get("cpu_load")
    lines = [
        f"NodeName={n['name']} Arch={n.get('arch', '')} CoresPerSocket={n.get('cores_per_socket', 1)} ",
        f"   CPUAlloc={n.get('cpus_alloc', 0)} CPUEfctv={n.get('cpus', 0)} CPUTot={n.get('cpus', 0)} "
        f"CPULoad={'N/A' if load is None else '%.2f' % load}",
        f"   AvailableFeatures={_n(n.get('features'))}",
        f"   ActiveFeatures={_n(n.get('active_features', n.get('features')))}",
        f"   Gres={_n(n.get('gres'))}",
    ]
    if details:
        lines += ["   GresDrain=N/A", f"   GresUsed={_n(n.get('gres_used'))}"]
    lines += [
        f"   NodeAddr={n.get('addr', '')} NodeHostName={n.get('hostname', '')} Port={n.get('port', 0)} "
        f"Version={n.get('version', '')}",
        f"   OS={n.get('os', '')} ",
        f"   RealMemory={n.get('real_memory', 0)} AllocMem={n.get('mem_alloc', 0)} "
        f"FreeMem={'N/A' if n.get('free_mem') is None else n['free_mem']} "
        f"Sockets={n.get('sockets', 1)} Boards={n.get('boards', 1)}",
        f"   State={_node_state(n)} ThreadsPerCore={n.get('threads_per_core', 1)} "
        f"TmpDisk={n.get('tmp_disk', 0)} Weight={n.get('weight', 1)} Owner=N/A MCS_label=N/A",
        f"   Partitions={','.join(n.get('partitions') or [])} ",
        f"   BootTime={fmt_iso(n.get('boot_time'), unset='None')} "
        f"SlurmdStartTime={fmt_iso(n.get('slurmd_start_time'), unset='None')}",
        f"   LastBusyTime={fmt_iso(n.get('last_busy_time'), unset='None')}",
        f"   CfgTRES={n.get('cfg_tres', '')}",
        f"   AllocTRES={n.get('alloc_tres') or ''}",
        "   CapWatts=n/a",
        "   CurrentWatts=0 AveWatts=0",
        "   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if n.get("reason"):
        r = f"   Reason={n['reason']}"
        if n.get("reason_user") or n.get("reason_time"):
            r += f" [{n.get('reason_user') or 'root'}@{fmt_iso(n.get('reason_time'))}]"
        lines.append(r)
    return _finish(lines, one_liner)


def _lim(v, none="UNLIMITED"):
    return none if v is None else str(v)


def show_partition(p: dict, one_liner: bool = False) -> str:
    lines = [
        f"PartitionName={p['name']}",
        f"   AllowGroups={p.get('allow_groups') or 'ALL'} AllowAccounts={p.get('allow_accounts') or 'ALL'} "
        f"AllowQos={p.get('allow_qos') or 'ALL'}",
        f"   AllocNodes=ALL Default={'YES' if p.get('default') else 'NO'} QoS=N/A",
        f"   DefaultTime={'NONE' if p.get('default_time') is None else fmt_limit_long(p['default_time'])} "
        f"DisableRootJobs=NO ExclusiveUser=NO GraceTime={p.get('grace_time', 0)} "
        f"Hidden={'YES' if p.get('hidden') else 'NO'}",
        f"   MaxNodes={_lim(p.get('max_nodes'))} MaxTime={fmt_limit_long(p.get('max_time'))} "
        f"MinNodes={p.get('min_nodes', 0)} LLN=NO MaxCPUsPerNode=UNLIMITED",
        f"   Nodes={p.get('nodes') or '(null)'}",
        f"   PriorityJobFactor={p.get('priority_job_factor', 1)} PriorityTier={p.get('priority_tier', 1)} "
        f"RootOnly=NO ReqResv=NO OverSubscribe={p.get('over_subscribe') or 'NO'}",
        "   OverTimeLimit=NONE PreemptMode=OFF",
        f"   State={p.get('state', 'UP')} TotalCPUs={p.get('total_cpus', 0)} "
        f"TotalNodes={p.get('total_nodes', 0)} SelectTypeParameters=NONE",
        "   JobDefaults=(null)",
        "   DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        f"   TRES={p.get('tres', '')}",
    ]
    return _finish(lines, one_liner)


def show_config(config_items: list[tuple[str, str]], now: int) -> str:
    out = [f"Configuration data as of {fmt_iso(now)}"]
    out += [f"{k:<23} = {v}" for k, v in config_items]
    return "\n".join(out) + "\n"
