import os
import sys


def command(argv, prefix):
    # After the interpreter and its options: -m MODULE, or the script (a file, a directory or a
    # zip file with a __main__.py); sys.argv as Python sets it before running either.
    rest = argv[prefix:]
    if rest[0] == "-m":
        return "module", rest[1], [rest[0]] + rest[2:]
    return "script", rest[0], rest


def path0(kind, target):
    # What Python puts first on sys.path for the command: nothing in safe-path or isolated mode.
    if getattr(sys.flags, "safe_path", False) or sys.flags.isolated:
        return None
    if kind == "module":
        return os.getcwd()
    if os.path.isdir(target) or _is_zip(target):
        return os.path.join(os.getcwd(), target)
    return os.path.dirname(os.path.realpath(target))


def _is_zip(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
