"""sglang_probe in-process (cases in test_sglang_probe.yaml; the harness is uthelper.py)."""
from uthelper import cases_of

test_module = cases_of("sglang_probe", __file__)
