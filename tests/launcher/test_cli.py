"""launcher.cli: argument splitting, options from the environment, and main()'s contract
(one error line plus a HINT, documented exit codes, never a traceback)."""

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SEED_TF_CONFIG, SEED_TPU_CONFIG, RecordingExec, examples
from launcher.cli import main, parse_command_line, split_argv
from launcher.errors import EX_CANNOT_EXECUTE, EX_CONFIG, EX_NOT_FOUND, EX_USAGE


def run_main(argv, environ, execvpe=None):
    return main(argv, environ, execvpe or RecordingExec())


@pytest.mark.parametrize("argv, expected", [
    ([], ([], [], [])),
    (["--job-dir=gs://b/j", "--lr=0.1"], ([], ["--job-dir=gs://b/j", "--lr=0.1"], [])),
    (["--dry-run", "--xla-runtime", "xrt", "--lr=0.1", "--dry-run"],
     (["--dry-run", "--xla-runtime", "xrt"], ["--lr=0.1", "--dry-run"], [])),
    (["--dry-run", "--", "python", "t.py", "--x"], (["--dry-run"], [], ["python", "t.py", "--x"])),
    (["--", "--lr=0.1", "--", "a"], ([], ["--lr=0.1", "--", "a"], [])),
    (["pos", "--", "x"], ([], ["pos", "--", "x"], [])),
])
def test_split_argv(argv, expected):
    assert split_argv(argv) == expected


def test_options_come_from_the_environment_and_the_command_line_wins():
    options = parse_command_line(["--tpu-wait-timeout=30"], {
        "LAUNCHER_TPU_WAIT_TIMEOUT": "99", "LAUNCHER_TPU_LOST_GRACE": "5",
        "LAUNCHER_TRAINER": "python -m trainer.imagenet", "LAUNCHER_XLA_RUNTIME": "XRT"})
    assert options.wait.deadline_s == 30 and options.wait.lost_grace_s == 5
    assert options.trainer == "python -m trainer.imagenet" and options.xla_runtime == "xrt"


@pytest.mark.parametrize("argv, environ, name", [
    (["--tpu-wait-timeout=soon"], {}, "--tpu-wait-timeout"),
    ([], {"LAUNCHER_TPU_WAIT_TIMEOUT": "-1"}, "LAUNCHER_TPU_WAIT_TIMEOUT"),
    ([], {"LAUNCHER_XLA_RUNTIME": "cuda"}, "LAUNCHER_XLA_RUNTIME"),
    (["--xla-runtime"], {}, "--xla-runtime"),
])
def test_bad_options_are_usage_errors(argv, environ, name, capsys):
    assert run_main(argv, environ) == EX_USAGE
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and name in lines[0] and lines[1].startswith("launcher: HINT: ")


def test_local_run_execs_the_default_trainer_with_every_argument_in_order(capsys):
    execvpe = RecordingExec()
    args = ["--job-dir=gs://bucket/job", "--lr=0.1", "--", "--weird", "x y"]
    assert run_main(args, {"HOME": "/root"}, execvpe) == 0
    file, argv, env = execvpe.calls[0]
    assert file == sys.executable and argv == [sys.executable, "-m", "trainer.mnist"] + args
    assert env["PJRT_DEVICE"] == "CPU" and env["HOME"] == "/root"
    err = capsys.readouterr().err
    assert "platform: no training platform found" in err and "exported: PJRT_DEVICE=CPU" in err


def test_explicit_command_after_double_dash():
    execvpe = RecordingExec()
    run_main(["--init=exec", "--", "/bin/true", "--flag"], {}, execvpe)
    run_main(["--", "/bin/true", "--flag"], {}, execvpe)  # under the init (launcher.init)
    assert execvpe.calls[0][1] == ["/bin/true", "--flag"]
    assert execvpe.calls[1][1][-3:] == ["--", "/bin/true", "--flag"]


def test_dry_run_prints_exports_and_the_command_and_does_not_exec(capsys):
    execvpe = RecordingExec()
    assert run_main(["--dry-run", "--xla-runtime=xrt", "--lr=0.1"], {}, execvpe) == 0
    out = capsys.readouterr().out.splitlines()
    assert execvpe.calls == []
    assert out[0].startswith("export XRT_DEVICE_MAP=") and out[-1].endswith("--lr=0.1")
    assert out[-1].startswith("# trainer: ")


