#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait until one SGLang launch is ready, proven by identity; fail fast with the cause."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_ready
short_description: Wait until an SGLang launch is ready, judged by identity rather than health
version_added: "0.1.0"
description:
  - Follows the log of one launch (from the launch record written by
    M(llmops.sglang.sglang_launch)) incrementally from the launch's byte offset, and declares
    the server ready only when B(all) of these hold.
  - The ready line (V(The server is fired up and ready to roll!)) appears in this launch's log
    after the launch offset; lines written before the offset (an appended log, an earlier run)
    never count.
  - C(Uvicorn running on http://HOST:PORT) for the expected port appeared and no bind error
    (C(error while attempting to bind on address)) did.
  - Every listening socket on the port that collides with the launch's address belongs to this
    launch (the record's pid, its descendants, its process group or session, or a process
    carrying C(LLMOPS_SGLANG_LAUNCH_ID) equal to the record's launch_id). Sockets collide when
    they have the same address family and address, or one is a wildcard (an IPv6 wildcard is
    taken as dual-stack); a listener on V(::1) does not collide with a server on V(127.0.0.1).
  - C(/server_info) (or the deprecated C(/get_server_info)) reports the expected fields
    (compared normalised - V(8) equals V("8"), trailing slashes in paths are ignored).
  - The requested health endpoint answers 200.
  - Then readiness must hold until the O(settle) window ends (process alive, port still this
    launch's). A starting launch's window counts from the poll that first saw its ready line
    (RV(settle_from)), so the time the proofs take is inside it; a re-check of a running
    server's counts from the proofs (RV(proven_at)). A death inside the window is reported like
    a crash, with its decisive lines.
  - Fails fast, with a RV(reason) code and the decisive log lines (a traceback from C(Traceback)
    to the exception line, capped at about 40 lines, secrets redacted) when the launch exits,
    prints a fatal line inside a traceback of its start, loses its port to another process, or
    reports another configuration. A crashed launch is reported within about one
    O(poll_interval) plus a short time used to capture the rest of the traceback.
  - "A fatal pattern decides only when the process exits, or when the line sits inside a
    traceback before the ready line. Known harmless lines never decide and are never named as
    the cause: warnings such as C(Ignore import error when loading X: No module named Y) that
    healthy servers print when an optional dependency is missing (see O(extra_benign_patterns))."
  - A server that already listens on its port when the check begins (a re-check of a running
    server) is judged by the port owner, C(/server_info) and health. A launch that was never judged
    ready before (it is not the start remembered in O(state_dir)) is judged as a start even when it
    already holds its port - a server this play launched that bound its port within the first poll -
    so it needs its ready line, its settle window counts from it and its start is remembered for the
    next RV(slow_start); only one whose log has grown past a start's (4 MiB) is taken as running. Its log is used only for
    the startup up to the ready line, if the log still has it; later lines (recovered
    per-request errors, hours of access lines) are never read, and a rotated, truncated or
    deleted log is no failure (RV(already_running)).
  - Tolerates log rotation (new inode - the old file is drained, the new one followed from
    byte 0) and truncation (restarts from 0 and notes it in RV(log_events)).
  - The log must be a regular file. It is opened without blocking and checked before any
    read; a FIFO, device, socket or directory at the log path fails at once with
    RV(reason=bad_log).
  - Changes nothing on the server. After a successful start it remembers the start's timeline
    in O(state_dir)/C(<name>.timeline.json) (0600, written atomically; not in check mode), so
    the next wait can say how far along a start is compared with the last one and flag a slow
    start (RV(slow_start)) or a cold one (RV(cold_start)). A re-check of a running server writes
    nothing.
  - In check mode it observes exactly the same way and writes nothing.
  - Without O(api_key), a launch whose record says it was started with a key is checked with the key that very
    launch was started with, read from its private C(<state_dir>/<name>.secrets) (kept by
    M(llmops.sglang.sglang_launch); a rollback's restored server runs the old key, which the controller does not
    know). It is sent only once the port owner was proven to be this launch and masked in everything returned.
  - "Live progress: the collection's action plugin of the same name (used automatically for
    C(llmops.sglang.sglang_ready) tasks) runs the wait in slices of O(slice_seconds) and prints,
    between slices, one line per host with the phase and its progress read from this launch's
    log, for example C(gpu-07 extraction: loading weights 31/64 shards (2m05s, 48% of the last
    start's time)), then C(... ready in 4m12s). Each slice goes on from the log byte the previous
    one reached (nothing is read twice); the timeout, the verdict and the result are those of
    one uninterrupted wait. Nothing is printed when the stdout callback is a machine format
    (anything but V(default), V(minimal), V(oneline) and the human community callbacks -
    V(json), V(yaml), ansible-runner's V(awx_display) included); C(LLMOPS_SGLANG_PROGRESS=always)
    or V(never) overrides that."
  - Nodes with O(node_rank) >= 1 have no HTTP server; the
    C(Dummy health check server started) log line is their readiness signal and HTTP checks
    are skipped.
author:
  - llmops.sglang contributors (@llmops)
requirements:
  - Linux (C(/proc) is read directly for processes and sockets).
options:
  name:
    description:
      - Instance name; the launch record is read from O(state_dir)/C(<name>.json).
      - One of O(name) or O(record) is required.
    type: str
  record:
    description:
      - The launch record itself (for example RV(llmops.sglang.sglang_launch#module:record)),
        instead of reading it from O(state_dir).
      - Needs at least C(pid) and C(log_path); C(start_time), C(log_offset), C(port),
        C(launch_id), C(pgid), C(sid), C(exit_path), C(argv) and C(expect) make the checks
        stronger.
    type: dict
  timeout:
    description:
      - Seconds to wait for readiness before failing with RV(reason=timeout).
    type: float
    default: 1200
  poll_interval:
    description:
      - Seconds between two polls of the log and the process (sub-second is cheap).
      - HTTP checks run at most every max(O(poll_interval), 0.5) seconds.
      - Must be between 0.01 and 60.
    type: float
    default: 0.2
  ready_patterns:
    description:
      - Regular expressions (Python C(re.search)) that mark the ready line. Replaces the default.
    type: list
    elements: str
  extra_ready_patterns:
    description:
      - Regular expressions added to O(ready_patterns) (or to its default).
    type: list
    elements: str
    default: []
  fatal_patterns:
    description:
      - Regular expressions that mark a fatal line (RV(reason=fatal_log)). Replaces the default
        list (missing modules, not enough memory, CUDA out of memory, CUDA graph capture failure,
        unbalanced memory, scheduler exception/death, initialization failure, sigquit from a
        child). The bind error is always fatal.
      - A fatal line fails the wait while the process lives only inside a traceback printed
        before the ready line; otherwise it explains the failure once the process exits.
    type: list
    elements: str
  extra_fatal_patterns:
    description:
      - Regular expressions added to O(fatal_patterns) (or to its default).
    type: list
    elements: str
    default: []
  extra_benign_patterns:
    description:
      - Regular expressions of harmless lines, added to the built-in list of warnings that
        SGLang prints on healthy hosts with the words of a fatal pattern (C(Ignore import error
        when loading ...), C(Failed to import from custom_ar with ModuleNotFoundError(...)), and
        others read from the 0.5.23 source). A line that matches one, and its continuation lines
        without a timestamp, never decides and is never named as a cause.
    type: list
    elements: str
    default: []
  settle:
    description:
      - Seconds that readiness must hold - the launched process alive and the port still owned
        by this launch, every proof held at least once and the port's owners checked again at
        the end - before the module answers ready.
      - A starting launch's window begins at the poll that first saw its ready line (it has
        been alive since), so the proofs' own time is inside the window; proofs that take
        longer than the window get the verdict as soon as they hold, after a last check that
        the process is alive and the port still its own. A re-check of a server that was
        already running, a launch without a ready line in its log (O(require_ready_line=false)),
        and a launch that lost its port begin it when the proofs held.
      - A death inside the window is reported like a crash (RV(reason=fatal_log) or
        RV(reason=exited)) with its decisive lines.
      - May run past O(timeout) by at most its own length. V(0) answers at the moment the
        proofs hold.
      - Must be between 0 and 600.
    type: float
    default: 2.0
  expect:
    description:
      - "C(/server_info) fields that must match, for example C({tp_size: 8, model_path: /models/x})."
      - Defaults to the record's C(expect) (model path, tp_size, port and the parser flags given
        at launch). V({}) disables the comparison.
    type: dict
  health:
    description:
      - Health endpoint that must answer 200 after the identity and configuration checks.
      - V(health_generate) runs a one-token generation on the server.
      - With V(none), a server that was already running when the check began and whose log no
        longer shows its ready line is still checked with C(/health), which answers 200 only
        after the warmup - the only remaining proof that its start completed.
    type: str
    choices: [none, health, health_generate]
    default: health
  node_rank:
    description:
      - Node rank of this host in a multi-node launch. Defaults to the record's C(node_rank), else V(0).
      - For ranks >= 1 the ready signal is C(Dummy health check server started) (plus any
        non-default O(ready_patterns)/O(extra_ready_patterns)), and no HTTP check runs.
    type: int
  slice_seconds:
    description:
      - Length of one slice of the wait when it runs through the action plugin (live progress
        between slices). V(0) waits in one call and prints no progress.
      - The default comes from the environment variable C(LLMOPS_SGLANG_READY_SLICE_SECONDS)
        on the controller, else V(10).
      - A slice may run a little longer to finish reading a verdict (the rest of a traceback,
        the settle window's last check). The module itself, run without the action plugin,
        ignores this option and waits in one call.
      - Must be between 0 and 600.
    type: float
  _resume:
    description:
      - Private to the collection's action plugin - do not set it. The state of a sliced wait
        (V({}) for its first slice, then what the previous slice returned); with it, the module
        runs one slice of at most about O(slice_seconds) and answers RV(pending) when the slice
        ends before the verdict.
    type: dict
  require_ready_line:
    description:
      - When V(false), the ready line is not required. Use it only for launches with a quiet
        C(--log-level) (warning, error) that hides the ready line; readiness then rests on the
        Uvicorn line (when the HTTP log level shows it), port owner identity, C(/server_info)
        and health.
      - When V(true) and the record's argv has a quiet C(--log-level), the module fails at once
        with RV(reason=ready_line_hidden) instead of waiting for a line that never comes.
    type: bool
    default: true
  work:
    description:
      - A proof that the server does its job, run once when every readiness proof holds, inside
        the O(settle) window (its time overlaps the window, so it adds no module call after the
        wait). A failure is RV(reason=work_failed), unless the server died meanwhile (then the
        crash is reported, with its decisive lines). Result in RV(work).
      - V(generate) - C(POST /generate) with 4 tokens must answer 200; with O(work.dump_dir), a
        regular file in that directory (recursively, symlinks not followed) must appear or change
        after the request began (the directory is listed just before the request, so a dump the
        start-up's warm-up wrote is not taken for a new one). The dump directory holds the
        operator's data, so once checked the proof's own file is removed again - only when it is the
        one file that appeared since the request (with other requests' dumps beside it, nothing is
        removed), through directory descriptors without following symlinks, a regular file owned by
        the server's user that is still the file checked. RV(work) says C(removed) or C(kept_why).
      - V(chat_reasoning) - C(POST /v1/chat/completions) (the model id from C(GET /v1/models))
        must answer 200 with a non-empty C(choices[0].message.reasoning_content) (a server
        started without C(--reasoning-parser) returns the reasoning inside C(content)).
      - Not run in check mode (the request would make the server write), nor for O(node_rank) >= 1.
    type: dict
    version_added: "0.4.0"
    suboptions:
      kind:
        description: Which proof.
        type: str
        choices: [generate, chat_reasoning]
        required: true
      dump_dir:
        description: With V(generate) - the directory the server writes a file into for each generation (C(SGLANG_HS_DUMP_DIR)).
        type: path
      dump_wait:
        description: Seconds to wait for the new file after the request answered.
        type: float
        default: 30
      timeout:
        description: Seconds each request may take.
        type: float
        default: 60
  release_lock:
    description:
      - The token (C(holder.token)) of the instance's operation lock to give back once the server
        is ready and its O(work) proven - the last step of a restart whose plan took the lock
        (C(llmops.sglang.sglang_launch)'s O(llmops.sglang.sglang_launch#module:operation_lock)),
        in this same call instead of a task of its own. Not released when the server is not ready
        (a rollback still needs it). A lock that now has another token is left in place (a warning).
      - Refreshed while the wait lasts, as with O(refresh_lock).
      - Result in RV(operation_lock_released).
    type: str
    version_added: "0.5.0"
  release_lock_after:
    description:
      - With O(release_lock), give the lock back only when the server's ready line is at least this
        many seconds old when the call ends (a server held past the restart's hold); a younger or
        unknown ready line keeps the lock (RV(operation_lock_released) says C(deferred)), so a later
        call or the play releases it. V(0) releases as soon as the server is ready.
    type: float
    default: 0
    version_added: "0.6.0"
  refresh_lock:
    description:
      - The token (C(holder.token)) of the instance's operation lock to refresh while this wait lasts,
        without giving it back (a rollback's readiness wait, after which the play releases the lock).
      - The wait writes the lock's C(refreshed) time at its start and then every 30 s (a sliced wait's
        slices together), so the lock's age - what lets another controller take it over after the
        longer of its C(ttl) and the C(lifetime) the holder recorded - counts from the holder's last
        sign of life, and a live run's lock stays its own however long the wait takes. A lock that now has
        another token, or none, is left alone. A refresh that cannot be written is a warning, never a
        failure of the wait. Nothing is written in check mode.
      - O(release_lock) refreshes its lock the same way.
    type: str
    version_added: "0.6.0"
  promote:
    description:
      - Once the server is ready and its O(work) proven (when asked), make THIS launch the instance's last
        proven-good launch - its record copied to C(<state_dir>/<name>.good.json) and the secrets it was
        started with (kept by M(llmops.sglang.sglang_launch) in the private C(<state_dir>/<name>.secrets)) to
        C(<state_dir>/<name>.good.secrets), both 0600, written atomically without following a symlink. What
        M(llmops.sglang.sglang_launch)'s O(llmops.sglang.sglang_launch#module:restore=last_good) starts again.
      - Only the launch named by the record now in C(<state_dir>/<name>.json) is promoted (the launch just
        judged); a server that is not ready, or whose proof failed, is never promoted. A promotion that cannot
        be written is a warning (RV(promote_error)), not a failure - the server is ready; the last-good record
        stays as it was. Nothing is written in check mode.
      - The restart role promotes its new server; its rollback does not (the restored launch is already the
        last good one).
    type: bool
    default: false
    version_added: "0.6.0"
extends_documentation_fragment:
  - llmops.sglang.common.state_dir
  - llmops.sglang.common.api_key
  - llmops.sglang.common.unused_gpu_backend
attributes:
  check_mode:
    support: full
    description:
      - Observes the same way in check mode and writes nothing (no remembered start, no promotion).
      - Outside check mode it changes nothing on the server; its own bookkeeping in the state dir
        (the remembered start, O(promote)) leaves C(changed) false.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
notes:
  - Failures are C(fail_json) with C(msg) (one precise sentence) and C(reason), one of
    V(exited), V(fatal_log), V(stale_server), V(config_mismatch), V(unauthorized),
    V(log_missing), V(log_truncated), V(bad_log), V(timeout), V(ready_line_hidden),
    V(work_failed), V(record_missing), V(record_invalid), V(record_damaged) (the record file is empty, cut
    short or not a JSON object - the check only reads it; a restart or a teardown keeps it aside and goes on),
    V(invalid_argument), V(bad_name), V(io_error),
    V(permission_denied), V(error) (the code is the one set where the failure was found).
  - A stale server that answers C(/health) 200 on the port never makes a failed launch ready.
seealso:
  - module: llmops.sglang.sglang_launch
  - module: llmops.sglang.sglang_teardown
"""

EXAMPLES = r"""
- name: Wait for the extraction server launched just before
  llmops.sglang.sglang_ready:
    name: extraction
    timeout: 1800

- name: Use the record returned by sglang_launch, and run a generation as the health check
  llmops.sglang.sglang_ready:
    record: "{{ launch.record }}"
    health: health_generate
    api_key: "{{ vault_sglang_api_key }}"

- name: Require a specific configuration (overrides the record's expect)
  llmops.sglang.sglang_ready:
    name: serving
    expect:
      tp_size: 8
      reasoning_parser: kimi_k2
      model_path: /models/Kimi-K2.5

- name: Treat a site-specific line as fatal too
  llmops.sglang.sglang_ready:
    name: extraction
    extra_fatal_patterns:
      - "hidden state dump failed"

- name: A launch with --log-level warning (the ready line is hidden)
  llmops.sglang.sglang_ready:
    name: quiet
    require_ready_line: false

- name: A harmless site-specific warning must never decide; answer as soon as the proofs hold
  llmops.sglang.sglang_ready:
    name: extraction
    extra_benign_patterns:
      - "optional tracer not installed"
    settle: 0

- name: Progress every 30 s instead of 10 (0 waits in one call and prints no progress)
  llmops.sglang.sglang_ready:
    name: extraction
    slice_seconds: 30

- name: Ready, then one generation must write a new hidden-state dump (inside the settle window)
  llmops.sglang.sglang_ready:
    name: extraction
    work:
      kind: generate
      dump_dir: /dev/shm/sglang_hs

- name: Ready, then a chat answer must carry reasoning_content (--reasoning-parser works)
  llmops.sglang.sglang_ready:
    name: serving
    work:
      kind: chat_reasoning

- name: Second node of a two-node launch (no HTTP server there)
  llmops.sglang.sglang_ready:
    name: kimi
    node_rank: 1
"""

RETURN = r"""
ready:
  description: Whether the launch is ready (always V(true) on success).
  returned: always
  type: bool
reason:
  description: V(ready), or the failure code (see notes).
  returned: always
  type: str
  sample: fatal_log
elapsed:
  description: Seconds since the module started.
  returned: always
  type: float
since_launch:
  description: Seconds since the launch (record C(launched_at)).
  returned: always
  type: float
timeline:
  description:
    - Startup phases in the order seen, each with seconds since launch and the line. Phases are
      C(init distributed), C(weight load begin), C(weight load end), C(kv cache),
      C(memory pool), C(cuda graph begin), C(cuda graph end), C(http up), C(warmup), C(ready)
      (or C(dummy health server) on node_rank >= 1).
  returned: always
  type: list
  elements: dict
  sample: [{phase: weight load begin, seconds: 4.1, line: "[2025-01-01 10:00:04 TP0] Load weight begin. avail mem=78.50 GB"}]
phase:
  description: The furthest phase reached (null before the first startup line).
  returned: always
  type: str
server_version:
  description: C(version) from C(/server_info).
  returned: always
  type: str
matched:
  description: Expected fields and the values the server reported (secrets masked).
  returned: always
  type: dict
expected:
  description: The fields that were compared.
  returned: always
  type: dict
mismatches:
  description: Expected vs actual table for RV(reason=config_mismatch).
  returned: on config_mismatch
  type: list
  elements: dict
  sample: [{field: tp_size, expected: 8, actual: 2}]
listeners:
  description: Listening sockets on the port, with their owner processes and whether they belong to this launch.
  returned: always
  type: list
  elements: dict
stale_owners:
  description: >-
    Processes holding the port on a colliding address that are not this launch (pid, user,
    cmdline, start time, address, family).
  returned: on stale_server
  type: list
  elements: dict
health:
  description: Endpoint checked and its last HTTP status.
  returned: always
  type: dict
decisive_lines:
  description: The log lines that explain a failure (traceback to the exception line), redacted, at most about 40.
  returned: always (empty on success)
  type: list
  elements: str
log_tail:
  description: The last 40 lines of this launch's log, redacted.
  returned: always (empty on success)
  type: list
  elements: str
exit_status:
  description: >-
    When the launch exited - the exit file of this launch (returncode, signal, exited_at), or
    C(unknown) when no exit file with this launch_id exists.
  returned: always (null while the process lives)
  type: raw
log_events:
  description: What happened to the log file (truncated, rotated, missing).
  returned: always
  type: list
  elements: dict
pid:
  description: The launched process.
  returned: always
  type: int
launch_id:
  description: The launch's id.
  returned: always
  type: str
log_path:
  description: The log followed.
  returned: always
  type: str
already_running:
  description: >-
    Whether the launch already listened on its port when the check began (a re-check): it was
    judged by the port owner, /server_info and health, and its old log lines were not read.
    Never true for a launch that was not judged ready before (see the description).
  returned: always
  type: bool
settle:
  description: The settle window applied, in seconds.
  returned: always
  type: float
  sample: 2.0
proven_at:
  description: >-
    Seconds since the launch at which every proof first held (the ready verdict follows when
    the settle window ends); null when they never held.
  returned: always
  type: float
  sample: 4.21
settle_from:
  description: >-
    Seconds since the launch at which the settle window began: the poll that first saw a
    starting launch's ready line, or RV(proven_at) for a re-check; null when the proofs never
    held.
  returned: always
  type: float
  sample: 4.02
work:
  description: >-
    The proof of work (O(work)) - C(ok), C(kind), C(msg), C(status) (the request's HTTP
    status), C(evidence) (the new dump's path, or the reasoning's length), C(seconds), and for
    V(generate) with a dump directory C(removed) (the proof's own dump was removed again) and
    C(kept_why) (why not). Null when none was asked or it did not run (check mode, node_rank >= 1,
    the proofs never held).
  returned: always
  type: dict
  sample: {ok: true, kind: generate, msg: "POST /generate -> 200, new dump /dev/shm/sglang_hs/req-1.pt; removed again
             (the dump directory holds data)", status: 200, evidence: /dev/shm/sglang_hs/req-1.pt, seconds: 0.31,
           removed: true, kept_why: null}
promoted:
  description: Whether this call made the launch the instance's last proven-good one (O(promote)); false when it already was.
  returned: when the server is ready
  type: bool
  version_added: "0.6.0"
last_good:
  description: With O(promote), the path of the last-good record (C(<state_dir>/<name>.good.json)); else null.
  returned: when the server is ready
  type: str
  version_added: "0.6.0"
  sample: /var/lib/llmops-sglang/serving.good.json
promote_error:
  description: Why O(promote) could not promote the ready launch (also a warning).
  returned: when the promotion failed
  type: str
  version_added: "0.6.0"
operation_lock_released:
  description: >-
    What became of the operation lock named by O(release_lock) - C(changed) (removed), C(token) (the
    token of the lock removed), C(lock_path), C(kept) (whose lock was left in place), C(error) (why it
    could not be removed), C(deferred) (kept: the ready line is younger than O(release_lock_after));
    in check mode C(would_release) instead (nothing is removed).
  returned: when O(release_lock) was given and the server is ready
  type: dict
  version_added: "0.5.0"
  sample: {changed: true, lock_path: /var/lib/llmops-sglang/serving.restart.lock, kept: null}
log_bytes_read:
  description: Bytes of the log read by this check (all slices together for a sliced wait).
  returned: always
  type: int
start_seconds:
  description: >-
    Seconds from the launch to its ready line (the C(ready) phase of RV(timeline)); null when
    the ready line was not seen.
  returned: always
  type: float
  sample: 252.4
last_start_seconds:
  description: >-
    The same for the last successful start of this instance remembered in O(state_dir) (for a
    re-check of that very launch: the start before it); null when none is remembered.
  returned: always
  type: float
  sample: 238.0
slow_start:
  description: >-
    Whether this start became ready and took more than 1.5 times as long as the last one
    (RV(start_seconds) > 1.5 x RV(last_start_seconds)).
  returned: always
  type: bool
cold_start:
  description: >-
    Whether a phase that compiles ran cold (RV(cold_phases) is not empty); a warning then names
    each such phase and what the last warm start took.
  returned: always
  type: bool
  version_added: "0.6.0"
cold_phases:
  description: >-
    The phases that compile - C(cuda graph capture) (torch.compile with C(--enable-torch-compile),
    DeepGEMM's JIT warm-up, the Triton and FlashInfer kernels built while capturing) and, with
    C(--disable-cuda-graph), C(warm-up request (first forward)) (where those compiles run then) -
    that took more than 3 times as long as in the last warm start of this instance remembered in
    O(state_dir), and at least 5 s more - C(phase), C(seconds), C(warm_seconds), C(warm_launch_id),
    C(warm_recorded_at) (epoch seconds). Empty for the first start remembered, a re-check of a
    running server, or a start that is not ready.
  returned: always
  type: list
  elements: dict
  version_added: "0.6.0"
  sample: [{phase: cuda graph capture, seconds: 186.0, warm_seconds: 28.7, warm_launch_id: 4f1c...,
            warm_recorded_at: 1764680000.0}]
pending:
  description: >-
    A slice of a sliced wait ended before the verdict. Only in the private results the action
    plugin reads between slices (with RV(progress) and the state to go on); never in a task's
    result.
  returned: between slices, to the action plugin only
  type: bool
progress:
  description: >-
    Where the start is - C(stage) (for example C(loading weights), C(memory pool ready),
    C(capturing CUDA graphs)), C(shards) and C(graphs) as [done, total] from the tqdm bars,
    C(graph_bs).
  returned: between slices, to the action plugin only
  type: dict
  sample: {stage: loading weights, shards: [31, 64], graphs: null, graph_bs: null, graph_kind: null}
"""

from typing import Any, Dict

import gc

if __name__ == "__main__":
    gc.disable()  # a module run: no collection while its code is imported (_exit.started turns it back on)

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit
from ansible_collections.llmops.sglang.plugins.module_utils._core import _options
from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _readiness
from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _ready_call
from ansible_collections.llmops.sglang.plugins.module_utils._readiness import _workproof


def argument_spec() -> Dict[str, Any]:
    return _options.merged(
        _options.GROUP,
        name=dict(type="str"),
        record=dict(type="dict"),
        timeout=dict(type="float", default=1200.0),
        poll_interval=dict(type="float", default=0.2),
        ready_patterns=dict(type="list", elements="str"),
        extra_ready_patterns=dict(type="list", elements="str", default=[]),
        fatal_patterns=dict(type="list", elements="str"),
        extra_fatal_patterns=dict(type="list", elements="str", default=[]),
        extra_benign_patterns=dict(type="list", elements="str", default=[]),
        settle=dict(type="float", default=_readiness.SETTLE_DEFAULT_S),
        expect=dict(type="dict"),
        health=dict(type="str", default="health", choices=list(_readiness.HEALTH_CHOICES)),
        node_rank=dict(type="int"),
        require_ready_line=dict(type="bool", default=True),
        slice_seconds=dict(type="float"),
        release_lock=dict(type="str", no_log=False),
        release_lock_after=dict(type="float", default=0.0),
        refresh_lock=dict(type="str", no_log=False),
        promote=dict(type="bool", default=False),
        work=dict(type="dict", options=dict(
            kind=dict(type="str", required=True, choices=list(_workproof.KINDS)),
            dump_dir=dict(type="path"),
            dump_wait=dict(type="float", default=30.0),
            timeout=dict(type="float", default=60.0))),
        # Private, set by the action plugin: run one slice ({} first, then the previous slice's
        # resume_state) and answer pending when it ends before a verdict.
        _resume=dict(type="dict"),
    )


def main() -> None:
    _exit.started()
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_one_of=[("name", "record")],
        mutually_exclusive=[("name", "record")],
        supports_check_mode=True,
    )
    _exit.run(module, _ready_call.run, "sglang_ready", [module.params["api_key"]])


if __name__ == "__main__":
    main()
