#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Warm a model's weight files into the page cache before a restart, within a memory floor."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_prewarm
short_description: Read a model's weight files into the page cache before an SGLang restart
version_added: "0.1.0"
description:
  - A restart's downtime on a large host is mostly the new server reading its weights from disk.
    The old server keeps serving until the teardown, so this module reads the checkpoint into
    the page cache before it; the new server then loads from memory.
  - "Files: the shards listed in C(model.safetensors.index.json) (else
    C(pytorch_model.bin.index.json)), else every top-level C(*.safetensors), else every top-level
    C(*.bin); plus the top-level config, tokenizer and chat template files (C(config.json),
    C(generation_config.json), C(tokenizer*), C(vocab.*), C(merges.txt), C(*.tiktoken),
    C(*.model), C(*.jinja), the index file, ...)."
  - "Symlinks: O(model_path) itself is resolved (a symlinked model directory is followed). Every
    file must resolve inside the model's tree: the resolved model directory, or, for a Hugging
    Face hub cache snapshot (a resolved path C(<cache>/models--<org>--<name>/snapshots/<rev>)),
    the repository's cache directory C(<cache>/models--<org>--<name>) where the snapshot's links
    point (C(../../blobs/<hash>)). A file resolving anywhere else, or a shard that is not a
    regular file, fails the task before anything is read, listing each one in RV(refused)."
  - Files are opened by their resolved path with C(O_NOFOLLOW) and the open descriptor is checked
    again (same device and inode, still inside the tree), so a symlink swapped in after the check
    cannot lead the read elsewhere. Only regular files are read; nothing is ever written.
  - "Reading: O(threads) files at a time, each sequentially in blocks of O(block_size) into one
    reused buffer per thread, with C(posix_fadvise(WILLNEED)) on the next block while the current
    one is read. Blocks already in the page cache are skipped."
  - "Memory floor: pages this run adds are counted as if they were not reclaimable. Before every
    block, MemAvailable now, minus the bytes this run added, minus the block's non-resident bytes,
    must stay at or above O(min_available); otherwise reading stops and the result says how much
    was warmed (RV(stopped=memory_floor), a warning). When not even the first block fits, the
    task fails with RV(reason=memory_floor) and reads nothing."
  - "Residency is measured, not assumed: C(mincore(2)) on a read-only mapping of each file,
    before and after, page by page (through ctypes and libc; no external tool)."
  - Idempotent - when at least O(resident_threshold) percent of the files is already resident,
    nothing is read and the task reports C(changed=false).
author:
  - llmops.sglang contributors (@llmops)
requirements:
  - Linux (C(mincore), C(posix_fadvise), C(/proc/self/fd)).
  - psutil for the Python that runs the module (it reads MemAvailable and MemTotal; SGLang's venv
    has it). Without it the module fails with reason V(missing_library), naming an interpreter on
    the host that has the collection's libraries (RV(interpreter_with_libraries)) to pass as
    C(ansible_python_interpreter). requests is not needed (the module sends no request).
