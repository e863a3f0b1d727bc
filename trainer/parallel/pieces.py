"""A checkpoint of a multi-host slice written as each host's own piece: no host gathers the
state that the devices of all hosts split between them (``--sharding=fsdp``).

The checkpoint of step N on H hosts is H files, ``ckpt-N-host-h-of-H.pt`` (``piece_name``),
each sealed with its digest as a whole checkpoint is (``trainer.checkpoints``). Host h's file
holds the regions of the split tensors (parameters, optimizer state, averages) that its devices
hold, each region once in the whole job (a shard's replica 0; ``xla.local_regions``); host
0's file also holds the rest of the state (the tensors held whole, the run's position), in
which each split tensor is the marker ``SPLIT``.

Committing needs no host to wait for another: each file appears whole or not at all, and a
step is a checkpoint once all H of its files are there (``complete_steps``). A host killed
mid-write leaves its step incomplete, and a restore takes the newest complete step. Rotation
keeps the newest ``keep`` complete steps: each host deletes only its own files of steps older
than those, so a slow host's step is never the reason a fast one deletes the step before it.

Restoring, every host reads all the step's files and puts each split tensor together whole in
its memory (``Assembly``); the run then places the whole state on its mesh as it places a whole
checkpoint, so it resumes on any number of hosts and devices, under either sharding. (The
whole state passes through each host's memory once, at restore: 93 GB for a 7b model with
AdamW, under a v5e host's 197 GB or a v6e host's 720 GB.)

Torch only: the caller fetches the regions (``trainer.xla``) and stores the files
(``trainer.checkpoints``)."""

from __future__ import annotations

import re
from typing import (
    Any,
    Callable,
    Dict,
    FrozenSet,
    Iterable,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Set,
    Tuple,
)

import torch

from trainer.errors import EX_USAGE, TrainerError

# In host 0's state, where a split tensor was: its regions are in the pieces.
SPLIT = "trainer: split over the hosts' pieces"

_PIECE = re.compile(r"^ckpt-(\d{9})-host-(\d{5})-of-(\d{5})\.pt$")



def piece_name(step: int, host: int, hosts: int) -> str:
    """The file name of host ``host``'s piece of the checkpoint of ``step`` on ``hosts`` hosts:
    only this module builds or parses it."""
    return "ckpt-{:09d}-host-{:05d}-of-{:05d}.pt".format(step, host, hosts)


def pieces_pattern(step: int, hosts: int) -> str:
    """All pieces of one checkpoint, for messages."""
    return "ckpt-{:09d}-host-*-of-{:05d}.pt".format(step, hosts)


def parse_piece(name: str) -> Optional[Tuple[int, int, int]]:
    """(step, host, hosts) of a piece's file name; None for any other name."""
    match = _PIECE.match(name)
    if match is None:
        return None
    step, host, hosts = (int(group) for group in match.groups())
    return (step, host, hosts) if host < hosts else None


def complete_steps(names: Iterable[str]) -> Dict[int, int]:
    """{step: hosts} for each step whose pieces of all its hosts are among ``names`` (of
    several host counts, a step written twice, the largest)."""
    found: Dict[Tuple[int, int], Set[int]] = {}
    for name in names:
        parsed = parse_piece(name)
        if parsed is not None:
            found.setdefault((parsed[0], parsed[2]), set()).add(parsed[1])
    complete: Dict[int, int] = {}
    for (step, hosts), present in found.items():
        if len(present) == hosts:
            complete[step] = max(hosts, complete.get(step, 0))
    return complete


class PieceLayout(NamedTuple):
    """Which pieces a process writes: ``hosts`` in all; ``writes``, for each piece of this
    process, (its host, the device ordinals whose shards it holds: None for all the process
    holds)."""

    hosts: int
    writes: Tuple[Tuple[int, Optional[FrozenSet[int]]], ...]

    @classmethod
    def of_process(cls, index: int, count: int) -> "PieceLayout":
        """Process ``index`` of ``count``, one per host: its own piece."""
        return cls(count, ((index, None),))

    @classmethod
    def simulated(cls, hosts: int, devices: int) -> "PieceLayout":
        """One process standing in for ``hosts`` hosts of ``devices // hosts`` consecutive
        devices each: it writes every host's piece (tests, benchmarks)."""
        each = devices // hosts
        return cls(hosts, tuple((host, frozenset(range(host * each, (host + 1) * each)))
                                for host in range(hosts)))


def take(tensors: Any, layout: PieceLayout, split: Callable[[torch.Tensor], bool],
         regions: Callable[[List[torch.Tensor]], List[List[Tuple[int, Any, torch.Tensor]]]],
         fetch: Callable[[List[torch.Tensor]], List[torch.Tensor]], extra: Dict[str, Any]
         ) -> Dict[int, Dict[str, Any]]:
    """{host: its piece} of state ``tensors`` (nested dicts and lists, on the device) for the
    pieces ``layout`` gives this process. ``split(tensor)``: whether the tensor is split over
    devices; ``regions``: ``xla.local_regions`` (each region with its device's ordinal);
    ``fetch``: CPU copies of whole tensors, which only host 0's piece holds, with ``extra``
    (the run's position)."""
    from trainer.checkpoints import named_tensors  # which imports this module

    named = list(named_tensors(tensors))
    apart = [(name, tensor) for name, tensor in named if split(tensor)]
    split_names = {name for name, _ in apart}
    found = regions([tensor for _, tensor in apart]) if apart else []
    pieces: Dict[int, Dict[str, Any]] = {}
    for host, devices in layout.writes:
        held = [[(bounds, part) for device, bounds, part in parts
                 if devices is None or device in devices] for parts in found]
        pieces[host] = {"host": host, "hosts": layout.hosts, "regions": {
            name: {"shape": list(tensor.shape), "parts": parts}
            for (name, tensor), parts in zip(apart, held) if parts}}
    if 0 in pieces:
        whole = [tensor for name, tensor in named if name not in split_names]
        copies = iter(fetch(whole) if whole else [])
        state = _replaced(tensors, lambda name, tensor: SPLIT if name in split_names
                          else next(copies))
        state.update(extra)
        pieces[0]["state"] = state
    return pieces


