// How a worker's end counts once its script is over, and the words said of it.
#include "agent/script_end.hpp"

#include <signal.h>

#include <catch2/catch.hpp>

using namespace trainrun::launch;
using trainrun::ExitStatus;

namespace {

ExitStatus exited(int code) { return {code, 0}; }
ExitStatus killed(int sig) { return {0, sig}; }

}  // namespace

TEST_CASE("a script's status: its exit code, SIGINT for KeyboardInterrupt", "[script_end]") {
  CHECK(script_status({"returned", 0}).code == 0);
  CHECK(script_status({"exit", 3}).code == 3);
  CHECK(script_status({"exception", 1}).code == 1);
  CHECK(script_status({"exception", 130}).signal == SIGINT);
}

TEST_CASE("a worker ended after --exit-grace counts as its script", "[script_end]") {
  const auto end =
      end_after_script(1, killed(SIGKILL), {"returned", 0}, true, "wait() (job.py:4)", 30, false);
  CHECK_FALSE(end.status.failed());
  CHECK(end.teardown ==
        "rank 1's script returned; the process had not exited 30 s later (it was in wait() "
        "(job.py:4)), so trainrun ended it");
  const auto failed = end_after_script(0, killed(SIGKILL), {"exception", 1}, true, "", 2.5, false);
  CHECK(failed.status.code == 1);
  CHECK(failed.status.signal == 0);
  CHECK(failed.teardown ==
        "rank 0's script raised an exception; the process had not exited 2.5 s later (it was in "
        "a place its stack does not show), so trainrun ended it");
}

TEST_CASE("a crash in teardown is named, the status the script's", "[script_end]") {
  auto end = end_after_script(1, killed(SIGABRT), {"returned", 0}, false, "", 30, false);
  CHECK(end.status.code == 0);
  CHECK(end.status.signal == 0);
  CHECK(end.teardown == "rank 1's script returned; the interpreter aborted in teardown (SIGABRT)");
  end = end_after_script(2, killed(SIGSEGV), {"exit", 4}, false, "", 30, false);
  CHECK(end.status.code == 4);
  CHECK(end.teardown ==
        "rank 2's script exited with 4; the interpreter was killed in teardown (SIGSEGV)");
}

TEST_CASE("an end the script asked for, a stop, an exit code: as they are", "[script_end]") {
  // KeyboardInterrupt ends the process by SIGINT: no crash.
  auto end = end_after_script(0, killed(SIGINT), {"exception", 130}, false, "", 30, false);
  CHECK(end.status.signal == SIGINT);
  CHECK(end.teardown.empty());
  // The agent signalled the group (a stop of the job): the signal is the end, as for any worker.
  end = end_after_script(0, killed(SIGTERM), {"returned", 0}, false, "", 30, true);
  CHECK(end.status.signal == SIGTERM);
  CHECK(end.teardown.empty());
  // An atexit handler's os._exit(3) is the process's own choice.
  end = end_after_script(0, exited(3), {"returned", 0}, false, "", 30, false);
  CHECK(end.status.code == 3);
  CHECK(end.teardown.empty());
  end = end_after_script(0, exited(0), {"returned", 0}, false, "", 30, false);
  CHECK_FALSE(end.status.failed());
  CHECK(end.teardown.empty());
}

TEST_CASE("the line of a worker that has not exited", "[script_end]") {
  CHECK(not_exited_line(1, 30.2, "destroy_process_group() (distributed_c10d.py:2100)") ==
        "rank 1 finished its script 30 s ago and has not exited: it is in "
        "destroy_process_group() (distributed_c10d.py:2100)");
  CHECK(script_over(3, {"exception", 130}) == "rank 3's script raised KeyboardInterrupt");
}
