"""Weight files of a checkpoint and how to read one (shaped like srt/model_loader/weight_utils.py).

Which files: as DefaultModelLoader._prepare_weights does for a local directory: `*.safetensors`
(else `*.bin` minus training leftovers), kept only if `model.safetensors.index.json` lists them
in its weight_map, sorted. Reading one file is either a plain sequential read (no torch needed:
the bytes come from disk or the page cache exactly as a real load's would) or, on a GPU, the
real `safetensors.safe_open` + copy of this rank's slice of every tensor to the device.
"""

import glob
import json
import os
import struct
from dataclasses import dataclass, field
from typing import Any, List, Optional

# srt/utils/common.py (0.5.6 and 0.5.23)
BAR_FORMAT = "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]"
INDEX_FILE = "model.safetensors.index.json"
_NOT_FOR_INFERENCE = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")
_READ_BLOCK = 16 << 20


class SafetensorError(Exception):
    """What safetensors raises for a broken file (its messages, e.g. `HeaderTooLarge`)."""


SafetensorError.__module__ = "safetensors_rust"


@dataclass
class WeightFiles:
    """The checkpoint's weight files; `on_disk` lists the ones that exist."""

    names: List[str]
    on_disk: List[str] = field(default_factory=list)
    use_safetensors: bool = True


def index_files(folder: str) -> Optional[List[str]]:
    """Sorted file names the index's weight_map points at; None without an index."""
    path = os.path.join(folder, INDEX_FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as fh:
        weight_map = json.load(fh)["weight_map"]
    return sorted(set(weight_map.values()))


def find_weight_files(folder: str) -> WeightFiles:
    """Safetensors files filtered by the index; `names` follows the index even for files that
    are not there (an emulated checkpoint may be an index alone)."""
    found = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    listed = index_files(folder)
    if found or listed is not None:
        if listed is None:
            return WeightFiles(names=found, on_disk=found)
        wanted = {os.path.join(folder, name) for name in listed}
        return WeightFiles(names=[os.path.join(folder, name) for name in listed],
                           on_disk=[f for f in found if f in wanted])
    bins = sorted(f for f in glob.glob(os.path.join(folder, "*.bin"))
                  if not f.endswith(_NOT_FOR_INFERENCE))
    return WeightFiles(names=bins, on_disk=bins, use_safetensors=False)


def _read_exact(fh: Any, size: int) -> bytes:
    data = fh.read(size)
    if len(data) != size:
        raise SafetensorError("Error while deserializing header: HeaderTooSmall")
    return data


def safetensors_header(fh: Any, file_size: int) -> dict:
    """The JSON header (tensor name -> dtype/shape/offsets), checked as safetensors does."""
    (length,) = struct.unpack("<Q", _read_exact(fh, 8))
    if length > file_size - 8:
        raise SafetensorError("Error while deserializing header: HeaderTooLarge")
    try:
        header = json.loads(_read_exact(fh, length))
    except (ValueError, UnicodeDecodeError):
        raise SafetensorError("Error while deserializing header: InvalidHeaderDeserialization")
    if not isinstance(header, dict):
        raise SafetensorError("Error while deserializing header: InvalidHeaderDeserialization")
    return header


@dataclass
class FileLoad:
    bytes_read: int = 0
    tensors: int = 0
    device_bytes: int = 0
    held: List[Any] = field(default_factory=list)


def read_into_memory(path: str, safetensors: bool) -> FileLoad:
    """Sequential read of the whole file in large blocks (what a load costs without torch)."""
    size = os.path.getsize(path)
    out = FileLoad()
    buf = bytearray(min(_READ_BLOCK, max(size, 1)))
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        if safetensors:
            header = safetensors_header(fh, size)
            out.tensors = sum(1 for name in header if name != "__metadata__")
            out.bytes_read = fh.tell()
        while True:
            got = fh.readinto(view)
            if not got:
                break
            out.bytes_read += got
    return out


def load_to_device(path: str, device: int, tp_rank: int, tp_size: int) -> FileLoad:
    """safe_open (mmap, as SGLang's default loader) and copy this rank's row slice of every
    tensor to cuda:<device>; the copies are kept by the caller until the process exits."""
    import torch
    from safetensors import safe_open

    out = FileLoad(bytes_read=os.path.getsize(path))
    with safe_open(path, framework="pt", device="cpu") as fh:
        for name in fh.keys():
            tensor = fh.get_tensor(name)
            if tp_size > 1 and tensor.dim() > 0:
                tensor = torch.tensor_split(tensor, tp_size, dim=0)[tp_rank]
            on_gpu = tensor.to(f"cuda:{device}")
            out.tensors += 1
            out.device_bytes += on_gpu.numel() * on_gpu.element_size()
            out.held.append(on_gpu)
    torch.cuda.synchronize(device)
    return out
