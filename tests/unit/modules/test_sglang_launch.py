"""sglang_launch in-process: bad input fails before any signal and creates nothing (cases in
test_sglang_launch.yaml; the harness is uthelper.py)."""
from uthelper import cases_of

test_module = cases_of("sglang_launch", __file__)
