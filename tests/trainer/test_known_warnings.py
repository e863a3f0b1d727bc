"""trainer.known_warnings: google-api-core's Python version notice, printed on every pjrt-image
run (``FutureWarning: You are using a non-supported Python version (3.10.13)``), is filtered
for any process that imports ``trainer``; other warnings still print."""

import subprocess
import sys

from conftest import REPO, clean_environ

# google-api-core's own check, on a date when this interpreter's version is past its support.
NOTICE = ("import datetime, warnings\n"
          "from google.api_core import _python_version_support as support\n"
          "support.check_python_version('google.api_core', today=datetime.date(2040, 1, 1))\n"
          "warnings.warn('another notice', FutureWarning)\n")


def run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=str(REPO), env=clean_environ(PYTHONPATH=str(REPO)), timeout=60)


def test_the_python_version_notice_is_filtered_and_other_warnings_are_not():
    bare = run(NOTICE)
    assert "You are using a non-supported Python version" in bare.stderr  # the test can fail
    filtered = run("import trainer\n" + NOTICE)
    assert filtered.returncode == 0, filtered.stderr
    assert "Python version" not in filtered.stderr
    assert "FutureWarning: another notice" in filtered.stderr
