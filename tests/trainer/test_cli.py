"""trainer.cli.parse_config: every flag set is either refused with a one-line usage error
(exit 64) or gives a config that the optimizer, the schedule and the seeding can use.
Checked on listed cases and by hypothesis over both trainers' whole flag space."""

import math

import pytest
import torch
from absl import flags
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import examples
from trainer import imagenet, mnist
from trainer.batches import epoch_order
from trainer.cli import parse_config, requested_help
from trainer.errors import EX_USAGE, TrainerError
from trainer.optim import build_optimizer


def defined(trainer):
    """A private flag set holding ``trainer``'s flags (the global one is for ``main``)."""
    flag_values = flags.FlagValues()
    trainer.define_flags(flag_values)
    return flag_values

TRAINER_FLAGS = {"mnist": defined(mnist), "imagenet": defined(imagenet)}

def parse(trainer, *args):
    flag_values = TRAINER_FLAGS[trainer]
    flag_values.unparse_flags()
    return parse_config(["trainer"] + list(args), flag_values)

def assert_usable(config):
    """What training does with the numbers before its first step, plus the last step's: every
    rate finite, of ``--lr``'s sign, and at most the run's peak (``--lr`` scaled linearly
    from a batch of ``--lr_batch`` to the global batch, one device here)."""
    model = torch.nn.Linear(2, 2)
    peak = config.lr * config.batch_size / config.lr_batch if config.lr_batch else config.lr
    for steps_per_epoch in (1, 937):
        _, scheduler = build_optimizer(config, model, steps_per_epoch)
        total = config.num_epochs * steps_per_epoch
        warmup = int(config.warmup_epochs * steps_per_epoch)
        for step in {0, max(0, warmup - 1), warmup, total - 1}:
            scheduler.set(step)
            rate = scheduler.optimizer.param_groups[0]["lr"]
            assert math.isfinite(rate) and rate * config.lr >= 0
            # The schedule multiplies the peak by a factor in [0, 1], in float64: no rounding
            # beyond the peak's own (2^-53 relative).
            assert abs(rate) <= abs(peak) * (1 + 2 ** -52)
    torch.manual_seed(config.seed)
    epoch_order(3, config.seed, config.num_epochs)

@pytest.mark.parametrize("args, text", [
    (["--lr=nan"], "--lr must be a finite number, got nan"),
    (["--lr=inf"], "--lr must be a finite number, got inf"),
    (["--lr=1e308"], "--lr must be at most 1e6, got 1e+308"),
    (["--momentum=-inf"], "--momentum must be a finite number"),
    (["--warmup_epochs=1e308"], "--warmup_epochs=1e+308 is longer than the run"),
    (["--seed=1180591620717411303424"], "--seed must be in [0, 4294967295]"),
    (["--seed=-1"], "--seed must be in [0, 4294967295]"),
    (["stray"], "unexpected argument 'stray'"),
    (["--batch_size=64", "8"], "unexpected argument '8'"),
    (["--batch_size=x"], "batch_size"),
])
def test_refused_flags_name_the_flag(args, text):
    with pytest.raises(TrainerError) as raised:
        parse("mnist", "--fake_data", *args)
    assert text in raised.value.message and raised.value.hint
    assert raised.value.exit_code == EX_USAGE

@pytest.mark.parametrize("value", ["[1]", "drop_path_rate=0.1", "{'a': 1}", "3"])
def test_model_kwargs_that_are_no_json_object_are_refused(value):
    with pytest.raises(TrainerError) as raised:
        parse("imagenet", "--fake_data", "--model_kwargs=" + value)
    assert raised.value.message == ("--model_kwargs must be a JSON object of keyword "
                                    "arguments, got {!r}".format(value))
    assert raised.value.exit_code == EX_USAGE
    config = parse("imagenet", "--fake_data", "--model_kwargs={\"drop_path_rate\": 0.1}")
    assert config.model_kwargs == '{"drop_path_rate": 0.1}'


def test_platform_spelling_and_a_full_flag_set_parse():
    config = parse("imagenet", "--fake_data", "--job-dir=gs://b/j", "--warmup_epochs=2",
                   "--seed=4294967295", "--lr=0.4")
    assert (config.job_dir, config.warmup_epochs, config.seed) == ("gs://b/j", 2.0, 2 ** 32 - 1)
    assert_usable(config)

NUMBERS = st.one_of(
    st.integers(min_value=-2 ** 80, max_value=2 ** 80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["1e308", "-0", "0x10", "1_000", "", " 3", "nan", "-inf", "2**70"]))
VALUES = st.one_of(NUMBERS, st.text(max_size=12), st.booleans())

def flag_args(trainer):
    names = sorted(TRAINER_FLAGS[trainer]) + ["no_such_flag", "job-dir", "noFake_data"]
    option = st.tuples(st.sampled_from(names), VALUES).map(
        lambda pair: "--{}={}".format(pair[0], str(pair[1]).lower()
                                      if isinstance(pair[1], bool) else pair[1]))
    word = st.text(min_size=1, max_size=8).filter(lambda text: not text.startswith("-"))
    return st.lists(st.one_of(option, option, option, word), max_size=6)

