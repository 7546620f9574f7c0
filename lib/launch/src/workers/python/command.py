
import os
import sys


def _command(argv, prefix):
    # After the interpreter and its options: -m MODULE, or the script (a file, a directory or a
    # zip file with a __main__.py); sys.argv as Python sets it before running either.
    rest = argv[prefix:]
    if rest[0] == "-m":
        return "module", rest[1], [rest[0]] + rest[2:]
    return "script", rest[0], rest


def _archive(path):
    try:
        with open(path, "rb") as f:
            return os.path.isdir(path) or f.read(4) == b"PK\x03\x04"
    except OSError:
        return os.path.isdir(path)


def _set_path0(kind, target):
    # What Python puts first on sys.path for the command: nothing in safe-path or isolated mode.
    if getattr(sys.flags, "safe_path", False) or sys.flags.isolated:
        return
    if kind == "module":
        sys.path[0] = os.getcwd()
    elif _archive(target):
        sys.path[0] = os.path.join(os.getcwd(), target)
    else:
        sys.path[0] = os.path.dirname(os.path.realpath(target))


def _library(name):
    # A module of Python's library, imported with the first entry of sys.path (the script's
    # directory, or the current one under -c) out of the way: a json.py there is the user's.
    module = sys.modules.get(name)
    if module is None:
        first, sys.path[:1] = sys.path[:1], []
        try:
            module = __import__(name)
        finally:
            sys.path[:0] = first
    return module


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


