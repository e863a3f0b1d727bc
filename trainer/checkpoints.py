"""``CheckpointStore``: numbered checkpoints in a job-dir folder, written atomically, the newest
K kept, and the newest *valid* one loaded at start: a file is trusted only when its bytes are the
ones written and its state is numbers. One that fails is skipped with a warning naming it, and
the one before it used; when every one fails the run stops (exit 65) rather than start over at
step 0, which would throw the job's training away.

The file is what ``torch.save`` writes (``torch.load`` reads it as it is) followed by a trailer,
``SEAL_MAGIC`` and the SHA-256 of everything before it in hex (``SEAL_BYTES`` in all), hashed
while the archive streams into its staged file: no second copy of the state in memory, and the
atomic rename (or the one GCS upload) stays the only step that makes it visible. Files written
before the trailer existed end with the archive itself; they are accepted with a warning, their
state still checked finite.

On a slice whose devices split the state (``--sharding=fsdp`` on several hosts), a checkpoint
is one file per host instead, each holding that host's regions (``trainer.parallel.pieces``,
which says how they commit and rotate); ``load_latest`` puts them together.

Two rules keep a run's work: a checkpoint that cannot be *read* (``StorageError``: exit 74
when storage is unavailable, 77 when it is forbidden) stops the run instead of counting as
corrupt, because starting over at step 0 would then write over that run; and saving step N
never deletes a checkpoint of a later step, whatever happened before."""

from __future__ import annotations

import hashlib
import io
import logging
import math
import re
from typing import Any, BinaryIO, Callable, Collection, Dict, Iterator, List, Optional, Tuple

import torch

from trainer.errors import EX_USAGE, DataError, TrainerError
from trainer.parallel import pieces
from trainer.storage import Directory

_NAME = re.compile(r"^ckpt-(\d{9})\.pt$")
log = logging.getLogger("trainer.checkpoints")

# The trailer after the archive: the magic, then the SHA-256 of the bytes before it in hex.
SEAL_MAGIC = b"\ntrainer-checkpoint-sha256:"
SEAL_BYTES = len(SEAL_MAGIC) + 64
# A zip archive, as torch.save writes it (no comment), ends with this record of 22 bytes.
_ZIP_END = b"PK\x05\x06"
_ZIP_END_BYTES = 22


# A checkpoint's list of the tensors it may hold nan or inf in (``divergence``).
GIVEN_NON_FINITE = "given_non_finite"


def checkpoint_name(step: int) -> str:
    """The file name of the checkpoint of ``step``: only this module builds or parses it."""
    return "ckpt-{:09d}.pt".format(step)