@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(TRAINER_FLAGS)).flatmap(
    lambda trainer: st.tuples(st.just(trainer), flag_args(trainer))))
@example(("mnist", ["--num_epochs=19687026759561955"]))  # make fuzz: an OverflowError
# make fuzz: a global batch above --lr_batch raises the peak above --lr (the linear rule);
# the test's bound was --lr itself
@example(("imagenet", ["--batch_size=257"]))
@example(("mnist", ["--lr=1e308"]))  # make fuzz: the scaled peak overflowed to inf
def test_any_flags_are_refused_in_one_line_or_usable(case):
    trainer, args = case
    try:
        config = parse(trainer, "--fake_data", *args)
    except TrainerError as error:
        assert error.exit_code == EX_USAGE
        assert error.message and "\n" not in error.message + error.hint
        return
    assert_usable(config)

@pytest.mark.parametrize("trainer, flag", [("mnist", "--help"), ("mnist", "-h"),
                                           ("imagenet", "--helpfull"), ("imagenet", "--help")])
def test_help_lists_the_trainers_flags_and_what_it_trains(trainer, flag):
    module = {"mnist": mnist, "imagenet": imagenet}[trainer]
    text = requested_help(["trainer", "--lr=0.1", flag], TRAINER_FLAGS[trainer], module.__doc__)
    assert text.splitlines()[0] == " ".join(module.__doc__.replace("``", "").split("\n\n")[0]
                                            .split())
    for name in TRAINER_FLAGS[trainer]:  # a bool flag shows as --[no]name
        assert "--{}:".format(name) in text or "--[no]{}:".format(name) in text
    assert ("--model:" in text) == (trainer == "imagenet")

def test_help_only_when_asked():
    for args in ([], ["--lr=0.1"], ["--data_dir=--help-me"], ["--helpless"]):
        assert requested_help(["trainer"] + args, TRAINER_FLAGS["mnist"]) is None


def test_a_trainers_default_warmup_is_shortened_to_a_shorter_run_and_a_given_one_refused():
    assert parse("imagenet", "--fake_data", "--num_epochs=2").warmup_epochs == 2.0
    assert parse("imagenet", "--fake_data").warmup_epochs == 5.0
    with pytest.raises(TrainerError, match=r"--warmup_epochs=3\.0 is longer than the run"):
        parse("imagenet", "--fake_data", "--num_epochs=1", "--warmup_epochs=3")


def test_the_runs_length_in_training_steps_epochs_and_evaluation_steps():
    capped = parse("mnist", "--fake_data", "--num_epochs=5", "--max_steps=7")
    assert (capped.train_steps(3), capped.epochs(3), capped.eval_steps(10)) == (7, 3, 10)
    assert (capped.train_steps(1), capped.epochs(1)) == (5, 5)  # the epochs end it first
    smoke = parse("imagenet", "--fake_data", "--smoke")
    assert (smoke.train_steps(2502), smoke.epochs(2502), smoke.eval_steps(98)) == (1, 1, 1)
    assert parse("mnist", "--fake_data", "--num_steps=4").eval_steps(10) == 4
    with pytest.raises(TrainerError, match="--smoke trains one step; --max_steps=2 asks"):
        parse("mnist", "--fake_data", "--smoke", "--max_steps=2")


@pytest.mark.parametrize("name, value, kind", [
    ("TRAINER_GCS_RETRY_DEADLINE", "soon", "positive"),
    ("TRAINER_GCS_RETRY_DEADLINE", "0", "positive"),
    ("TRAINER_GCS_RETRY_DEADLINE", "-5", "positive"),
    ("TRAINER_GCS_RETRY_DEADLINE", "inf", "positive"),
    ("TRAINER_GCS_RETRY_DEADLINE", "nan", "positive"),
    ("TRAINER_GCS_REFUSAL_RETRY", "-1", "non-negative"),
    ("TRAINER_GCS_REFUSAL_RETRY", "nan", "non-negative"),
    ("TRAINER_GCS_REFUSAL_RETRY", "inf", "non-negative"),
    ("TRAINER_STOP_DEADLINE", "0", "positive"),
    ("TRAINER_STOP_DEADLINE", "later", "positive"),
])
def test_bad_retry_and_deadline_seconds_are_refused_naming_the_variable(name, value, kind):
    # Before anything is set (alone in the environment, the bad variable sets nothing); that
    # a trainer process ends on it with exit 64 is test_trainer_process's, one per variable.
    from trainer import cli, stop_signal, storage

    before = (storage.RETRY_DEADLINE_S, storage.REFUSAL_RETRY_S, stop_signal.DEADLINE_S)
    with pytest.raises(TrainerError) as refused:
        cli._configure_retries_and_deadlines({name: value})
    assert refused.value.exit_code == EX_USAGE
    assert refused.value.message == "{}={!r} is not a {} number of seconds".format(
        name, value, kind)
    assert refused.value.hint.startswith("e.g. {}=".format(name))
    assert (storage.RETRY_DEADLINE_S, storage.REFUSAL_RETRY_S, stop_signal.DEADLINE_S) == before
