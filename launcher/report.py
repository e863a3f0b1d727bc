"""What the launcher prints: the start-up summary, with secrets redacted, and ``export`` lines.

Only variables the launcher chose or kept are ever listed (an allowlist; the environment is
never dumped), and any value whose name looks secret is replaced by ``<redacted>``, including
``--name=value`` trainer arguments.
"""

from __future__ import annotations

import re
import shlex
from typing import Iterable, List, Sequence, Tuple

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|PRIVATE|SIGNATURE", re.I)


def looks_secret(name: str) -> bool:
    """True when a variable or flag name suggests its value is a secret."""
    return bool(_SECRET_NAME.search(name))


def redact_value(name: str, value: str) -> str:
    return REDACTED if looks_secret(name) else value


def redact_args(args: Sequence[str]) -> List[str]:
    """Redact values of secret-looking ``--flag=value`` and ``--flag value`` arguments."""
    result: List[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            result.append(REDACTED)
            hide_next = False
        elif arg.startswith("-") and "=" in arg:
            name, _, value = arg.partition("=")
            result.append("{}={}".format(name, redact_value(name, value)))
        else:
            hide_next = arg.startswith("-") and looks_secret(arg)
            result.append(arg)
    return result


def format_assignments(pairs: Iterable[Tuple[str, str]]) -> str:
    text = " ".join("{}={}".format(name, shlex.quote(redact_value(name, value)))
                    for name, value in pairs)
    return text or "(none)"


def shell_exports(pairs: Iterable[Tuple[str, str]]) -> List[str]:
    """``export NAME='value'`` lines that a POSIX shell can ``eval``."""
    return ["export {}={}".format(name, shlex.quote(value)) for name, value in pairs]


def format_command(command: Sequence[str]) -> str:
    return " ".join(shlex.quote(arg) for arg in redact_args(command))
