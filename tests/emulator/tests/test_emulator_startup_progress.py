"""Startup progress as real SGLang writes it to a log file: the weight-loading and CUDA graph
tqdm bars (rank 0 only, `\\r`-separated updates on one physical line), their order among the
phase lines, the shard count taken from the checkpoint, and a real read of the shards."""

import json
import os
import re
import signal
import struct
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import Launch, children_of, free_port, read_proc

DATA = Path(__file__).parent / "data"
WEIGHT_BAR = re.compile(
    r"Loading safetensors checkpoint shards: +(\d+)% Completed \| (\d+)/(\d+) "
    r"\[\d\d:\d\d<(?:\d\d:\d\d|\?), +(?:\d+\.\d\d(?:it/s|s/it)|\?it/s)\]"
)
GRAPH_BAR = re.compile(
    r"Capturing batches \(bs=(\d+) avail_mem=\d+\.\d\d GB\): +(\d+)%\|[ ▏▎▍▌▋▊▉█]{10}\| (\d+)/(\d+) "
    r"\[\d\d:\d\d<(?:\d\d:\d\d|\?), +(?:\d+\.\d\d(?:it/s|s/it)|\?it/s)\]"
)
H100_TP1_BS = [1, 2, 4, 8, 12] + list(range(16, 257, 8))  # default capture list, max bs 256


def write_config(folder: Path, architecture: str = "LlamaForCausalLM") -> None:
    """A local model path needs config.json (as transformers' AutoConfig does)."""
    (folder / "config.json").write_text(json.dumps({"architectures": [architecture],
                                                    "torch_dtype": "bfloat16"}))


def write_index(folder: Path, shards: int, architecture: str = "LlamaForCausalLM") -> List[str]:
    write_config(folder, architecture)
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    weight_map = {f"model.layers.{i}.weight": name for i, name in enumerate(names)}
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return names


def write_safetensors(path: Path, tensors: Dict[str, int]) -> int:
    """A valid safetensors file of float32 vectors {name: length}; returns its size."""
    header, offset = {}, 0
    for name, length in tensors.items():
        header[name] = {"dtype": "F32", "shape": [length], "data_offsets": [offset, offset + 4 * length]}
        offset += 4 * length
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.write(os.urandom(offset))
    return path.stat().st_size


def raw_log(launch: Launch) -> str:
    """The log as written: Launch.log() reads in text mode, which turns every \r into \n."""
    return launch.err_path.read_bytes().decode("utf-8", errors="replace")


def segments(log: str, pattern: "re.Pattern[str]") -> List["re.Match[str]"]:
    """Every bar update in the log (updates are separated by \\r, the bar ends with \\n)."""
    return [m for m in (pattern.search(part) for part in re.split(r"[\r\n]", log)) if m]


def positions(log: str, needles: List[str]) -> List[int]:
    found = [log.find(n) for n in needles]
    assert all(p >= 0 for p in found), [n for n, p in zip(needles, found) if p < 0]
    return found


def test_progress_bar_is_byte_identical_to_tqdm(emulator_python: str) -> None:
    """The emulator's bar against tqdm 4.70.1 on the same clocked scenarios (recorded JSON)."""
    out = subprocess.run([emulator_python, str(DATA / "tqdm_scenarios.py"), "emulator"],
                         capture_output=True, text=True, check=True, encoding="utf-8")
    expected = json.loads((DATA / "tqdm_4.70.1.json").read_text(encoding="utf-8"))
    assert json.loads(out.stdout) == expected


def test_startup_progress_in_order_with_increasing_shards(launcher, tmp_path: Path) -> None:
    write_index(tmp_path, 6, "DeepseekV3ForCausalLM")
    launch = launcher("--model-path", str(tmp_path), "--port", str(free_port()),
                      env={"SGLANG_EMULATOR_SHARD_SECONDS": "0.15"})
    launch.wait_log("fired up and ready to roll")
    log = raw_log(launch)
    order = positions(log, [
        "TP0] Load weight begin. avail mem=",
        "\rLoading safetensors checkpoint shards:   0% Completed | 0/6 [00:00<?, ?it/s]",
        "Loading safetensors checkpoint shards: 100% Completed | 6/6 [",
        "TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=",
        "TP0] KV Cache is allocated.",
        "TP0] Memory pool end. avail mem=",
        "TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=",
        "Capturing batches (bs=256 avail_mem=",
        "Capturing batches (bs=1 avail_mem=",
        "TP0] Capture cuda graph end. Time elapsed: ",
        "The server is fired up and ready to roll!",
    ])
    assert order == sorted(order)
    shards = segments(log, WEIGHT_BAR)
    counts = [int(m.group(2)) for m in shards]
    # each shard takes longer than tqdm's 0.1 s mininterval: every count is drawn, in order,
    # and the close redraws the last one
    assert counts == list(range(7)) + [6]
    assert {m.group(3) for m in shards} == {"6"}
    assert [int(m.group(1)) for m in shards] == [round(100 * c / 6) for c in counts]
    # one physical line: updates joined by \r, closed by a single \n
    bar_line = next(line for line in log.split("\n") if "Loading safetensors checkpoint shards" in line)
    assert bar_line.startswith("\rLoading safetensors") and bar_line.count("\r") == len(counts)