class CheckpointStore:
    """Checkpoints ``ckpt-<step>.pt`` in ``directory``; ``keep`` newest are retained, and the
    one of the step ``kept`` names (``--keep_best``'s) besides."""

    def __init__(self, directory: Directory, keep: int = 3, writes: bool = True) -> None:
        """``writes``: False for a process that writes no whole checkpoint (a host of a slice
        but the first): it leaves temporary files alone, as another host may be writing
        them (it still writes its own pieces of a split state: ``save_piece``)."""
        self.directory = directory
        self.keep = max(1, keep)
        if writes:
            directory.remove_stale_temporaries()
        # Tensors a checkpoint may hold nan or inf in (``divergence.given_non_finite``).
        self.allowed_non_finite: Collection[str] = ()
        # A step whose checkpoint the rotation leaves (the best evaluation's), or None. Read
        # by the background writer's rotation: rebound, never changed in place.
        self.kept: Optional[int] = None
        # The hosts whose pieces make one checkpoint of this run (``save_piece``); 1: a file.
        self.hosts = 1
        # Where the checkpoint ``load_latest`` returned was read from (for messages).
        self.source = ""

    def steps(self) -> List[int]:
        """Steps with a checkpoint (a file, or some pieces of one), oldest first."""
        return sorted(self._files())

    def _files(self, names: Optional[List[str]] = None) -> Dict[int, List[str]]:
        """{step: the names of its files} in the folder (or among ``names``)."""
        found: Dict[int, List[str]] = {}
        for name in self.directory.list() if names is None else names:
            step = _step_of(name)
            if step is not None:
                found.setdefault(step, []).append(name)
        return found

    def uri(self, step: int) -> str:
        """Where this run writes the checkpoint of ``step`` (for messages)."""
        return self.directory.join(checkpoint_name(step) if self.hosts == 1
                                   else pieces.pieces_pattern(step, self.hosts))

    def save(self, step: int, state: Dict[str, Any]) -> str:
        """Write ``state`` (tensors already on the CPU) as the checkpoint of ``step``,
        serialised straight to a file: no copy of it in memory (a bytes buffer held one, 205 MB
        for ResNet-50, while the write went on). Then the rotation (``_rotate``): this process
        writes the whole checkpoint, so every file of an older step is its to delete."""
        name = checkpoint_name(step)
        self.directory.write_file(name, lambda stream: _write_sealed(state, stream),
                                  needs=size_of(state))
        self._rotate(step, lambda old_name: True)
        return self.uri(step)

    def save_piece(self, step: int, host: int, piece: Dict[str, Any]) -> str:
        """Write host ``host``'s ``piece`` (``pieces.take``) of the checkpoint of ``step``,
        one of ``self.hosts``; then the rotation (``_rotate``) of this host's own files (host 0
        also whole files, and pieces of hosts this run has not). Returns where it went. A
        ``TrainerError`` (exit 64) where this host has written ``keep`` + 2 steps' pieces and
        still no step is complete: the other hosts' pieces go elsewhere (a local job dir on a
        slice is each host's own folder), and no run could ever resume."""
        name = pieces.piece_name(step, host, self.hosts)
        piece["step"] = step
        self.directory.write_file(name, lambda stream: _write_sealed(piece, stream),
                                  needs=size_of(piece))
        if not self._rotate(step, lambda old_name: self._owns(old_name, host)):
            mine = [found for found in self.directory.list()
                    if (pieces.parse_piece(found) or (0, -1))[1] == host]
            if len(mine) >= self.keep + 2:
                raise TrainerError(
                    "{} holds {} checkpoint pieces of this host (process {}) and not one "
                    "complete checkpoint: the other hosts' pieces do not land there".format(
                        self.directory.join(""), len(mine), host),
                    "give the job a --job_dir every host sees as one folder "
                    "(gs://BUCKET/..., or a mount all hosts share): a local folder is each "
                    "host's own", EX_USAGE)
        return self.directory.join(name)

    def _rotate(self, step: int, owns: Callable[[str], bool]) -> bool:
        """Keep the newest ``keep`` checkpoints that could be restored (a whole file, or a
        step with every host's piece) among this step and earlier ones, and ``kept``; delete
        the files ``owns`` of every step older than those. A later step is another run's
        progress (or this one's, if its restore went wrong), never ours to delete. Returns
        whether there were ``keep`` to keep (else nothing is deleted)."""
        names = self.directory.list()
        files = self._files(names)
        restorable = sorted(set(pieces.complete_steps(names)) | {
            other for other, found in files.items() if checkpoint_name(other) in found})
        restorable = [other for other in restorable if other <= step]
        if len(restorable) < self.keep:
            return False
        oldest_kept, kept = restorable[-self.keep], self.kept
        for old in sorted(other for other in files if other < oldest_kept and other != kept):
            for old_name in files[old]:
                if owns(old_name):
                    self.directory.delete(old_name)
        return True

    def _owns(self, name: str, host: int) -> bool:
        """Whether host ``host`` of this run rotates file ``name`` away."""
        parsed = pieces.parse_piece(name)
        if parsed is None:  # a whole checkpoint
            return host == 0
        return parsed[1] == host or (host == 0 and parsed[1] >= self.hosts)

    def load_latest(self) -> Optional[Tuple[int, Dict[str, Any]]]:
        """The newest checkpoint that passes, as (step, state), or None when there is none
        (``source`` then names it). A file whose bytes differ from the digest written with it,
        that does not load as a checkpoint, or whose state holds nan or inf is skipped with a
        warning; so is a step whose pieces are not all there (a host stopped while writing
        its own: as a file never renamed into place, no checkpoint); a file that is gone is
        skipped too; a ``StorageError`` reading one ends the run (exit 74 for an outage, 77
        for a refusal), and so does a ``DataError`` (exit 65) when every checkpoint there was
        refused."""
        refused = []
        files = self._files()
        for step in sorted(files, reverse=True):
            names = files[step]
            try:
                state, problem, where = self._read(step, names)
            except FileNotFoundError:  # deleted since it was listed
                log.warning("skipping vanished checkpoint of step %d in %s", step,
                            self.directory.join(""))
                continue
            if problem is None:
                self.source = where
                return step, state
            if where is None:  # pieces of a step not all written: no checkpoint
                log.warning("skipping step %d in %s: %s", step, self.directory.join(""),
                            problem)
                continue
            log.warning("skipping damaged checkpoint %s: %s", where, problem)
            refused.append("{} ({})".format(where.rsplit("/", 1)[-1], problem))
        if refused:
            raise DataError(
                "every checkpoint in {} is damaged, so the run stops instead of starting "
                "again at step 0: {}".format(self.directory.uri, "; ".join(refused)),
                "restore good copies of them, or move them away to start the job over from "
                "step 0 (its training so far is then lost)")
        return None

    def load(self, step: int) -> Dict[str, Any]:
        """The checkpoint of ``step`` (not the newest: ``trainer.consolidate``); a
        ``DataError`` naming it where it does not pass its checks."""
        state, problem, where = self._read(step, self._files().get(step, []))
        if problem is not None:
            raise DataError("checkpoint {} is {}: {}".format(
                where or self.directory.join(checkpoint_name(step)),
                "damaged" if where else "incomplete", problem),
                "name another step's, or restore a good copy of it")
        return state

    def _read(self, step: int, names: List[str]
              ) -> Tuple[Any, Optional[str], Optional[str]]:
        """(state, None, where) for the checkpoint of ``step`` (its files ``names``) when it
        is one to trust; else (None, why not, where: None when its pieces are not all
        there)."""
        name = checkpoint_name(step)
        if name in names or not names:
            data = self.directory.read_bytes(name)
            state, problem = self._opened(name, data)
            del data  # the bytes are not needed once loaded: one copy of the state less
            return state, problem, self.directory.join(name)
        hosts = pieces.complete_steps(names).get(step)
        if hosts is None:
            held = [pieces.parse_piece(found) for found in names]
            largest = max(parsed[2] for parsed in held if parsed is not None)
            written = sum(1 for parsed in held if parsed is not None and parsed[2] == largest)
            return None, ("{} of {} hosts' pieces written (a host stopped while writing its "
                          "own, or is writing it still)".format(written, largest)), None
        where = self.directory.join(pieces.pieces_pattern(step, hosts))
        assembly = pieces.Assembly()
        for host in range(hosts):
            piece_name = pieces.piece_name(step, host, hosts)
            data = self.directory.read_bytes(piece_name)
            piece, problem = self._unsealed(piece_name, data)
            del data
            problem = problem or assembly.add(piece)
            if problem is not None:
                return None, "{}: {}".format(piece_name, problem), where
            del piece
        state, problem = assembly.result()
        if problem is not None:
            return None, problem, where
        return self._checked(state) + (where,)

    def _opened(self, name: str, data: bytes) -> Tuple[Any, Optional[str]]:
        """(state, None) when ``data``, the bytes of ``name``, are a checkpoint to trust,
        else (None, why not, in a few words)."""
        state, problem = self._unsealed(name, data)
        if problem is not None:
            return None, problem
        return self._checked(state)

    def _unsealed(self, name: str, data: bytes) -> Tuple[Any, Optional[str]]:
        """(what file ``name`` holds, None) when ``data``, its bytes, are those written and
        load, else (None, why not)."""
        view = memoryview(data)
        if len(data) >= SEAL_BYTES and view[-SEAL_BYTES:-64].tobytes() == SEAL_MAGIC:
            recorded = view[-64:].tobytes().decode("ascii", "replace")
            archive = view[:-SEAL_BYTES]
            if hashlib.sha256(archive).hexdigest() != recorded:
                return None, "its bytes differ from the SHA-256 recorded when it was written"
        elif view[-_ZIP_END_BYTES:-_ZIP_END_BYTES + 4].tobytes() == _ZIP_END:
            archive = view
            log.warning("checkpoint %s has no digest (written by an earlier version): its "
                        "bytes cannot be verified, only its values checked finite",
                        self.directory.join(name))
        else:
            return None, ("it ends in neither a digest nor a whole archive (truncated, or no "
                          "checkpoint)")
        try:
            state = _load(archive)
            if not isinstance(state, dict) or "step" not in state:
                raise ValueError("not a trainer checkpoint")
        except Exception as error:  # bytes that are no checkpoint
            return None, "unreadable: {}: {}".format(type(error).__name__, error)
        return state, None

    def _checked(self, state: Any) -> Tuple[Any, Optional[str]]:
        """(state, None) when its values are numbers, else (None, which is not)."""
        if not isinstance(state, dict) or "step" not in state:
            return None, "unreadable: not a trainer checkpoint"
        # The buffers the model was given as nan or inf, as the run knows them and as the
        # checkpoint records them (a reader without the model: ``trainer.consolidate``).
        allowed = set(self.allowed_non_finite) | set(state.get(GIVEN_NON_FINITE) or ())
        bad = non_finite(state, allowed)
        if bad is not None:
            return None, "{} holds nan or inf".format(bad)
        return state, None


