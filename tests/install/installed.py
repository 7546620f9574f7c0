"""What the install tests share: the option names of `trainrun --help`, the rendered man page,
and what the bash completion offers."""
import os
import re
import subprocess


def help_option_names(trainrun):
    """Every option spelling of --help-all ("-r", "--redirects", "--nproc-per-node"), with the
    "--a_b" spelling it says each "--a-b" also has."""
    out = subprocess.run([trainrun, "--help-all"], capture_output=True, text=True,
                         check=True).stdout
    names = set()
    for line in out.splitlines():
        # An option's line: its names at two spaces' indent, its description below at six.
        m = re.match(r"^  (-[^\s,]+)(?:, (--[^\s,]+))?", line)
        if not m:
            continue
        for name in m.groups():
            if name:
                names.add(name)
                if name.startswith("--"):
                    names.add("--" + name[2:].replace("-", "_"))
    return names


def render_man(page):
    """The page as `man -l` prints it, formatting removed."""
    env = dict(os.environ, MANWIDTH="200", LC_ALL="C.UTF-8", MAN_KEEP_FORMATTING="")
    r = subprocess.run(["man", "-l", "-P", "cat", page], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return re.sub(r".\x08", "", r.stdout)


def complete(completion_file, *words):
    """What _trainrun offers for the command line `trainrun WORDS...` (the last word is the one
    being completed)."""
    script = ('source "$1"; shift; COMP_WORDS=(trainrun "$@"); COMP_CWORD=$#; _trainrun; '
              'printf "%s\\n" "${COMPREPLY[@]}"')
    r = subprocess.run(["bash", "-c", script, "complete", completion_file, *words],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [w for w in r.stdout.splitlines() if w]
