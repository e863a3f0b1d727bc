"""Warnings the project knows to be harmless, filtered once for every process that imports
``trainer`` (the package's ``__init__`` installs them): each printed on every run, and a
newcomer cannot act on it.

- google-api-core's Python version notice (``FutureWarning: You are using a non-supported
  Python version (3.10.13)``, or "... past its end of life", "... which Google will stop
  supporting"), raised when ``google.cloud.storage`` is imported: the interpreter is the base
  image's (the pjrt base's Python 3.10, the xrt base's 3.7), fixed by the platform's images,
  and the locked client libraries work on it as tested. Only that module's notice is
  filtered; other FutureWarnings still print.
"""

import warnings

GOOGLE_PYTHON_VERSION_NOTICE = r"You are using a (non-supported )?Python version"


def install() -> None:
    warnings.filterwarnings("ignore", message=GOOGLE_PYTHON_VERSION_NOTICE,
                            category=FutureWarning, module=r"google\.api_core\.")