def _step_of(name: str) -> Optional[int]:
    """The step of a checkpoint's file (whole, or a piece), None for any other name."""
    match = _NAME.match(name)
    if match is not None:
        return int(match.group(1))
    parsed = pieces.parse_piece(name)
    return None if parsed is None else parsed[0]


def mismatch(model: torch.nn.Module, saved: Dict[str, Any]) -> Optional[str]:
    """Why the saved ``model`` state cannot be loaded into ``model`` (a short phrase naming the
    first differing parameter), or None when it fits."""
    expected = model.state_dict()
    state = saved.get("model")
    if not isinstance(state, dict):
        return "it holds no model state"
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        return "{} parameters missing (e.g. {}), {} unexpected (e.g. {})".format(
            len(missing), missing[0] if missing else "-", len(unexpected),
            unexpected[0] if unexpected else "-")
    for name, tensor in expected.items():
        value = state[name]
        if not isinstance(value, torch.Tensor) or value.shape != tensor.shape:
            return "{} has shape {}, this model needs {}".format(
                name, tuple(getattr(value, "shape", ())), tuple(tensor.shape))
    return None


def non_finite(state: Any, allowed: Collection[str] = ()) -> Optional[str]:
    """The name of the first floating-point tensor of ``state`` (nested dicts and lists on the
    host) that holds nan or inf, or None when every one is finite; the tensors named in
    ``allowed`` (dotted paths) are not looked at."""
    for name, tensor in named_tensors(state):
        if name in allowed:
            continue
        # Summed in float64, finite float32 values cannot overflow (2^128 each, at most 2^64
        # of them, against float64's 2^1024), so the sum is finite exactly when every
        # element is: one pass, and no mask as large as the tensor.
        if tensor.is_floating_point() and not math.isfinite(
                float(tensor.sum(dtype=torch.float64))):
            return name
    return None


