"""launcher.address: endpoint validation before anything is exported."""

import pytest

from launcher.address import Endpoint, parse_endpoint
from launcher.errors import ConfigError


@pytest.mark.parametrize("text, expected", [
    ("10.240.1.2:8470", Endpoint("10.240.1.2", 8470)),
    ("tpu-host.internal:1", Endpoint("tpu-host.internal", 1)),
    ("[fe80::1]:8470", Endpoint("fe80::1", 8470)),
    ("fe80::1:8470", Endpoint("fe80::1", 8470)),  # TF's resolver prints IPv6 unbracketed
    ("localhost:65535", Endpoint("localhost", 65535)),
])
def test_valid_endpoints(text, expected):
    assert parse_endpoint(text, "X") == expected


def test_str_brackets_ipv6_only():
    assert str(Endpoint("fe80::1", 8470)) == "[fe80::1]:8470"
    assert str(Endpoint("10.0.0.2", 8470)) == "10.0.0.2:8470"


def test_default_port_for_bare_hosts():
    assert parse_endpoint("10.0.0.2", "TPU_IP_ADDRESS", 8470) == Endpoint("10.0.0.2", 8470)
    assert parse_endpoint("::1", "TPU_IP_ADDRESS", 8470) == Endpoint("::1", 8470)


@pytest.mark.parametrize("text", [
    "", "10.0.0.2", "10.0.0.2:", "10.0.0.2:0", "10.0.0.2:65536", "10.0.0.2:84a0", ":8470",
    "999.1.1.1:8470", "bad_host:8470", "-host:8470", "a b:1", "[::1:8470", "host:８４７０",
])
def test_invalid_endpoints_name_the_source(text):
    with pytest.raises(ConfigError) as caught:
        parse_endpoint(text, "XRT_TPU_CONFIG")
    assert "XRT_TPU_CONFIG" in caught.value.message
