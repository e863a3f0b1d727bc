"""``python pip_check.py PINS``: ``pip check`` of this interpreter, with an allow-list.

Run by the Dockerfile after the lock is installed. pip's ``--no-deps`` install of the lock skips
pip's conflict check, so this step runs it on the whole environment (base and lock together).
Each conflict the base forces on the image is named in ``PINS`` (``requirements/image-RUNTIME.txt``)
on a line of its own, with the reason::

    # allow-conflict: cloud-tpu-client requires google-api-python-client: <why>

meaning "distribution cloud-tpu-client may have a requirement on google-api-python-client
that the environment does not meet". Allowed conflicts are printed and pass; any other
conflict, or a line of pip's output this cannot read, fails with one line (exit 1). An
allow-list entry that no longer occurs is printed as stale, so it can be dropped.

Runs with the image's own Python (3.7 in the xrt image) and only its standard library.
Exit codes: 0 clean or only allowed conflicts, 1 another conflict, 64 usage, 66 ``PINS``
unreadable, 65 an allow-list line that does not parse.
"""

import re
import subprocess
import sys

ALLOW = re.compile(r"^#\s*allow-conflict:\s*(?P<dist>[A-Za-z0-9_.-]+)\s+requires\s+"
                   r"(?P<req>[A-Za-z0-9_.-]+)\s*:\s*(?P<why>\S.*)$")
# pip's two conflict lines (pip 10 to 24): a requirement met at the wrong version, and one
# that is not installed at all.
_WRONG = re.compile(r"^(?P<dist>\S+) \S+ has requirement (?P<req>[A-Za-z0-9_.-]+).*, but you "
                    r"have \S+ \S+\.$")
_MISSING = re.compile(r"^(?P<dist>\S+) \S+ requires (?P<req>[A-Za-z0-9_.-]+).*, which is not "
                      r"installed\.$")


class AllowListError(Exception):
    """An ``# allow-conflict:`` line that does not parse; the message names it."""


def normalize(name):
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_allowed(text, source="PINS"):
    """{(distribution, requirement): reason} from the ``# allow-conflict:`` lines of ``text``."""
    allowed = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not re.match(r"^#\s*allow-conflict\b", line):
            continue
        match = ALLOW.match(line.strip())
        if not match:
            raise AllowListError("{}:{}: expected '# allow-conflict: DIST requires REQ: why', "
                                 "got {!r}".format(source, number, line.strip()))
        allowed[(normalize(match.group("dist")), normalize(match.group("req")))] = \
            match.group("why").strip()
    return allowed


def conflict_key(line):
    """(distribution, requirement) of one line of ``pip check``'s output, or None when the
    line is not one of pip's conflict lines."""
    match = _WRONG.match(line) or _MISSING.match(line)
    if not match:
        return None
    return normalize(match.group("dist")), normalize(match.group("req"))


def judge(output, allowed):
    """(allowed lines, refused lines, stale allow-list keys) for ``pip check``'s ``output``."""
    passed, refused, seen = [], [], set()
    for line in (line.strip() for line in output.splitlines()):
        if not line or line.startswith("No broken requirements"):
            continue
        key = conflict_key(line)
        if key in allowed:
            passed.append(line)
            seen.add(key)
        else:
            refused.append(line)
    return passed, refused, sorted(set(allowed) - seen)


def main(argv):
    if len(argv) != 1:
        sys.stderr.write("usage: python pip_check.py requirements/image-RUNTIME.txt\n")
        return 64
    try:
        with open(argv[0]) as handle:
            allowed = read_allowed(handle.read(), argv[0])
    except OSError as error:
        sys.stderr.write("pip_check.py: cannot read {}: {}\n".format(argv[0], error.strerror))
        return 66
    except AllowListError as error:
        sys.stderr.write("pip_check.py: {}\n".format(error))
        return 65
    result = subprocess.run([sys.executable, "-m", "pip", "check",
                             "--disable-pip-version-check"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True)
    passed, refused, stale = judge(result.stdout, allowed)
    for line in passed:
        print("pip check: allowed by {}: {}".format(argv[0], line))
    for dist, req in stale:
        print("pip check: stale allow-conflict in {}: {} requires {} no longer conflicts"
              .format(argv[0], dist, req))
    if refused or (result.returncode != 0 and not passed):
        sys.stderr.write("pip check: conflicts {} does not allow: {}; HINT: fix the pins, or, "
                         "if the base forces it, add '# allow-conflict: DIST requires REQ: "
                         "why' there\n".format(argv[0], " | ".join(refused) or
                                                 "pip check failed ({})".format(
                                                     result.returncode)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
