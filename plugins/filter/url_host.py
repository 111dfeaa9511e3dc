# -*- coding: utf-8 -*-
"""Filters url_host and http_url: where a server bound at an address is reached, as a URL's
host. Controller side only."""
from __future__ import annotations

from typing import Any, Dict

from ansible_collections.llmops.sglang.plugins.plugin_utils._hostport import bare, bracketed, hostport

# A wildcard bind is reached through the same family's loopback on the server's own host.
_WILDCARD = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


def url_host(bind_host: Any) -> str:
    """The host of a URL to a server bound at `bind_host`, asked from the server's own host: a
    wildcard (or none) is that family's loopback; an IPv6 literal is bracketed once."""
    host = bare(bind_host)
    return bracketed(_WILDCARD.get(host, host), in_url=True)


def http_url(host: Any, port: Any) -> str:
    """`http://host:port` with an IPv6 literal bracketed once (`fe80::1` and `[fe80::1]` alike)."""
    return "http://" + hostport(host, port, in_url=True)


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"url_host": url_host, "http_url": http_url}
