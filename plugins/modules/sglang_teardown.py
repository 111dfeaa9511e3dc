#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module sglang_teardown: stop an SGLang server completely and prove it is gone."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_teardown
short_description: Stop SGLang servers completely, with a reason for every process stopped
description:
  - Selects teardown targets, each with the reasons it was chosen, from the launch record of
    O(name) in O(state_dir) (main process and supervisor, pid and start time checked against PID
    reuse; members of its process group and session only while the recorded leader is alive
    with its recorded start time, or when they carry this launch's marker, and never once the
    launch's exit file exists), every process carrying the instance marker
    C(LLMOPS_SGLANG_INSTANCE=name) and C(LLMOPS_SGLANG_STATE_DIR=state_dir) in its environment
    (this finds children that escaped into their own session or were reparented to init),
    sglang processes that write the launch log or run in the instance TMPDIR (these files only
    support a process that already looks like sglang - a shell cd'd into the TMPDIR is not taken),
    sglang servers by process title or command line (C(sglang::*), C(-m sglang.launch_server),
    C(sglang serve)), listeners on O(ports) (IPv4 and IPv6), command lines matching O(patterns),
    and the descendants of all of those.
  - With O(name), processes marked as B(another) instance are never swept by title or pattern;
    they are reported in RV(other_instances). One that listens on a managed port (another
    instance on this instance's port) refuses the teardown before any signal, with RV(reason)
    V(other_instance), naming the instance, its state dir and the command that stops it
    (C(ansible-playbook playbooks/teardown.yml -e sglang_name=OTHER)) - unless O(takeover) names
    it, then it is stopped like any listener of the port. A hand-started server on the port (no
    launch record, no marker) is no instance and is stopped as before.
  - Without a launch record - missing, or damaged (empty, cut short, not a JSON object; kept aside
    as C(<name>.json.damaged-<UTC stamp>) for inspection, never deleted, see RV(record_damaged)) -
    the instance is found by its marker and ports, and by its cgroup when every process in it
    carries this instance's marker (an empty one is removed).
  - Never targets the module itself and its ancestors (ansible, the ssh session, the shell),
    PID 1, kernel threads, protected names (O(protect)) or other users' processes unless
    O(all_users); these are reported in RV(spared). Never targets a process in another PID
    namespace (a container's) unless the launch record names it; matches there are reported in
    RV(other_namespaces).
  - Compute processes on the managed O(gpus) that are not targets are foreign; by default the
    task fails before any signal, naming each. One in another PID namespace is foreign even with
    O(foreign_gpu_processes=kill). Processes that hold C(/dev/nvidia*) open but are
    not listed by NVML are only reported (the fuser view says "uses CUDA", not "uses GPU N").
  - Takes a pidfd on every target when planning (start time verified right after) and sends
    every signal through it, so a pid recycled between plan and signal never receives one (where
    pidfds are unavailable, a start-time check immediately before kill). Sends SIGTERM, then
    SIGCONT to the same processes (a stopped process cannot run its SIGTERM handler until it is
    continued; a running one ignores SIGCONT), waits up to O(grace_period), sends SIGKILL to what remains, and waits for exit (a zombie counts as
    gone). Processes that appear under a target meanwhile join only if they pass the same rules
    as planned targets; a process the plan spared is never taken later. Then verifies within O(timeout) that no target is alive, no listener
    is left on O(ports) and the GPU backend lists no target on the managed GPUs.
  - Removes leftover files in O(shm_dir) matching known sglang/torch/NCCL patterns (only the
    module user's unless O(all_users)) and the contents of O(purge_paths), only where no live
    process holds them open or mapped; removes the instance TMPDIR, the launch record and the exit
    file after a successful teardown. Every directory it deletes in is opened once without
    following symlinks, checked, and emptied through that descriptor.
  - A launch with containment (its record says C(containment) C(cgroup) or C(systemd)) is stopped
    through its cgroup first, which is the authoritative member list - SIGTERM to every member,
    then C(cgroup.kill) (C(systemctl kill) for a unit) after O(grace_period), then the cgroup is
    removed (see RV(containment)). Processes that only the launch record's heuristics (pid,
    process group, session, marker, TMPDIR, launch log) attribute to the instance but that are
    outside its cgroup are never signalled; they are reported in RV(outside_cgroup). Processes
    found by O(ports), O(patterns) or the title sweep outside the cgroup are stopped as for an
    uncontained instance, and ports and GPUs are verified the same way. A record written before
    containment existed is torn down as before.
  - Holds the per-instance lock while acting, so a launch and a teardown of one instance never
    interleave.
  - "Progress: the collection's action plugin of the same name (used automatically for
    C(llmops.sglang.sglang_teardown) tasks) prints one line per host before the module runs -
    the grace period and about when SIGKILL comes to what ignores SIGTERM - and, after it, one
    line per phase - how many targets SIGTERM ended and how fast, what SIGKILL ended, whether
    ports and GPUs were verified free, the files removed - for example C(gpu-07 extraction
    teardown: SIGTERM ended 11 of 12 processes in 3.2s). The module itself runs in one call
    (a teardown is not resumed across calls: its pidfds and the instance lock belong to one
    process). Nothing is printed when the stdout callback is a machine format (anything but
    V(default), V(minimal), V(oneline) and the human community callbacks);
    C(LLMOPS_SGLANG_PROGRESS=always) or V(never) overrides that."
requirements:
  - Linux (C(/proc)).
  - psutil (5.9 or later) for the Python that runs the module (SGLang's venv has it). Without it
    the module fails with reason V(missing_library), naming an interpreter on the host that has
    it when there is one (see RV(interpreter_with_libraries)).
version_added: "0.1.0"
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.common.state_dir
  - llmops.sglang.common.gpu_backend
  - llmops.sglang.common.unused_api_key
options:
  name:
    description:
      - Instance name; selects the launch record C(<state_dir>/<name>.json) and the marker.
    type: str
  ports:
    description:
      - Managed TCP ports (integers 1-65535); their listeners (IPv4 and IPv6) and descendants are
        targets.
    type: list
    elements: int
    default: []
  gpus:
    description:
      - Managed GPU indexes. Omitted means every GPU; C([]) means GPUs are not managed.
    type: list
    elements: raw
  patterns:
    description:
      - Python regular expressions searched in each command line. A pattern matching the empty
        string or this module's own command line is refused (C(sglang) alone is too broad).
    type: list
    elements: str
    default: []
  sglang_processes:
    description:
      - Select sglang servers by process title / command line. With O(name), only unmarked
        (hand-started) sglang processes and this instance's; set V(false) to rely on the launch
        record, marker, ports and patterns only (recommended on hosts shared by several users).
      - sglang-router's process (title C(sglang::router)) is never selected by title; it is no
        server, and a worker's host often runs the router too.
    type: bool
    default: true
  all_users:
    description:
      - Also target processes of other users, and remove other users' files matching the shm
        patterns in O(shm_dir) (default only the user the module runs as).
    type: bool
    default: false
  protect:
    description:
      - Extra names or globs never to signal, matched against the process name and the basename
        of argv[0]; added to nvidia-persistenced, nv-hostengine, dcgm*, sshd, systemd, init.
        An entry protecting a process that O(patterns) selects is an error naming both.
    type: list
    elements: str
    default: []
  foreign_gpu_processes:
    description: What to do with compute processes on the managed GPUs that are not targets.
    type: str
    choices: [fail, kill, ignore]
    default: fail
  grace_period:
    description: Seconds to wait after SIGTERM before SIGKILL.
    type: float
    default: 30
  timeout:
    description: Seconds allowed after the grace period for SIGKILL to take effect and for ports and GPUs to be released.
    type: float
    default: 60
  shm_cleanup:
    description:
      - Remove unheld files in O(shm_dir) matching the known sglang, torch and NCCL patterns,
        owned by the module's user (everyone's with O(all_users)).
    type: bool
    default: true
  shm_dir:
    description:
      - Shared-memory directory to clean. It and every directory above it must belong to root
        or the module's user, writable by others only when sticky (like /dev/shm).
    type: path
    default: /dev/shm
  purge_paths:
    description:
      - Directories to empty (the directory itself stays), e.g. a hidden-state dump directory.
        Entries held open or mapped by a live process are kept.
      - Judged on the resolved path (symlinks followed once, when validating) - refused with
        C(bad_purge_path) - a shared root (C(/), C(/tmp), C(/dev/shm), C(/home), C(/root), ...),
        anything in a system tree (C(/var) and everything under it but C(/var/tmp/*), C(/usr),
        C(/etc), C(/dev) but C(/dev/shm/*), ...), a user's home C(/home/NAME), the state dir,
        anything in it or above it, and anything above O(shm_dir).
      - Refused with C(unsafe_purge_path), in check mode too and before any signal - a directory
        not owned by root or the module's user, or writable by group or others; a symlink or a
        directory writable by other users (unless sticky) anywhere on the way. A missing
        directory is nothing to do.
      - A directory with files in it is named in a warning (shown without C(-v)) with the number
        of files and their size - V(would empty) in check mode.
    type: list
    elements: path
    default: []
  clear_cache:
    description:
      - Empty the instance's compile and JIT cache directory (the directory stays) once every
        target is proven gone - the directory its launch record names (C(compile_cache.dir), set by
        C(sglang_launch)'s O(llmops.sglang.sglang_launch#module:cache_dir)), else this user's
        C(~/.cache/sglang); nothing when the launch's env set C(SGLANG_CACHE_DIR) (the operator's).
        Without this option no teardown touches the cache. The next start of every server that uses
        this directory compiles from nothing.
      - Refused with V(unsafe_dir) before any signal when the directory, or one above it, is a
        symlink, another user's, or writable by group or others. Check mode measures it.
      - The result is RV(compile_cache_cleared).
    type: bool
    default: false
    version_added: "0.6.0"
  takeover:
    description:
      - Names of other instances this teardown may stop when one of their processes listens on a
        managed port. Without it that is refused before any signal (RV(reason) V(other_instance)).
        Their launch records are left as they are (their next run finds the server gone).
    type: list
    elements: str
    default: []
    version_added: "0.6.0"
attributes:
  check_mode:
    support: full
    description: Lists targets with reasons, the signals that would be sent and the files that would be removed.
  diff_mode:
    support: full
    description: Before/after list of processes and files.
notes:
  - Requires Linux C(/proc). Uses NVML (nvidia-ml-py) when importable, else C(nvidia-smi).
  - Give O(gpus) when several instances share a host, else the other instance's schedulers are
    foreign GPU users and the task refuses.
"""

EXAMPLES = r"""
- name: Stop the extraction server started by sglang_launch, and its dump files
  llmops.sglang.sglang_teardown:
    name: extraction
    ports: [8000]
    gpus: [0, 1, 2, 3, 4, 5, 6, 7]
    purge_paths: [/dev/shm/sglang_hs]
    grace_period: 20

- name: Preview what a teardown of everything on port 30000 would stop
  llmops.sglang.sglang_teardown:
    ports: [30000]
    gpus: []
  check_mode: true
  register: plan

- name: Stop a hand-started server found only by its command line, keep GPU agents
  llmops.sglang.sglang_teardown:
    sglang_processes: false
    patterns: ['--model-path /models/kimi-k2\.5']
    protect: [node_exporter, 'dcgm-exporter*']
    foreign_gpu_processes: ignore
"""

RETURN = r"""
targets:
  description:
    - Processes chosen, with every reason (secrets in command lines masked). The members of a contained
      launch's cgroup are listed too (reason C(member of the instance's cgroup PATH)), although they are
      stopped through the cgroup rather than one by one, so this list, RV(killed), RV(stopped) and the diff
      count the same processes.
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 4242, "name": "python", "cmdline": "python -m sglang.launch_server --port 8000 --api-key ********",
            "user": "root", "pgid": 4242, "sid": 4242, "start_time": 1718000000.12,
            "reasons": ["launch record main process (pid 4242)", "listens on managed port 8000 (ipv4 0.0.0.0)"]}]
stopped:
  description:
    - How many processes this teardown stopped - targets ended by its SIGTERM or SIGKILL (a target already
      gone when it acted is not counted); in check mode, how many it would stop (the targets alive when
      planned, cgroup members included - the processes the diff lists). The one count to report.
  returned: always
  type: int
  sample: 12
killed:
  description: Targets that are gone, with the signal that ended them (SIGTERM, SIGKILL or already-gone).
  returned: success
  type: list
  elements: dict
  sample: [{"pid": 4243, "name": "sglang::schedul", "cmdline": "sglang::scheduler_TP0", "user": "root",
            "reason": "child of 4242", "signal": "SIGTERM"}]
signals:
  description:
    - Signals sent (in check mode, the SIGTERMs that would be sent), each to the listed pids through their pidfds.
      Every SIGTERM is followed by a SIGCONT to the pids it reached (so that stopped processes can honour it).
      C(kind) is C(group) when every member of that process group is a target, else C(pid).
    - C(kind) C(cgroup) (a contained launch) - C(id) is the cgroup's path, C(pids) its members; its SIGKILL
      entry (C(via) says C(cgroup.kill) or C(systemctl kill)) lists the members that ignored SIGTERM. In
      check mode the cgroup step is listed when the cgroup has members.
  returned: always
  type: list
  elements: dict
  sample: [{"signal": "SIGTERM", "kind": "group", "id": 4242, "pids": [4242, 4243]},
           {"signal": "SIGCONT", "kind": "group", "id": 4242, "pids": [4242, 4243]}]
survivors:
  description: Targets still alive after SIGKILL and O(timeout) (the task fails).
  returned: always
  type: list
  elements: dict
d_state:
  description: Survivors in uninterruptible sleep, with their C(wchan) (the task fails).
  returned: always
  type: list
  elements: dict
other_instances:
  description: sglang processes marked as another instance, left alone.
  returned: always
  type: list
  elements: dict
other_namespaces:
  description:
    - Processes a reason selected that live in another PID namespace (a container), left alone
      (would_be lists the reasons, pid_namespace the namespace).
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 5150, "name": "python", "user": "root", "cmdline": "python -m sglang.launch_server --port 30000",
            "would_be": ["command line: python -m sglang.launch_server"], "pid_namespace": "pid:[4026532179]"}]
foreign_listeners:
  description:
    - Listeners on a managed port that are never targets (another user's, or an owner that cannot be
      read) but whose address does not collide with the instance's bind address (the record's C(host)),
      for example C([::1]:P) with IPV6_V6ONLY beside a server on C(0.0.0.0:P). Left alone; they do not
      block the teardown nor count as a port still held. A colliding one is a C(scope_conflict).
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 700, "name": "python3", "user": "alice", "cmdline": "python3 -m http.server", "port": 8000,
            "family": "ipv6", "address": "::1", "why_not": "another user's process (all_users is false)"}]
outside_cgroup:
  description:
    - Contained launches only - processes the launch record's heuristics (pid, process group, session,
      marker, TMPDIR, launch log) attribute to the instance that are not members of its cgroup. Never
      signalled (would_be lists the reasons).
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 7001, "name": "python", "user": "root", "cmdline": "python worker.py",
            "would_be": ["session 4242 of the launch record"]}]
containment:
  description:
    - Contained launches only - the cgroup stop. C(cgroup) the instance's cgroup (null when it no longer
      exists or is not this launch's), C(members) its processes (pid, name, user, cmdline; after a real run
      C(ended) is SIGTERM, SIGKILL, alive or gone before SIGTERM), C(removed) whether the cgroup was
      removed, C(killed_with) what was used after the grace period (null when SIGTERM sufficed),
      C(notes), C(timings) in seconds. In check mode nothing is removed.
  returned: when the launch record names a cgroup
  type: dict
  sample: {"cgroup": "/sys/fs/cgroup/llmops-sglang.slice/qwen", "removed": true, "killed_with": null,
           "members": [{"pid": 4242, "name": "python", "user": "root", "cmdline": "python -m sglang.launch_server",
                        "ended": "SIGTERM"}], "notes": [], "timings": {"total": 0.44}}
spared:
  description:
    - Processes a reason selected but a protection excluded (why_not says which), including
      processes that appeared under a target during the teardown and were refused.
    - Named C(spared), not C(skipped), which Ansible reserves for tasks that did not run.
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 812, "name": "dcgm-exporter", "user": "root", "cmdline": "/usr/bin/dcgm-exporter",
            "would_be": ["child of 4242"], "why_not": "protected name (dcgm*)"}]
device_file_holders:
  description: Processes holding /dev/nvidia* open that the GPU backend does not list; target says whether they were stopped.
  returned: always
  type: list
  elements: dict
device_file_holders_scan:
  description:
    - How much of the host the fuser view (device_file_holders) covers. Only processes that could be targets
      are read (the module's user unless all_users, this PID namespace); the walk over their fd links stops at
      the teardown's timeout.
    - scanned, left_out (excluded by those rules), unreached (not read before the timeout), cut_short, seconds,
      and a note when cut short. Null when GPUs are not managed (gpus is empty).
  returned: always
  type: dict
  sample: {"scanned": 41, "left_out": 230, "unreached": 0, "cut_short": false, "seconds": 0.012}
port_holders_scan:
  description:
    - How much of the host the naming of the managed ports' holders covered. The kernel's TCP tables say which
      sockets listen there and whose they are; only then are fd tables read, those of the socket's own user
      first and the others only for a socket none of those holds, the module's user's processes only unless
      O(all_users), and never past the teardown's O(timeout).
    - scanned, left_out (never read; excluded by those rules or not needed), unreached (not read before the
      timeout), cut_short, seconds, users (null with O(all_users)), note. Null when no O(ports) are managed.
    - A listener whose holders were not read has no pids and blocks the teardown where it collides with the
      instance's address (the teardown fails with RV(reason) V(scope_conflict)), as another user's listener
      always did.
  returned: always
  type: dict
  sample: {"scanned": 12, "left_out": 230, "unreached": 0, "cut_short": false, "seconds": 0.004, "users": [0],
           "note": "complete"}
  version_added: "0.6.0"
foreign_gpu_processes:
  description: Non-target compute processes on the managed GPUs (pid, user, cmdline, gpus {index GiB}).
  returned: always
  type: list
  elements: dict
gpus_after:
  description: Managed GPUs after teardown (memory used, processes still listed, each with its pid_namespace own, other or not visible).
  returned: success
  type: list
  elements: dict
gpu_processes_left:
  description: Target pids the GPU backend still lists on the managed GPUs after teardown, with MiB per GPU (the task fails when not empty).
  returned: success
  type: dict
errors:
  description:
    - Signals that could not be sent and files that could not be removed (a directory or file that
      changed owner or became a mount point is kept and named here).
  returned: success
  type: list
  elements: str
ports_after:
  description: Listeners still on the managed ports after teardown (the task fails when not empty).
  returned: success
  type: list
  elements: dict
shm_removed:
  description: Files removed (in check mode, that would be removed) from shm_dir and purge_paths.
  returned: always
  type: list
  elements: dict
shm_kept:
  description: Matching files kept because a live process holds them, with the holders.
  returned: always
  type: list
  elements: dict
tmpdir_removed:
  description: The instance TMPDIR removed (or that would be), if any.
  returned: always
  type: str
compile_cache_cleared:
  description:
    - With O(clear_cache) - the cache directory emptied (in check mode, measured) - C(dir),
      C(existed), C(entries) and C(bytes) (what was in it), C(cleared), C(errors) (what could not
      be removed); C(dir) null and C(msg) when the launch's env named it (kept). The compile cache
      is never touched otherwise, and the instance TMPDIR (RV(tmpdir_removed)) no longer holds it.
  returned: when O(clear_cache) is true and the teardown succeeded
  type: dict
  version_added: "0.6.0"
  sample: {dir: /root/.cache/sglang, existed: true, entries: 4, bytes: 286261248, cleared: true, errors: []}
record_removed:
  description: Launch record and exit file removed (or that would be).
  returned: always
  type: list
  elements: str
record:
  description: Launch record notes (gone / reused pids, a damaged record, a cgroup recovered without one), files, tmpdir.
  returned: always
  type: dict
record_damaged:
  description:
    - The instance's launch record was damaged (zero bytes, cut short, not a JSON object) - C(path), C(error),
      and C(kept_as) (where it was renamed for inspection) or in check mode C(would_keep_as). The teardown went on
      as for an instance without a record. Null otherwise.
  returned: always
  type: dict
  version_added: "0.6.0"
  sample: {path: /var/lib/llmops-sglang/serving.json, error: "cannot read ...: it is empty (0 bytes)",
           kept_as: /var/lib/llmops-sglang/serving.json.damaged-20260101T000000Z}
other_instances_on_ports:
  description: On RV(reason) V(other_instance) - each other instance found on a managed port (C(name), C(state_dir), C(pids)).
  returned: when reason is other_instance
  type: list
  elements: dict
timings:
  description: Seconds per phase (plan, term, kill, verify, cleanup).
  returned: success
  type: dict
  sample: {"plan": 0.04, "term": 0.35, "kill": 0.0, "verify": 0.0, "cleanup": 0.01}
reason:
  description: On failure, a machine-readable code set where the error was found (bad_pattern, bad_port,
    bad_gpus, bad_name, bad_option, bad_protect, bad_purge_path, unsafe_purge_path, empty_scope, scope_conflict,
    other_instance (another instance holds a managed port; nothing was stopped), unsafe_record, unsafe_cgroup,
    foreign_gpu_processes, locked, survivors, d_state, signal_failed, port_still_held, gpu_not_released,
    unsupported, missing_library; for an operating-system error no_space, permission_denied, read_only_fs,
    not_found or io_error, with RV(path); internal_error for a bug, with the traceback in C(exception)).
  returned: failure
  type: str
path:
  description: The file an operating-system error is about.
  returned: when an operating-system error ended the module
  type: str
missing_libraries:
  description: The Python libraries the module's interpreter could not import.
  returned: when reason is missing_library
  type: list
  elements: str
  sample: [psutil]
interpreter_with_libraries:
  description:
    - An interpreter on the host that imports psutil and requests (run only when nobody but root
      or the module's user can replace it), to pass as C(ansible_python_interpreter); null when
      none was found.
  returned: when reason is missing_library
  type: str
"""

import gc

if __name__ == "__main__":
    gc.disable()  # a module run: no collection while its code is imported (_exit.started turns it back on)

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _depsearch
from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit
from ansible_collections.llmops.sglang.plugins.module_utils._core import _options
from ansible_collections.llmops.sglang.plugins.module_utils._host import _record
from ansible_collections.llmops.sglang.plugins.module_utils._teardown import _teardown_call
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host._lock import instance_lock


def argument_spec() -> dict:
    return _options.teardown_module()


def _body(module: AnsibleModule) -> dict:
    """Validate, then plan and act under the instance lock (_exit.run ends the module)."""
    p = module.params
    if not os.path.isdir("/proc/self"):
        raise SglangError("sglang_teardown needs Linux /proc", reason="unsupported")
    state_dir = p["state_dir"] or _record.default_state_dir()
    req = _teardown_call.prepare(p, p["name"], state_dir, p["gpu_backend"])
    # Check mode takes no lock: it must not even create the state dir. A lock that stays taken
    # fails with the reason the lock sets (locked).
    if p["name"] and not module.check_mode:
        with instance_lock(state_dir, p["name"], timeout=req.lock_timeout):
            return _teardown_call.run(req, False, module._diff, module.warn)
    return _teardown_call.run(req, module.check_mode, module._diff, module.warn)


def main() -> None:
    _exit.started()
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    _depsearch.require(module, ["psutil"])
    _exit.run(module, _body, "sglang_teardown")


if __name__ == "__main__":
    main()
