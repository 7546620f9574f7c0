#include "trainrun/launch/workers/entrypoint.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "trainrun/base/process.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/launch/workers/python_exec.hpp"

namespace trainrun::launch {

namespace {

// strerror's words with a small first letter, as in a shell's messages.
std::string errno_text(int err) {
  std::string text = std::strerror(err);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string path_variable(const std::map<std::string, std::string>& env) {
  auto it = env.find("PATH");
  return it != env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
}

// Resolves a program the way a shell would, or throws with the shell's exit code.
std::string resolve_program(const std::string& name, const std::map<std::string, std::string>& env,
                            const std::string& hint) {
  if (name.find('/') != std::string::npos) {
    struct stat st {};
    if (::stat(name.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR)
        throw EntrypointError(fmt::format("{}: no such file{}", name, hint), 127);
      throw exec_error(name, errno);
    }
    if (S_ISDIR(st.st_mode)) throw EntrypointError(fmt::format("{}: is a directory", name), 126);
    if (::access(name.c_str(), X_OK) != 0)
      throw EntrypointError(
          fmt::format("{}: permission denied (not executable; chmod +x it{})", name, hint), 126);
    return name;
  }
  // The workers' PATH, not ours: they are started with `env`.
  const auto found = find_program(name, path_variable(env));
  if (!found)
    throw EntrypointError(fmt::format("{}: command not found on PATH{}", name, hint), 127);
  return *found;
}

}  // namespace

EntrypointError exec_error(const std::string& program, int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return EntrypointError(fmt::format("{}: no such file", program), 127);
    case ENOEXEC:
      return EntrypointError(
          fmt::format("{}: cannot execute: exec format error (neither a program for this machine "
                      "nor a script with a #! line)",
                      program),
          126);
    case ELOOP:
      return EntrypointError(fmt::format("{}: too many levels of symbolic links", program), 126);
    case EACCES:
      return EntrypointError(fmt::format("{}: cannot execute: permission denied", program), 126);
    default:
      return EntrypointError(fmt::format("{}: cannot execute: {}", program, errno_text(err)), 126);
  }
}

ResolvedEntry resolve_entrypoint(const LaunchConfig& config,
                                 const std::map<std::string, std::string>& env) {
  ResolvedEntry r{config, ""};
  LaunchConfig& c = r.config;
  if (c.entry_mode == EntryMode::executable && !c.no_python) {
    // Without --no-python an executable file runs directly; anything else is a Python script.
    const bool local = is_regular(c.entrypoint);
    if (local && !is_executable_file(c.entrypoint)) c.entry_mode = EntryMode::python_script;
    if (local && is_executable_file(c.entrypoint) && c.entrypoint.find('/') == std::string::npos)
      c.entrypoint = "./" + c.entrypoint;
  }
  if (c.entry_mode == EntryMode::executable) {
    // A bare name that is no program on PATH, with a Python script of that name here
    // (`trainrun check_nodes` beside check_nodes.py): the script is named.
    std::string hint;
    if (c.entrypoint.find('/') == std::string::npos && is_regular(c.entrypoint + ".py"))
      hint = fmt::format(" ({0}.py is in this directory: trainrun {0}.py runs it)", c.entrypoint);
    r.program = resolve_program(c.entrypoint, env, hint);
    return r;
  }
  if (c.python_source == PythonSource::path) {
    if (auto chosen = environment_python(env, self_exe())) {
      c.python_exec = chosen->first;
      c.python_source = chosen->second;
    }
  }
  r.program = resolve_program(c.python_exec, env, " (set PYTHON_EXEC to the Python interpreter)");
  if (c.entry_mode == EntryMode::python_script) {
    struct stat st {};
    if (::stat(c.entrypoint.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR)
        throw EntrypointError(fmt::format("{}: no such file", c.entrypoint), 127);
      throw EntrypointError(fmt::format("{}: {}", c.entrypoint, errno_text(errno)), 126);
    }
    if (S_ISDIR(st.st_mode) && !is_regular(c.entrypoint + "/__main__.py"))
      throw EntrypointError(fmt::format("{}: is a directory without __main__.py", c.entrypoint),
                            126);
    if (::access(c.entrypoint.c_str(), R_OK) != 0)
      throw EntrypointError(fmt::format("{}: permission denied (not readable)", c.entrypoint), 126);
  }
  return r;
}

namespace {

// Whether arg[i] continues a name of Python's string.Template ([_a-z0-9], any case): torchrun
// leaves "$local_rankX" alone, the name being "local_rankX".
bool identifier_char(const std::string& arg, size_t i) {
  if (i >= arg.size()) return false;
  const char c = arg[i];
  return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

}  // namespace

std::string expand_local_rank(const std::string& arg, int local_rank) {
  std::string out;
  const std::string rank = std::to_string(local_rank);
  for (size_t i = 0; i < arg.size();) {
    if (arg[i] != '$') {
      out += arg[i++];
    } else if (arg.compare(i, 2, "$$") == 0) {
      out += '$';
      i += 2;
    } else if (arg.compare(i, 13, "${local_rank}") == 0) {
      out += rank;
      i += 13;
    } else if (arg.compare(i, 11, "$local_rank") == 0 && !identifier_char(arg, i + 11)) {
      out += rank;
      i += 11;
    } else {
      out += arg[i++];
    }
  }
  return out;
}

std::size_t python_options_end(const std::vector<std::string>& argv) {
  std::size_t i = 1;
  while (i < argv.size() && argv[i].size() > 1 && argv[i][0] == '-' && argv[i] != "-m")
    i += argv[i] == "-X" || argv[i] == "-W" ? 2 : 1;
  return std::min(i, argv.size());
}

std::vector<std::string> worker_argv(const LaunchConfig& config, bool faulthandler) {
  std::vector<std::string> argv;
  if (config.entry_mode == EntryMode::executable) {
    argv.push_back(config.entrypoint);
  } else {
    argv.push_back(config.python_exec);
    // As PYTHONFAULTHANDLER=1 does, off the environment (which stays torchrun's); spawned
    // children inherit it (subprocess._args_from_interpreter_flags).
    if (faulthandler) argv.insert(argv.end(), {"-X", "faulthandler"});
    argv.push_back("-u");
    if (config.entry_mode == EntryMode::python_module) argv.push_back("-m");
    argv.push_back(config.entrypoint);
  }
  argv.insert(argv.end(), config.entry_args.begin(), config.entry_args.end());
  return argv;
}

}  // namespace trainrun::launch
