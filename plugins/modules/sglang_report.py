#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write the restart report's files into a directory, following no link."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_report
short_description: Write the restart report's files into a directory without following links
version_added: "0.3.0"
description:
  - Writes already rendered files (the restart report's HTML and Markdown, from the
    C(llmops.sglang.sglang_report) role) into O(dir), creating it (and missing parents) when
    absent. Runs where the report goes - the role delegates it to the controller.
  - The directory is walked from C(/) one component at a time, each opened without following a
    symbolic link, relative to the one above it. A link anywhere on the way (at O(dir) itself
    above all) is refused with C(reason=unsafe_dir), never followed; so is a directory owned by
    another user than root or the module's user, or writable by group or others (above O(dir),
    a root-owned sticky directory such as C(/tmp) is fine). Missing directories are created with
    mode C(0755) relative to the checked parent and judged like existing ones; the mode of an
    existing O(dir) is left as it is.
  - Each file is written as a fresh temporary file in O(dir) (never opened through a link) and
    renamed over its name with mode C(0644); a link planted at the name is replaced, not written
    through. A file that already holds the content with that mode is left alone.
author:
  - llmops.sglang contributors (@llmops)
options:
  dir:
    description:
      - The report directory (absolute, or relative to the module's working directory).
    type: path
    required: true
  files:
    description:
      - The files to write - each a plain file name (no C(/), not starting with a dot) and its
        content.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The file name in O(dir).
        type: str
        required: true
      content:
        description: The file's content (text, written as UTF-8).
        type: str
        required: true
attributes:
  check_mode:
    support: full
    description: Judges the directory and says which files would change; creates and writes nothing.
  diff_mode:
    support: full
    description: The names of the files that change (not their content).
notes:
  - Failures carry C(reason) - V(unsafe_dir) (a link, another user's or a group/other-writable
    directory on the way), V(io_error), V(invalid_argument) (a file name that is not plain).
seealso:
  - module: llmops.sglang.sglang_ready
"""

EXAMPLES = r"""
- name: Write a report page
  llmops.sglang.sglang_report:
    dir: /var/lib/sglang-reports
    files:
      - name: restart.html
        content: "{{ lookup('ansible.builtin.template', 'report.html.j2') }}"
  delegate_to: localhost
"""

RETURN = r"""
dir:
  description: The report directory, absolute.
  returned: always
  type: str
written:
  description: The files that were (in check mode - would be) written, as paths.
  returned: always
  type: list
  elements: str
created:
  description: The directories that were created (in check mode - would be created), outermost first.
  returned: always
  type: list
  elements: str
reason:
  description: Why the module failed - V(unsafe_dir) (see the module documentation above for when).
  returned: failure
  type: str
  sample: unsafe_dir
"""

import gc

if __name__ == "__main__":
    gc.disable()  # a module run: no collection while its code is imported (_exit.started turns it back on)

import os
from typing import Any, Dict, List

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._core import _exit
from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
from ansible_collections.llmops.sglang.plugins.module_utils._host import _reportdir


def _missing_dirs(path: str) -> List[str]:
    """Check mode: the directories that would be created (nothing is created)."""
    out = []
    probe = path
    while not os.path.lexists(probe):
        out.append(probe)
        probe = os.path.dirname(probe)
    return list(reversed(out))


def _body(module: AnsibleModule) -> Dict[str, Any]:
    p = module.params
    full = os.path.abspath(p["dir"])
    try:
        opened = _reportdir.open_dir(full, create=not module.check_mode)
    except SglangError as exc:
        if not (module.check_mode and exc.details.get("reason") == "missing_file"):
            raise
        names = [os.path.join(full, f["name"]) for f in p["files"]]
        missing = _missing_dirs(full)
        result = {"changed": True, "dir": full, "written": names, "created": missing,
                  "diff": {"before": "", "after": "".join("%s\n" % w for w in missing + names)}}
        if not module._diff:
            result.pop("diff")
        return result
    written = []
    try:
        for item in p["files"]:
            if _reportdir.write_file(opened, item["name"], item["content"].encode("utf-8"),
                                     check_mode=module.check_mode):
                written.append(os.path.join(full, item["name"]))
    finally:
        opened.close()
    result = {"changed": bool(written or opened.created), "dir": full, "written": written, "created": opened.created,
              "diff": {"before": "", "after": "".join("%s\n" % w for w in opened.created + written)}}
    if not module._diff:
        result.pop("diff")
    return result


def main() -> None:
    _exit.started()
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path", required=True),
            files=dict(type="list", elements="dict", required=True,
                       options=dict(name=dict(type="str", required=True), content=dict(type="str", required=True))),
        ),
        supports_check_mode=True,
    )
    _exit.run(module, _body, "sglang_report")


if __name__ == "__main__":
    main()
