#include "trainrun/stacks/parse.hpp"

#include <catch2/catch.hpp>

#include "proc.hpp"

using namespace trainrun::stacks;

// Outputs as the tools print them (py-spy 0.4.3, eu-stack 0.188, gdb 13.1), shortened.
TEST_CASE("py-spy's JSON gives Python and native frames, innermost first") {
  const char* text = R"([
  {"pid": 787, "thread_id": 140641678970944, "thread_name": "MainThread", "os_thread_id": 787,
   "active": false, "owns_gil": false, "process_info": null,
   "frames": [
     {"name": "read", "filename": "/usr/lib/x86_64-linux-gnu/libc.so.6",
      "module": "/usr/lib/x86_64-linux-gnu/libc.so.6", "short_filename": "libc.so.6", "line": 0},
     {"name": "stuck_here", "filename": "/tmp/stx/stuck.py", "module": null,
      "short_filename": "stuck.py", "line": 8},
     {"name": "<module>", "filename": "/tmp/stx/stuck.py", "module": null,
      "short_filename": "stuck.py", "line": 15}]}])";
  const auto threads = parse_py_spy_json(text);
  REQUIRE(threads.size() == 1);
  CHECK(threads[0].tid == 787);
  CHECK(threads[0].name == "MainThread");
  REQUIRE(threads[0].frames.size() == 3);
  CHECK(threads[0].frames[0].kind == FrameKind::native);
  CHECK(threads[0].frames[0].module == "/usr/lib/x86_64-linux-gnu/libc.so.6");
  CHECK(threads[0].frames[0].file.empty());
  CHECK(threads[0].frames[1].kind == FrameKind::python);
  CHECK(describe(threads[0].frames[1]) == "stuck_here (/tmp/stx/stuck.py:8)");
  CHECK_THROWS_WITH(parse_py_spy_json("Error: Failed to find python version"),
                    Catch::Contains("not py-spy's JSON"));
  CHECK_THROWS(parse_py_spy_json(R"([{"frames": [{"name": 3}]}])"));
}

TEST_CASE("py-spy's frames of a worker with a diagnosis channel: the script's, not the channel's") {
  // The thread that serves the channel is the launcher's, whatever it is doing when it is read;
  // a function of the same name in another file is the worker's.
  const char* text = R"([
  {"thread_name": "MainThread", "os_thread_id": 9,
   "frames": [
     {"name": "stuck_here", "filename": "/tmp/job.py", "module": null, "line": 8},
     {"name": "<module>", "filename": "/tmp/job.py", "module": null, "line": 15}]},
  {"thread_name": null, "os_thread_id": 10,
   "frames": [
     {"name": "tracebacks", "filename": "/tmp/trainrun-python-x1/trainrun_diagnosis.py",
      "module": null, "line": 99},
     {"name": "_trainrun_diagnosis", "filename": "/tmp/trainrun-python-x1/trainrun_diagnosis.py",
      "module": null, "line": 140}]},
  {"thread_name": "loader", "os_thread_id": 11,
   "frames": [
     {"name": "_trainrun_diagnosis", "filename": "/tmp/job.py", "module": null, "line": 3},
     {"name": "run", "filename": "/usr/lib/python3.11/threading.py", "module": null, "line": 9}]}
  ])";
  const auto threads = parse_py_spy_json(text);
  REQUIRE(threads.size() == 2);
  REQUIRE(threads[0].frames.size() == 2);
  CHECK(describe(threads[0].frames[1]) == "<module> (/tmp/job.py:15)");
  CHECK(threads[1].name == "loader");
}

