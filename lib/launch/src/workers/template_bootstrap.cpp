#include "template_bootstrap.hpp"

#include <string>

namespace trainrun::launch {

// Read from the standard input (kTemplateLoader) before anything else comes there: a worker
// forked from the template shows its command line in ps, not this program.
// argv[1]: the modules, comma-separated; argv[2]: how many entries of a worker's argv are the
// interpreter and its options; argv[3]: the job marker's name; then local rank 0's command (-m
// MODULE or the script, and its arguments). Standard input: the Unix socket to the agent.
//
// Replies to the agent: a tag, a little-endian 32-bit length and that many bytes. R: ready (the
// imports are done, or one failed: every worker then raises its error), with a line to say when
// it is not empty (a module started a thread: the workers import it and the rest themselves). P: a
// worker's pid. U: the template cannot fork safely, the line to say. F: the fork failed, its errno.
// A request: a little-endian 32-bit length (sent with the descriptors), then six lists, each a
// count and its items (a length and the bytes): argv, environment, working directory (none or
// one), settings (session 2 / group 1 / neither 0, death signal, descriptor limit or -1, each
// standard stream's kind: 0 the next descriptor passed, 1 /dev/null, 2 closed; whether a
// cgroup's directory descriptor follows; whether the diagnosis channel follows), the signals set
// back to default, the CPUs. Descriptors: the streams of kind 0, the cgroup's directory, the
// diagnosis channel, and last the exec report's write end.
const char* const kTemplateLoader =
    "import sys; exec(compile(sys.stdin.buffer.read(int(sys.argv.pop(1))), '<trainrun --preload>', "
    "'exec'))";

// A worker started the ordinary way runs diagnosis_bootstrap() before its command: `python
// OPTIONS -c kDiagnosisLoader FD SIZE COMMAND...` reads SIZE bytes of it from FD, its diagnosis
// channel (workers/diagnosis.hpp), where the agent wrote them.
// It imports nothing (os is loaded at every interpreter's start): with -c the current directory
// comes first on the path, where a socket.py of the user's would shadow the library's.
const char* const kDiagnosisLoader =
    "import sys, os; _f, _n, _b = int(sys.argv[1]), int(sys.argv[2]), bytearray(); "
    "_r = lambda: os.read(_f, _n - len(_b)) or sys.exit('trainrun: the worker bootstrap did not "
    "arrive'); [_b.extend(_r()) for _ in iter(lambda: len(_b) < _n, False)]; "
    "exec(compile(bytes(_b), '<trainrun>', 'exec'))";

namespace {

// What both programs share: how Python's main finds the command, and runs it.
const char* const kCommand = R"py(
import os, sys



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


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


)py";

// The diagnosis channel's server: a thread of the worker's own.
const char* const kDiagnosis = R"py(def _returned(how, code):
    pass  # a worker without a diagnosis channel has no one to tell


def _serve_diagnosis(fd):
    # trainrun's diagnosis channel (workers/diagnosis.hpp): a thread that answers each request
    # from the agent on `fd` with this process's Python traceback of every thread and, once
    # torch.distributed is loaded, its flight recorder's entries: what a hang report needs,
    # without ptrace and without a change to the script. A request is a line, its id; the answer
    # one line, the id, a space and a JSON object (ASCII: json's escapes keep newlines out), so
    # that an answer the agent gave up waiting for is skipped by its id. It runs before the
    # script and imports only json (with the script's directory out of the path: a json.py there
    # is the user's, not ours) and the built-in _thread, not threading; it reads and writes the
    # descriptor with os alone.
    import _thread
    os.set_inheritable(fd, False)
    main = _thread.get_ident()
    json = sys.modules.get("json")
    if json is None:
        first, sys.path[:1] = sys.path[:1], []
        try:
            import json
        finally:
            sys.path[:0] = first

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
                errors.append("{}: {}".format(backend, e))
        if not dumps:
            return {"error": "; ".join(errors)}
        merged = dumps[0][1]
        used = [(b, d) for b, d in dumps if d.get("entries")]
        groups = memberships()
        if len(used) > 1:
            groups = ["{} ({})".format(g, b) for g in groups for b, _ in used]
            # Each backend numbers its collectives apart: the same group name (a default group
            # of cpu:gloo,cuda:nccl) is two groups here.
            merged = dict(used[0][1], entries=[])
            for backend, d in used:
                for entry in d.get("entries", []):
                    group = entry.get("process_group")
                    if isinstance(group, list) and group:
                        entry["process_group"] = ["{} ({})".format(group[0], backend)] + group[1:]
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
        with writing:
            while data:
                data = data[os.write(fd, data):]

