"""docs/install.md's one CMake configuration of the runtime against the torch that pip installed:
run as the document gives it (in a build directory of the test's own), with that environment's
`python` first on PATH; it must find pip's LibTorch — its CMake files and its libraries — and
never a system LibTorch (Debian's libtorch-dev is installed beside it on the test machines).
Building and installing what it configured is what build-pypi/ and runtime_install_find_package
already do."""
import os
import re
import subprocess

SOURCE = os.environ.get("TRAINRUN_SOURCE_DIR", "")
PYTHON = os.environ.get("TRAINRUN_PYTHON", "")
HEADING = "### C++ training programs: the runtime against pip's torch"


def configuration_commands():
    """The document's block, up to the build: the configuration it describes."""
    with open(os.path.join(SOURCE, "docs", "install.md")) as f:
        text = f.read()
    assert HEADING in text, f"docs/install.md: the section {HEADING!r} is gone"
    m = re.search(r"```sh\n(.*?)```", text[text.index(HEADING):], re.S)
    assert m, "docs/install.md: the section has no sh block"
    block = m.group(1)
    assert "cmake --build build-runtime" in block, block
    return block[:block.index("cmake --build build-runtime")]


def test_the_documented_configuration_finds_pips_libtorch(tmp_path):
    torch_dir = subprocess.run([PYTHON, "-c", "import os, torch; print(os.path.dirname("
                                "torch.__file__))"], capture_output=True, text=True,
                               check=True).stdout.strip()
    script = configuration_commands().replace("build-runtime", str(tmp_path / "build"))
    env = dict(os.environ, PATH=os.path.dirname(PYTHON) + os.pathsep + os.environ["PATH"])
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=SOURCE, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    cache = dict(line.split("=", 1) for line in
                 (tmp_path / "build" / "CMakeCache.txt").read_text().splitlines()
                 if "=" in line and not line.startswith(("#", "//")))
    for key in ("Torch_DIR:PATH", "TORCH_LIBRARY:FILEPATH", "c10_LIBRARY:FILEPATH"):
        assert key in cache, key
        assert os.path.realpath(cache[key]).startswith(os.path.realpath(torch_dir) + os.sep), \
            f"{key}={cache[key]} is not pip's torch in {torch_dir}"
