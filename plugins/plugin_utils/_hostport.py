# -*- coding: utf-8 -*-
"""PRIVATE to llmops.sglang. host:port for URLs and rendezvous addresses, on the controller: an
IPv6 literal is bracketed once (a host given already bracketed, as inventories often write
them, is not bracketed again), or its colons would read as the port's."""
from __future__ import annotations

from typing import Any


def bare(host: Any) -> str:
    """The host without the brackets an IPv6 literal may come with (`[fe80::1]` -> `fe80::1`)."""
    text = str(host).strip()
    return text[1:-1] if text.startswith("[") and text.endswith("]") else text


def bracketed(host: Any) -> str:
    """The host as it goes before `:port`: an IPv6 literal in brackets, once."""
    text = bare(host)
    return "[%s]" % text if ":" in text else text


def hostport(host: Any, port: Any) -> str:
    """`host:port` with the host bracketed where it must be."""
    return "%s:%d" % (bracketed(host), int(port))
