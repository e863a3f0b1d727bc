"""trainer.gcs_listing against fake-gcs-server: every object under a prefix once, as (name,
size), a page at a time, with a progress line per ``every_s``; the directories built on it
list and walk the same, with each google-cloud-storage major the images ship."""

import json
import logging
import subprocess
import sys

from test_storage_faults import storage_major  # noqa: F401 (a fixture)

from conftest import REPO, clean_environ
from trainer.gcs_listing import object_entries


def fill(bucket):
    """25 objects in tree/a/, one in tree/, one in a sibling prefix: {name: size} under tree/."""
    objects = {"tree/a/{:02d}.JPEG".format(number): number for number in range(25)}
    objects["tree/top.json"] = 3
    for name, size in objects.items():
        bucket.blob(name).upload_from_string(b"x" * size)
    bucket.blob("treetop/other").upload_from_string(b"y")
    return objects


def test_every_object_once_a_page_at_a_time_with_progress(gcs, caplog):
    objects = fill(gcs)
    caplog.set_level(logging.INFO, logger="trainer")
    entries = object_entries(gcs.client, gcs.name, "tree/", {}, page_size=10, every_s=0)
    assert list(entries) == sorted(objects.items())
    lines = [record.getMessage() for record in caplog.records]
    assert [line.split(", ")[0] for line in lines] == [
        "listing gs://{}/tree/: 10 objects in 1 pages so far".format(gcs.name),
        "listing gs://{}/tree/: 20 objects in 2 pages so far".format(gcs.name),
        "listing gs://{}/tree/: 26 objects in 3 pages so far".format(gcs.name),
        "listed gs://{}/tree/: 26 objects in 3 pages".format(gcs.name)]
    caplog.clear()
    # A folder's own objects only; a short listing prints nothing.
    assert list(object_entries(gcs.client, gcs.name, "tree/", {}, "/")) == [("tree/top.json", 3)]
    assert caplog.records == []


def test_list_and_walk_with_both_storage_majors(gcs, gcs_server, storage_major):  # noqa: F811
    objects = fill(gcs)
    script = ("import json, sys; from trainer import storage; d = storage.open_dir(sys.argv[1]);"
              "print(json.dumps([d.list(), d.walk(), d.walk('a'), d.list('a')[:2]]))")
    result = subprocess.run(
        [sys.executable, "-c", script, "gs://{}/tree".format(gcs.name)], cwd=str(REPO),
        env=clean_environ(STORAGE_EMULATOR_HOST=gcs_server.url, PYTHONPATH=storage_major),
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    names = sorted(name[len("tree/"):] for name in objects)
    assert json.loads(result.stdout) == [["top.json"], names, names[:-1], names[:2]]
