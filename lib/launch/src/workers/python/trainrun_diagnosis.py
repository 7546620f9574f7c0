import _thread
import json
import os
import sys


def serve(fd):
    # trainrun's diagnosis channel (workers/diagnosis.hpp): a thread that answers each request
    # from the agent on `fd` with this process's Python traceback of every thread and, once
    # torch.distributed is loaded, its flight recorder's entries: what a hang report needs,
    # without ptrace and without a change to the script. A request is a line, its id; the answer
    # one line, the id, a space and a JSON object (ASCII: json's escapes keep newlines out), so
    # that an answer the agent gave up waiting for is skipped by its id. It starts before the
    # script (sitecustomize.py), is started by the built-in _thread, not threading (whose
    # enumerate() lists the script's threads alone), and reads and writes the descriptor with os.
    os.set_inheritable(fd, False)
    main = _thread.get_ident()

    def tracebacks():
        threading = sys.modules.get("threading")
        names = {t.ident: t.name for t in threading.enumerate()} if threading else {}
        me = _thread.get_ident()
        threads = []
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            frames = []
            while frame is not None:
                frames.append([frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name])
                frame = frame.f_back
            threads.append({"id": ident, "name": names.get(ident, ""), "main": ident == main,
                            "frames": frames})
        threads.sort(key=lambda t: not t["main"])
        return threads

    def recorder():
        if "torch.distributed" not in sys.modules:
            return None
        from torch._C import _distributed_c10d as c10d
        dump = getattr(c10d, "_dump_fr_trace_json", None)
        nccl = getattr(c10d, "_dump_nccl_trace_json", None)
        calls = [(b, lambda b=b: dump(includeCollectives=True, onlyActive=False, backend=b))
                 for b in ("gloo", "nccl")] if dump else []
        if not calls and nccl:  # a torch whose recorder is NCCL's alone
            calls = [("nccl", lambda: nccl(includeCollectives=True, onlyActive=False))]
        if not calls:
            return {"error": "this torch has no flight recorder to read"}
        dumps, errors = [], []
        for backend, call in calls:
            try:
                dumps.append((backend, json.loads(call())))
            except TypeError:  # a torch whose dump takes no backend: its one recorder
                try:
                    dumps = [("", json.loads(dump(True, False)))]
                except Exception as e:
                    errors.append(str(e))
                break
            except Exception as e:
                errors.append(f"{backend}: {e}")
        if not dumps:
            return {"error": "; ".join(errors)}
        merged = dumps[0][1]
        used = [(b, d) for b, d in dumps if d.get("entries")]
        groups = memberships()
        if len(used) > 1:
            groups = [f"{g} ({b})" for g in groups for b, _ in used]
            # Each backend numbers its collectives apart: the same group name (a default group
            # of cpu:gloo,cuda:nccl) is two groups here.
            merged = dict(used[0][1], entries=[])
            for backend, d in used:
                for entry in d.get("entries", []):
                    group = entry.get("process_group")
                    if isinstance(group, list) and group:
                        entry["process_group"] = [f"{group[0]} ({backend})"] + group[1:]
                    merged["entries"].append(entry)
        merged["trainrun_groups"] = groups
        return merged

    def memberships():
        # The names of the process groups this rank belongs to, as its recorder names them: a
        # member that never called a group's collective is then told from a rank outside it
        # (Gloo's dump has no group's ranks).
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        try:
            names = c10d._world.pg_names
            return sorted({names[pg] for pg in list(c10d._world.pg_group_ranks) if pg in names})
        except Exception:
            return []

    writing = _thread.allocate_lock()

    def send(data):
        # The main thread's notice and this thread's answers: each line whole.
        with writing:
            while data:
                data = data[os.write(fd, data):]

    def answer(ident):
        reply = {}
        for key, what in (("threads", tracebacks), ("flight_recorder", recorder)):
            try:
                reply[key] = what()
            except Exception as e:
                reply[key + "_error"] = f"{type(e).__name__}: {e}"
        send(ident + b" " + json.dumps(reply, default=str).encode() + b"\n")

    def _trainrun_diagnosis():
        pending = b""
        while True:
            try:
                chunk = os.read(fd, 256)
                if not chunk:
                    return
                pending += chunk
                while b"\n" in pending:
                    line, _, pending = pending.partition(b"\n")
                    answer(line.strip()[:32])
                pending = pending[-64:]
            except OSError:
                return

    _thread.start_new_thread(_trainrun_diagnosis, ())
    _tell_script_end(send, main)


def _tell_script_end(send, main):
    # The script's end, told once as a notice (id 0) that the agent times the interpreter's exit
    # from (workers/diagnosis.hpp, ScriptReturn): "returned", "exit" with the code SystemExit
    # asks for, or "exception" (1; KeyboardInterrupt 128+2, which ends the process by SIGINT).
    # Python's main runs the script after this bootstrap, so nothing of ours wraps it: an uncaught
    # exception is seen by sys.excepthook (ours chained in front of the one in place, or where the
    # script replaced it, sys.last_value, which Python sets before calling the hook), a SystemExit
    # by sys.exit, exit() and quit(). A SystemExit the script raises itself is taken for a return.
    import threading

    ended = ["returned", 0]
    hook = sys.excepthook

    def excepthook(kind, value, traceback):
        if _thread.get_ident() == main:
            ended[:] = ["exception", 128 + 2 if issubclass(kind, KeyboardInterrupt) else 1]
        return hook(kind, value, traceback)

    def asked(code):
        # Python's own rule: None is 0, an integer is itself, anything else is printed and is 1.
        if _thread.get_ident() == main:
            code = 0 if code is None else code if isinstance(code, int) else 1
            ended[:] = ["exit", code & 0xFF]

    def exiting(exit):
        def wrapper(*args):
            asked(args[0] if args else None)
            return exit(*args)

        return wrapper

    sys.excepthook = excepthook
    sys.exit = exiting(sys.exit)
    builtins = sys.modules["builtins"]
    for name in ("exit", "quit"):
        if hasattr(builtins, name):
            setattr(builtins, name, exiting(getattr(builtins, name)))

    me = os.getpid()

    def over():
        # A process the script forked inherits the channel and this hook: its end is not the
        # script's.
        if os.getpid() != me:
            return
        if sys.excepthook is not excepthook:
            error = getattr(sys, "last_value", None)
            if error is not None:
                ended[:] = ["exception", 128 + 2 if isinstance(error, KeyboardInterrupt) else 1]
        try:
            send(b"0 " + json.dumps({"returned": ended[0], "code": ended[1]}).encode() + b"\n")
        except OSError:
            pass

    # As the main thread finishes, before the threads that are not daemons are joined (3.9+; a
    # hook registered later, concurrent.futures' join of its pools, runs before it); Python 3.8
    # has only atexit, whose handlers run once those threads have ended, ours last.
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        import atexit

        register = atexit.register
    register(over)


