"""SGLang emulator: same entry points, process titles, logs and HTTP API as sglang 0.5.23.

Importing the package is cheap on purpose (no torch): tooling may import it to probe.
"""

from sglang.version import __version__

__all__ = ["__version__"]
