"""Field names and enums from the Google API descriptions that google-api-python-client ships
(``googleapiclient/discovery_cache/documents/{ml.v1,aiplatform.v1}.json``), so the checks
follow the real API rather than a hand-copied list."""

from __future__ import annotations

import functools
import json
import os
from typing import Dict, Tuple

# The two API descriptions the checks use: legacy AI Platform Training and Vertex AI.
ML, VERTEX = "ml.v1", "aiplatform.v1"


@functools.lru_cache(maxsize=None)
def schemas(document: str) -> Dict[str, dict]:
    """The ``schemas`` of API description ``document`` (e.g. ``"ml.v1"``)."""
    import googleapiclient

    path = os.path.join(os.path.dirname(googleapiclient.__file__), "discovery_cache",
                        "documents", document + ".json")
    with open(path) as handle:
        return json.load(handle)["schemas"]


def enum(document: str, schema: str, field: str) -> Tuple[str, ...]:
    return tuple(schemas(document)[schema]["properties"][field].get("enum", ()))