options:
  model_path:
    description:
      - Absolute path of the model directory (the server's C(--model-path)), or a Hugging Face
        hub cache snapshot directory.
    type: path
    required: true
  threads:
    description:
      - Files read in parallel (1 to 64). Each thread holds one buffer of O(block_size).
    type: int
    default: 4
  block_size:
    description:
      - Bytes read per call, as bytes or a size with binary units (V(16M), V(16MiB), V(1G)).
        Between 64K and 1G, rounded up to whole pages. The memory floor is checked between blocks.
    type: raw
    default: 16M
  min_available:
    description:
      - The floor MemAvailable must stay above while reading, counting this run's reads as used
        memory. A percentage of MemTotal (V(10%)) or a size (V(64G), bytes).
      - Protects the serving process and the rest of the host from reclaim and swap. If the
        checkpoint's non-resident bytes do not fit above the floor, only what fits is read.
    type: raw
    default: 10%
  timeout:
    description:
      - Seconds of reading after which the run stops early (RV(stopped=timeout), a warning, not a
        failure - the restart can go on with what was warmed).
    type: float
    default: 1800
  resident_threshold:
    description:
      - Percent of the files' bytes that must already be resident for the task to read nothing
        and report C(changed=false).
    type: float
    default: 99
  detail:
    description:
      - Return RV(details), one entry per file (residency before and after, bytes read, seconds).
    type: bool
    default: false
extends_documentation_fragment:
  - llmops.sglang.common.unused_state_dir
  - llmops.sglang.common.unused_gpu_backend
  - llmops.sglang.common.unused_api_key
attributes:
  check_mode:
    support: full
    description:
      - Selects the files and measures their residency (C(mincore) never reads a page); reports
        RV(would_read_bytes) and whether the non-resident bytes fit above the floor (RV(fits)).
        Reads nothing.
  diff_mode:
    support: full
    description: The residency before and after (or expected after, in check mode).
notes:
  - Failures have a RV(reason) - V(bad_model_path) (missing, relative), V(not_a_directory),
    V(no_weights), V(bad_index) (invalid index JSON, a shard named outside the directory),
    V(missing_file) (a listed shard or a dangling link), V(unsafe_symlink),
    V(not_regular_file), V(memory_floor) (nothing could be read), V(invalid_argument); a failed
    read or open names its path (V(io_error), V(permission_denied), V(not_found)).
  - The page cache is a cache - what is warmed can be evicted again before the server reads it
    (other reads, memory pressure). Run it right before the teardown.
  - Page cache warming helps a server that reads its weights through the page cache (the
    default safetensors loading). Loaders that bypass it (O_DIRECT, GPUDirect Storage) gain
    nothing.
seealso:
  - module: llmops.sglang.sglang_launch
  - module: llmops.sglang.sglang_teardown
"""

EXAMPLES = r"""
- name: Warm the next model while the old server still serves
  llmops.sglang.sglang_prewarm:
    model_path: /models/Kimi-K2.5
  register: prewarm

- name: A Hugging Face hub cache snapshot, a fixed floor, per-file details
  llmops.sglang.sglang_prewarm:
    model_path: /data/hf/hub/models--Qwen--Qwen3-8B/snapshots/0123456789abcdef0123456789abcdef01234567
    min_available: 64G
    threads: 8
    block_size: 32M
    detail: true

- name: Would it fit? (reads nothing)
  llmops.sglang.sglang_prewarm:
    model_path: /models/Kimi-K2.5
  check_mode: true
  register: plan

- name: Never abort a restart because the host has no room to warm
  llmops.sglang.sglang_prewarm:
    model_path: /models/Kimi-K2.5
  register: prewarm
  failed_when: prewarm.failed and prewarm.reason != 'memory_floor'
"""

RETURN = r"""
msg:
  description: One sentence - what was read, how fast, and the residency before and now.
  returned: always
  type: str
  sample: "read 37.2 GiB of 12 files of /models/m in 16.1 s (2.48 GB/s): 7.0% was resident before, 100.0% now"
model_path:
  description: The model path as given.
  returned: always
  type: str
resolved_path:
  description: The model directory with every symlink resolved.
  returned: always
  type: str
tree:
  description: The directory every file had to resolve inside (see the description).
  returned: always
  type: str
  sample: /data/hf/hub/models--Qwen--Qwen3-8B
source:
  description: Where the weight list came from - the index file name, or the glob used.
  returned: always
  type: str
  sample: model.safetensors.index.json
files:
  description: Number of files selected (weights plus config and tokenizer files).
  returned: always
  type: int
bytes:
  description: Their total size in bytes.
  returned: always
  type: int
resident_before:
  description: Bytes of those files in the page cache before the run (mincore).
  returned: always
  type: int
resident_before_pct:
  description: RV(resident_before) as a percentage of RV(bytes) - the share already resident.
  returned: always
  type: float
resident_after:
  description: Bytes in the page cache at the end, measured again (in check mode, now).
  returned: always
  type: int
resident_after_pct:
  description: RV(resident_after) as a percentage of RV(bytes).
  returned: always
  type: float
need_bytes:
  description: Bytes not resident before the run.
  returned: always
  type: int
read_bytes:
  description: Bytes this run read (resident blocks are skipped, so at most about RV(need_bytes) plus partial blocks).
  returned: always
  type: int
warmed_bytes:
  description: RV(resident_after) minus RV(resident_before), at least 0.
  returned: always
  type: int
would_read_bytes:
  description: The non-resident bytes that fit above the floor (what a run would read).
  returned: always
  type: int
seconds:
  description: Seconds spent reading.
  returned: always
  type: float
gbps:
  description: RV(read_bytes) / RV(seconds), in GB/s (10^9 bytes).
  returned: always
  type: float
fits:
  description: Whether all of RV(need_bytes) fit above the floor when the run started.
  returned: always
  type: bool
complete:
  description: Whether every file was read to its end (or already resident).
  returned: always
  type: bool
stopped:
  description: Why reading stopped early - V(memory_floor) or V(timeout); null otherwise.
  returned: always
  type: str
threads:
  description: Threads used.
  returned: always
  type: int
block_size:
  description: Block size used, in bytes (page aligned).
  returned: always
  type: int
memory:
  description: MemTotal, MemAvailable before and after, and the floor, in bytes.
  returned: always
  type: dict
  sample: {total: 2164000000000, available_before: 1900000000000, available_after: 1890000000000, floor: 216400000000}
details:
  description:
    - One entry per file - name, resolved path, kind (V(weight) or V(aux)), size, resident bytes
      and percent before and after, bytes read, bytes skipped as already resident, complete, seconds.
  returned: when O(detail=true)
  type: list
  elements: dict
refused:
  description: Files refused by the tree rule or as not regular files - name, path, target, why.
  returned: on failure with reason unsafe_symlink or not_regular_file
  type: list
  elements: dict
reason:
  description: The failure code (see notes); V(missing_library) when psutil is not importable.
  returned: on failure
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
  sample: /root/ml-env/bin/python
"""

import gc

if __name__ == "__main__":
    gc.disable()  # a module run: no collection while its code is imported (_exit.started turns it back on)

from typing import Any, Dict

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._sglang import _depsearch
from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit
from ansible_collections.llmops.sglang.plugins.module_utils._core import _options
from ansible_collections.llmops.sglang.plugins.module_utils._prewarm import _prewarm


def argument_spec() -> Dict[str, Any]:
    return _options.merged(
        _options.GROUP,
        model_path=dict(type="path", required=True),
        threads=dict(type="int", default=4),
        block_size=dict(type="raw", default="16M"),
        min_available=dict(type="raw", default="10%"),
        timeout=dict(type="float", default=1800),
        resident_threshold=dict(type="float", default=99),
        detail=dict(type="bool", default=False),
    )


def body(module: AnsibleModule) -> Dict[str, Any]:
    params = module.params
    opts = _prewarm.Options(threads=params["threads"],
                            block_size=_prewarm.parse_size(params["block_size"], "block_size"),
                            min_available=params["min_available"], timeout=params["timeout"],
                            resident_threshold=params["resident_threshold"], check_mode=module.check_mode)
    outcome = _prewarm.run(params["model_path"], opts)
    result = _prewarm.report(outcome, opts, detail=params["detail"])
    if outcome.stopped:
        module.warn(result["msg"])
    if module._diff:
        result["diff"] = _prewarm.diff(result, module.check_mode)
    return result


def main() -> None:
    _exit.started()
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    # psutil only (no request is sent); it came with _prewarm, so asking it to import again is free:
    # one that is installed but does not import is named as missing too
    _depsearch.require(module, ("psutil",), import_them=True)
    _exit.run(module, body, "sglang_prewarm")


if __name__ == "__main__":
    main()