@pytest.mark.parametrize("error, code", [(FileNotFoundError(), EX_NOT_FOUND),
                                         (PermissionError(13, "Permission denied"),
                                          EX_CANNOT_EXECUTE)])
def test_exec_failures_have_their_own_codes(error, code, capsys):
    assert run_main([], {}, RecordingExec(error)) == code
    assert "HINT:" in capsys.readouterr().err


@pytest.mark.parametrize("argv, environ, named", [
    (["--", ""], {}, "the command after -- is empty"),
    (["--dry-run", "--", " "], {}, "the command after -- is empty"),
    ([], {"LAUNCHER_TRAINER": "''"}, "LAUNCHER_TRAINER / --trainer is empty"),
    ([], {"LAUNCHER_TRAINER": "python 'unclosed"}, "LAUNCHER_TRAINER / --trainer is not a valid"),
    (["--trainer="], {}, "--trainer is empty"),
    (["--trainer", " ", "--dry-run"], {}, "--trainer is empty"),
])
def test_an_empty_or_broken_trainer_command_is_a_usage_error(argv, environ, named, capsys):
    environ = dict(environ, PJRT_DEVICE="CPU")
    assert run_main(argv, environ) == EX_USAGE
    error, hint = capsys.readouterr().err.splitlines()[-2:]
    assert named in error and hint.startswith("launcher: HINT: ")


@pytest.mark.parametrize("argv, environ, named", [
    (["--init=tini"], {}, "--init='tini' is not an init mode"),
    ([], {"LAUNCHER_INIT": "always"}, "LAUNCHER_INIT='always' is not an init mode"),
])
def test_an_unknown_init_mode_is_a_usage_error(argv, environ, named, capsys):
    assert run_main(argv, dict(environ, PJRT_DEVICE="CPU")) == EX_USAGE
    error, hint = capsys.readouterr().err.splitlines()[-2:]
    assert named in error and hint == "launcher: HINT: use one of: group, child, exec"


def test_a_nul_character_in_an_option_is_a_usage_error(capsys):
    # Not a real argv (exec cannot pass one), but main() is also called in-process.
    assert run_main(["--host-root=\0"], {"PJRT_DEVICE": "CPU"}) == EX_USAGE
    error, hint = capsys.readouterr().err.splitlines()[-2:]
    assert "--host-root contains a NUL" in error and hint.startswith("launcher: HINT: ")


def test_pjrt_with_a_tpu_node_fails_before_any_waiting(capsys):
    environ = {"TPU_CONFIG": SEED_TPU_CONFIG, "TF_CONFIG": SEED_TF_CONFIG}
    assert run_main([], environ) == EX_CONFIG
    err = capsys.readouterr().err
    assert "PJRT" in err and "gcr.io/tpu-pytorch/xla:r1.11_3.7" in err
    assert "tensorflow" not in sys.modules  # failed before the resolver was even imported


def test_secrets_never_reach_the_output(capsys):
    environ = {"WANDB_API_KEY": "s3cr3t-env", "PJRT_DEVICE": "CPU",
               "AWS_SECRET_ACCESS_KEY": "s3cr3t-aws"}
    run_main(["--dry-run", "--api_token=s3cr3t-arg", "--password", "s3cr3t-next"], environ)
    captured = capsys.readouterr()
    assert "s3cr3t" not in captured.out + captured.err


_env_values = st.one_of(st.text(max_size=30), st.sampled_from(
    [SEED_TPU_CONFIG, SEED_TF_CONFIG, "{}", "null", '{"job": "x"}', '{"task": {"index": "1"}}']))


@settings(max_examples=examples(300), deadline=None)
@given(st.fixed_dictionaries({}, optional={
    name: _env_values for name in ("TPU_CONFIG", "TF_CONFIG", "CLUSTER_SPEC", "PJRT_DEVICE",
                                   "XRT_TPU_CONFIG", "TPU_IP_ADDRESS")}))
