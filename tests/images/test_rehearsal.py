"""``make rehearse-container`` as docs/submitting.md#rehearse gives it, on this session's engine
and the stand-in the tier built: the build is the one the ``images`` fixture made (a cache
hit, no new image), then the image trains on fake data into a fresh ``runs/`` folder."""

import json
import shutil

from conftest import REPO, clean_environ
from containers import make


def test_the_documented_rehearsal_trains_in_the_image(images):
    before = set(REPO.glob("runs/rehearsal-*"))
    result = make("rehearse-container", "REHEARSAL_IMAGE=" + images["pjrt"], env=clean_environ())
    made = set(REPO.glob("runs/rehearsal-*")) - before
    try:
        assert result.returncode == 0, result.stderr[-3000:]
        [job] = made
        summary = json.loads((job / "summary.json").read_text())
        assert summary["global_step"] == 20
        assert "rehearse: done: {}/summary.json".format(job.relative_to(REPO)) in result.stderr
    finally:
        for job in made:
            shutil.rmtree(str(job))
