#include "entrypoint.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

namespace trainrun::launch {

namespace {

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_executable_file(const std::string& path) {
  return is_regular(path) && ::access(path.c_str(), X_OK) == 0;
}

std::string path_variable(const std::map<std::string, std::string>& env) {
  auto it = env.find("PATH");
  return it != env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
}

// PATH lookup as execvp does it; empty when not found.
std::string find_in_path(const std::string& name, const std::string& path_variable) {
  size_t start = 0;
  while (start <= path_variable.size()) {
    size_t end = path_variable.find(':', start);
    if (end == std::string::npos) end = path_variable.size();
    std::string dir = path_variable.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return "";
}

// Resolves a program the way a shell would, or throws with the shell's exit code.
std::string resolve_program(const std::string& name, const std::map<std::string, std::string>& env,
                            const std::string& hint) {
  if (name.find('/') != std::string::npos) {
    struct stat st {};
    if (::stat(name.c_str(), &st) != 0)
      throw EntrypointError(fmt::format("{}: no such file{}", name, hint), 127);
    if (S_ISDIR(st.st_mode)) throw EntrypointError(fmt::format("{}: is a directory", name), 126);
    if (::access(name.c_str(), X_OK) != 0)
      throw EntrypointError(
          fmt::format("{}: permission denied (not executable; chmod +x it{})", name, hint), 126);
    return name;
  }
  std::string found = find_in_path(name, path_variable(env));
  if (found.empty())
    throw EntrypointError(fmt::format("{}: command not found on PATH{}", name, hint), 127);
  return found;
}

}  // namespace

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
    r.program = resolve_program(c.entrypoint, env, "");
    return r;
  }
  r.program = resolve_program(c.python_exec, env, " (set PYTHON_EXEC to the Python interpreter)");
  if (c.entry_mode == EntryMode::python_script) {
    struct stat st {};
    if (::stat(c.entrypoint.c_str(), &st) != 0)
      throw EntrypointError(fmt::format("{}: no such file", c.entrypoint), 127);
    if (S_ISDIR(st.st_mode) && !is_regular(c.entrypoint + "/__main__.py"))
      throw EntrypointError(fmt::format("{}: is a directory without __main__.py", c.entrypoint),
                            126);
    if (::access(c.entrypoint.c_str(), R_OK) != 0)
      throw EntrypointError(fmt::format("{}: permission denied (not readable)", c.entrypoint), 126);
  }
  return r;
}

}  // namespace trainrun::launch
