"""Finding 7 of the third review: the report role follows no link planted at the report dir.

Another user plants a symlink where the report directory will be (in a sticky, world-writable
directory like /tmp) pointing at a root-only directory. The old role's `file: state=directory
mode=0755` followed it: root opened the root-only directory to everyone and wrote the report
into it. Now the directory is walked with O_NOFOLLOW (the sglang_report module): the link is
refused (unsafe_dir), the root-only directory keeps its mode and gets no file. The race
(the link planted and removed again and again while root creates the directory) is run
hundreds of times, bounded in time.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time

from helpers.fixtures import ROOT

SWAPPER = r"""
import os, sys, time
link, target, stop = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
while time.monotonic() < stop:
    try:
        os.symlink(target, link)
    except OSError:
        pass
    try:
        os.unlink(link)
    except OSError:
        pass
"""


def _secret(tmp_path) -> str:
    secret = tmp_path / "root-only"
    secret.mkdir()
    os.chmod(str(secret), 0o700)
    (secret / "key").write_text("root's\n")
    return str(secret)


def _untouched(secret: str) -> None:
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o700
    assert sorted(os.listdir(secret)) == ["key"]


def test_the_role_refuses_a_link_planted_at_the_report_dir(tmp_path, sticky_shm, throwaway_user):
    secret = _secret(tmp_path)
    report_dir = os.path.join(sticky_shm, "reports")
    throwaway_user.run(["ln", "-s", secret, report_dir])
    results = tmp_path / "results"
    results.mkdir()
    (results / "gpu-1.json").write_text(json.dumps({"name": "extraction", "host": "gpu-1", "plan": {}}))
    inv = tmp_path / "inv.ini"
    inv.write_text("[gpus]\ngpu-1\n[gpus:vars]\nansible_connection=local\nansible_python_interpreter=%s\n"
                   % os.path.join(ROOT, ".venv", "bin", "python"))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    run = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", str(inv),
                          os.path.join(ROOT, "tests", "integration", "playbooks", "report_synthetic.yml"),
                          "-e", "results_dir=%s" % results, "-e", "sglang_report_dir=%s" % report_dir],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
                         check=False)
    _untouched(secret)
    assert run.returncode != 0, run.stdout[-3000:]
    assert "unsafe_dir" in run.stdout and "symbolic link" in run.stdout, run.stdout[-3000:]
    assert os.path.islink(report_dir)


def test_a_link_raced_in_while_the_dir_is_created_is_never_followed(tmp_path, sticky_shm, throwaway_user):
    from ansible_collections.llmops.sglang.plugins.module_utils._core._errors import SglangError
    from ansible_collections.llmops.sglang.plugins.module_utils._host import _reportdir

    secret = _secret(tmp_path)
    report_dir = os.path.join(sticky_shm, "reports")
    seconds = 20
    swapper = throwaway_user.start(["python3", "-c", SWAPPER, report_dir, secret, str(seconds)])
    outcomes = {"created": 0, "refused": 0}
    stop = time.monotonic() + seconds - 2
    try:
        while time.monotonic() < stop and sum(outcomes.values()) < 600:
            try:
                opened = _reportdir.open_dir(report_dir)
            except SglangError as exc:
                # refused: a link (unsafe_dir), or the name gone at that instant (missing_file)
                assert exc.details["reason"] in ("unsafe_dir", "missing_file"), exc.msg
                outcomes["refused"] += 1
                continue
            try:
                assert _reportdir.write_file(opened, "report.html", b"<html></html>\n")
            finally:
                opened.close()
            outcomes["created"] += 1
            assert not os.path.islink(report_dir) and os.path.isfile(os.path.join(report_dir, "report.html"))
            shutil.rmtree(report_dir)  # ours (root's, in a sticky dir: the user cannot swap it)
            _untouched(secret)
    finally:
        swapper.kill()
        swapper.wait()
    _untouched(secret)
    assert outcomes["created"] > 0 and outcomes["refused"] > 0, outcomes
    assert sum(outcomes.values()) >= 100, outcomes
