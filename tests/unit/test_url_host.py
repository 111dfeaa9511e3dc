"""host:port for the roll's URLs and the multinode rendezvous: an IPv6 literal bracketed once.
Before, an inventory that wrote an IPv6 ansible_host (or dist_init_host) already bracketed, as
URLs need it, got it bracketed again (`[[fe80::1]]:50000`), and the rolling role's worker URL
did not bracket an unbracketed one at all (`http://fe80::1:30000`, which the router reads as
port 1)."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.filter.multinode_plan import dist_init_addr
from ansible_collections.llmops.sglang.plugins.filter.url_host import http_url, url_host


@pytest.mark.parametrize("bind, want", [
    ("0.0.0.0", "127.0.0.1"), ("", "127.0.0.1"), (None, "127.0.0.1"), ("::", "[::1]"), ("[::]", "[::1]"),
    ("10.0.0.7", "10.0.0.7"), ("gpu-07", "gpu-07"), ("fe80::1", "[fe80::1]"), ("[fe80::1]", "[fe80::1]"),
])
def test_url_host(bind, want):
    assert url_host(bind) == want


@pytest.mark.parametrize("host, want", [
    ("gpu-07", "http://gpu-07:30000"), ("10.0.0.7", "http://10.0.0.7:30000"),
    ("fe80::1", "http://[fe80::1]:30000"), ("[fe80::1]", "http://[fe80::1]:30000"),
])
def test_http_url(host, want):
    assert http_url(host, "30000") == want


def test_the_rendezvous_address_is_bracketed_once():
    assert dist_init_addr("[fd00::5]", 50000) == "[fd00::5]:50000"
    assert dist_init_addr("fd00::5", "50000") == "[fd00::5]:50000"
    assert dist_init_addr("node-0", 50000) == "node-0:50000"


def test_an_ipv6_zone_is_percent_encoded_in_a_url_only():
    assert http_url("fe80::1%eth0", 30000) == "http://[fe80::1%25eth0]:30000"
    assert http_url("[fe80::1%25eth0]", 30000) == "http://[fe80::1%25eth0]:30000"
    assert dist_init_addr("fe80::1%eth0", 50000) == "[fe80::1%eth0]:50000"


@pytest.mark.parametrize("host, port, why", [
    (None, 30000, "no host"), ("", 30000, "no host"), ("host:1234", 30000, "not an IPv6 address"),
    ("[a", 30000, "not an IPv6 address in brackets"), ("gpu-07", 0, "between 1 and 65535"), ("gpu-07", 70000, "between 1 and 65535"),
    ("gpu-07", True, "not a number"), ("gpu-07", "x", "not a number"), ("fe80::1%", 1, "empty IPv6 zone"),
])
def test_what_cannot_make_an_address_is_refused_by_name(host, port, why):
    with pytest.raises(ValueError, match=why):
        http_url(host, port)
