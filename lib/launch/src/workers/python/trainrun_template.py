import array
import atexit
import ctypes
import fcntl
import os
import resource
import signal
import socket
import struct
import sys
import time

import trainrun_diagnosis
from trainrun_command import command, flush, path0
from trainrun_request import decode_request

HERE = os.path.dirname(os.path.abspath(__file__))


def serve(settings):
    # trainrun's --preload template (workers/warm_start.cpp), started as local rank 0's worker
    # would be, its bootstrap at the interpreter's start (sitecustomize.py): imports the modules
    # once, then forks a worker for each request on its standard input, a Unix socket to the
    # agent. Only a forked worker returns from here, set up as its request says; Python then runs
    # its script as in any interpreter it started.
    agent = os.getppid()
    modules = settings["modules"]
    prefix = settings["prefix"]
    # The job's marker, for the watchdog: in this process's environment block (what
    # /proc/PID/environ shows, for every worker forked from it too), in no module's os.environ.
    os.environ.pop(settings["marker"], None)
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
            why = f"{threads()} threads in the template"
            if os.environ.get("OMP_NUM_THREADS") != "1":
                # A torch built with OpenMP starts its pool at import (on a 16-core GPU node: 16
                # threads) unless OMP_NUM_THREADS=1, which trainrun sets with more than one worker.
                why += "; OMP_NUM_THREADS is {}: an OpenMP pool may be among them".format(
                    os.environ.get("OMP_NUM_THREADS", "unset"))
            return f"started a thread ({why})"
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
            return f"initialised the CUDA driver ({os.path.basename(path)}) in the template"
        return None

    # Imported as local rank 0's script would import them: its directory first on the path,
    # where Python puts it only after this bootstrap (sys.argv[0] is "-m" for a module).
    first = path0("module" if sys.argv[0] == "-m" else "script", sys.argv[0])

    def load(names):
        # An import that fails is every worker's error to raise.
        if first is not None:
            sys.path.insert(0, first)
        try:
            for name in names:
                __import__(name)
        except BaseException as e:
            if hasattr(e, "add_note"):
                e.add_note("(imported by trainrun --preload={})".format(",".join(modules)))
            return e
        finally:
            if first is not None:
                sys.path.remove(first)
        return None

    failed = culprit = None
    said, rest = "", []
    for index, name in enumerate(modules):
        spare = _spare(libc) if index and culprit is None else None
        if spare and spare[0] == 0:
            # The template as it was before `name`, which started a thread in the one before.
            said, rest = spare[1], modules[index:]
            break
        failed = load([name])
        problem = None if failed or culprit else unsafe()
        if spare and problem:
            what = "started " + _new_thread() if problem.startswith("started a thread") else problem
            os.write(spare[1], "--preload: {} {}; workers are forked from the template as it was "
                     "before it ({}) and import {} themselves".format(
                         name, what, ",".join(modules[:index]), ",".join(modules[index:])).encode())
            os.close(spare[1])
            control.close()
            # The pid the agent knows stays until the spare, its template now, ends.
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
        # A little-endian 32-bit length, sent with the descriptors, then the request's JSON.
        fds = array.array("i")
        (size,) = struct.unpack("<I", exactly(4, fds))
        # Above the standard streams, which the worker sets up from them.
        fds = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3) if fd <= 2 else fd for fd in fds]
        return decode_request(exactly(size), fds), fds

    flush()
    send(b"R", said)
    while True:
        job, fds = request()
        problem = unsafe()
        if problem:
            for fd in fds:
                os.close(fd)
            who = culprit or "--preload={}".format(",".join(modules))
            send(b"U", f"--preload: {who} {problem}; forking it could hang or break a worker, "
                 "so workers start the ordinary way")
            continue
        flush()
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
    report = job.report
    # Once the intermediate has exited, this process is the agent's child.
    while os.getppid() == middle:
        time.sleep(0.0001)
    if job.group == "session":
        os.setsid()
    elif job.group == "group":
        os.setpgid(0, 0)
    if job.cpus:
        os.sched_setaffinity(0, job.cpus)
    sources = [s if isinstance(s, int) else None for s in job.streams]
    if job.cgroup is not None:
        try:
            procs = os.open("cgroup.procs", os.O_WRONLY | os.O_CLOEXEC, dir_fd=job.cgroup)
            os.write(procs, b"0")
            os.close(procs)
        except OSError:
            pass
    if job.descriptor_limit is not None:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE,
                               (job.descriptor_limit,
                                resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        except (OSError, ValueError):
            pass
    if job.death_signal:
        libc.prctl(1, job.death_signal, 0, 0, 0)  # PR_SET_PDEATHSIG
    libc.prctl(0x59616D61, agent, 0, 0, 0)  # PR_SET_PTRACER: the agent's stack tools may attach
    if os.getppid() != agent:
        os._exit(127)  # the agent died before the death signal was set
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    # default_signals were set back before the template's own start, which `fresh` records.
    for number, handler in fresh.items():
        if handler is not None and signal.getsignal(number) is not handler:
            signal.signal(number, handler)
    try:
        for i, stream in enumerate(job.streams):
            if stream == "null":
                sources[i] = os.open(os.devnull, os.O_RDONLY if i == 0 else os.O_WRONLY)
        for i, stream in enumerate(job.streams):
            if sources[i] is not None:
                os.dup2(sources[i], i)
            elif stream == "closed":
                try:
                    os.close(i)
                except OSError:
                    pass
        channel = job.diagnosis
        for fd in set(fds + [s for s in sources if s is not None]):
            if fd > 2 and fd not in (channel, report):
                os.close(fd)
        if job.cwd is not None:
            os.chdir(job.cwd)
    except OSError as e:
        os.write(report, struct.pack("i", e.errno))
        os._exit(127)
    os.environ.clear()
    for entry in job.env:
        name, _, value = entry.partition(b"=")
        os.environb[name] = value
    decoded = [os.fsdecode(x) for x in job.argv]
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
    sys.argv = command(decoded, prefix)[2]
    if failed is not None:
        _fail(failed)
    if channel is not None:
        trainrun_diagnosis.serve(channel)
    # What the template did not import (a module of them started a thread): the worker's own.
    failed = load(rest) if rest else None
    if failed is not None:
        _fail(failed)


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
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: it goes with the template
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
            where = "{}.{}".format(getattr(target, "__module__", "?"),
                                   getattr(target, "__qualname__", "?")) if target else "none"
            return f"thread {thread.name!r} (target {where})"
    for task in os.listdir("/proc/self/task"):
        if int(task) != os.getpid():
            with open(f"/proc/self/task/{task}/comm") as comm:
                return f"thread {comm.read().strip()!r} (native)"
    return "a thread"


def _fail(error):
    # A module that failed to import in the template fails each worker as the script's import
    # would have: its traceback (from the module's frames on), the exit code of an uncaught
    # exception, the atexit handlers run. Raised from here, where the site module runs this, it
    # would print "Error in sitecustomize" and run the script.
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(HERE + os.sep):
        tb = tb.tb_next
    code = 1
    if isinstance(error, SystemExit):
        code = error.code if isinstance(error.code, int) else 0 if error.code is None else 1
        if not isinstance(error.code, (int, type(None))):
            print(error.code, file=sys.stderr)
    else:
        sys.excepthook(type(error), error.with_traceback(tb), tb)
    atexit._run_exitfuncs()
    flush()
    if isinstance(error, KeyboardInterrupt):
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