def test_fuzz_main_never_tracebacks(environ):
    """Whatever the platform passes, main() answers 0 or the config code with clean lines."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = main(["--dry-run", "--xla-runtime=pjrt", "--host-root=/nonexistent"], environ)
    lines = err.getvalue().splitlines()
    assert code in (0, EX_CONFIG), lines
    assert all(line.startswith("launcher: ") for line in lines)
    if code == EX_CONFIG:
        assert len(lines) == 2 and lines[1].startswith("launcher: HINT: ")
        named = [name for name in environ if name in lines[0]]
        assert named, lines[0]
    assert "Traceback" not in err.getvalue()


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_is_printed_and_main_returns_0_without_starting_anything(flag, capsys):
    execvpe = RecordingExec()
    assert main([flag, "--lr=0.1"], {}, execvpe) == 0
    assert "--xla-runtime" in capsys.readouterr().out and execvpe.calls == []


def test_runtime_variables_set_blank_are_unset_for_the_trainer_and_kept_ones_normalised(capsys):
    execvpe = RecordingExec()
    environ = {"PJRT_DEVICE": " cpu ", "XRT_TPU_CONFIG": " ", "TPU_IP_ADDRESS": ""}
    assert main(["--xla-runtime=pjrt"], environ, execvpe) == 0
    [(_, _, env)] = execvpe.calls
    assert env["PJRT_DEVICE"] == "CPU"
    assert "XRT_TPU_CONFIG" not in env and "TPU_IP_ADDRESS" not in env
    assert main(["--dry-run", "--xla-runtime=pjrt"], environ, RecordingExec()) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["unset XRT_TPU_CONFIG", "unset TPU_IP_ADDRESS", "export PJRT_DEVICE=CPU"]


class MaskRecordingExec(RecordingExec):
    """Also records which stop signals were blocked at the moment of the exec."""

    def __call__(self, file, args, env):
        import signal

        self.blocked = signal.pthread_sigmask(signal.SIG_BLOCK, []) & {signal.SIGTERM,
                                                                       signal.SIGINT}
        super().__call__(file, args, env)


@pytest.mark.parametrize("argv, held", [
    ([], True),  # the default trainer: python -m trainer.mnist
    (["--trainer=python -m trainer.imagenet"], True),
    (["--", "/bin/sleep", "1"], False),  # a command of the user's would keep them blocked
])
def test_stop_signals_are_blocked_across_the_exec_of_our_trainers_only(argv, held):
    import signal

    execvpe = MaskRecordingExec()
    assert main(argv, {"PJRT_DEVICE": "CPU"}, execvpe) == 0
    assert execvpe.blocked == ({signal.SIGTERM, signal.SIGINT} if held else set())
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == set()  # unblocked afterwards


@pytest.mark.parametrize("argv", [
    ["python", "train.py", "--steps=10"],
    ["--dry-run", "./train.sh"],
    ["--trainer=python -m trainer.imagenet", "train.py"],
])
def test_a_forgotten_double_dash_is_refused_naming_the_command_with_it(argv, capsys):
    """It ran the MNIST trainer with the user's arguments (``Unknown command line flag
    'steps'``); the launcher's own line showed what happened, last."""
    execvpe = RecordingExec()
    assert run_main(argv, {}, execvpe) == EX_USAGE and execvpe.calls == []
    error, hint = capsys.readouterr().err.splitlines()
    first = next(arg for arg in argv if not arg.startswith("-"))
    assert error.startswith("launcher: UsageError: {!r} is not a flag of the trainer".format(
        first)) and error.endswith("a command of your own goes after --")
    assert hint.startswith("launcher: HINT: python -m launcher -- {}".format(
        " ".join(argv[argv.index(first):])))


def test_a_script_of_your_own_still_takes_words_and_so_does_the_command_after_double_dash():
    execvpe = RecordingExec()
    assert run_main(["--trainer=python my.py", "data.csv"], {}, execvpe) == 0
    assert execvpe.calls[0][1][-2:] == ["my.py", "data.csv"]
    assert run_main(["--", "python", "train.py"], {}, execvpe) == 0
