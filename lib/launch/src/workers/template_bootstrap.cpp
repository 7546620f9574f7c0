#include "template_bootstrap.hpp"

#include <initializer_list>
#include <string>
#include <string_view>

#include "python_files.hpp"

namespace trainrun::launch {

// Read from the standard input (kTemplateLoader) before anything else comes there: a worker
// forked from the template shows its command line in ps, not this program.
// argv[1]: the modules, comma-separated; argv[2]: how many entries of a worker's argv are the
// interpreter and its options; argv[3]: the job marker's name; then local rank 0's command (-m
// MODULE or the script, and its arguments). Standard input: the Unix socket to the agent.
//
// Replies to the agent: a tag, a little-endian 32-bit length and that many bytes. R: ready (the
// imports are done, or one failed: every worker then raises its error). P: a worker's pid. U: the
// template cannot fork safely, the line to say. F: the fork failed, its errno.
// A request: a little-endian 32-bit length (sent with the descriptors), then that many bytes of
// JSON (fork_request.hpp).
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

// The files of python/ are the parts of one program, joined in the order given.
std::string joined(std::initializer_list<std::string_view> names) {
  std::string program;
  for (const std::string_view name : names) program += python_file(name);
  return program;
}

}  // namespace

const std::string& template_bootstrap() {
  static const std::string program =
      joined({"command.py", "diagnosis.py", "request.py", "template.py", "run.py"});
  return program;
}

const std::string& diagnosis_bootstrap() {
  static const std::string program = joined({"command.py", "diagnosis.py", "plain.py", "run.py"});
  return program;
}

}  // namespace trainrun::launch