def test_cuda_graph_bar_walks_the_default_batch_sizes(launcher) -> None:
    launch = launcher("--model-path", "org/model", "--port", str(free_port()))
    launch.wait_log("fired up and ready to roll")
    log = raw_log(launch)
    updates = segments(log, GRAPH_BAR)
    assert {m.group(4) for m in updates} == {str(len(H100_TP1_BS))}
    described = list(dict.fromkeys(int(m.group(1)) for m in updates))
    assert described == sorted(H100_TP1_BS, reverse=True)
    done = [int(m.group(3)) for m in updates]
    assert done == sorted(done) and done[-1] == len(H100_TP1_BS)
    assert log.index("Capture cuda graph begin") < log.index("Capturing batches") < log.index(
        "Capture cuda graph end")


@pytest.mark.parametrize("args, expected", [
    (["--cuda-graph-max-bs-decode", "16"], [16, 12, 8, 4, 2, 1]),
    (["--max-running-requests", "10"], [10, 8, 4, 2, 1]),
    (["--cuda-graph-bs-decode", "3", "5"], [5, 3]),
    (["--tp-size", "4"], sorted([1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16))
                                + [512], reverse=True)),
])
def test_cuda_graph_batch_sizes_follow_the_config(launcher, args: List[str], expected: List[int]) -> None:
    launch = launcher("--model-path", "org/model", "--port", str(free_port()), *args)
    launch.wait_log("fired up and ready to roll")
    log = raw_log(launch)
    updates = segments(log, GRAPH_BAR)
    assert list(dict.fromkeys(int(m.group(1)) for m in updates)) == expected
    assert {m.group(4) for m in updates} == {str(len(expected))}


@pytest.mark.parametrize("layout, expected", [
    ("index", 3),          # index wins over extra files it does not list
    ("files", 5),          # no index: the *.safetensors files
    ("not_a_dir", 7),      # hub id: SGLANG_EMULATOR_SHARDS
])
def test_shard_count_follows_the_checkpoint(launcher, tmp_path: Path, layout: str, expected: int) -> None:
    model = tmp_path / "model"
    model.mkdir()
    if layout == "index":
        for name in write_index(model, 3):
            (model / name).write_bytes(b"")
        for i in range(2):
            (model / f"consolidated-{i}.safetensors").write_bytes(b"")
    elif layout == "files":
        write_config(model)
        for i in range(5):
            (model / f"model-{i}.safetensors").write_bytes(b"")
    path = str(model) if layout != "not_a_dir" else "org/model"
    launch = launcher("--model-path", path, "--port", str(free_port()),
                      env={"SGLANG_EMULATOR_SHARDS": "7"})
    launch.wait_log("fired up and ready to roll")
    log = raw_log(launch)
    totals = {m.group(3) for m in segments(log, WEIGHT_BAR)}
    assert totals == {str(expected)}
    assert f"100% Completed | {expected}/{expected} [" in log


def test_only_rank_zero_draws_bars(launcher) -> None:
    launch = launcher("--model-path", "org/model", "--port", str(free_port()), "--tp-size", "2")
    launch.wait_log("fired up and ready to roll")
    log = raw_log(launch)
    assert log.count("\rLoading safetensors checkpoint shards:   0% Completed | 0/4 ") == 1
    assert log.count("\r  0%|          | 0/36 [00:00<?, ?it/s]") == 1
    assert "TP1] Capture cuda graph end" in log


def test_bars_print_whatever_the_log_level(launcher) -> None:
    """tqdm is not logging: `--log-level warning` hides the phase lines, not the bars."""
    launch = launcher("--model-path", "org/model", "--port", str(free_port()), "--log-level", "warning")
    launch.wait_log(r"Capturing batches \(bs=1 avail_mem=[\d.]+ GB\): 100%")
    assert "Load weight begin" not in raw_log(launch)
    assert "Loading safetensors checkpoint shards: 100% Completed | 4/4 [" in raw_log(launch)


def test_disable_cuda_graph_has_no_capture_bar(launcher) -> None:
    launch = launcher("--model-path", "org/model", "--port", str(free_port()), "--disable-cuda-graph")
    launch.wait_log("fired up and ready to roll")
    log = raw_log(launch)
    assert "Capturing batches" not in log and "Capture cuda graph" not in log
    assert "Loading safetensors checkpoint shards: 100% Completed | 4/4 [" in log


