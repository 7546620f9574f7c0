#include "trainrun/launch/workers/python_exec.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <utility>

#include "test_support.hpp"

using namespace trainrun::launch;

TEST_CASE("which Python: the activated environment, then the one trainrun is installed in") {
  const std::string dir = trainrun::test::make_temp_dir("python_choice");
  auto make_env = [&](const std::string& prefix, bool marked, bool with_python) {
    REQUIRE(::mkdir(prefix.c_str(), 0755) == 0);
    REQUIRE(::mkdir((prefix + "/bin").c_str(), 0755) == 0);
    if (marked) ::close(::creat((prefix + "/pyvenv.cfg").c_str(), 0644));
    if (with_python) REQUIRE(::symlink("/bin/true", (prefix + "/bin/python3").c_str()) == 0);
  };
  const std::string active = dir + "/active", own = dir + "/own", bare = dir + "/bare";
  make_env(active, true, true);
  make_env(own, true, true);
  make_env(bare, false, true);
  using Choice = std::optional<std::pair<std::string, PythonSource>>;
  CHECK(environment_python({{"VIRTUAL_ENV", active}}, own + "/bin/trainrun") ==
        Choice{{active + "/bin/python3", PythonSource::activated}});
  CHECK(environment_python({{"CONDA_PREFIX", active}}, "") ==
        Choice{{active + "/bin/python3", PythonSource::activated}});
  // An activated environment without an interpreter is passed over.
  CHECK(environment_python({{"VIRTUAL_ENV", dir + "/nonexistent"}}, own + "/bin/trainrun") ==
        Choice{{own + "/bin/python3", PythonSource::own_environment}});
  // A prefix that is no environment (/usr, a bare tree): PATH's python3 decides.
  CHECK(environment_python({}, bare + "/bin/trainrun") == std::nullopt);
  CHECK(environment_python({}, "/usr/bin/trainrun") == std::nullopt);
  CHECK(environment_python({}, "") == std::nullopt);

  CHECK(handed_python({{"PYTHON_EXEC", "venv/bin/python"}}, "", "/work") ==
        "/work/venv/bin/python");
  CHECK(handed_python({{"PYTHON_EXEC", "python3.11"}}, "", "/work") == "python3.11");
  CHECK(handed_python({{"VIRTUAL_ENV", active}}, "", "/work") == active + "/bin/python3");
  CHECK(handed_python({}, bare + "/bin/trainrun", "/work") == "");
  PythonExec a{active + "/bin/python3", PythonSource::activated, "3.11.2"};
  CHECK(python_line(a) ==
        "Python workers run " + active + "/bin/python3 (Python 3.11.2; the activated environment)");
}