    def answer(ident):
        reply = {}
        for key, what in (("threads", tracebacks), ("flight_recorder", recorder)):
            try:
                reply[key] = what()
            except Exception as e:
                reply[key + "_error"] = "{}: {}".format(type(e).__name__, e)
        send(ident + b" " + json.dumps(reply, default=str).encode() + b"\n")

    def returned(how, code):
        # The script is over (how: "returned", "exit" or "exception"; code: the exit status it
        # asks for): a notice, id 0, which the agent times the interpreter's exit from.
        try:
            send(b"0 " + json.dumps({"returned": how, "code": code}).encode() + b"\n")
        except OSError:
            pass

    global _returned
    _returned = returned

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


)py";

const char* const kTemplate = R"py(_BOOTSTRAP = "<trainrun --preload>"


def _spare(libc):
    # Before an import that may start a thread: a fork of the template as it is, which waits. If
    # the import starts one, the template hands it the agent's socket and a line to say (the
    # fork gets (0, line)) and waits for it, keeping the pid the agent knows; else it is
    # dismissed. Returns (its pid, the end to write to) in the template.
    readable, writable = os.pipe()
    pid = os.fork()
    if pid:
        os.close(readable)
        return pid, writable
    os.close(writable)
    libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL: it goes with the template
    line = b""
    while True:
        chunk = os.read(readable, 65536)
        if not chunk:
            break
        line += chunk
    if not line:
        os._exit(0)
    os.close(readable)
    return 0, line.decode()


def _new_thread():
    # The thread an import started: its name and target, or its name as the kernel has it.
    threading = sys.modules.get("threading")
    for thread in threading.enumerate() if threading else []:
        if thread is not threading.main_thread():
            target = getattr(thread, "_target", None)
            return "thread {!r} (target {})".format(thread.name, "{}.{}".format(
                getattr(target, "__module__", "?"), getattr(target, "__qualname__", "?"))
                if target else "none")
    for task in os.listdir("/proc/self/task"):
        if int(task) != os.getpid():
            with open("/proc/self/task/{}/comm".format(task)) as comm:
                return "thread {!r} (native)".format(comm.read().strip())
    return "a thread"


