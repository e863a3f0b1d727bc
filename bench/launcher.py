"""Launcher benchmark against the emulated Cloud TPU API on loopback (run: make bench).

Prints, over N runs (default 12), median and p95 of:
  reaction   node flips to READY+HEALTHY at a known instant -> trainer's first output line
  overhead   process start -> trainer's first line, launcher (node already READY) vs direct
and the trainer's peak RSS (VmHWM) when exec'd by the launcher vs started directly.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import fake_cloud_tpu as fake  # noqa: E402

FAKE_TRAINER = REPO / "tests" / "fake_trainer.py"
RSS_TRAINER = REPO / "bench" / "rss_trainer.py"


def base_env(api: fake.FakeCloudTpuApi, metadata: fake.FakeMetadataServer, sdk: str,
             trainer: Path) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TPU_NAME", "PJRT_DEVICE", "XRT_TPU_CONFIG", "TPU_IP_ADDRESS")}
    env.update(fake.client_environ(api.discovery_url, metadata.host, sdk))
    env.update(TPU_CONFIG='{{"project": "{}", "zone": "{}", "tpu_node_name": "{}"}}'.format(
        fake.PROJECT, fake.ZONE, fake.NODE), LAUNCHER_XLA_RUNTIME="xrt",
        LAUNCHER_TRAINER="python {}".format(trainer),
        FAKE_TRAINER_OUT=os.path.join(sdk, "trainer.jsonl"))
    return env


def first_line_time(process: subprocess.Popen) -> float:
    line = process.stdout.readline()
    stamp = time.monotonic()
    if not line:
        raise RuntimeError("trainer printed nothing: " + process.stderr.read())
    return stamp


def launcher(env: Dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "launcher"], cwd=str(REPO), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def reaction_once(api, env) -> float:
    api.answer_with(fake.state("CREATING"))
    before = len(api.node_requests)
    process = launcher(env)
    while len(api.node_requests) < before + 3:  # it is polling a not-ready node
        time.sleep(0.01)
    time.sleep(random.uniform(0.0, 1.5))  # flip at an arbitrary phase of the backoff
    api.answer_with(fake.ready())
    flipped = time.monotonic()
    started = first_line_time(process)
    process.wait()
    return started - flipped


def overhead_once(api, env, direct: bool) -> float:
    api.answer_with(fake.ready())
    begin = time.monotonic()
    if direct:
        process = subprocess.Popen([sys.executable, str(FAKE_TRAINER)], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    else:
        process = launcher(env)
    started = first_line_time(process)
    process.wait()
    return started - begin


def peak_rss(env, direct: bool) -> int:
    """The RSS trainer's VmHWM, started directly or exec'd after a TPU-node resolve (the
    launcher imported and used TensorFlow first)."""
    command = ([sys.executable, str(RSS_TRAINER)] if direct
               else [sys.executable, "-m", "launcher"])
    output = subprocess.run(command, cwd=str(REPO), env=env, capture_output=True, text=True,
                            check=True).stdout
    return int(output.split("peak_rss_kib")[1].split()[0])


def summary(name: str, values: List[float], unit: str = "s") -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return "{:<34} median {:.3f} {}  p95 {:.3f} {}  (n={})".format(
        name, statistics.median(values), unit, p95, unit, len(values))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=12)
    args = parser.parse_args()
    metadata = fake.FakeMetadataServer().start()
    api = fake.FakeCloudTpuApi().start()
    with tempfile.TemporaryDirectory() as sdk:
        env = base_env(api, metadata, sdk, FAKE_TRAINER)
        reaction = [reaction_once(api, env) for _ in range(args.runs)]
        via_launcher = [overhead_once(api, env, direct=False) for _ in range(args.runs)]
        direct = [overhead_once(api, env, direct=True) for _ in range(args.runs)]
        rss_env = base_env(api, metadata, sdk, RSS_TRAINER)
        rss_direct = [peak_rss(rss_env, direct=True) for _ in range(3)]
        rss_launched = [peak_rss(rss_env, direct=False) for _ in range(3)]
    api.stop()
    metadata.stop()
    print(summary("reaction (READY -> trainer line)", reaction))
    print(summary("start -> trainer line, launcher", via_launcher))
    print(summary("start -> trainer line, direct", direct))
    print("launcher overhead (median)         {:.3f} s".format(
        statistics.median(via_launcher) - statistics.median(direct)))
    print("trainer peak RSS direct            {:.0f} MiB".format(
        statistics.median(rss_direct) / 1024))
    print("trainer peak RSS via launcher      {:.0f} MiB".format(
        statistics.median(rss_launched) / 1024))
    print("peak RSS ratio launcher/direct     {:.3f}".format(
        statistics.median(rss_launched) / statistics.median(rss_direct)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
