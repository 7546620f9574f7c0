"""python -m trainrun ARGS: runs the installed binary in this process's place."""

import os
import sys

from . import executable


def main():
    path = executable()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        sys.stderr.write(
            f"trainrun: the trainrun binary {path} is missing or not executable; "
            "reinstall it with `pip install --force-reinstall trainrun`\n"
        )
        sys.exit(127)
    sys.stdout.flush()
    try:
        os.execv(path, [path] + sys.argv[1:])
    except OSError as e:
        # Found but not runnable here (another architecture, a damaged file): 126, as a shell's.
        sys.stderr.write(f"trainrun: cannot run the trainrun binary {path}: {e.strerror}; "
                         "reinstall it with `pip install --force-reinstall trainrun`\n")
        sys.exit(126)


if __name__ == "__main__":
    main()
