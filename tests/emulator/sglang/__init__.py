"""SGLang emulator: same entry points, process titles, logs and HTTP API as sglang 0.5.23.

Importing the package is cheap on purpose (no torch): tooling may import it to probe.
As 0.5.23 does at import, the third-party compile caches are pointed under SGLANG_CACHE_DIR
(only when emulating 0.5.23: SGLANG_EMULATOR_LOG_VERSION; 0.5.6 has no redirect).
"""

from sglang.srt.environ import redirect_third_party_caches as _redirect_third_party_caches

_redirect_third_party_caches()

from sglang.version import __version__  # noqa: E402

__all__ = ["__version__"]