TEST_CASE("eu-stack's frames with module and source line") {
  const char* text = R"(PID 1020 - process
TID 1020:
#0  0x00007eff790f62ec __GI___libc_read - /usr/lib/x86_64-linux-gnu/libc.so.6
    ../sysdeps/unix/sysv/linux/read.c:26:10
#1  0x00005589f3f1a2f5 demo::stuck_here() - /tmp/stx/stuck_cpp
    /tmp/stx/stuck.cpp:7:14
#2  0x00005589f3f1a179 main - /tmp/stx/stuck_cpp
TID 1021:
#0  0x00007eff790cd545 __GI___clock_nanosleep - /usr/lib/x86_64-linux-gnu/libc.so.6
#1  0x00007eff792d44a3 - /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30
)";
  const auto threads = parse_eu_stack(text);
  REQUIRE(threads.size() == 2);
  CHECK(threads[0].tid == 1020);
  REQUIRE(threads[0].frames.size() == 3);
  CHECK(threads[0].frames[1].function == "demo::stuck_here()");
  CHECK(threads[0].frames[1].module == "/tmp/stx/stuck_cpp");
  CHECK(threads[0].frames[1].file == "/tmp/stx/stuck.cpp");
  CHECK(threads[0].frames[1].line == 7);
  CHECK(threads[0].frames[2].line == 0);
  CHECK(threads[1].frames[1].function.empty());
  CHECK(threads[1].frames[1].module == "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30");
  CHECK_THROWS_WITH(parse_eu_stack("eu-stack: dwfl_linux_proc_report pid 9: No such file"),
                    Catch::Contains("no thread"));
}

TEST_CASE("gdb's backtraces: LWP, name, function without its arguments, file or library") {
  const char* text = R"([New LWP 1021]
__GI___libc_read (nbytes=1, buf=0x7ffe9155ed3f, fd=0) at ../sysdeps/unix/sysv/linux/read.c:26

Thread 2 (Thread 0x7eff78f1d6c0 (LWP 1021) "stuck_cpp"):
#0  0x00007eff790cd545 in __GI___clock_nanosleep (clock_id=0, req=0x7e) at ../sysdeps/unix/sysv/linux/clock_nanosleep.c:48
#1  0x00007eff792d44a3 in ?? () from /lib/x86_64-linux-gnu/libstdc++.so.6
#2  0x0000000000401234 in std::thread::_State_impl<std::thread::_Invoker<std::tuple<main::{lambda()#1}> > >::_M_run (this=0x1) at /usr/include/c++/12/bits/std_thread.h:211

Thread 1 (Thread 0x7eff79438440 (LWP 1020) "stuck_cpp"):
#0  __GI___libc_read (nbytes=1, buf=0x7ffe9155ed3f, fd=0) at ../sysdeps/unix/sysv/linux/read.c:26
#1  0x00005589f3f1a2f5 in demo::stuck_here () at stuck.cpp:7
#2  0x00005589f3f1a179 in main () at stuck.cpp:14
[Inferior 1 (process 1020) detached]
)";
  const auto threads = parse_gdb(text);
  REQUIRE(threads.size() == 2);
  CHECK(threads[0].tid == 1021);
  CHECK(threads[0].name == "stuck_cpp");
  CHECK(threads[0].frames[1].function.empty());
  CHECK(threads[0].frames[1].module == "/lib/x86_64-linux-gnu/libstdc++.so.6");
  CHECK(
      threads[0].frames[2].function ==
      "std::thread::_State_impl<std::thread::_Invoker<std::tuple<main::{lambda()#1}> > >::_M_run");
  CHECK(threads[1].tid == 1020);
  REQUIRE(threads[1].frames.size() == 3);
  CHECK(threads[1].frames[0].function == "__GI___libc_read");
  CHECK(threads[1].frames[1].function == "demo::stuck_here");
  CHECK(threads[1].frames[1].file == "stuck.cpp");
  CHECK(threads[1].frames[1].line == 7);
  CHECK_THROWS(parse_gdb("ptrace: No such process.\n"));
}

TEST_CASE("system calls by name, from the C library's table") {
  CHECK(describe_syscall_line("0 0x0 0x7ffe 0x1 0x0 0x0 0x0 0x7ffd 0x7f12\n") == syscall_name(0));
  CHECK(describe_syscall_line("running\n") == "running");
  CHECK(describe_syscall_line("-1 0x7ffd 0x7f12\n") == "none");
  CHECK(describe_syscall_line("") == "");
  CHECK(syscall_name(999999) == "syscall 999999");
#ifdef __x86_64__
  CHECK(syscall_name(0) == "read");
  CHECK(syscall_name(202) == "futex");
#endif
}
