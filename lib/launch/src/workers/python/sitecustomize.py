# trainrun's bootstrap of a Python worker and of the --preload template (workers/
# python_bootstrap.hpp). The agent puts this file's directory first on PYTHONPATH and says what to
# do in TRAINRUN_BOOTSTRAP; Python imports the module while it starts (the site module), before
# the script, which then runs as `python script.py` runs it: its command line, sys.argv,
# __main__ and every traceback are Python's own, with no frame of ours under the script's.
# What stays of us: the diagnosis channel's thread, json and threading in sys.modules, and the
# hooks that see the script's end (sys.excepthook, sys.exit, exit(), quit(): trainrun_diagnosis).


def _bootstrap():
    import json
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    settings = json.loads(os.environ.pop("TRAINRUN_BOOTSTRAP", None) or "{}")
    try:
        import trainrun_diagnosis

        if "template" in settings:
            import trainrun_template
    except BaseException:
        if "template" in settings:
            # A template whose bootstrap cannot be read (its directory removed as trainrun ended
            # while it started) must not go on to run the script as a worker nobody started.
            os._exit(1)
        raise

    # Out of the script's way: PYTHONPATH as the user set it (python_bootstrap.cpp; the children
    # a worker starts inherit it), this directory off sys.path, our modules out of sys.modules.
    mode = settings.get("pythonpath")
    if mode == "unset":
        os.environ.pop("PYTHONPATH", None)
    elif mode == "empty":
        os.environ["PYTHONPATH"] = ""
    elif mode == "after":
        os.environ["PYTHONPATH"] = os.environ["PYTHONPATH"].split(os.pathsep, 1)[1]
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    sys.path_importer_cache.pop(here, None)
    for name in [n for n in sys.modules if n.startswith("trainrun_")] + ["sitecustomize"]:
        del sys.modules[name]

    # The sitecustomize this one stands in front of (Debian's, or the user's on PYTHONPATH),
    # run before the template's imports as it runs before a script's. What it raises is raised
    # once ours is done, for the site module to print as it would.
    found, error = True, None
    try:
        import sitecustomize  # noqa: F401
    except ImportError as e:
        found = e.name != "sitecustomize"
        error = e if found else None
    except Exception as e:
        error = e
    if "template" in settings:
        # Returns only in a worker it forked, which then serves its own channel.
        trainrun_template.serve(settings["template"])
    elif settings.get("diagnosis") is not None:
        trainrun_diagnosis.serve(settings["diagnosis"])
    if error is not None:
        raise error
    return found


if not _bootstrap():
    # No sitecustomize of anyone else's: the site module takes this for "there is none" and
    # leaves none in sys.modules, as without us.
    raise ImportError("no sitecustomize", name="sitecustomize")
