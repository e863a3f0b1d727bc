"""The objects under a Cloud Storage prefix as a stream of (name, size), a page at a time, with
a progress line while a long listing runs.

``list(client.list_blobs(...))`` keeps a ``Blob`` per object, with every metadata field the
API returns: about 3.5 KB each, 4.6 GB for ImageNet's 1.33 million files, and nothing is
printed during its 1,300 list pages. Here only each object's name and size leave the page
(the API is asked for just those fields, so the responses are smaller too), and a line every
``LOG_EVERY_S`` seconds says how far the listing got (``bench/listing.py`` measures the
memory per listed object).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, Iterator, Optional, Tuple

log = logging.getLogger("trainer")

LOG_EVERY_S = 10.0
# The fields of a list response that the stream needs: the page token is what pages on.
FIELDS = "items(name,size),nextPageToken"
# Objects per page: Cloud Storage's default and largest. Asked for explicitly, because a server
# that defaults to no limit (fake-gcs-server) would otherwise answer with one page of all.
PAGE_SIZE = 1000


def object_entries(client: Any, bucket: str, prefix: str, policy: Dict[str, Any],
                   delimiter: Optional[str] = None, page_size: int = PAGE_SIZE,
                   every_s: float = LOG_EVERY_S) -> Iterator[Tuple[str, int]]:
    """(object name, size in bytes) of every object whose name starts with ``prefix`` (with
    ``delimiter`` "/": only those not in a deeper folder), in the API's order (by name).
    ``policy`` is the retry and timeout of each page request. Errors are the library's, raised
    where the failing page is read. After ``every_s`` seconds and every ``every_s`` after,
    and at the end of a listing that logged, a line: objects and pages so far."""
    iterator = client.list_blobs(bucket, prefix=prefix, delimiter=delimiter, fields=FIELDS,
                                 page_size=page_size, **policy)
    started = last = time.monotonic()
    objects = pages = 0
    logged = False
    for page in iterator.pages:
        for blob in page:
            objects += 1
            yield blob.name, blob.size
        pages += 1
        now = time.monotonic()
        if now - last >= every_s:
            last, logged = now, True
            log.info("listing gs://%s/%s: %d objects in %d pages so far, %.0f s", bucket,
                     prefix, objects, pages, now - started)
    if logged:
        log.info("listed gs://%s/%s: %d objects in %d pages, %.0f s", bucket, prefix, objects,
                 pages, time.monotonic() - started)
