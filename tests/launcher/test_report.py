"""launcher.report: redaction and shell quoting."""

import shlex
import subprocess

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import examples
from launcher.report import (
    REDACTED,
    format_assignments,
    printable,
    redact_args,
    shell_exports,
    shell_word,
)


def test_secret_looking_names_are_redacted():
    text = format_assignments([("WANDB_API_KEY", "abc"), ("HF_TOKEN", "t"),
                               ("DB_PASSWORD", "p"), ("PJRT_DEVICE", "CPU")])
    assert "abc" not in text and "=t " not in text and "=p " not in text
    assert "PJRT_DEVICE=CPU" in text and text.count(REDACTED) == 3


def test_secret_args_are_redacted_in_both_spellings():
    assert redact_args(["--api_key=s3cr3t", "--token", "s3cr3t", "--lr=0.1", "pos"]) == [
        "--api_key=" + REDACTED, "--token", REDACTED, "--lr=0.1", "pos"]


@pytest.mark.parametrize("arg, shown", [
    ("--passphrase=hunter2", "--passphrase=" + REDACTED),
    ("--pwd=hunter2", "--pwd=" + REDACTED),
    ("--header=Authorization: Bearer hunter2", "--header=Authorization: " + REDACTED),
    ("Authorization: Basic aHVudGVyMg==", "Authorization: " + REDACTED),
    ("--header=X: Bearer hunter2", "--header=X: Bearer " + REDACTED),
    ("--data_url=https://ann:hunter2@host/x", "--data_url=https://ann:" + REDACTED + "@host/x"),
    ("https://ann:hunter2@host/x", "https://ann:" + REDACTED + "@host/x"),
    ("--data_dir=gs://bucket/path:with@odd", "--data_dir=gs://bucket/path:with@odd"),
    ("--lr=0.1", "--lr=0.1"),
    ("--note=a basic token of thanks", "--note=a basic token of thanks"),  # prose stays
])
def test_secrets_inside_values_are_redacted(arg, shown):
    assert redact_args([arg]) == [shown]


def test_exports_round_trip_through_a_shell():
    lines = shell_exports([("XRT_TPU_CONFIG", "tpu_worker;0;10.0.0.2:8470"), ("A", "it's")])
    assert shlex.split(lines[0]) == ["export", "XRT_TPU_CONFIG=tpu_worker;0;10.0.0.2:8470"]
    assert shlex.split(lines[1]) == ["export", "A=it's"]


@settings(max_examples=examples(200), deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
               max_size=12))
def test_shell_word_is_one_line_and_bash_reads_it_back(text):
    word = shell_word(text)
    assert "\n" not in word and "\r" not in word
    printed = subprocess.run(["bash", "-c", "printf %s " + word], capture_output=True,
                             check=True).stdout
    assert printed.decode("utf-8", "surrogateescape") == text


@settings(max_examples=examples(200), deadline=None)
@example("0\x1e0")  # a TPU_ACCELERATOR_TYPE of CI's property run: once two log lines
@given(st.text(max_size=12))
def test_printable_text_is_one_line_and_keeps_what_was_printable(text):
    shown = printable(text)
    assert len(("x" + shown + "x").splitlines()) == 1
    assert shown == text or not text.isprintable()
