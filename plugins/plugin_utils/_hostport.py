# -*- coding: utf-8 -*-
"""PRIVATE to llmops.sglang. host:port for URLs and rendezvous addresses, on the controller: an
IPv6 literal is bracketed once (a host given already bracketed, as inventories often write
them, is not bracketed again), or its colons would read as the port's. A host or port that
cannot make an address is refused with a ValueError that names it."""
from __future__ import annotations

import ipaddress
from typing import Any


def bare(host: Any) -> str:
    """The host without the brackets an IPv6 literal may come with (`[fe80::1]` -> `fe80::1`)."""
    text = "" if host is None else str(host).strip()
    return text[1:-1] if text.startswith("[") and text.endswith("]") else text


def _check_ipv6(text: str) -> None:
    """A host with a colon must be an IPv6 literal (with an optional `%zone`)."""
    addr, _sep, zone = text.partition("%")
    try:
        ipaddress.IPv6Address(addr)
    except ValueError:
        raise ValueError("host %r has a colon but is not an IPv6 address (a port goes in its own setting)" % text)
    if "%" in text and not zone:
        raise ValueError("host %r has an empty IPv6 zone" % text)


def bracketed(host: Any, in_url: bool = False) -> str:
    """The host as it goes before `:port`: an IPv6 literal in brackets, once; in a URL its zone's
    `%` is written `%25` (RFC 6874)."""
    text = bare(host)
    if not text or text in ("None",):
        raise ValueError("no host given (%r)" % (host,))
    if "[" in text or "]" in text:
        raise ValueError("host %r is not an IPv6 address in brackets, nor a name" % text)
    if ":" not in text:
        return text
    if "%25" in text:
        text = text.replace("%25", "%", 1)
    _check_ipv6(text)
    return "[%s]" % (text.replace("%", "%25", 1) if in_url else text)


def port_number(port: Any) -> int:
    """A TCP port, 1-65535."""
    if isinstance(port, bool):
        raise ValueError("port %r is not a number" % (port,))
    try:
        number = int(float(str(port).strip()))
    except ValueError:
        raise ValueError("port %r is not a number" % (port,))
    if not 1 <= number <= 65535:
        raise ValueError("port %r is not between 1 and 65535" % (port,))
    return number


def hostport(host: Any, port: Any, in_url: bool = False) -> str:
    """`host:port` with the host bracketed where it must be."""
    return "%s:%d" % (bracketed(host, in_url), port_number(port))