def checked_tensors(piece: Dict[str, Any]) -> Dict[str, Any]:
    """A piece's tensors for a finite-values check (``checkpoints.non_finite``), named as
    in the whole state; a split tensor's regions as a list under its name."""
    named: Dict[str, Any] = dict(piece.get("state") or {})
    for name, entry in piece["regions"].items():
        named[name] = [part for _, part in entry["parts"]]
    return named


class Assembly:
    """The whole state of a checkpoint, put together piece by piece (``add``), each piece's
    regions copied into the tensors they belong to and then let go."""

    def __init__(self) -> None:
        self.state: Optional[Dict[str, Any]] = None
        self.wholes: Dict[str, torch.Tensor] = {}
        self.filled: Dict[str, int] = {}

    def add(self, piece: Any) -> Optional[str]:
        """Take in one piece; why it cannot be (a few words), or None."""
        if not isinstance(piece, dict) or not isinstance(piece.get("regions"), dict):
            return "not a piece of a checkpoint"
        if "state" in piece:
            self.state = piece["state"]
        for name, entry in piece["regions"].items():
            shape = tuple(entry["shape"])
            for bounds, part in entry["parts"]:
                if len(bounds) != len(shape) or any(
                        not 0 <= start <= stop <= size
                        for (start, stop), size in zip(bounds, shape)):
                    return "a region of {} lies outside its shape {}".format(name, shape)
                if name not in self.wholes:
                    self.wholes[name] = torch.empty(shape, dtype=part.dtype)
                    self.filled[name] = 0
                if part.dtype != self.wholes[name].dtype:
                    return "the regions of {} are of {} and {}".format(
                        name, self.wholes[name].dtype, part.dtype)
                region = self.wholes[name][tuple(slice(*bound) for bound in bounds)]
                if region.shape != part.shape:
                    return "a region of {} is {}, its bounds say {}".format(
                        name, tuple(part.shape), tuple(region.shape))
                region.copy_(part)
                self.filled[name] += part.numel()
        return None

    def result(self) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
        """(the whole state, None), or (None, why not): host 0's piece missing, or a split
        tensor not covered by the pieces' regions."""
        if self.state is None:
            return None, "host 0's piece holds no state"
        missing: List[str] = []

        def whole(name: str, marker: Any) -> Any:
            tensor = self.wholes.get(name)
            if tensor is None or self.filled[name] != tensor.numel():
                missing.append(name)
                return marker
            return tensor

        state = _replaced(self.state, whole, markers=True)
        if missing:
            return None, "the pieces do not cover {} (e.g. {})".format(
                "{} split tensor{}".format(len(missing), "" if len(missing) == 1 else "s"),
                missing[0])
        return state, None


def _replaced(value: Any, replace: Callable[[str, Any], Any], name: str = "",
              markers: bool = False) -> Any:
    """``value`` with each tensor (``markers``: each ``SPLIT``) replaced by
    ``replace(its dotted path, it)``; dicts and lists copied, everything else kept."""
    if (markers and isinstance(value, str) and value == SPLIT) or (
            not markers and isinstance(value, torch.Tensor)):
        return replace(name, value)
    if isinstance(value, dict):
        return {key: _replaced(item, replace, "{}.{}".format(name, key) if name else str(key),
                               markers) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_replaced(item, replace,
                                     "{}.{}".format(name, index) if name else str(index),
                                     markers) for index, item in enumerate(value))
    return value



# A hook for tests and benchmarks: one process writes its checkpoints as the pieces of this
# many hosts, each of consecutive devices, as a slice's hosts would write them.
SIMULATED_HOSTS = "TRAINER_CHECKPOINT_HOSTS"


def layout_for(process_index: int, process_count: int, devices: int,
               environ: Mapping[str, str]) -> Optional[PieceLayout]:
    """The pieces a process of a job on ``devices`` devices writes when its state is split
    (``--sharding=fsdp``): its own on a slice of several hosts; on one host none (one file)
    unless ``TRAINER_CHECKPOINT_HOSTS=N`` asks for N simulated hosts' (a ``TrainerError``,
    exit 64, where N does not divide the devices)."""
    if process_count > 1:
        return PieceLayout.of_process(process_index, process_count)
    text = environ.get(SIMULATED_HOSTS, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 0 < int(text) <= devices or devices % int(text):
        raise TrainerError("{}={!r} is not a number of hosts that divides the job's {} "
                           "device{}".format(SIMULATED_HOSTS, text, devices,
                                             "" if devices == 1 else "s"),
                           "a hook for tests: unset it, or e.g. {}=2 on 4 devices".format(
                               SIMULATED_HOSTS), EX_USAGE)
    hosts = int(text)
    return None if hosts == 1 else PieceLayout.simulated(hosts, devices)
