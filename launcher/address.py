"""Validate a TPU endpoint before it is exported: ``host:port`` with an IPv4 address, an IPv6
address (``[::1]:8470``) or a DNS hostname, and a port in 1-65535."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from launcher.errors import ConfigError

# RFC 1123 labels: letters, digits and inner hyphens, 1-63 characters each.
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


@dataclass(frozen=True)
class Endpoint:
    """A validated ``host:port``; ``str()`` gives the form gRPC and XRT expect."""

    host: str
    port: int

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.host

    def __str__(self) -> str:
        return "[{}]:{}".format(self.host, self.port) if self.is_ipv6 else "{}:{}".format(
            self.host, self.port)


def parse_endpoint(text: str, source: str, default_port: int = 0) -> Endpoint:
    """Parse ``text`` (from ``source``, named in errors) into an ``Endpoint``.

    A bare host is accepted only when ``default_port`` is given. Unbracketed IPv6 with a port
    (``fe80::1:8470``, as TensorFlow's resolver prints it) is read as address + last group.
    """
    text = text.strip()
    host, port_text = _split_host_port(text, default_port)
    if not _valid_host(host):
        raise ConfigError(
            "{} has an invalid host {!r} in {!r}".format(source, host, text),
            "expected an IPv4 address, an IPv6 address in brackets, or a hostname")
    if not (port_text.isdigit() and port_text.isascii() and 1 <= int(port_text) <= 65535):
        raise ConfigError(
            "{} has an invalid port {!r} in {!r}".format(source, port_text, text),
            "the port must be a number from 1 to 65535, e.g. 10.0.0.2:8470")
    return Endpoint(host, int(port_text))


def _split_host_port(text: str, default_port: int):
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket:
            return text, ""
        if not rest and default_port:
            return host, str(default_port)
        return host, rest[1:] if rest.startswith(":") else rest or "?"
    if text.count(":") > 1:
        # Either a bare IPv6 address or an unbracketed IPv6 address followed by a port.
        if default_port and _is_ip(text):
            return text, str(default_port)
        host, _, port = text.rpartition(":")
        return host, port
    if ":" not in text and default_port:
        return text, str(default_port)
    host, _, port = text.partition(":")
    return host, port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _valid_host(host: str) -> bool:
    if _is_ip(host):
        return True
    if ":" in host or len(host) > 253 or not host:
        return False
    labels = host.rstrip(".").split(".")
    # An all-numeric dotted name that is not a valid IPv4 address (999.1.1.1) is a typo.
    if all(label.isdigit() for label in labels):
        return False
    return all(_LABEL.fullmatch(label) for label in labels)
