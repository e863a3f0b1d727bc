"""What the launcher prints: the start-up summary, with secrets redacted, and ``export`` lines.

Only variables the launcher chose or kept are ever listed (an allowlist; the environment is
never dumped), and any value whose name looks secret is replaced by ``<redacted>``, including
``--name=value`` trainer arguments; passwords in URLs, Authorization headers and bearer tokens
are hidden inside any argument.
"""

from __future__ import annotations

import re
import shlex
from typing import Iterable, List, Sequence, Tuple

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASS|PWD|CREDENTIAL|AUTH|PRIVATE|SIGNATURE", re.I)
# Secrets inside a value, whatever the argument is called: the password of a URL's user info
# (scheme://user:PASSWORD@host) and the credentials of an HTTP Authorization header or a
# bearer token.
_URL_PASSWORD = re.compile(r"(?P<keep>[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*:)[^/@\s]+(?=@)")
_AUTH_HEADER = re.compile(r"(?P<keep>\b(?:authorization|proxy-authorization)\s*[:=]\s*).+",
                          re.I)
_BEARER = re.compile(r"(?P<keep>\bbearer\s+)\S+", re.I)


def looks_secret(name: str) -> bool:
    """True when a variable or flag name suggests its value is a secret."""
    return bool(_SECRET_NAME.search(name))


def redact_value(name: str, value: str) -> str:
    return REDACTED if looks_secret(name) else value


def redact_text(text: str) -> str:
    """Hide URL passwords, Authorization headers and bearer tokens inside any text."""
    for pattern in (_URL_PASSWORD, _AUTH_HEADER, _BEARER):
        text = pattern.sub(lambda match: match.group("keep") + REDACTED, text)
    return text


def redact_args(args: Sequence[str]) -> List[str]:
    """Redact values of secret-looking ``--flag=value`` and ``--flag value`` arguments, and
    secrets inside any argument (``redact_text``)."""
    result: List[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            result.append(REDACTED)
            hide_next = False
        elif arg.startswith("-") and "=" in arg:
            name, _, value = arg.partition("=")
            result.append("{}={}".format(name, redact_text(redact_value(name, value))))
        else:
            hide_next = arg.startswith("-") and looks_secret(arg)
            result.append(redact_text(arg))
    return result


def shell_word(text: str) -> str:
    """``text`` quoted for a shell, always on one line: a word with control characters (a
    newline in an argument) uses bash's ``$'...'`` escapes, so that a printed command never
    spills onto a second line, where ``eval`` would run it as a command of its own."""
    if all(char.isprintable() for char in text):
        return shlex.quote(text)
    return "$'{}'".format("".join(_ansi_c_escape(char) for char in text))


def printable(text: str) -> str:
    """``text`` with every character that is not printable (control characters, and the
    separators ``str.splitlines`` breaks at: ``\\x1c``-``\\x1e``, ``\\x85``, ``\\u2028``)
    written as an escape, so that a value from the environment can never start a log line
    of its own."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _ansi_c_escape(char)
                   for char in text)


def _ansi_c_escape(char: str) -> str:
    if char in "\\'":
        return "\\" + char
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x80:  # above, \x would be a raw byte, not the character
        return "\\x{:02x}".format(code)
    return "\\u{:04x}".format(code) if code < 0x10000 else "\\U{:08x}".format(code)


def format_assignments(pairs: Iterable[Tuple[str, str]]) -> str:
    text = " ".join("{}={}".format(name, shell_word(redact_value(name, value)))
                    for name, value in pairs)
    return text or "(none)"


def shell_exports(pairs: Iterable[Tuple[str, str]]) -> List[str]:
    """``export NAME='value'`` lines that bash can ``eval``, one line each."""
    return ["export {}={}".format(name, shell_word(value)) for name, value in pairs]


def format_command(command: Sequence[str]) -> str:
    return " ".join(shell_word(arg) for arg in redact_args(command))
