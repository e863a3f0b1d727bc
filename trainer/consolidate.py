"""The whole model of a run's checkpoint, as ``model.pt`` is written:
``python -m trainer.consolidate JOB_DIR [--step=N | --best] [--out=NAME]``.

A run writes ``model.pt`` when it completes; this makes the same file from any checkpoint
afterwards: the newest that passes its checks (digest, finite values) by default, the one of
step ``--step``, or the one ``--keep_best`` kept (``--best``: ``best.json``'s; for an
``ema_`` figure, its averaged weights, as ``model-best.pt`` holds them). The file goes
to the job dir (local or ``gs://``) as ``--out`` (default ``model-step-N.pt``), through a
temporary file and a rename; plain torch loads it (``model.load_state_dict(torch.load(f))``).
A checkpoint is one file of whole tensors under any ``--sharding``, or on a slice each host's
piece (``trainer.parallel.pieces``), which this puts together.

Exit codes: 0 done; 64 bad option; 65 no checkpoint to read (none, damaged, or not the one
asked for); 74 the job dir cannot be read or written.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, Dict, List, Optional, Tuple

from trainer.best_model import BEST_RECORD
from trainer.checkpoints import CheckpointStore, checkpoint_name, save_state, size_of
from trainer.errors import EX_USAGE, DataError, TrainerError
from trainer.outputs import OutputPaths, checkpoint_directory
from trainer.storage import open_dir
from trainer.weight_average import PREFIX as AVERAGED

log = logging.getLogger("trainer")


def best_record(model_dir: Any) -> Dict[str, Any]:
    """``best.json`` (``--keep_best``'s record); a data error naming it where there is none,
    it is not one, or it names no checkpoint."""
    where = model_dir.join(BEST_RECORD)
    if not model_dir.exists(BEST_RECORD):
        raise DataError("{} holds no {}: the run kept no best checkpoint".format(
            model_dir.join(""), BEST_RECORD), "run it with --keep_best=NAME, or drop --best "
            "for the newest checkpoint")
    try:
        record = json.loads(model_dir.read_bytes(BEST_RECORD).decode())
    except ValueError as error:
        raise DataError("{} is not JSON: {}".format(where, error),
                        "name the checkpoint with --step instead")
    if not isinstance(record, dict) or not isinstance(record.get("step"), int):
        raise DataError("{} is no record of --keep_best (no step)".format(where),
                        "name the checkpoint with --step instead")
    if not record.get("checkpoint"):
        raise DataError("{} names no checkpoint (the run wrote none)".format(where),
                        "its weights are model-best.pt already")
    return record


def consolidate(job_dir: str, step: int = 0, best: bool = False, out: str = ""
                ) -> Tuple[int, str]:
    """Write the model of the chosen checkpoint; returns (its step, where it went)."""
    paths = OutputPaths.resolve(job_dir, {})
    directory = checkpoint_directory(paths)
    store = CheckpointStore(directory, writes=False)
    model_dir = open_dir(paths.model_dir)
    record = best_record(model_dir) if best else {}
    wanted: Optional[int] = record["step"] if best else (step or None)
    steps = store.steps()
    if wanted is None:
        found = store.load_latest()
        if found is None:
            raise DataError("{} holds no checkpoint".format(directory.join("")),
                            "name the job dir a run checkpointed into")
        wanted, state = found
    else:
        if wanted not in steps:
            raise DataError("{} holds no checkpoint of step {} (it holds {})".format(
                directory.join(""), wanted, ", ".join(str(s) for s in steps) or "none"),
                "name one of those with --step, or drop it for the newest")
        state = store.load(wanted)
    name = out or "model-step-{}.pt".format(wanted)
    model: Dict[str, Any] = dict(state["model"])
    if str(record.get("metric", "")).startswith(AVERAGED) and state.get("ema"):
        model.update(state["ema"])  # --keep_best=ema_...: the averaged weights were the best
    model_dir.write_file(name, lambda stream: save_state(model, stream), needs=size_of(model))
    where = model_dir.join(name)
    log.info("the model of %s (step %d) written to %s: torch.load it, then "
             "model.load_state_dict", directory.join(checkpoint_name(wanted)), wanted, where)
    return wanted, where


def main(argv: Optional[List[str]] = None) -> int:
    from trainer.console import run_tool

    parser = argparse.ArgumentParser(prog="python -m trainer.consolidate",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("job_dir", help="the run's --job_dir, DIR or gs://...")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--step", type=int, default=0,
                        help="the checkpoint of this step (default: the newest that passes)")
    choice.add_argument("--best", action="store_true",
                        help="the checkpoint --keep_best kept (best.json names it)")
    parser.add_argument("--out", default="", help="the file's name in the job dir (default "
                        "model-step-N.pt)")

    def run(args: argparse.Namespace) -> None:
        if args.step < 0:
            raise TrainerError("--step={} is negative".format(args.step),
                               "name a step the run checkpointed", EX_USAGE)
        if "/" in args.out:
            raise TrainerError("--out={} is a path, not a file name".format(args.out),
                               "it is written in the job dir, e.g. --out=model-final.pt",
                               EX_USAGE)
        consolidate(args.job_dir, args.step, args.best, args.out)

    return run_tool(parser, argv, run)


if __name__ == "__main__":
    sys.exit(main())
