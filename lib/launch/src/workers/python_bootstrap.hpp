#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace trainrun::launch {

// The directory of trainrun's Python (python/*.py): sitecustomize.py and the modules it imports,
// which Python runs while it starts, before the script, when the directory is first on
// PYTHONPATH. It starts a worker's diagnosis channel (diagnosis.hpp) or makes the interpreter the
// --preload template (warm_start.hpp) without a word on the command line: the worker runs `python
// OPTIONS SCRIPT ARGS` as under torchrun, and its tracebacks hold no frame of ours.
// One per agent, private (0700) in $TMPDIR, written at its first use, removed with this object.
class PythonBootstrap {
 public:
  // Throws SetupError naming the directory and the reason.
  PythonBootstrap();
  ~PythonBootstrap();
  PythonBootstrap(const PythonBootstrap&) = delete;
  PythonBootstrap& operator=(const PythonBootstrap&) = delete;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// A worker's environment ("NAME=value" entries) with the bootstrap in it: `dir` first on
// PYTHONPATH, and TRAINRUN_BOOTSTRAP, `settings` (what sitecustomize.py is to do) with
// "pythonpath": how to put the user's PYTHONPATH back ("unset", "empty", or "after" our
// directory and a colon). The bootstrap takes both out of os.environ, so that the worker's
// children do not run it.
std::vector<std::string> bootstrap_environment(std::vector<std::string> env, const std::string& dir,
                                               nlohmann::json settings);

}  // namespace trainrun::launch
