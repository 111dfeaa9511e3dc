#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module sglang_launch: preflight, then start an SGLang server in its own session."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_launch
short_description: Start an SGLang server after a full preflight, idempotently
description:
  - Runs a complete preflight first and reports B(every) problem at once in RV(preflight.errors)
    - the interpreter is the venv's (never a C(python3) looked up in PATH), sglang is importable
    there (when not, names the interpreter and any venv that has sglang), every flag in O(args)
    exists in B(that) sglang version and every value is within its choices and type, O(model_path)
    exists (a local directory with C(config.json)) unless it is a hub id C(org/name), O(tp_size)
    GPUs are visible, the port is free (or held by this same instance), no process that is
    neither this instance nor an sglang server of the module's user listens on the port (on any
    address), the log and state directories are writable, they and the instance C(TMPDIR) have
    O(min_free_mb) MiB and O(min_free_inodes) inodes free, O(env) is valid, and the log level
    does not hide the ready line.
  - Starts C(<venv>/bin/python -m sglang.launch_server) (or C(<venv>/bin/sglang serve)) under a
    small supervising parent in a new session (setsid), stdin from C(/dev/null), stdout and
    stderr to a fresh per-launch log C(<log_dir>/<name>-<UTC timestamp>.log) with the symlink
    C(<log_dir>/<name>.log) pointing at the newest; older logs beyond O(keep_logs) are removed.
    The server survives the end of the task and of the ssh session.
  - The server gets a clean, explicit environment - C(PATH) with the venv's C(bin) first,
    C(VIRTUAL_ENV), C(HOME), C(USER), C(LANG), C(no_proxy)/C(NO_PROXY) including C(localhost,127.0.0.1,::1),
    a per-instance C(TMPDIR) C(<state_dir>/<name>.tmp), C(PYTHONUNBUFFERED=1),
    C(SPT_NOENV=1) (keeps the marker readable in titled ranks), C(SGLANG_LOG_MS=1) (millisecond
    log times), the instance marker
    variables C(LLMOPS_SGLANG_INSTANCE), C(LLMOPS_SGLANG_LAUNCH_ID), C(LLMOPS_SGLANG_STATE_DIR),
    then O(env). Proxies reach the server only when set in O(env).
  - Writes the launch record C(<state_dir>/<name>.json) (mode 0600, atomically) that
    C(sglang_ready) and C(sglang_teardown) work from. Secrets are never stored or returned in
    clear; the API key only reaches the server's command line, as sglang requires.
  - Idempotent - when the recorded server is alive (same pid and start time) with the same
    fingerprint (interpreter, sglang version, entry point, model, host, port, tp_size, args,
    env and a digest of the API key) and answers HTTP within O(probe_timeout), nothing is
    started (RV(reason) V(running)). A running server with another fingerprint, one that does
    not answer (hung or stopped, RV(reason) V(unresponsive)), or a port held by another process,
    fails with what differs and who holds the port; without O(teardown) this module never stops
    anything (use C(sglang_teardown)).
  - With O(teardown), a replacement in one call - once the whole preflight has passed, and under the
    instance lock the launch holds anyway, C(sglang_teardown)'s engine stops what the teardown
    options select for this instance and proves it gone (processes, ports, GPUs, files), then the
    launch decides and starts. A failed preflight stops nothing; a failed teardown starts nothing.
    This is how the restart role replaces a server (one module run instead of two, and no moment
    between the teardown and the launch in which another run could take the instance's place).
  - Every result and failure passes through one redaction before it is returned - secret keys,
    secret flag values in command lines (also inside one-string process titles) and every
    literal secret value given are masked.
  - Holds the per-instance lock C(<state_dir>/<name>.lock) while deciding and launching.
  - What an operator must see is an Ansible warning (shown without C(-v)) - every preflight
    warning, GPUs that could not be read (no NVML, no C(nvidia-smi)) so that O(tp_size) was not
    checked against them (unless O(gpu_check=false) or O(gpu_backend=none)), and a O(model_path)
    taken for a hub id.
requirements:
  - Linux (C(/proc)).
  - psutil and requests for the Python that runs the module (SGLang's venv has both). Without
    them the module fails with reason V(missing_library), naming an interpreter on the host that
    has them - O(venv), the interpreters of launch records and running sglang servers, sglang
    installs under O(search_paths) - to pass as C(ansible_python_interpreter).
version_added: "0.1.0"
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.common.state_dir
  - llmops.sglang.common.gpu_backend
  - llmops.sglang.common.api_key
  - llmops.sglang.common.python
  - llmops.sglang.common.introspect_timeout
options:
  name:
    description: Instance name; names the launch record, the lock, the log files and the marker.
    type: str
    default: sglang
  venv:
    description:
      - Virtualenv holding sglang; its C(bin/python) runs the server. Exactly one of O(venv) and
        O(python) (the interpreter that runs the server) is required, unless O(restore=last_good).
    type: path
  search_paths:
    description:
      - Globs of environment roots searched for other sglang installs when the interpreter has
        none (reported in the error). Default - common venv, conda and pyenv locations.
    type: list
    elements: path
  entrypoint:
    description:
      - V(launch_server) runs C(python -m sglang.launch_server); V(serve) runs the venv's
        C(sglang serve); V(auto) prefers launch_server, else serve.
    type: str
    choices: [auto, launch_server, serve]
    default: auto
  model_path:
    description:
      - Local model directory (with C(config.json)) or hub id C(org/name).
      - Required unless O(restore=last_good).
    type: str
  host:
    description: Address the server binds.
    type: str
    default: 127.0.0.1
  port:
    description: TCP port of the HTTP server (an integer 1-65535).
    type: raw
    default: 30000
  tp_size:
    description: Tensor parallel size (an integer >= 1).
    type: raw
    default: 1
  args:
    description:
      - Extra server flags, keys without leading dashes (C(reasoning-parser) or C(reasoning_parser)).
        V(true) gives a bare switch, V(false) or V(null) omits the flag, a list repeats the flag
        (or follows one flag for C(nargs=+) flags), a mapping is passed as one JSON string.
      - Checked against the flags of the sglang version in the venv, including choices and types.
      - C(model-path), C(host), C(port), C(tp-size) and C(api-key) must be given through their
        own options instead.
    type: dict
    default: {}
  env:
    description:
      - Extra environment variables for the server (override the defaults, never the instance
        markers). Values must be strings; quote YAML booleans.
    type: dict
    default: {}
  log_dir:
    description: Directory of the per-launch logs. Default C(<state_dir>/logs).
    type: path
  keep_logs:
    description: Per-launch log files of this instance to keep, the new one included.
    type: int
    default: 5
  state:
    description: V(started) - the described server runs after the task.
    type: str
    choices: [started]
    default: started
  lock_timeout:
    description: Seconds to wait for another launch or teardown of the same instance.
    type: float
    default: 30
  gpu_check:
    description:
      - Check that O(tp_size) GPUs are visible (after C(CUDA_VISIBLE_DEVICES) in O(env), whose
        entries must name GPUs of this host). V(false) only for emulators that oversubscribe
        GPUs on purpose (e.g. the GPU validation's tp 8 over 2 GPUs).
      - GPUs are counted through O(gpu_backend); V(none) skips the check (a note, not a failure).
    type: bool
    default: true
  allow_log_level_warning:
    description:
      - Allow C(--log-level warning) (or error, critical), which hides the ready line that
        C(sglang_ready) waits for. Reported in RV(preflight.warnings).
    type: bool
    default: false
  foreign_port_holders:
    description:
      - What a listener on O(port) (any address) that is neither this instance nor an sglang
        server of the module's user in its PID namespace means for the plan. A restart's teardown stops every listener
        of its ports, so such a holder is refused by default.
      - V(fail) - the preflight fails with RV(reason) V(port_busy), naming the holder (pid, user,
        command line with secrets masked); nothing is stopped.
      - V(kill) - the operator accepts that a restart stops it - check mode plans the change
        (V(port_busy), changed) with the holder labelled C(foreign=true) in RV(port_holder), the
        diff and RV(blockers). A real launch still never stops it.
    type: str
    choices: [fail, kill]
    default: fail
  min_free_mb:
    description:
      - MiB that must be free (for this user) on the filesystems of the log directory, the state
        directory and the instance C(TMPDIR) (each measured at its nearest existing ancestor
        when it does not exist yet). Below it the preflight fails with RV(reason) V(no_space),
        before anything is stopped.
    type: float
    default: 100
  min_free_inodes:
    description:
      - Inodes that must be free on the same filesystems (filesystems without an inode limit
        are not checked). Below it the preflight fails with RV(reason) V(no_space).
    type: int
    default: 1000
  shm_min_free_mb:
    description:
      - MiB that must be free in C(/dev/shm) for the new server, checked in the preflight - before a
        restart stops anything. SGLang, torch and NCCL create their shared-memory segments there; a
        full C(/dev/shm) kills the new server (and then the rollback) with C(No space left on
        device) once the old one is gone. The files of a O(output_dirs) entry there that is
        C(reclaimable) count as free. A refusal (RV(reason) V(no_space)) names the largest entries
        with their owners and the processes holding them (names and sizes only).
      - Default (null) - 128 + 16 per O(tp_size) rank (256 for tp 8) - a floor that catches a full or
        tiny C(/dev/shm) (a container's 64 MiB default), not a sizing guide. V(0) turns the check off.
    type: float
    version_added: "0.6.0"
  ignore_changes:
    description:
      - Changes on disk since the running server started that do B(not) make the plan replace it -
        V(code) (a file of the sglang package the server imports added, removed or changed, or of
        its source checkout or O(identity_paths)), V(model) (the model directory's config,
        tokenizer, chat template, weight index or weight files). Such a change is still said, as a
        warning. Empty (the default) - either change makes a running server of the requested
        configuration a change, RV(reason) V(code_changed) or V(model_changed).
      - What counts is each file's relative path, size and mtime (nothing is read); see
        RV(identity).
    type: list
    elements: str
    choices: [code, model]
    default: []
    version_added: "0.6.0"
  identity_paths:
    description:
      - More files or directories that count as the server's code (each file by relative path,
        size and mtime), for example a patch directory on C(PYTHONPATH) in O(env) or a
        C(sitecustomize.py). Each must be an absolute path that exists. The sglang package the
        server imports always counts, and so does a C(PYTHONPATH) entry in O(env) that holds an
        C(sglang) package.
    type: list
    elements: path
    default: []
    version_added: "0.6.0"
  output_dirs:
    description:
      - Directories the server writes into besides its log (for example the hidden-state dump
        directory that C(SGLANG_HS_DUMP_DIR) names). Checked in the preflight - in check mode
        too, so a restart's plan refuses them before anything is stopped - and created, when
        missing, just before the spawn.
      - Each must be usable by root without handing it to another user - opened one component at
        a time without following symlinks, owned by root or this user and not writable by others
        (a sticky shared root such as C(/dev/shm) may hold it); otherwise RV(reason) V(unsafe_dir).
      - Its filesystem must have O(output_dirs[].min_free_mb) MiB free, else RV(reason) V(no_space).
    type: list
    elements: dict
    default: []
    version_added: "0.4.0"
    suboptions:
      path:
        description: The directory (absolute).
        type: path
        required: true
      min_free_mb:
        description: MiB that must be free on its filesystem.
        type: float
        default: 0
      mode:
        description: Mode when it is created (octal string); group/other-writable modes are refused.
        type: str
        default: "0755"
      reclaimable:
        description:
          - The directory is emptied before the launch (the teardown's C(purge_paths)), so the files it
            holds count as free space; it must then also be a directory the teardown may purge (not a
            shared root, a system tree, a home or inside the state directory).
        type: bool
        default: false
  operation_lock:
    description:
      - Take the instance's operation lock C(<state_dir>/<name>.restart.lock) in this same call,
        before the server is read - what C(llmops.sglang.sglang_lock) takes, with the same holder
        (this controller's C(ansible-playbook), play and inventory host) and the same judgement of
        a left-over holder (a provably gone one is taken over at once; an alive one, or another
        controller's younger than O(operation_lock.ttl), refuses with RV(reason) V(locked)). The
        restart role's plan takes it this way, saving a task; C(llmops.sglang.sglang_ready)'s
        O(llmops.sglang.sglang_ready#module:release_lock) gives it back once the server is ready.
      - Taken for real in check mode too (the plan of a restart runs in check mode) unless
        O(operation_lock.check_only). Not taken when the preflight failed (nothing is done then).
      - Needs the module's action plugin (call it as C(llmops.sglang.sglang_launch)).
    type: dict
    version_added: "0.5.0"
    suboptions:
      ttl:
        description:
          - Seconds after which a lock whose holder cannot be checked from this controller counts as stale.
          - Also recorded in the lock as this run's own lifetime (C(lifetime)), so another controller takes it
            over only after the longer of its own ttl and this one, counted from the lock's last refresh. The
            restart role passes the lifetime of its whole run (the C(llmops.sglang.lock_lifetime) filter).
        type: float
        default: 0
      check_only:
        description: Only find out whether the lock could be taken (a C(--check) run); nothing is written.
        type: bool
        default: false
      holder:
        description: Set by the action plugin - the controller, play and inventory host taking the lock.
        type: dict
      takeover:
        description: Set by the action plugin - the token of a holder it judged gone.
        type: str
      takeover_reason:
        description: Set by the action plugin - why that holder is gone.
        type: str
  prewarm:
    description:
      - When this call runs in check mode (a restart's plan) and decides that a server must be
        (re)started, read the weight files of O(model_path) into the page cache, as
        C(llmops.sglang.sglang_prewarm) does (same file selection, memory floor, symlink rule and
        idempotence), while the old server still serves. The restart role's plan does this,
        saving a task. Result in RV(prewarm).
      - A prewarm that fails (nothing fits above the floor, no weight files, an unsafe link) is no
        failure of this call; RV(prewarm) says it with C(failed), C(reason) and C(msg).
      - Ignored by a launch that starts a server (the server reads its weights itself). O(model_path)
        must be an absolute local directory.
    type: dict
    version_added: "0.5.0"
    suboptions:
      threads:
        description: Files read in parallel (1 to 64).
        type: int
        default: 4
      min_available:
        description: The floor MemAvailable must stay above while reading - a percentage of MemTotal (V(10%)) or a size (V(64G)).
        type: raw
        default: 10%
      timeout:
        description: Seconds of reading after which it stops early (no failure).
        type: float
        default: 1800
      check_only:
        description: Only measure what would be read (a C(--check) run); nothing is read.
        type: bool
        default: false
      forced:
        description:
          - Warm also when the requested server is running unchanged - a forced restart (the
            restart role's C(sglang_restart_force)) replaces it all the same. Without it such a
            call reads nothing.
        type: bool
        default: false
        version_added: "0.7.0"
  probe_timeout:
    description:
      - Seconds a running server with the requested configuration has to answer an HTTP request
        (C(GET /v1/models), no credentials; any HTTP status is an answer). A request that gets no
        answer is sent again, 3 attempts at most with 1 s between them (at most 3 x O(probe_timeout)
        + 2 s in all, 17 s by default), since a stall of one request is no hung server. One that answers
        none (hung, stopped) is RV(reason) V(unresponsive) - changed in check mode, so a restart
        replaces it; a failure otherwise. One that answers a retry is kept, with a warning.
    type: float
    default: 5
  spawn_timeout:
    description:
      - Seconds the server process may take to appear after the spawn (interpreter start-up;
        cold venvs on network filesystems are slow). When none appears, the launch's session is
        stopped and the task fails with RV(reason) V(spawn_timeout).
    type: float
    default: 30
  containment:
    description:
      - How the launched server is contained, so that C(sglang_teardown) finds every process of it
        however it forks, detaches or retitles itself. The choice and why are in
        RV(containment) and in the launch record (C(containment), C(containment_why)).
      - V(systemd) - a transient unit C(llmops-sglang-<name>.service) (C(systemd-run),
        C(KillMode=control-group)); needs PID 1 to be systemd and root.
      - V(cgroup) - a cgroup v2 directory C(<cgroup2 mount>/llmops-sglang.slice/<name>/) owned by the
        module's user; the supervisor joins it before the server starts.
      - V(none) - no cgroup; the server is found by its launch record, session, marker and titles.
      - V(auto) - V(systemd) where PID 1 is systemd and the module runs as root, else V(cgroup) where
        cgroup v2 is writable by the module's user, else V(none).
      - A backend asked for by name that is not available fails with RV(reason)
        V(containment_unavailable) before anything is read or created. An instance cgroup (or unit)
        that still holds processes refuses the launch with V(cgroup_busy) (changed in check mode).
    type: str
    choices: [auto, systemd, cgroup, none]
    default: auto
  teardown:
    description:
      - Stop the instance first, in this call - the options of C(llmops.sglang.sglang_teardown), with
        the same meaning and defaults; its O(name), O(state_dir) and O(gpu_backend) are this
        module's. Run only when the preflight passed, under the instance lock, before the record and
        the port are read for the decision. Its result is RV(teardown); a failure fails the task
        with the teardown's RV(reason) and starts nothing. Omitted - nothing is stopped.
    type: dict
    version_added: "0.5.0"
    suboptions:
      ports:
        description: Managed TCP ports; their listeners and descendants are targets.
        type: list
        elements: int
        default: []
      gpus:
        description: Managed GPU indexes. Omitted means every GPU; C([]) means GPUs are not managed.
        type: list
        elements: raw
      patterns:
        description: Python regular expressions searched in each command line (as the teardown's).
        type: list
        elements: str
        default: []
      sglang_processes:
        description: Select this instance's and unmarked sglang processes by title / command line.
        type: bool
        default: true
      all_users:
        description: Also target processes and shm files of other users.
        type: bool
        default: false
      protect:
        description: Extra names or globs never to signal (added to the teardown's own list).
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
        description: Remove unheld sglang, torch and NCCL files in O(teardown.shm_dir).
        type: bool
        default: true
      shm_dir:
        description: Shared-memory directory to clean.
        type: path
        default: /dev/shm
      purge_paths:
        description:
          - Directories to empty (judged and refused as the teardown's O(teardown.purge_paths)).
          - Not emptied when the running server has the requested configuration and is replaced only because it
            did not answer (RV(reason) V(unresponsive)) - RV(teardown) says C(purge_skipped).
        type: list
        elements: path
        default: []
      clear_cache:
        description:
          - Empty the compile cache the old server used (see O(cache_dir)) once it is proven gone, so
            that the new server compiles from nothing (after an upgrade of torch or the kernels, say).
            Refused with V(unsafe_dir) before anything is stopped when the directory is unsafe.
        type: bool
        default: false
        version_added: "0.6.0"
      takeover:
        description:
          - Other instances, by name, the teardown may stop when they hold the port; without it the call fails
            before anything is stopped with RV(reason) V(other_instance), naming the instance and how to stop it.
        type: list
        elements: str
        default: []
        version_added: "0.6.0"
  cache_dir:
    description:
      - The directory of the server's persistent compile and JIT caches, one per host and user -
        by default SGLang's own, C(~/.cache/sglang) of the server's user (the module's). Every launch,
        whatever its SGLang version, gets the variables SGLang 0.5.23 sets at import, under it -
        C(SGLANG_CACHE_DIR) (the directory), C(TRITON_CACHE_DIR) (C(triton)), C(TORCHINDUCTOR_CACHE_DIR)
        (C(inductor)), C(CUDA_CACHE_PATH) (C(nv)), C(TILELANG_CACHE_DIR) (C(tilelang)),
        C(FLASHINFER_WORKSPACE_BASE) (the directory) and C(SGLANG_DG_CACHE_DIR) (C(deep_gemm)). SGLang
        0.5.6 would otherwise compile C(--enable-torch-compile) into inductor's default in the launch's
        private TMPDIR, which the teardown removes, and recompile on every restart.
      - Each variable the operator's O(env) sets wins; with C(SGLANG_CACHE_DIR) in O(env) the others
        derive from it and this option is not used. Such values are used as given (a warning names
        one that lies in the TMPDIR or where others can write).
      - The directory holds code the server loads, so it is checked in the preflight (before any
        teardown) and refused with RV(reason) V(unsafe_dir) when it, or any directory above it, is a
        symlink, is owned by another user than root or the module's, or is writable by group or
        others (a shared C(/tmp) or C(/dev/shm) path included), or when it lies inside the launch's
        TMPDIR. A missing one is created 0700 at the launch.
      - No teardown removes it; O(teardown.clear_cache) (or C(sglang_teardown)'s O(teardown.clear_cache))
        empties it. The launch record keeps where each cache is (C(compile_cache)); C(sglang_probe)
        shows their sizes.
    type: path
    version_added: "0.6.0"
  restore:
    description:
      - V(none) - launch the server the options describe.
      - V(last_good) - launch exactly the configuration of the instance's last proven-good launch,
        C(<state_dir>/<name>.good.json) (written only by M(llmops.sglang.sglang_ready)'s
        O(llmops.sglang.sglang_ready#module:promote) once that launch was proven ready and did its work) - its
        interpreter, entry point, model, host, port, tp size, args and environment - with the secrets it ran with
        (the api key, secret flags and secret environment values) from the private file
        C(<state_dir>/<name>.good.secrets). This is the rollback of a failed restart, in the same run or in a
        later one (the record survives an interrupted run; C(<name>.json) does not keep it, every launch
        replaces that).
      - With V(last_good) the server options given to this call (O(venv), O(python), O(entrypoint),
        O(model_path), O(host), O(port), O(tp_size), O(args), O(env), O(api_key)) are ignored - their defaults
        cannot be told from values given, so none of them can change what is restored. Every other option (the
        directories, the lock, O(containment), O(foreign_port_holders), O(gpu_check), O(output_dirs),
        O(teardown), ...) applies as usual - the restored configuration passes the whole preflight, and the
        teardown obeys O(foreign_port_holders) on each of its ports before anything is stopped.
      - Refused before anything is read or stopped, with RV(reason) V(no_last_good) (no launch of this instance
        was ever promoted) or V(last_good_unreadable) (the record or its secrets file is unsafe - a symlink,
        another user's, readable or writable by others -, damaged, incomplete, or its configuration and secrets
        do not give back its fingerprint).
      - When the last-good launch itself is the recorded one and still alive, nothing is stopped (O(teardown)
        is skipped) and the decision is the usual one (V(running) when it answers).
      - What was restored (no secrets) is RV(restored).
    type: str
    choices: [none, last_good]
    default: none
    version_added: "0.6.0"
attributes:
  check_mode:
    support: full
    description:
      - With O(teardown), its check-mode result (targets, signals, files) is RV(teardown) and the
        decision is made on the server as it runs now; changed when either would change
        something. Nothing is stopped.
      - Runs the whole preflight and starts nothing. A running instance with another fingerprint
        is reported as changed with RV(reason) V(config_changed) and the differences (this is how
        the restart role plans); one that does not answer within O(probe_timeout) as changed with
        RV(reason) V(unresponsive). A port held by an sglang server that is not this instance is
        reported in RV(port_holder) and RV(blockers) with RV(reason) V(port_busy) (changed); a
        foreign holder fails the plan unless O(foreign_port_holders=kill). A running instance of the
        requested configuration whose sglang code or model files changed on disk since it started is
        reported as changed with RV(reason) V(code_changed) or V(model_changed) and RV(changes). An instance cgroup that still
        holds processes is reported the same way with RV(reason) V(cgroup_busy). The containment
        backend is chosen and reported (RV(containment)); nothing is created.
  diff_mode:
    support: full
    description:
      - Before/after fingerprint inputs (secrets masked); the "before" side starts with one
        C(# port holder:) line per other listener on the port, labelled C([foreign]) when it is one.
        For V(code_changed) and V(model_changed) the "after" side ends with the change's message
        and one C(#   modified:), C(#   added:) or C(#   removed:) line per file.
notes:
  - Requires Linux C(/proc). GPUs are counted with NVML (nvidia-ml-py) when importable, else C(nvidia-smi).
  - The server runs under a supervising parent (C(<state_dir>/llmops-sglang-supervisor.py)) that
    forwards SIGTERM/SIGINT and writes C(<state_dir>/<name>.exit.json) when the server exits.
seealso:
  - module: llmops.sglang.sglang_ready
  - module: llmops.sglang.sglang_teardown
"""

EXAMPLES = r"""
- name: Start the serving instance from the venv, with the Kimi reasoning parser
  llmops.sglang.sglang_launch:
    name: serving
    venv: /root/ml-env
    model_path: /models/Kimi-K2.5
    port: 8000
    tp_size: 8
    args:
      reasoning-parser: kimi_k2
      tool-call-parser: kimi_k2
      trust-remote-code: true
      mem-fraction-static: 0.88
    api_key: "{{ vault_sglang_api_key }}"
  register: launch

- name: Extraction - the dump directory is checked before anything is stopped (10 GiB free) and created
  llmops.sglang.sglang_launch:
    name: extraction
    venv: /root/ml-env
    model_path: /models/Qwen3-8B
    port: 30001
    env:
      SGLANG_HS_DUMP_DIR: /dev/shm/sglang_hs
    output_dirs:
      - path: /dev/shm/sglang_hs
        min_free_mb: 10240
        mode: "0750"

- name: Replace the running server in one call - stop it and prove it gone, then launch (preflight first)
  llmops.sglang.sglang_launch:
    name: serving
    venv: /root/ml-env
    model_path: /models/Kimi-K2.5
    port: 8000
    tp_size: 8
    teardown:
      ports: [8000]
      grace_period: 30

- name: Plan a restart - what would change? (check mode, with the diff)
  llmops.sglang.sglang_launch:
    name: extraction
    venv: /root/ml-env
    model_path: /models/Kimi-K2.5
    port: 8000
    tp_size: 8
    args:
      disable-cuda-graph: true
      disable-radix-cache: true
      disable-custom-all-reduce: true
      mem-fraction-static: 0.88
    env:
      SGLANG_HS_DUMP_DIR: /dev/shm/sglang_hs
      NCCL_PROTO: Simple
  check_mode: true
  diff: true
  register: plan
"""

RETURN = r"""
changed:
  description: Whether a server was (or in check mode would be) started.
  returned: always
  type: bool
reason:
  description:
    - V(new) (no record), V(not_running) (recorded server gone), V(running) (same server alive
      and answering, nothing done), V(config_changed) (alive with another fingerprint; check mode
      only, else a failure), V(unresponsive) (alive with the same fingerprint but no HTTP answer
      within O(probe_timeout); check mode only, else a failure), V(code_changed) and
      V(model_changed) (alive with the same fingerprint, but a file of the sglang code it imports,
      or of its model, was changed, added or removed on disk since it started - RV(changes) names
      them; check mode only, else a failure; not with O(ignore_changes)), V(port_busy) (port held by
      another sglang server - changed in check mode -, or by a foreign holder - a failure unless
      O(foreign_port_holders=kill)), V(cgroup_busy) (the instance cgroup or unit still holds
      processes of another launch of this name - changed in check mode, else a failure).
    - On failure also V(containment_unavailable) (the O(containment) asked for is not available
      here; nothing was done), V(unsafe_cgroup) (the instance cgroup exists owned by another user,
      or is not a directory), V(containment_failed) (the supervisor or the server did not end up in
      the instance cgroup; the launch was stopped), V(missing_library) (psutil or requests not importable, see RV(interpreter_with_libraries)),
      V(no_space) (below O(min_free_mb) or O(min_free_inodes), or C(/dev/shm) below O(shm_min_free_mb)), V(preflight_failed)
      (several kinds of preflight failure), and the reasons of the step that failed - V(bad_name),
      V(unsafe_dir), V(locked), V(lock_failed), V(spawn_failed), V(spawn_timeout), V(died), V(io_error),
      V(no_last_good), V(last_good_unreadable) (O(restore)), ... -
      taken from where the error was raised.
  returned: always
  type: str
  sample: new
decision:
  description: One sentence saying what was (or in check mode would be) done and why.
  returned: always
  type: str
  sample: "instance 'serving' (pid 4242, stopped (state T)) runs the requested configuration but did not answer /v1/models within 5 s: it must be replaced"
identity:
  description:
    - What the requested server would import and load, as it is on disk now (each file by
      relative path, size and mtime; no content is read). C(code) - C(package) (the sglang
      package directory), C(source) (V(installed), V(checkout) - inside a git work tree, through
      an editable install or a C(PYTHONPATH) entry - or V(directory)), C(files), C(digest),
      C(roots) (the package and each of O(identity_paths) with its C(files) and C(digest)), C(git)
      (C(root), C(head), C(branch), C(modified) - the files git reports modified or untracked
      under the package, or null with C(modified_error) saying why git was not asked). C(model) -
      C(path) (resolved), C(files), C(weights), C(weight_bytes); null for a hub id.
    - The launch record keeps the same, with each root's listing, as C(code_identity) and
      C(model_identity); the plan compares them with a running server's.
  returned: when the preflight passed
  type: dict
  version_added: "0.6.0"
  sample: {code: {package: /root/ml-env/lib/python3.11/site-packages/sglang, source: installed, files: 5771,
                  digest: 3f1c0a9e8b7d6c5b4a392817, git: null},
           model: {path: /models/Kimi-K2.5, files: 72, weights: 64, weight_bytes: 1029734400000}}
probe:
  description: The HTTP probe of a running server that did not answer - C(endpoint), C(timeout) (of each attempt),
    C(answered) (false), C(status), C(error), C(state) (process state, V(T) when stopped), C(attempts) (how many
    requests it sent), C(max_attempts), C(retried), C(seconds) (all attempts together). A server that answered a
    retry is kept; the stall is a warning (RV(preflight), check C(liveness)).
  returned: when reason is unresponsive
  type: dict
replace_reason:
  description:
    - What a replacement the plan asks for (check mode, changed) is for - the RV(reason) V(config_changed),
      V(unresponsive), V(port_busy) or V(cgroup_busy); null when no running server must be replaced. A server
      replaced because it is V(unresponsive) runs the requested configuration - its data is kept (with
      O(teardown), that call's C(purge_paths) are not emptied, see RV(teardown)).
  returned: always
  type: str
  version_added: "0.6.0"
  sample: unresponsive
previous_exit:
  description:
    - The instance's recorded server is gone without a teardown (RV(reason) V(not_running)) - its C(pid),
      C(launch_id), C(launched_at), whether its C(exit_file) exists and, from it, C(returncode), C(signal),
      C(exited_at) (epoch) and C(exited_at_utc); C(how) says it in words (also in RV(decision)).
  returned: when the launch record names a server that is gone
  type: dict
  version_added: "0.6.0"
  sample: {pid: 4242, launch_id: 9f2c, exit_file: true, returncode: 1, signal: null, exited_at: 1767225600.0,
           exited_at_utc: "2026-01-01T00:00:00Z", how: "exited on its own at 2026-01-01T00:00:00Z with exit code 1"}
pid:
  description: Main server process (the one that owns the port); null in check mode.
  returned: always
  type: int
  sample: 123456
output_dirs_created:
  description:
    - The O(output_dirs) created by this launch (missing before it). With O(teardown) they are created under the
      instance lock before anything is stopped (a name another user took during the teardown would leave the host
      without a server); after the teardown every one is judged again.
  returned: when a server was started, or a teardown ran
  type: list
  elements: str
  sample: [/dev/shm/sglang_hs]
log_path:
  description: This launch's own log file.
  returned: always
  type: str
  sample: /var/lib/llmops-sglang/logs/serving-20250101T120000Z.log
record:
  description: The launch record as written (secrets masked); see docs/conventions.md.
  returned: when a server runs or was started
  type: dict
fingerprint:
  description: sha256 of everything that defines the server (secrets included only as digests).
  returned: when preflight resolved the interpreter
  type: str
fingerprint_inputs:
  description: The inputs of the fingerprint, secrets masked.
  returned: when preflight resolved the interpreter
  type: dict
changes:
  description:
    - What differs from the running server, one entry per key (C(args.reasoning-parser), ...) with
      C(before) and C(after).
    - For V(code_changed) and V(model_changed) one entry per kind, C(key) V(code) or V(model), with
      C(message) (the sentence the decision says - C(sglang code changed since pid 4242 started) or C(model
      weights changed), then the first file and how many more, e.g. C(srt/models/deepseek_v2.py (+1 file))),
      C(files) (C(modified), C(added),
      C(removed) - paths relative to the package or the model directory, at most 50 each) and C(count).
  returned: when reason is config_changed, code_changed or model_changed
  type: list
  elements: dict
preflight:
  description: The preflight report - every check with its outcome, and all errors and warnings.
  returned: always
  type: dict
  contains:
    checks:
      description: One entry per check - C(name), C(status) (V(ok), V(failed), V(warning), V(note) or V(skipped)) and C(msg).
      returned: always
      type: list
      elements: dict
    errors:
      description: Every problem that fails the preflight, as one sentence each.
      returned: always
      type: list
      elements: str
    warnings:
      description: Problems that do not fail the preflight (for example a log level that hides the ready line).
      returned: always
      type: list
      elements: str
interpreter:
  description: The resolved interpreter (path, venv, python_version, sglang_version, entrypoints, ...).
  returned: when resolved
  type: dict
argv:
  description: The server command line (secrets masked).
  returned: when preflight resolved the interpreter
  type: list
  elements: str
port_holder:
  description:
    - Processes listening on the port (any address) that are not this instance - C(pid), C(user),
      C(cmdline) (secrets masked), C(address), C(instance) (false), C(sglang) (why it is an sglang
      server of the module's user, or null), C(foreign) (true when it is not - a plain listener,
      another user's process, a process in another PID namespace, or one whose owner is not
      visible) and C(note) (for example V(in another PID namespace (a container))).
  returned: always
  type: list
  elements: dict
  sample: [{pid: 4242, user: root, cmdline: [python3, -m, http.server, "8000"], address: 0.0.0.0,
            instance: false, sglang: null, foreign: true}]
blockers:
  description: Check mode - what would make the real launch fail although the preflight passed.
  returned: always
  type: list
  elements: str
log_tail:
  description: Last lines of the log (secrets masked) when the server died right after the launch or never appeared.
  returned: on failure with reason died or spawn_timeout
  type: str
diff:
  description: Fingerprint inputs before (the running server, if any) and after, as text.
  returned: with --diff
  type: dict
missing_libraries:
  description: The Python libraries the module's interpreter could not import.
  returned: when reason is missing_library
  type: list
  elements: str
  sample: [psutil, requests]
containment:
  description:
    - The containment of the server - C(backend) (V(systemd), V(cgroup) or V(none)), C(why) (how it
      was chosen), C(cgroup) (absolute path of the instance cgroup) and C(unit) (the systemd unit),
      null where not applicable. For a server already running, what its launch record says; for a
      new launch, what O(containment) chose (C(cgroup) and C(unit) filled in once it started).
  returned: always, except when O(containment) could not be chosen
  type: dict
  sample: {backend: cgroup, why: "auto: PID 1 is not systemd; cgroup v2 at /sys/fs/cgroup is writable by uid 0",
           cgroup: /sys/fs/cgroup/llmops-sglang.slice/serving, unit: null}
restored:
  description:
    - With O(restore=last_good) - what was restored - C(from) (the last-good record's path), C(launch_id),
      C(fingerprint), C(promoted_at_utc), C(pid) and C(start_time) (of the last-good launch, maybe long gone).
      Never a secret.
  returned: when O(restore=last_good) and the last-good record could be used
  type: dict
  version_added: "0.6.0"
  sample: {from: /var/lib/llmops-sglang/serving.good.json, launch_id: 5f0c..., fingerprint: 9ab1...,
           promoted_at_utc: "2026-05-04T10:12:00Z", pid: 4242, start_time: 1777888888.1}
last_good:
  description:
    - The instance's last proven-good launch as it is on the host before this call (what
      O(restore=last_good) would start) - C(path), C(launch_id), C(fingerprint), C(promoted_at_utc), and
      C(error) when the record cannot be read (then restoring it is refused). Null when there is none.
  returned: when the module got past its name and state dir
  type: dict
  version_added: "0.6.0"
  sample: {path: /var/lib/llmops-sglang/serving.good.json, launch_id: 5f0c..., fingerprint: 9ab1...,
           promoted_at_utc: "2026-05-04T10:12:00Z", error: null}
prewarm:
  description:
    - What O(prewarm) read - the result C(llmops.sglang.sglang_prewarm) returns (C(changed), C(msg),
      C(files), C(bytes), C(resident_before_pct), C(resident_after_pct), C(read_bytes), C(seconds),
      C(stopped), C(memory), ...), or C(failed), C(reason) and C(msg) when it could not run.
  returned: when O(prewarm) was given and this call, in check mode, decided a server must be (re)started
    (with O(prewarm.forced), also when it is running unchanged)
  type: dict
  version_added: "0.5.0"
  sample: {changed: true, resident_before_pct: 2.5, resident_after_pct: 100.0, read_bytes: 16106127360,
           msg: "read 15.0 GiB of 4 files of /models/Qwen3-8B in 6.1 s (2.64 GB/s): 2.5% was resident before, 100.0% now"}
teardown:
  description:
    - What O(teardown) did - the result C(llmops.sglang.sglang_teardown) returns (C(targets),
      C(killed), C(survivors), C(ports_after), C(shm_removed), C(record_removed), C(timings), ...;
      in check mode what it would do). When it failed, also C(failed), C(reason) and C(msg); the
      task fails with the same RV(reason) and nothing was started.
    - C(purge_skipped) (C(paths), C(reason) V(unresponsive), C(why)) - the running server had the requested
      configuration and did not answer, so it was stopped without emptying C(purge_paths) (its dumps are data).
  returned: when O(teardown) was given and the preflight passed
  type: dict
  version_added: "0.5.0"
  sample: {changed: true, targets: [{pid: 4242, name: python3, why: [launch record]}],
           killed: [{pid: 4242, name: python3, signal: SIGTERM}], survivors: [], timings: {plan: 0.06, term: 0.4}}
operation_lock:
  description:
    - The operation lock this call took (O(operation_lock)) - C(reason) (V(taken), V(held) by this
      run already, V(taken_over)), C(lock_path), C(holder), C(holder_text), and C(previous) and
      C(taken_over) after a takeover. On a refusal the module fails with RV(reason) V(locked) and
      the top-level C(holder), C(holder_text), C(age) and C(lock_path) of the lock's holder.
  returned: when O(operation_lock) was given and the preflight passed
  type: dict
  version_added: "0.5.0"
  sample: {changed: true, reason: taken, lock_path: /var/lib/llmops-sglang/serving.restart.lock,
           holder_text: "ansible-playbook pid 4242 of root@ctl.example.com, play 'Restart', host gpu-07, since 12:01:07"}
interpreter_with_libraries:
  description:
    - An interpreter on the host that imports psutil and requests (run only when nobody but root
      or the module's user can replace it), to pass as C(ansible_python_interpreter); null when
      none was found.
  returned: when reason is missing_library
  type: str
  sample: /root/ml-env/bin/python
"""

import os
from typing import Any, Dict

import gc

if __name__ == "__main__":
    gc.disable()  # a module run: no collection while its code is imported (_exit.started turns it back on)

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._host import _containment
from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _depsearch
from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_exec
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _launch_restore
from ansible_collections.llmops.sglang.plugins.module_utils._core import _options
from ansible_collections.llmops.sglang.plugins.module_utils._launch import _preflight
from ansible_collections.llmops.sglang.plugins.module_utils._core import _redact
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError


def _warn(module: AnsibleModule, result: Dict[str, Any]) -> None:
    """What the operator must see without -v, from the result or the failure alike."""
    secrets = _launch_exec.param_secrets(module.params)
    for text in _launch_exec.operator_warnings(result.get("preflight") or {}, module.params):
        module.warn(_redact.redact_text(text, secrets))


def _body(module: AnsibleModule) -> Dict[str, Any]:
    """Preflight, decide (_launch_plan), act (_launch_exec); _exit.run redacts what leaves."""
    if not os.path.isdir("/proc/self"):
        raise SglangError("sglang_launch needs Linux /proc", reason="unsupported")
    try:
        result = _launch_exec.run(module.params, module.check_mode, module._diff, module.warn,
                                  lambda values: module.no_log_values.update(v for v in values if len(v) >= 8))
    except SglangError as exc:
        _warn(module, exc.details)
        raise
    _warn(module, result)
    return result


def main() -> None:
    _exit.started()
    module = AnsibleModule(
        argument_spec=_options.merged(
            _options.STATE_DIR, _options.GPU_BACKEND, _options.API_KEY, _options.PYTHON, _options.INTROSPECT_TIMEOUT,
            name=dict(type="str", default="sglang"),
            venv=dict(type="path"),
            search_paths=dict(type="list", elements="path"),
            entrypoint=dict(type="str", default="auto", choices=list(_preflight.ENTRYPOINTS)),
            model_path=dict(type="str"),
            host=dict(type="str", default="127.0.0.1"),
            port=dict(type="raw", default=30000),
            tp_size=dict(type="raw", default=1),
            args=dict(type="dict", default={}),
            env=dict(type="dict", default={}),
            log_dir=dict(type="path"),
            keep_logs=dict(type="int", default=5),
            state=dict(type="str", default="started", choices=["started"]),
            lock_timeout=dict(type="float", default=30),
            gpu_check=dict(type="bool", default=True),
            allow_log_level_warning=dict(type="bool", default=False),
            foreign_port_holders=dict(type="str", default="fail", choices=list(_preflight.FOREIGN_POLICIES)),
            min_free_mb=dict(type="float", default=100),
            min_free_inodes=dict(type="int", default=1000),
            shm_min_free_mb=dict(type="float"),
            ignore_changes=dict(type="list", elements="str", default=[], choices=["code", "model"]),
            identity_paths=dict(type="list", elements="path", default=[]),
            output_dirs=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                min_free_mb=dict(type="float", default=0.0),
                mode=dict(type="str", default="0755"),
                reclaimable=dict(type="bool", default=False))),
            probe_timeout=dict(type="float", default=5),
            prewarm=dict(type="dict", options=dict(
                threads=dict(type="int", default=4),
                min_available=dict(type="raw", default="10%"),
                timeout=dict(type="float", default=1800.0),
                check_only=dict(type="bool", default=False),
                forced=dict(type="bool", default=False))),
            operation_lock=dict(type="dict", options=dict(
                ttl=dict(type="float", default=0.0),
                check_only=dict(type="bool", default=False),
                holder=dict(type="dict"),
                takeover=dict(type="str"),
                takeover_reason=dict(type="str"))),
            spawn_timeout=dict(type="float", default=30),
            containment=dict(type="str", default="auto", choices=list(_containment.BACKENDS)),
            teardown=dict(type="dict", options=_options.teardown()),
            cache_dir=dict(type="path"),
            restore=dict(type="str", default="none", choices=list(_launch_restore.RESTORE_CHOICES)),
        ),
        mutually_exclusive=[("venv", "python")],
        # restore: last_good takes the server's configuration from the last-good record
        required_if=[("restore", "none", ("model_path",)), ("restore", "none", ("venv", "python"), True)],
        supports_check_mode=True,
    )
    # Secret env values (HF_TOKEN, *_PASSWORD...) and secret flags in `args` get Ansible's own
    # no_log masking, so they never show in `invocation`, messages or -vvv output; shorter values
    # would mask unrelated text (paths).
    secrets = _launch_exec.param_secrets(module.params)
    module.no_log_values.update(text for text in secrets if len(text) >= 8)
    _depsearch.require(module)
    _exit.run(module, _body, "sglang_launch", secrets)


if __name__ == "__main__":
    main()
