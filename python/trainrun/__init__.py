"""trainrun, a drop-in replacement for torchrun.

The wheel installs the ``trainrun`` executable itself in the environment's ``bin/``;
``python -m trainrun ARGS`` runs it where ``bin/`` is not on PATH.
"""

import os
import sysconfig

__all__ = ["executable", "__version__"]


def _version():
    try:
        from importlib.metadata import version

        return version("trainrun")
    except Exception:  # a source checkout that was never installed
        return "unknown"


__version__ = _version()


def executable():
    """The path of the installed ``trainrun`` binary (it may be missing if the install is broken)."""
    # The wheel's RECORD says where pip put it, whatever the scheme (venv, --user, --prefix).
    try:
        from importlib.metadata import PackageNotFoundError, files

        for f in files("trainrun") or ():
            if f.name == "trainrun" and f.parent.name == "bin":
                return os.path.normpath(str(f.locate()))
    except (ImportError, PackageNotFoundError):
        pass
    return os.path.join(sysconfig.get_path("scripts"), "trainrun")
