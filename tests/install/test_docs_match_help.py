"""The man page and the bash completion list every option of --help, with its help text: all
three come from one option table, so they cannot drift apart."""
import os
import re
import subprocess

from installed import complete, help_option_names, render_man

TRAINRUN = os.environ["TRAINRUN_BIN"]
MAN_PAGE = os.environ["TRAINRUN_MAN_PAGE"]
COMPLETION = os.environ["TRAINRUN_BASH_COMPLETION"]


def test_help_lists_the_options_this_test_expects():
    names = help_option_names(TRAINRUN)
    for name in ("--nproc-per-node", "--nproc_per_node", "-r", "--help", "--help-all",
                 "--version", "-q", "--verbose", "--log-timestamps", "--summary-file"):
        assert name in names


def test_every_help_option_is_in_the_man_page_with_its_help_text():
    text = render_man(MAN_PAGE)
    words = set(re.findall(r"(?<![\w-])-{1,2}[A-Za-z][\w-]*", text))
    missing = help_option_names(TRAINRUN) - words
    assert not missing, f"options of --help missing from trainrun.1: {sorted(missing)}"
    flat = " ".join(text.split())
    for phrase in ("Workers per node: an integer, cpu, gpu, xpu or auto",
                   "Only trainrun's error lines", "[env PET_NPROC_PER_NODE]"):
        assert phrase in flat


def test_every_help_option_is_completed():
    names = sorted(help_option_names(TRAINRUN))
    for name in names:
        assert name in complete(COMPLETION, name), name
    # "--" alone is offered the dashed spellings; each underscored one completes from itself.
    assert set(complete(COMPLETION, "--")) >= {n for n in names
                                               if n.startswith("--") and "_" not in n}


def test_completion_offers_one_spelling_of_each_option():
    # The dashed one, so that a prefix names one option; torchrun's underscored one to a word
    # that has an underscore.
    assert complete(COMPLETION, "--npr") == ["--nproc-per-node"]
    assert complete(COMPLETION, "--nproc_") == ["--nproc_per_node"]
    assert complete(COMPLETION, "--max-r") == ["--max-restarts"]
    assert not [n for n in complete(COMPLETION, "--") if "_" in n]


def test_completion_leaves_the_entrypoints_arguments_alone():
    # After the entrypoint, options are the program's: bash's own file completion takes over.
    assert complete(COMPLETION, "--nnodes", "2", "train.py", "--nn") == []
    assert sorted(complete(COMPLETION, "--nnodes=2", "--no-")) == [
        "--no-diagnosis", "--no-preflight", "--no-python"]
    assert complete(COMPLETION, "--log-dir", "--") == []  # a value, not an option


def test_completion_offers_an_options_values():
    assert complete(COMPLETION, "--rdzv-backend", "") == ["static", "c10d", "etcd", "etcd-v2"]
    assert complete(COMPLETION, "--rdzv_backend", "e") == ["etcd", "etcd-v2"]
    # --tee=VALUE reaches the function split at "=", as bash splits it.
    assert complete(COMPLETION, "--tee", "=") == ["0", "1", "2", "3"]
    assert complete(COMPLETION, "-r", "=", "3") == ["3"]
    assert complete(COMPLETION, "--print-completion", "z") == ["zsh"]
    assert complete(COMPLETION, "--log-dir", "") == []  # a path: bash's file completion


def test_print_completion_is_the_installed_file():
    r = subprocess.run([TRAINRUN, "--print-completion", "bash"], capture_output=True, text=True)
    assert r.returncode == 0
    with open(COMPLETION) as f:
        assert f.read() == r.stdout