def save_state(state: Any, stream: BinaryIO) -> "hashlib._Hash":
    """``torch.save`` ``state`` into ``stream``; returns the SHA-256 of what it wrote. A full
    disk is raised as the ``OSError`` it is: torch's writer reports the short write as an
    error of its own ("[enforce fail at inline_container.cc] unexpected pos"), which says
    nothing of space."""
    digesting = _DigestingWriter(stream)
    try:
        torch.save(state, digesting)
    except RuntimeError:
        if digesting.error is not None:
            raise digesting.error
        raise
    if digesting.error is not None:  # swallowed by the writer: the archive is incomplete
        raise digesting.error
    return digesting.digest


def size_of(state: Any) -> int:
    """About how many bytes ``torch.save`` writes for ``state``: its tensors' (the rest is
    small)."""
    return sum(tensor.numel() * tensor.element_size() for _, tensor in named_tensors(state))


def _write_sealed(state: Dict[str, Any], stream: BinaryIO) -> None:
    """``state`` as a checkpoint file: the archive, then the trailer with its digest."""
    digest = save_state(state, stream)
    stream.write(SEAL_MAGIC + digest.hexdigest().encode("ascii"))


class _DigestingWriter:
    """A write-only stream that passes bytes on to ``stream`` and hashes them on the way; it
    keeps the first ``OSError`` of ``stream`` (``error``), which torch's writer replaces."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.digest = hashlib.sha256()
        self.error: Optional[OSError] = None

    def write(self, data: Any) -> int:
        try:
            written = self.stream.write(data)
        except OSError as error:
            self.error = self.error or error
            raise
        self.digest.update(data)
        return written

    def flush(self) -> None:
        self.stream.flush()


def _load(archive: memoryview) -> Any:
    """The state in the archive's bytes, read in place (no copy of them)."""
    try:
        return torch.load(_ReadView(archive), map_location="cpu", weights_only=False)
    except TypeError:  # torch 1.12 has no weights_only
        return torch.load(_ReadView(archive), map_location="cpu")


