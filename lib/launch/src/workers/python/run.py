def _run(start):
    # As Python's main runs the command: in a fresh __main__ module.
    import types
    failed, (kind, target, argv) = start
    sys.argv = argv
    main = types.ModuleType("__main__")
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    _set_path0(kind, target)
    if failed is not None:
        raise failed
    import runpy
    if kind == "module":
        runpy._run_module_as_main(target, alter_argv=True)
        return
    if _archive(target):
        runpy._run_module_as_main("__main__", alter_argv=False)
        return
    from importlib.machinery import SourceFileLoader
    filename = target
    if sys.version_info >= (3, 9) and not os.path.isabs(target):
        filename = os.path.join(os.getcwd(), target)
    main.__file__ = filename
    main.__cached__ = None
    main.__loader__ = SourceFileLoader("__main__", filename)
    with open(target, "rb") as source:
        code = compile(source.read(), filename, "exec", dont_inherit=True)
    exec(code, main.__dict__)


_start = _prepare()
try:
    _run(_start)
except SystemExit:
    raise
except BaseException as _error:
    # Python's main shows no frame of its own in a traceback: neither does the template.
    _tb = _error.__traceback__
    while _tb is not None and _tb.tb_frame.f_code.co_filename in ("<string>", _BOOTSTRAP):
        _tb = _tb.tb_next
    _error.__traceback__ = _tb
    del _tb, _start
    if isinstance(_error, KeyboardInterrupt):
        raise  # Python's main ends the process by SIGINT
    # What Python's main does with an uncaught exception: the hook prints it, the exit code is 1.
    sys.last_type, sys.last_value, sys.last_traceback = type(_error), _error, _error.__traceback__
    sys.excepthook(type(_error), _error, _error.__traceback__)
    sys.exit(1)
