"""scripts/class-sizes.py: a class over the limit fails unless the allow-list says why; a line of
the allow-list for a class no longer over it, or without a reason, fails too."""
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "class-sizes.py")


def sizes(tmp_path, allow=None):
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    body = "\n".join(f"  int f{i}() {{ return {i}; }}" for i in range(40))
    (src / "big.hpp").write_text(f"namespace demo {{\nclass Big {{\n public:\n{body}\n}};\n}}\n")
    (src / "small.hpp").write_text("namespace demo {\nclass Small {\n  int x;\n};\n}\n")
    args = [sys.executable, SCRIPT, "--over", "20", str(src)]
    if allow is not None:
        (tmp_path / "allow").write_text(allow)
        args[4:4] = ["--allow", str(tmp_path / "allow")]
    return subprocess.run(args, capture_output=True, text=True)


def test_a_class_over_the_limit_fails_and_says_what_to_do(tmp_path):
    r = sizes(tmp_path)
    assert r.returncode == 1
    assert "demo::Big" in r.stdout and "Small" not in r.stdout
    assert "split it by responsibility" in r.stderr


def test_a_class_the_allow_list_explains_passes(tmp_path):
    r = sizes(tmp_path, "# why\ndemo::Big  one table of forty accessors\n")
    assert r.returncode == 0, r.stderr
    assert "allowed: one table of forty accessors" in r.stdout


def test_a_stale_or_unexplained_allow_line_fails(tmp_path):
    r = sizes(tmp_path, "demo::Big  a reason\ndemo::Small  was big once\n")
    assert r.returncode == 1
    assert "demo::Small is in" in r.stderr and "drop its line" in r.stderr
    r = sizes(tmp_path, "demo::Big\n")
    assert r.returncode == 1
    assert "needs a reason" in r.stderr
