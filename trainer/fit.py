"""``fit()``: the run shared by every trainer. Resume from the newest valid checkpoint, train
epoch by epoch with progress lines, evaluate, checkpoint, write outputs, and on SIGTERM finish
the current step, checkpoint and stop.

The parts live in their own modules: the devices and processes (``devices``), the step
functions and their path (``steps``, decided in ``xla``), the epoch loops (``loop``), the
learning rate (``optim``), checkpoints and resuming (``resume``), the compile cache
(``compile_cache``) and the summary (``summary``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Optional, Sequence

import torch

from trainer import devices, divergence, restart, stop_signal, tied_weights, xla
from trainer.batch_tree import BatchLoss
from trainer.batches import DataSource, RunSchedule
from trainer.best_model import BestModel, parse_best
from trainer.checkpoints import to_cpu
from trainer.chips import chip
from trainer.compile_cache import CompileCache
from trainer.config import (
    DEFAULT_HYPERTUNE_METRIC,
    LOSS_HYPERTUNE_METRIC,
    TrainConfig,
    parse_profile_steps,
)
from trainer.errors import EX_USAGE, Preempted, TrainerError
from trainer.job_totals import JobTotals
from trainer.loop import EpochHooks, LoopState, evaluate, train_epoch
from trainer.optim import build_optimizer
from trainer.outputs import STOP, OutputPaths, RunOutputs
from trainer.parallel.fsdp import ShardPlan
from trainer.parallel.place import follow_parameters, place_model
from trainer.parallel.remat import recompute_blocks
from trainer.profiling import ProfileWindow
from trainer.progress import InputSetup, ProgressLog
from trainer.resume import RunCheckpoints
from trainer.steps import (
    BINARY_ACCURACY,
    PERPLEXITY,
    TOKEN_ACCURACY,
    Scoring,
    StepOptions,
    Steps,
    headline_accuracy,
)
from trainer.summary import GraphCounts, PhaseTimes, summarize
from trainer.throughput import TokenRates
from trainer.weight_average import AVERAGED_MODEL
from trainer.weight_average import PREFIX as AVERAGED

log = logging.getLogger("trainer")


@dataclass
class TrainSpec:
    """What a trainer contributes: its model, data and loss; ``fit`` does the rest."""

    name: str
    model: torch.nn.Module
    data: DataSource
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    topk: Sequence[int] = (1,)
    # One logit per example against targets 0 and 1: binary accuracy, not top-k (``Steps``).
    binary: bool = False
    # Scores per token against token labels: token accuracy, the scores on this dimension of
    # the outputs (``Steps``); perplexity: exp of the evaluation loss, a cross-entropy
    # (``own_loop.token_kind``).
    token_scores: Optional[int] = None
    perplexity: bool = False
    # How many rows of each evaluation batch are examples (``steps.Steps``: evaluation then
    # also reports the loss); None: padding is labelled ``batches.IGNORE_LABEL``.
    eval_rows: Optional[Callable[[int], int]] = None
    # The user's own evaluation metrics (``trainer.train(metrics=...)``): name -> fn(outputs,
    # targets), each batch's mean, reported example-weighted (``steps.Steps``).
    metrics: Optional[Dict[str, Callable]] = None
    # The user's parameter groups (``trainer.param_groups``), by parameter name.
    param_groups: Sequence[Any] = ()
    # A language model's: the tokens of one example and the model FLOPs of one token, for
    # tokens/s per device and MFU (``trainer.throughput``); 0: not a model of tokens.
    tokens_per_example: int = 0
    flops_per_token: float = 0.0


def fit(config: TrainConfig, spec: TrainSpec, paths: OutputPaths,
        topology: Optional[devices.Topology] = None) -> Dict[str, Any]:
    """Train ``spec`` as ``config`` says on ``topology`` (default: ``devices.detect``; its
    data source must load the global batch, or this host's part of it); returns the summary
    (also written to the job dir). The run's local working folders are deleted when it ends,
    however it ends."""
    started = time.time()
    stop_signal.resume_with(paths.resume)  # the hints of a stop that ends the process at once
    topology = topology or devices.detect(config.devices)
    writes = topology.writes_outputs
    with contextlib.ExitStack() as scratch:
        scratch.callback(spec.data.close)  # its data workers live until the run ends
        # Before anything compiles.
        cache = scratch.enter_context(CompileCache.for_run(config.compile_cache, paths, writes))
        counts = GraphCounts()
        dev = xla.device()
        path = _step_path(config, spec.loss_fn)
        # Read on the host, before the move: buffers given as nan or inf (a -inf mask).
        given_non_finite = divergence.given_non_finite(spec.model)
        model = tied_weights.to_device(spec.model, dev)  # tied parameters stay one
        # --sharding: the parameters split over the mesh before anything holds copies of them.
        sharding, shard_plan = place_model(config, model, topology, dev)
        recompute_blocks(model, config.remat)  # --remat
        # A loss that is a Module may hold tensors (CrossEntropyLoss(weight=...)): with the model.
        loss_fn = spec.loss_fn.to(dev) if isinstance(spec.loss_fn, (torch.nn.Module,
                                                                    BatchLoss)) \
            else spec.loss_fn
        steps_per_epoch = _steps_per_epoch(config, spec.data)
        spec.data.schedule(RunSchedule(config.epochs(steps_per_epoch), config.eval_every_epochs,
                                       steps_per_epoch, config.eval_steps(spec.data.eval_steps)))
        optimizer, learning_rate = build_optimizer(config, model, steps_per_epoch,
                                                   spec.data.batch_size, spec.param_groups)
        steps = Steps(model, optimizer, learning_rate, loss_fn, spec.topk, path,
                      config.precision,
                      scoring=Scoring(spec.eval_rows, spec.binary, spec.metrics,
                                      spec.token_scores, spec.perplexity),
                      options=StepOptions(config.seed, config.clip_grad_norm,
                                          config.grad_accum_steps, topology.devices,
                                          config.ema_decay))
        checkpoints = RunCheckpoints.for_paths(paths, config.keep_checkpoints, steps, topology,
                                               config.step_batch_size, spec.data.layout,
                                               spec.data.identity(), given_non_finite)
        state = LoopState()
        train_steps = config.train_steps(steps_per_epoch)
        restored_total = checkpoints.resume(state, train_steps)
        if shard_plan is not None:  # restored whole, made by clones: split as their parameters
            follow_parameters(optimizer, steps.average)
        outputs = scratch.enter_context(RunOutputs(paths, resume_step=state.global_step,
                                                   hypertune_tag=config.hypertune_metric,
                                                   writes=writes, uploads=checkpoints.writer))
        log.info("%s on %s (%s), %s steps in %s: %d steps/epoch x %d epochs%s", spec.name,
                 topology.describe(), xla.device_kind(dev), path, config.precision,
                 steps_per_epoch, config.epochs(steps_per_epoch),
                 "" if train_steps == steps_per_epoch * config.epochs(steps_per_epoch) else
                 ", ending at step {} ({})".format(train_steps, "--smoke" if config.smoke
                                                   else "--max_steps"))
        if spec.data.describe():
            log.info("data: %s", spec.data.describe())
        log.info("global batch %d (--batch_size=%d per device x %d%s); peak learning rate %g "
                 "(%s)", spec.data.batch_size, config.batch_size, topology.devices,
                 " x --grad_accum_steps={}: micro-batches of {}".format(
                     config.grad_accum_steps, spec.data.batch_size // config.grad_accum_steps)
                 if config.grad_accum_steps > 1 else "",
                 learning_rate.peak, "--lr={:g} x {} / --lr_batch={}".format(
                     config.lr, spec.data.batch_size, config.lr_batch)
                 if config.lr_batch else "--lr as given: --lr_batch=0")
        profile = ProfileWindow.for_run(parse_profile_steps(config.profile_steps),
                                        paths.tensorboard_dir, outputs.tensorboard_folder,
                                        outputs.flush)
        run = _Run(config, spec.data, steps, state, checkpoints, paths.resume,
                   _Records(outputs, counts, cache, profile),
                   _Placement(sharding, devices.BoundaryVote(
                       topology, _stop_requested(checkpoints), sharding, dev,
                       checkpoints.clock_due(config.checkpoint_minutes), paths.resume)))
        # Every host resumed where the others did (a local job dir on a slice: they did not).
        checkpoints.check_same_start(state.global_step, run.placement.vote.job_sum)
        run.best = best_model(config, outputs, steps)
        if run.best is not None and run.best.step is not None:  # a resumed run's best so far
            checkpoints.keep_also(run.best.step)
        checkpoints.this_process = lambda: _this_process(
            run, checkpoints, outputs.steps_past_resume, spec.data.batch_size)
        tokens = _token_rates(spec, dev)
        progress = ProgressLog(state, spec.data.batch_size, topology.devices,
                               config.train_steps(steps_per_epoch), outputs.record,
                               counts.compiled, _input_setup(config, spec.data),
                               initial_total=restored_total,
                               rate_at=steps.learning_rate.value, tokens=tokens)
        # The entry modules catch SIGTERM from start-up on; this also covers in-process
        # callers and gives the previous handler back afterwards.
        # A stop that ends the process from another thread (``stop_signal``: inside a long
        # compile) lets the checkpoint write in flight land first.
        scratch.enter_context(stop_signal.before_ending(checkpoints.writer.settle))
        with stop_signal.caught():
            finished = False
            try:
                accuracy = run.all_epochs(progress)
                stop_signal.stopping()  # training is over: the run ends, stopped or not
                # Training is over: no data worker outlives it (one that died while the
                # model is written would fail a finished run).
                spec.data.close()
                checkpoints.finish()
                finished = True
            finally:
                if profile is not None and (finished or stop_signal.received()):
                    profile.stop()  # stopped inside the window: what it captured
                if not finished:  # failing already: that error is the one reported
                    stop_signal.stopping()  # and no stop's exit code replaces it
                    checkpoints.abandon()
                outputs.flush()
                cache.save()
        trained = to_cpu(model.state_dict(), xla.to_host)
        # model.pt and the summary: numbers only (but the buffers given as nan or inf).
        divergence.check_model(trained, state.global_step, given_non_finite)
        outputs.save_model(trained)
        if steps.average is not None:  # the averaged weights, with the model's buffers
            with steps.average.swapped():
                averaged = to_cpu(model.state_dict(), xla.to_host)
            divergence.check_model(averaged, state.global_step, given_non_finite)
            outputs.save_model(averaged, AVERAGED_MODEL)
        job = checkpoints.job_totals()
        summary = summarize(spec.name, str(xla.device_kind(dev)), path, state,
                            spec.data.batch_size, accuracy, counts, started, cache.report(),
                            PhaseTimes(run.eval_seconds, checkpoints.seconds))
        summary.update(devices=topology.devices, devices_found=topology.found,
                       processes=topology.process_count, batch_size_per_device=config.batch_size,
                       grad_accum_steps=config.grad_accum_steps,
                       global_batch=spec.data.batch_size,
                       learning_rate=steps.learning_rate.peak, precision=config.precision,
                       sharding="fsdp" if shard_plan is not None else "dp",
                       remat=config.remat,
                       model_state_bytes=_state_bytes(steps, shard_plan),
                       job=job.summary(outputs.stops))
        if tokens is not None:  # steady rates: the steps that compiled left out
            summary.update(tokens.figures(summary["steady_examples_per_second"]
                                          / topology.devices),
                           model_flops_per_token=tokens.flops_per_token)
        # The job's, as of the last evaluation (the last epoch is always evaluated); this
        # host's own where nothing was evaluated.
        summary.update(run.damaged_total or spec.data.damaged_images())
        outputs.write_summary(summary)
    # Handed back on the host with model.pt's weights: what the caller does next (Hugging
    # Face's save_pretrained, inference, another run) needs no XLA device.
    tied_weights.onto_host(model, trained)
    return summary


@dataclass
class _Records:
    """What a run keeps besides its model: outputs, graph counts, compiled programs."""

    outputs: RunOutputs
    counts: GraphCounts
    cache: CompileCache
    profile: Optional[ProfileWindow] = None


@dataclass
class _Placement:
    """How batches reach the devices (None: one device) and how the processes agree to
    stop and to checkpoint."""

    sharding: Optional[xla.BatchSharding]
    vote: devices.BoundaryVote

    def loader(self, batches, steps: Steps, loop_cuts: bool = False, fixed=None):
        """``batches`` on the devices. ``loop_cuts``: the loop cuts each lazy step itself
        before asking for the next batch (``loop.train_epoch``, so that the time it waits is
        the input's alone): the loader must then not cut again (it would on the lazy path,
        and an empty cut still costs about a millisecond a step). ``fixed``: the one batch
        every step holds (``DataSource.fixed_batch``), placed on the devices once."""
        path = xla.COMPILED if loop_cuts else steps.path  # COMPILED: the loader never cuts
        if fixed is not None:
            loaded = xla.resident_batches(batches, fixed, steps.device, path, self.sharding)
        else:
            loaded = xla.device_loader(batches, steps.device, path, self.sharding, steps.path)
        if self.sharding is not None and xla.collectives_need_lockstep():
            return _OneStepInFlight(loaded)
        return loaded


class _OneStepInFlight:
    """``batches``, each handed out once every step dispatched before it has finished
    (``xla.collectives_need_lockstep``). ``device_seconds``: the time spent waiting for those
    steps, which is the devices' compute, not the input's: ``loop.StepClock.next_batch``
    leaves it out of the input wait (on 4 XLA CPU devices it was 80-90 % of every step, and
    MNIST's batches from memory were called input-bound)."""

    def __init__(self, batches: Iterable) -> None:
        self.batches = iter(batches)
        self.device_seconds = 0.0

    def __iter__(self) -> "_OneStepInFlight":
        return self

    def __next__(self):
        batch = next(self.batches)
        started = time.perf_counter()
        xla.wait()
        self.device_seconds += time.perf_counter() - started
        return batch


class _Run:
    """The epochs of one ``fit``: train, evaluate, checkpoint, and stop on SIGTERM."""

    def __init__(self, config: TrainConfig, data: DataSource, steps: Steps, state: LoopState,
                 checkpoints: RunCheckpoints, resume: Optional[str], records: _Records,
                 placement: _Placement) -> None:
        self.config, self.data, self.steps, self.state = config, data, steps, state
        self.resume = resume  # OutputPaths.resume: for the hint of a stop
        self.checkpoints, self.placement = checkpoints, placement
        self.outputs, self.counts, self.cache = records.outputs, records.counts, records.cache
        self.profile = records.profile
        self.steps_per_epoch = _steps_per_epoch(config, data)
        # The run's length: --num_epochs, cut where --max_steps (or --smoke) ends it, in
        # the last epoch.
        self.train_steps = config.train_steps(self.steps_per_epoch)
        self.epochs = config.epochs(self.steps_per_epoch)
        self.eval_seconds = 0.0
        self.best: Optional[BestModel] = None  # --keep_best
        # Damaged images over the job's hosts as of the last evaluation (``job_damaged``).
        self.damaged_total: Dict[str, int] = {}

    def all_epochs(self, progress: ProgressLog) -> Dict[str, float]:
        """Train the remaining epochs; returns the last evaluation's accuracy."""
        state, config = self.state, self.config
        if self.placement.vote.settle():  # during start-up: nothing new to checkpoint
            raise _preempted("stopped by {} before training resumed at step {}".format(
                stop_signal.name(), state.global_step),
                restart.stop_hint(self.resume, checkpointed=False))
        hooks = EpochHooks(config.log_steps, progress, self.checkpoint_cadence,
                           self.placement.vote.decide, input_wait=self.placement.vote.input_wait)
        if self.profile is not None:
            hooks.step_context = self.profile.step_context
        accuracy: Optional[Dict[str, float]] = None
        # A run stopped after an epoch's last step (the run's last included) resumes inside
        # that epoch with no step left: it still ends that epoch (its count, checkpoint and
        # evaluation), as the run that was not stopped did.
        while state.epoch < self.epochs and (state.global_step < self.train_steps
                                             or state.step_in_epoch > 0):
            accuracy = self.epoch(hooks)
        if accuracy is None:  # resumed from the last epoch's checkpoint: its figures, again
            accuracy = self.evaluate_epoch()  # (an evaluation that counted nothing is {})
        return accuracy

    def epoch(self, hooks: EpochHooks) -> Optional[Dict[str, float]]:
        """Train the rest of the current epoch; returns its evaluation, None when it has
        none."""
        state = self.state
        self.counts.epoch_started()
        steps = min(self.steps_per_epoch,
                    self.train_steps - (state.global_step - state.step_in_epoch))
        batches = itertools.islice(self.data.train_batches(state.epoch, state.step_in_epoch),
                                   max(0, steps - state.step_in_epoch))
        if train_epoch(self.steps, self.placement.loader(batches, self.steps, loop_cuts=True,
                                                         fixed=self.data.fixed_batch()),
                       state, hooks):
            self.record_stop()
            raise _stopped("", self.checkpoints.save_final(state, self.outputs), state,
                           self.resume)
        state.epoch += 1
        state.step_in_epoch = 0
        last = state.epoch == self.epochs
        # The finished epoch is saved before it is evaluated: SIGTERM during the evaluation
        # then costs the evaluation only. The write runs in the background meanwhile.
        if self.saves_after(state.epoch):
            self.checkpoints.save(state, self.outputs)
        accuracy: Optional[Dict[str, float]] = None
        if last or state.epoch % self.config.eval_every_epochs == 0:
            accuracy = self.evaluate_epoch()
        self.counts.epoch_ended()
        if len(self.counts.executions_per_epoch) == 1:
            self.cache.save()  # every graph of the run exists after its first epoch
        return accuracy

    def checkpoint_cadence(self, state: LoopState, clock_agreed: bool) -> None:
        """Checkpoint at ``state`` every ``--checkpoint_steps`` steps, and when every process
        agreed that ``--checkpoint_minutes`` have passed on some host's clock. That vote was
        cast a boundary earlier (``devices.BoundaryVote``): if a checkpoint was saved at that
        boundary, the vote predates it and is spent."""
        steps = self.config.checkpoint_steps
        by_steps = bool(steps) and state.global_step % steps == 0
        by_clock = clock_agreed and self.checkpoints.saved_step != state.global_step - 1
        # An epoch's last step is saved by the epoch's end where it saves: one write a step.
        at_epoch_end = ((state.step_in_epoch >= self.steps_per_epoch
                         or state.global_step >= self.train_steps)
                        and self.saves_after(state.epoch + 1))
        if (by_steps or by_clock) and not at_epoch_end:
            self.checkpoints.save(state, self.outputs)

    def record_stop(self) -> None:
        """A metrics line for the stop at this step: the job's summary counts them. The stop
        has begun: no deadline ends the process while it checkpoints (``stop_signal``)."""
        stop_signal.stopping()
        self.outputs.record(STOP, {"signal": stop_signal.name() if stop_signal.received()
                                   else "another host"}, self.state.global_step)

    def saves_after(self, finished: int) -> bool:
        """Whether the run checkpoints once ``finished`` epochs have trained."""
        every = self.config.checkpoint_epochs
        return finished == self.epochs or bool(every) and finished % every == 0

    def evaluate_epoch(self) -> Dict[str, float]:
        """Evaluate the model as it is after epoch ``state.epoch``, log and record it; on
        SIGTERM stop at the next batch (``Preempted``)."""
        state = self.state
        if not self.data.eval_steps:  # nothing to evaluate (``trainer.train`` without a set)
            return {}
        started = time.perf_counter()
        eval_batches = itertools.islice(self.data.eval_batches(),
                                        self.config.eval_steps(self.data.eval_steps))
        loaded = self.placement.loader(eval_batches, self.steps, fixed=self.data.fixed_batch())
        accuracy = evaluate(self.steps, loaded, self.placement.vote.should_stop,
                            self.placement.vote.input_wait)
        self.eval_seconds += time.perf_counter() - started
        if accuracy is None:
            self.record_stop()
            self.outputs.flush()
            # Saved before the evaluation (in the background: waited for here), or now.
            raise _stopped(" while evaluating epoch {}".format(state.epoch),
                           self.checkpoints.save_final(state, self.outputs), state, self.resume)
        _log_epoch(state, accuracy, self.outputs, self.job_damaged(state.epoch - 1))
        if self.best is not None and self.best.consider(
                accuracy, state.epoch, state.global_step, self._weights_of(self.best.spec.name),
                self.checkpoints.name(state.global_step)):
            self.keep_best_checkpoint()
        self.outputs.flush(background=True)
        return accuracy


    def keep_best_checkpoint(self) -> None:
        """The best evaluation's checkpoint kept out of the rotation (``--keep_best``), written
        now where the epoch's end wrote none (the weights are the ones evaluated)."""
        self.checkpoints.save(self.state, self.outputs)  # no write where it is saved already
        self.checkpoints.keep_also(self.state.global_step)

    def job_damaged(self, epoch: int) -> Dict[str, int]:
        """``DataSource.damaged_images`` of ``epoch`` summed over the job's hosts (at an
        evaluation's end, which every host reaches: ``BoundaryVote.job_sum``); the run's
        training total so far is summed with them, for ``summary.json`` (``damaged_total``)."""
        mine = self.data.damaged_images(epoch)
        if not mine:
            return mine
        total = self.data.damaged_images()["train_damaged_images"]
        summed = self.placement.vote.job_sum(list(mine.values()) + [total])
        figures = dict(zip(mine, summed))
        self.damaged_total = dict(figures, train_damaged_images=summed[-1])
        return figures

    def _weights_of(self, figure: str) -> Callable[[], Dict[str, torch.Tensor]]:
        """What makes the state dict of the model ``figure`` judges: the averaged weights'
        for an ``ema_`` figure, else the weights'."""
        model, average = self.steps.model, self.steps.average

        def weights() -> Dict[str, torch.Tensor]:
            if average is not None and figure.startswith(AVERAGED):
                with average.swapped():
                    return to_cpu(model.state_dict(), xla.to_host)
            return to_cpu(model.state_dict(), xla.to_host)
        return weights


def _step_path(config: TrainConfig, loss_fn: Any) -> str:
    """``--step_mode``'s path, lazy where the loss is a Module holding tensors
    (``CrossEntropyLoss(weight=...)``): the compiled step traces the model's tensors as its
    inputs, not a loss's (``graph_step``); asked for by name, that is a usage error."""
    path = xla.step_path(config.step_mode)
    module = loss_fn.function if isinstance(loss_fn, BatchLoss) else loss_fn
    holds = isinstance(module, torch.nn.Module) and any(
        True for _ in itertools.chain(module.parameters(), module.buffers()))
    if path != xla.COMPILED or not holds:
        return path
    if config.step_mode == xla.COMPILED:
        raise TrainerError("--step_mode=compiled: loss_fn ({}) holds tensors, which the "
                           "compiled step does not take yet".format(type(module).__name__),
                           "use --step_mode=lazy (or auto, which chooses it)", EX_USAGE)
    log.info("loss_fn (%s) holds tensors: the steps run lazily (the compiled step takes only "
             "the model's tensors)", type(module).__name__)
    return xla.LAZY


def _token_rates(spec: TrainSpec, dev: torch.device) -> Optional[TokenRates]:
    """A language model's tokens/s and MFU figures (None for other models), against the
    peak of the chip ``dev`` is (``trainer.chips``; none known: no MFU)."""
    if not spec.tokens_per_example:
        return None
    found = chip(xla.chip_kind(dev))
    return TokenRates(spec.tokens_per_example, spec.flops_per_token,
                      found.peak_flops if found is not None else None)


def _state_bytes(steps: Steps, plan: Optional[ShardPlan]) -> Dict[str, int]:
    """The model state's bytes, ``whole`` and ``per_device`` (FSDP's plan), and
    ``per_device_measured``: the parameters, optimizer state and averages as the first device
    holds them at the end (gradients are transient: not there)."""
    slots = [value for group in steps.optimizer.param_groups for parameter in group["params"]
             for value in steps.optimizer.state.get(parameter, {}).values()
             if isinstance(value, torch.Tensor) and value.dim() > 0]
    held = list(steps.model.parameters()) + slots + (
        list(steps.average.averages) if steps.average is not None else [])
    per_device, whole = plan.state_bytes() if plan is not None else (None, None)
    return {"per_device": per_device, "whole": whole,
            "per_device_measured": xla.device_bytes(held)}


def best_model(config: TrainConfig, outputs: RunOutputs, steps: Steps
               ) -> Optional[BestModel]:
    """``--keep_best``'s keeper (None without it), checked against what ``steps``' evaluation
    reports before anything trains."""
    spec = parse_best(config.keep_best)
    if spec is None:
        return None
    reported = (list(steps.metric_names) + (["loss"] if steps.eval_rows is not None else [])
                + ([PERPLEXITY] if steps.perplexity else []) + list(steps.metrics))
    if steps.average is not None:
        reported += [AVERAGED + name for name in reported]
    return BestModel(spec, outputs.model_dir, reported)


def _this_process(run: "_Run", checkpoints: RunCheckpoints, steps_redone: int,
                  batch_size: int) -> JobTotals:
    """What this process has added to the job's totals so far."""
    clock = run.state.clock
    first = clock.to_first_step
    return JobTotals(
        processes=1, resumes=int(checkpoints.resumed), training_seconds=clock.seconds,
        evaluation_seconds=run.eval_seconds, checkpoint_seconds=checkpoints.seconds,
        compile_seconds=run.counts.compile_seconds(),
        restore_seconds=checkpoints.restore_seconds,
        restart_seconds=first if first is not None and checkpoints.resumed else 0.0,
        steps_trained=clock.steps, steps_redone=steps_redone,
        steady_steps=clock.steady_steps, steady_examples=clock.steady_steps * batch_size,
        steady_seconds=clock.steady_seconds,
        to_first_step_seconds=[] if first is None else [round(first, 3)])


def _stop_requested(checkpoints: RunCheckpoints) -> Callable[[], bool]:
    """This process's reason to stop at the next boundary: SIGTERM, or a background checkpoint
    write that failed (the run stops within a step, writing the state it reached first)."""
    return lambda: stop_signal.received() or checkpoints.writer.failed()


def _stopped(during: str, checkpoint: Optional[str], state: LoopState,
             resume: Optional[str]) -> Preempted:
    """The ``Preempted`` of a stop at ``state``, naming where its checkpoint is and what
    resumes it (``resume``: ``OutputPaths.resume``). A host that
    did not get SIGTERM itself stopped because another host asked (the vote does not say
    why: SIGTERM there, or a failed checkpoint write on the host that writes them, which
    reports that failure itself)."""
    if not stop_signal.received():
        return _preempted("stopped{} at step {} as another host asked".format(
            during, state.global_step), "the host that asked says why in its log")
    return _preempted("stopped by {}{} at step {}; checkpoint {}".format(
        stop_signal.name(), during, state.global_step, checkpoint or "not written (no job dir)"),
        restart.stop_hint(resume if checkpoint or resume is None else ""))


def _preempted(message: str, hint: str) -> Preempted:
    """A stop's error, with the exit code of the signal received (Ctrl-C: 130)."""
    stop_signal.stopping()
    return Preempted(message, hint, exit_code=stop_signal.exit_code())


# What the evaluation reports as a share of its examples (``steps.Steps.results``).
SHARES = ("top1", "top5", BINARY_ACCURACY, TOKEN_ACCURACY)
SHARES += tuple(AVERAGED + name for name in SHARES)


def _log_epoch(state: LoopState, accuracy: Dict[str, float], outputs: RunOutputs,
               damaged: Optional[Dict[str, int]] = None) -> None:
    """The epoch's evaluation logged and recorded; ``damaged``: ``DataSource.damaged_images``
    (recorded beside it, where the source decodes images)."""
    # Shares as percentages; the loss and the user's metrics (``trainer.train(metrics=)``) as
    # the numbers they are.
    line = "  ".join(("{} {:.2%}" if name in SHARES else "{} {:.4g}").format(name, value)
                     for name, value in accuracy.items())
    log.info("epoch %d done (step %d): eval %s", state.epoch, state.global_step, line)
    damaged = damaged or {}
    if any(damaged.values()):
        log.warning("epoch %d: %d damaged images skipped in training (another image of the "
                    "batch stood in for each), %d in the evaluation (left out of its figures)",
                    state.epoch, damaged["train_damaged_images"],
                    damaged["eval_damaged_images"])
    outputs.record("eval", dict(accuracy, epoch=state.epoch, **damaged), state.global_step)
    headline = headline_accuracy(accuracy)
    if outputs.hypertune_tag in accuracy:  # a study of a metric the evaluation reports, by name
        outputs.report_hypertune(accuracy[outputs.hypertune_tag], state.global_step)
    elif headline is not None:
        outputs.report_hypertune(headline, state.global_step)
    elif "loss" in accuracy:  # no class scores (``trainer.train``): the loss is the measure
        # Under the default tag a study reads the value as an accuracy, maximised: the loss
        # goes under its own tag then (a study on it minimises ``loss``). A tag the user named
        # is the user's study, for the loss.
        default = outputs.hypertune_tag == DEFAULT_HYPERTUNE_METRIC
        outputs.report_hypertune(accuracy["loss"], state.global_step,
                                 LOSS_HYPERTUNE_METRIC if default else "")


def _steps_per_epoch(config: TrainConfig, data: DataSource) -> int:
    return min(data.steps_per_epoch, config.num_steps or data.steps_per_epoch)


def _input_setup(config: TrainConfig, data: DataSource) -> InputSetup:
    from trainer.data.workers import resolve_workers
    from trainer.host_resources import host_cores

    workers = getattr(data, "workers", None)  # what the source chose (and logged)
    return InputSetup(config.fake_data, resolve_workers(config.num_workers, announce=False)
                      if workers is None else workers, host_cores(),
                      data.decodes_images, host_device=xla.device_type() == "CPU",
                      memory_holds=getattr(data, "memory_holds", None),
                      from_shards=data.from_shards)


