_BOOTSTRAP = "<trainrun>"


def _prepare():
    # A worker started the ordinary way (workers/diagnosis.cpp): `python OPTIONS -c LOADER FD
    # SIZE COMMAND...`, FD the diagnosis channel this program came on. The command runs as
    # `python OPTIONS COMMAND...` would run it.
    fd = int(sys.argv[1])
    at = sys.orig_argv.index("-c") if hasattr(sys, "orig_argv") else -1
    if at >= 0:
        sys.orig_argv = sys.orig_argv[:at] + sys.orig_argv[at + 4 :]
    kind, target, sys.argv = _command(sys.argv[3:], 0)
    _serve_diagnosis(fd)
    return None, (kind, target, sys.argv)


