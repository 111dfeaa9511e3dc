"""TEST-ONLY (tests/realsglang/check.sh): lets PyPI's CUDA torchvision import next to a CPU torch.

PyPI's torchvision wheels link libtorch_cuda; next to the CPU torch their C ops cannot load and
`import torchvision` dies with "operator torchvision::nms does not exist". sglang imports
torchvision while building its parser, so a CPU-only check declares the two op schemas that
torchvision registers fakes for. Never install this on a serving host.
"""
import sys


class _Finder:
    done = False

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" and not _Finder.done:
            _Finder.done = True
            try:
                import torch
                try:
                    torch.ops.torchvision.nms
                except (AttributeError, RuntimeError):
                    global _LIB
                    _LIB = torch.library.Library("torchvision", "DEF")
                    for op in ("nms", "qnms"):
                        _LIB.define(op + "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            except Exception:
                pass
        return None


sys.meta_path.insert(0, _Finder())