def _prepare():
    # trainrun's --preload template (workers/warm_start.cpp): imports the modules once, then forks
    # a worker for each request on its standard input, a Unix socket to the agent. Only a forked
    # worker returns from here: with what it runs.
    import array, fcntl, signal, socket, struct, time
    import ctypes, resource

    agent = os.getppid()
    modules = sys.argv[1].split(",")
    prefix = int(sys.argv[2])
    # The job's marker, for the watchdog: in this process's environment block (what
    # /proc/PID/environ shows, for every worker forked from it too), in no module's os.environ.
    os.environ.pop(sys.argv[3], None)
    control = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    libc = ctypes.CDLL(None, use_errno=True)
    # A fresh interpreter's dispositions (this one was started as a worker is): each worker gets
    # them back, whatever a module changed.
    fresh = {}
    for number in signal.valid_signals():
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            fresh[number] = signal.getsignal(number)

    def threads():
        return len(os.listdir("/proc/self/task"))

    def unsafe():
        # A thread that ends by itself soon after an import is given a second to end.
        for _ in range(100):
            if threads() == 1:
                break
            time.sleep(0.01)
        else:
            why = "{} threads in the template".format(threads())
            if os.environ.get("OMP_NUM_THREADS") != "1":
                # A torch built with OpenMP starts its pool at import (on a 16-core GPU node: 16
                # threads) unless OMP_NUM_THREADS=1, which trainrun sets with more than one worker.
                why += "; OMP_NUM_THREADS is {}: an OpenMP pool may be among them".format(
                    os.environ.get("OMP_NUM_THREADS", "unset"))
            return "started a thread ({})".format(why)
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_initialized():
                return "initialised CUDA in the template"
        except Exception:
            pass
        # A CUDA build of torch loads the driver at import (cuBLAS does) without initialising
        # it, which is safe to fork: cuDeviceGetCount answers CUDA_ERROR_NOT_INITIALIZED (3)
        # until cuInit has run, and nothing else.
        with open("/proc/self/maps") as maps:
            drivers = {line.split()[-1] for line in maps if "/libcuda.so" in line}
        for path in drivers:
            try:
                count = ctypes.c_int(0)
                driver = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
                if driver.cuDeviceGetCount(ctypes.byref(count)) == 3:
                    continue
            except (OSError, AttributeError):
                pass
            return "initialised the CUDA driver ({}) in the template".format(os.path.basename(path))
        return None

    def load(name):
        # An import that fails is every worker's error to raise.
        try:
            __import__(name)
        except BaseException as e:
            if hasattr(e, "add_note"):
                e.add_note("(imported by trainrun --preload={})".format(",".join(modules)))
            return e
        return None

    # Imported as local rank 0's script would import them.
    kind, target, sys.argv = _command([sys.executable] * prefix + sys.argv[4:], prefix)
    _set_path0(kind, target)
    failed = culprit = None
    said, rest = "", []
    for index, name in enumerate(modules):
        spare = _spare(libc) if index and culprit is None else None
        if spare and spare[0] == 0:
            # The template as it was before `name`, which started a thread in the one before.
            said, rest = spare[1], modules[index:]
            break
        failed = load(name)
        problem = None if failed or culprit else unsafe()
        if spare and problem:
            what = "started " + _new_thread() if problem.startswith("started a thread") else problem
            os.write(spare[1], "--preload: {} {}; workers are forked from the template as it was "
                     "before it ({}) and import {} themselves".format(
                         name, what, ",".join(modules[:index]), ",".join(modules[index:])).encode())
            os.close(spare[1])
            control.close()
            os.waitpid(spare[0], 0)
            os._exit(0)
        if spare:
            os.close(spare[1])
            os.waitpid(spare[0], 0)
        if failed:
            break
        if problem:
            culprit = name

    def send(tag, text=""):
        data = text.encode()
        control.sendall(tag + struct.pack("<I", len(data)) + data)

    def exactly(size, fds=None):
        data = b""
        while len(data) < size:
            if fds is None:
                chunk = control.recv(size - len(data))
            else:
                chunk, ancillary, _, _ = control.recvmsg(size - len(data), socket.CMSG_SPACE(64))
                for level, what, payload in ancillary:
                    if level == socket.SOL_SOCKET and what == socket.SCM_RIGHTS:
                        fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
            if not chunk:
                os._exit(0)  # the agent is done with us
            data += chunk
        return data

    def request():
        fds = array.array("i")
        (size,) = struct.unpack("<I", exactly(4, fds))
        body = memoryview(exactly(size))
        fields, at = [], 0
        while at < len(body):
            (count,) = struct.unpack_from("<I", body, at)
            at += 4
            items = []
            for _ in range(count):
                (length,) = struct.unpack_from("<I", body, at)
                items.append(bytes(body[at + 4 : at + 4 + length]))
                at += 4 + length
            fields.append(items)
        return fields, list(fds)

    _flush()
    send(b"R", said)
    while True:
        fields, fds = request()
        problem = unsafe()
        if problem:
            for fd in fds:
                os.close(fd)
            who = culprit or "--preload={}".format(",".join(modules))
            send(b"U", "--preload: {} {}; forking it could hang or break a worker, so workers "
                 "start the ordinary way".format(who, problem))
            continue
        _flush()
        readable, writable = os.pipe()
        try:
            middle = os.fork()
        except OSError as e:
            for fd in fds + [readable, writable]:
                os.close(fd)
            send(b"F", str(e.errno))
            continue
        if middle == 0:
            # Forks the worker and exits at once: the worker is re-parented to the agent (a child
            # subreaper), which reaps it by its pid as it reaps the workers it spawns.
            try:
                os.close(readable)
                middle = os.getpid()
                worker = os.fork()
                if worker != 0:
                    os.write(writable, struct.pack("<i", worker))
            except BaseException:
                worker = -1
            if worker != 0:
                os._exit(0)
            os.close(writable)
            break
        os.close(writable)
        for fd in fds:
            os.close(fd)
        reply = b""
        while len(reply) < 4:
            chunk = os.read(readable, 4 - len(reply))
            if not chunk:
                break
            reply += chunk
        os.close(readable)
        os.waitpid(middle, 0)
        if len(reply) == 4:
            send(b"P", str(struct.unpack("<i", reply)[0]))
        else:
            send(b"F", "11")  # EAGAIN: the worker could not be forked

    # The worker: the SpawnRequest carried out as lib/base's spawn does between fork and exec.
    control.close()
    fds = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3) if fd <= 2 else fd for fd in fds]
    argv, env, cwd, settings, default_signals, cpus = fields
    group, death_signal, limit, *streams, cgroup, diagnosis = [int(x) for x in settings]
    report = fds[-1]
    # Once the intermediate has exited, this process is the agent's child.
    while os.getppid() == middle:
        time.sleep(0.0001)
    if group == 2:
        os.setsid()
    elif group == 1:
        os.setpgid(0, 0)
    if cpus:
        os.sched_setaffinity(0, [int(x) for x in cpus])
    sources, at = [], 0
    for stream in streams:
        sources.append(fds[at] if stream == 0 else None)
        at += stream == 0
    if cgroup:
        try:
            procs = os.open("cgroup.procs", os.O_WRONLY | os.O_CLOEXEC, dir_fd=fds[at])
            os.write(procs, b"0")
            os.close(procs)
        except OSError:
            pass
    if limit >= 0:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE,
                               (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        except (OSError, ValueError):
            pass
    if death_signal:
        libc.prctl(1, death_signal, 0, 0, 0)  # PR_SET_PDEATHSIG
    libc.prctl(0x59616D61, agent, 0, 0, 0)  # PR_SET_PTRACER: the agent's stack tools may attach
    if os.getppid() != agent:
        os._exit(127)  # the agent died before the death signal was set
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    # default_signals were set back before the template's own start, which `fresh` records.
    for number, handler in fresh.items():
        if handler is not None and signal.getsignal(number) is not handler:
            signal.signal(number, handler)
    try:
        for i, stream in enumerate(streams):
            if stream == 1:
                sources[i] = os.open(os.devnull, os.O_RDONLY if i == 0 else os.O_WRONLY)
        for i, stream in enumerate(streams):
            if sources[i] is not None:
                os.dup2(sources[i], i)
            elif stream == 2:
                try:
                    os.close(i)
                except OSError:
                    pass
        channel = fds[at + cgroup] if diagnosis else None
        for fd in set(fds[:-1] + [s for s in sources if s is not None]):
            if fd > 2 and fd != channel:
                os.close(fd)
        if cwd:
            os.chdir(cwd[0])
    except OSError as e:
        os.write(report, struct.pack("i", e.errno))
        os._exit(127)
    os.environ.clear()
    for entry in env:
        name, _, value = entry.partition(b"=")
        os.environb[name] = value
    decoded = [os.fsdecode(x) for x in argv]
    if hasattr(sys, "orig_argv"):
        sys.orig_argv = decoded
    # numpy seeds its global random state when imported: each worker seeds its own, as each
    # fresh interpreter would (Python's random reseeds itself after a fork).
    if "numpy.random" in sys.modules:
        try:
            sys.modules["numpy.random"].seed()
        except Exception:
            pass
    os.close(report)
    if channel is not None:
        _serve_diagnosis(channel)
    for name in rest:
        failed = failed or load(name)
    return failed, _command(decoded, prefix)


)py";

