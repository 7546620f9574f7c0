#include "worker_processes.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace trainrun::runtime::testing {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string command_output(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + command);
  std::string output;
  char buffer[65536];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int status = ::pclose(pipe);
  if (status != 0) {
    throw std::runtime_error(command.substr(0, 200) + " failed (status " + std::to_string(status) +
                             "):\n" + output);
  }
  return output;
}

std::vector<nlohmann::json> metric_lines(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(read_file(run_dir + "/metrics.jsonl"));
  std::string line;
  while (std::getline(lines, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

WorkerRun run_workers(const std::string& program, const std::vector<std::string>& args, int world,
                      const std::map<std::string, std::string>& extra_env,
                      std::chrono::seconds timeout) {
  const std::string log_dir = make_temp_dir("logs");
  // The workers' TMPDIR: what a worker killed mid-way leaves there goes with the test's own.
  const std::string scratch = make_temp_dir("tmp");
  const int copies = world == 0 ? 1 : world;
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < copies; ++rank) {
    const std::string log = log_dir + "/rank" + std::to_string(rank) + ".log";
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("run_workers: fork failed");
    if (pid == 0) {
      for (const char* name :
           {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "GROUP_RANK", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID",
            "TORCHELASTIC_ERROR_FILE"}) {
        ::unsetenv(name);
      }
      ::setenv("TMPDIR", scratch.c_str(), 1);
      if (world > 0) {
        const std::string r = std::to_string(rank);
        const std::string w = std::to_string(world);
        ::setenv("RANK", r.c_str(), 1);
        ::setenv("LOCAL_RANK", r.c_str(), 1);
        ::setenv("WORLD_SIZE", w.c_str(), 1);
        ::setenv("LOCAL_WORLD_SIZE", w.c_str(), 1);
        ::setenv("GROUP_RANK", "0", 1);
        ::setenv("MASTER_ADDR", "127.0.0.1", 1);
        ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
        ::setenv("TORCHELASTIC_RESTART_COUNT", "0", 1);
        ::setenv("OMP_NUM_THREADS", "1", 1);
      }
      for (const auto& [name, value] : extra_env) {
        std::string expanded = value;
        const auto at = expanded.find("{rank}");
        if (at != std::string::npos) expanded.replace(at, 6, std::to_string(rank));
        ::setenv(name.c_str(), expanded.c_str(), 1);
      }
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(program.c_str()));
      for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
      argv.push_back(nullptr);
      ::execv(program.c_str(), argv.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }

  WorkerRun run;
  run.exit_codes.assign(static_cast<std::size_t>(copies), -1);
  int running = copies;
  bool killed = false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int rank = 0; rank < copies; ++rank) {
        if (pids[static_cast<std::size_t>(rank)] != pid) continue;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        run.exit_codes[static_cast<std::size_t>(rank)] = code;
        pids[static_cast<std::size_t>(rank)] = -1;
        --running;
        if (code != 0 && !killed) {
          killed = true;
          for (pid_t other : pids) {
            if (other > 0) ::kill(other, SIGKILL);
          }
        }
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline && !run.timed_out) {
      run.timed_out = true;
      for (pid_t other : pids) {
        if (other > 0) ::kill(other, SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int rank = 0; rank < copies; ++rank) {
    run.outputs.push_back(read_file(log_dir + "/rank" + std::to_string(rank) + ".log"));
  }
  return run;
}

}  // namespace trainrun::runtime::testing