def test_wording_of_0_5_23(launcher, tmp_path: Path) -> None:
    write_index(tmp_path, 2)
    launch = launcher("--model-path", str(tmp_path), "--port", str(free_port()),
                      env={"SGLANG_EMULATOR_LOG_VERSION": "0.5.23"})
    launch.wait_log("fired up and ready to roll")
    log = raw_log(launch)
    positions(log, [
        "\rMulti-thread loading shards:   0% Completed | 0/2 [00:00<?, ?it/s]",
        "Multi-thread loading shards: 100% Completed | 2/2 [",
    ])
    assert re.search(r"TP0\] Load weight end\. elapsed=\d+\.\d\d s, type=LlamaForCausalLM, "
                     r"avail mem=\d+\.\d\d GB, mem usage=\d+\.\d\d GB\.", log)
    assert re.search(r"TP0\] Capture target decode CUDA graph begin\. backend=full, "
                     r"num_tokens_per_req=1, avail mem=\d+\.\d\d GB", log)
    assert re.search(r"TP0\] Capture target decode CUDA graph end\. bs=\[1, 2, 4, .*, 256\], "
                     r"elapsed=\d+\.\d\d s, mem usage=\d+\.\d\d GB, avail mem=\d+\.\d\d GB\.", log)
    assert "Loading safetensors checkpoint shards" not in log


def test_multithread_flag_switches_the_description(launcher) -> None:
    launch = launcher("--model-path", "org/model", "--port", str(free_port()),
                      "--model-loader-extra-config", '{"enable_multithread_load": true}')
    launch.wait_log("fired up and ready to roll")
    log = raw_log(launch)
    assert "Multi-thread loading shards: 100% Completed | 4/4 [" in log
    assert "Loading safetensors checkpoint shards" not in log


def _scheduler_pid(launcher_pid: int) -> int:
    pids = [p for p in children_of(launcher_pid) if read_proc(p, "comm").startswith(b"sglang::schedul")]
    assert len(pids) == 1, pids
    return pids[0]


def _rchar(pid: int) -> int:
    fields = dict(line.split(": ") for line in read_proc(pid, "io").decode().splitlines())
    return int(fields["rchar"])


def _checkpoint(folder: Path) -> int:
    """3 shards of 2 tensors, 8 MiB each, listed by an index; returns the bytes on disk."""
    names = write_index(folder, 3)
    return sum(write_safetensors(folder / name, {f"{name}.a": 1 << 20, f"{name}.b": 1 << 20})
               for name in names)


@pytest.mark.parametrize("multithread", [False, True])
def test_load_weights_reads_every_shard(launcher, tmp_path: Path, multithread: bool) -> None:
    total = _checkpoint(tmp_path)
    args = ["--model-path", str(tmp_path), "--port", str(free_port()), "--log-level", "debug"]
    if multithread:
        args += ["--model-loader-extra-config", '{"enable_multithread_load": true, "num_threads": 2}']
    launch = launcher(*args, env={"SGLANG_EMULATOR_LOAD_WEIGHTS": "1"})
    launch.wait_log("fired up and ready to roll")
    log = raw_log(launch)
    stats = re.search(r"TP0\] Emulator weight load: mode=host, files=3, bytes_read=(\d+), "
                      r"tensors=6, device_bytes=0, elapsed=", log)
    assert stats and int(stats.group(1)) == total, log
    # the kernel's own count: the scheduler read at least the whole checkpoint
    assert _rchar(_scheduler_pid(launch.pid)) >= total
    desc = "Multi-thread loading shards" if multithread else "Loading safetensors checkpoint shards"
    assert f"{desc}: 100% Completed | 3/3 [" in log


def test_simulated_load_reads_no_shard(launcher, tmp_path: Path) -> None:
    """The default (no SGLANG_EMULATOR_LOAD_WEIGHTS) only times the phase: the control for the
    kernel count above."""
    total = _checkpoint(tmp_path)
    launch = launcher("--model-path", str(tmp_path), "--port", str(free_port()), "--log-level", "debug")
    launch.wait_log("fired up and ready to roll")
    log = raw_log(launch)
    assert "Emulator weight load: mode=simulated, files=3, bytes_read=0, tensors=0" in log
    assert _rchar(_scheduler_pid(launch.pid)) < total


@pytest.mark.parametrize("layout, message", [
    ("corrupt", "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge"),
    ("empty", "RuntimeError: Cannot find any model weights with `{model}`"),
])
def test_load_weights_failures_take_the_sigquit_path(launcher, tmp_path: Path, layout: str,
                                                     message: str) -> None:
    write_config(tmp_path)
    if layout == "corrupt":
        (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    launch = launcher("--model-path", str(tmp_path), "--port", str(free_port()),
                      env={"SGLANG_EMULATOR_LOAD_WEIGHTS": "1"})
    assert launch.wait_exit(timeout=30) == -signal.SIGKILL  # the launcher kills its tree and itself
    log = launch.log()
    assert message.format(model=tmp_path) in log
    assert "Scheduler hit an exception" in log and "Received sigquit from a child process" in log