class _ReadView(io.RawIOBase):
    """A read-only, seekable stream over a ``memoryview``."""

    def __init__(self, view: memoryview) -> None:
        super().__init__()
        self.view, self.position = view, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        target = memoryview(buffer).cast("B")
        chunk = self.view[self.position:self.position + len(target)]
        target[:len(chunk)] = chunk
        self.position += len(chunk)
        return len(chunk)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: len(self.view)}
        self.position = max(0, base[whence] + offset)
        return self.position

    def tell(self) -> int:
        return self.position


# Copies a list of tensors to the CPU, in order (``to_cpu``).
Fetch = Callable[[List[torch.Tensor]], List[torch.Tensor]]


def to_cpu(value: Any, fetch: Optional[Fetch] = None) -> Any:
    """A copy of nested state (dicts, lists, tuples of tensors) with every tensor on the CPU;
    a copy even of tensors that were there already, since a background write reads it while
    training goes on. ``fetch`` copies a list of tensors to the CPU at once (``xla.to_host``:
    one transfer for all those on the device, where one per tensor waits for each in turn);
    default: one by one."""
    tensors = [tensor for _, tensor in named_tensors(value)]
    copies = (fetch or _each_to_cpu)(tensors)
    return _rebuilt(value, iter(copies))


def _each_to_cpu(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    return [tensor.detach().to("cpu", copy=True) for tensor in tensors]


def named_tensors(value: Any, name: str = "") -> Iterator[Tuple[str, torch.Tensor]]:
    """Every tensor of nested state (dicts, lists, tuples), with its dotted path
    (``optimizer.state.0.momentum_buffer``), in the order ``_rebuilt`` puts copies back."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from named_tensors(item, "{}.{}".format(name, key) if name else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from named_tensors(item, "{}.{}".format(name, index) if name else str(index))


def _rebuilt(value: Any, copies: Iterator[torch.Tensor]) -> Any:
    """``value`` with its tensors replaced, in ``_collect``'s order, by ``copies``."""
    if isinstance(value, torch.Tensor):
        return next(copies)
    if isinstance(value, dict):
        return {key: _rebuilt(item, copies) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_rebuilt(item, copies) for item in value)
    return value
