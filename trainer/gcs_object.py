"""One Cloud Storage object's bytes, or a range of them, in one GET and one read, checked: a
whole object against its CRC32C, a range against its length (the object's hash is of the whole
object; callers check a range's content, e.g. the shard reader with the index's checksums).

``Blob.download_as_bytes`` reads a body 8 KB at a time through three Python layers, each
chunk copied and hashed on its own: about 200 MB/s of a whole core, which a data worker
streaming shards pays beside its decoding. Asking the client's own session for the object
and reading the body in one call is about 4x faster (``bench/data.py``), with the same
credentials, endpoint (``STORAGE_EMULATOR_HOST`` too) and retries.

It uses two private attributes that google-cloud-storage has had from 1.x to 3.x (the
library's own downloads use them): the client's authorized session (``Client._http``) and
``Blob._get_download_url``. The tests read through it with both majors the images ship.
"""

from __future__ import annotations

import base64


def read_object(blob, retry, timeout: float, start: int = 0, length: int = -1) -> bytes:
    """The bytes of ``blob``, or with ``length`` >= 0 its ``length`` bytes from ``start`` (fewer
    where the object ends before). Errors are the library's: an HTTP failure is its typed API
    error (``NotFound``...), retried by ``retry`` where transient; a connection that breaks
    mid-body, or bytes that do not match the object's CRC32C, are a ``ConnectionError``,
    retried as well."""
    if length == 0:
        return b""
    client = blob.client
    wanted = (start, length) if length > 0 else None
    return retry(lambda: _get(client._http, blob._get_download_url(client), timeout, wanted))()


def _get(session, url: str, timeout: float, wanted=None) -> bytes:
    import http.client

    import urllib3
    from google.api_core import exceptions

    # No decompression: the hash is of the stored bytes, which is what is read.
    headers = {"Accept-Encoding": "identity"}
    if wanted is not None:
        headers["Range"] = "bytes={}-{}".format(wanted[0], wanted[0] + wanted[1] - 1)
    response = session.get(url, stream=True, timeout=timeout, headers=headers)
    with response:
        if wanted is not None and response.status_code == 416:
            return b""  # the range starts past the object's end
        if response.status_code >= 300:
            response.content  # noqa: B018 (the error message is in the body)
            raise exceptions.from_http_response(response)
        try:
            body = response.raw.read(decode_content=False)
        except (urllib3.exceptions.HTTPError, http.client.HTTPException) as error:
            raise ConnectionError("reading {} broke off: {}".format(url, error))
    length = response.headers.get("Content-Length")
    if length is not None and int(length) != len(body):
        raise ConnectionError("{} sent {} of {} bytes".format(url, len(body), length))
    if wanted is not None and response.status_code == 206:
        return body
    expected = _crc32c(response.headers)
    if expected is not None and expected != _crc32c_of(body):
        raise ConnectionError("{} arrived corrupted (CRC32C mismatch)".format(url))
    # A server that ignores a range sends the whole object (checked): the range is in it.
    return body if wanted is None else body[wanted[0]:wanted[0] + wanted[1]]


def _crc32c(headers):
    """The object's CRC32C from ``x-goog-hash`` (``crc32c=BASE64,md5=BASE64``), or None when
    the server sent none or sends the object transcoded (then the hash is of other bytes)."""
    if headers.get("x-goog-stored-content-encoding", "identity") != "identity":
        return None
    for part in headers.get("x-goog-hash", "").split(","):
        name, _, value = part.strip().partition("=")
        if name == "crc32c":
            return base64.b64decode(value)
    return None


def _crc32c_of(data: bytes) -> bytes:
    import google_crc32c

    return google_crc32c.value(data).to_bytes(4, "big")