const char* const kPlain = R"py(_BOOTSTRAP = "<trainrun>"


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


)py";

const char* const kRun = R"py(def _run(start):
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
except SystemExit as _exit:
    # Python's own rule: None is 0, an integer is itself, anything else is printed and is 1.
    _code = _exit.code
    _returned("exit", (0 if _code is None else _code if isinstance(_code, int) else 1) & 0xFF)
    raise
except BaseException as _error:
    # Python's main shows no frame of its own in a traceback: neither does the template.
    _tb = _error.__traceback__
    while _tb is not None and _tb.tb_frame.f_code.co_filename in ("<string>", _BOOTSTRAP):
        _tb = _tb.tb_next
    _error.__traceback__ = _tb
    del _tb, _start
    if isinstance(_error, KeyboardInterrupt):
        _returned("exception", 128 + 2)
        raise  # Python's main ends the process by SIGINT
    # What Python's main does with an uncaught exception: the hook prints it, the exit code is 1.
    sys.last_type, sys.last_value, sys.last_traceback = type(_error), _error, _error.__traceback__
    sys.excepthook(type(_error), _error, _error.__traceback__)
    _returned("exception", 1)
    sys.exit(1)
else:
    _returned("returned", 0)
)py";

}  // namespace

const std::string& template_bootstrap() {
  static const std::string program = std::string(kCommand) + kDiagnosis + kTemplate + kRun;
  return program;
}

const std::string& diagnosis_bootstrap() {
  static const std::string program = std::string(kCommand) + kDiagnosis + kPlain + kRun;
  return program;
}

}  // namespace trainrun::launch
