#include "hosts_plan.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <cctype>
#include <charconv>
#include <nlohmann/json.hpp>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/rdzv/rendezvous_token.hpp"

namespace trainrun::launch {

namespace {

bool valid_variable_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

// The values reach the agents as JSON text (encode_handover): bytes that are not UTF-8 would
// arrive as U+FFFD, another value than the one given.
void require_utf8(const std::string& value, const std::string& what) {
  const std::string_view valid = valid_utf8_prefix(value);
  if (valid.size() < value.size())
    throw UsageError(fmt::format(
        "{}: byte 0x{:02X} of the value is not UTF-8; --hosts hands the values to the agents as "
        "text and cannot carry it; set it in the hosts' own environment instead",
        what, static_cast<unsigned char>(value[valid.size()])));
}

}  // namespace

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<std::string> ssh_command(const std::vector<std::string>& ssh, const std::string& host,
                                     const std::string& remote_command) {
  std::vector<std::string> out = ssh;
  // No terminal (the agent's stdin is the launcher's pipe), never a password prompt, and a dead
  // connection noticed within half a minute.
  for (const char* word : {"-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o",
                           "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3"})
    out.emplace_back(word);
  out.push_back(host);
  out.push_back(remote_command);
  return out;
}

std::string stop_line(int signal) { return fmt::format("stop {}\n", signal); }

std::optional<int> stop_signal_of(const std::string& line) {
  if (line.rfind("stop ", 0) != 0) return std::nullopt;
  int signal = 0;
  const char* begin = line.data() + 5;
  const char* end = line.data() + line.size();
  const auto [at, ec] = std::from_chars(begin, end, signal);
  if (ec != std::errc() || at != end || begin == end || signal <= 0 || signal >= NSIG)
    return std::nullopt;
  return signal;
}

std::string host_address(const std::string& destination) {
  const size_t at = destination.rfind('@');
  return at == std::string::npos ? destination : destination.substr(at + 1);
}

std::vector<std::string> agent_arguments(const HostsOptions& options,
                                         const std::vector<PlannedHost>& hosts, size_t index) {
  const PlannedHost& host = hosts.at(index);
  std::vector<std::string> args = {
      fmt::format("--nnodes={}", hosts.size()), fmt::format("--node-rank={}", index),
      "--nproc-per-node=" + (host.workers ? std::to_string(*host.workers) : options.workers)};
  if (!options.master_addr_given)
    args.push_back("--master-addr=" + host_address(hosts.front().name));
  if (!options.output_given) args.emplace_back("--tee=3");
  if (!options.prefix_given)
    args.push_back("--log-line-prefix-template=[" + host_address(host.name) + ":${rank}]:");
  args.insert(args.end(), options.agent_options.begin(), options.agent_options.end());
  args.insert(args.end(), options.entry.begin(), options.entry.end());
  return args;
}

std::string remote_command(const std::string& cwd, const std::string& trainrun,
                           const std::string& version, const std::vector<std::string>& args) {
  std::string out = "cd " + shell_quote(cwd) + " && exec " + shell_quote(trainrun) + " " +
                    shell_quote("--remote-agent=" + version);
  for (const std::string& arg : args) out += " " + shell_quote(arg);
  return out;
}

std::map<std::string, std::string> parse_env_file(const std::string& text,
                                                  const std::string& path) {
  std::map<std::string, std::string> out;
  int number = 0;
  for (std::string line : split(text, '\n')) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string stripped = trim(line);
    if (stripped.empty() || stripped[0] == '#') continue;
    std::string entry = stripped.rfind("export ", 0) == 0 ? trim(stripped.substr(7)) : stripped;
    const size_t eq = entry.find('=');
    const std::string name = entry.substr(0, eq);
    if (eq == std::string::npos || !valid_variable_name(name))
      throw UsageError(fmt::format("{}: line {}: cannot read '{}'; use NAME=VALUE", path, number,
                                   utf8_prefix(stripped, 80)));
    out[name] = entry.substr(eq + 1);
    require_utf8(out[name], fmt::format("{}: line {}: {}", path, number, name));
  }
  return out;
}

std::map<std::string, std::string> forwarded_environment(
    const std::vector<std::map<std::string, std::string>>& files,
    const std::vector<std::string>& forward, const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> out;
  for (const auto& file : files)
    for (const auto& [name, value] : file) out[name] = value;
  for (const std::string& entry : forward) {
    const size_t eq = entry.find('=');
    const std::string name = entry.substr(0, eq);
    if (!valid_variable_name(name))
      throw UsageError(
          fmt::format("-x {}: not a variable name; use -x NAME or -x NAME=VALUE", entry));
    if (eq != std::string::npos) {
      out[name] = entry.substr(eq + 1);
      require_utf8(out[name], "-x " + name);
      continue;
    }
    auto it = env.find(name);
    if (it == env.end())
      throw UsageError(fmt::format(
          "-x {}: {} is not set on this machine; set it or give -x {}=VALUE", name, name, name));
    out[name] = it->second;
    require_utf8(out[name], "-x " + name);
  }
  if (out.count(kTokenVariable))
    throw UsageError(fmt::format(
        "{} is not forwarded: trainrun makes each --hosts job a token of its own and hands it to "
        "the agents over ssh's standard input; leave it out of -x and {}",
        kTokenVariable, kEnvFileName));
  return out;
}

std::string encode_handover(const Handover& handover) {
  nlohmann::json j = {
      {"token", handover.token}, {"env", handover.env}, {"python", handover.python}};
  return j.dump() + "\n";
}

Handover decode_handover(const std::string& line) {
  Handover out;
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    out.token = j.at("token").get<std::string>();
    out.env = j.at("env").get<std::map<std::string, std::string>>();
    out.python = j.value("python", "");
  } catch (const nlohmann::json::exception&) {
    throw UsageError(
        "--remote-agent: standard input does not hold a launcher's handover; this option is for "
        "the agents trainrun --hosts starts over ssh");
  }
  if (out.token.empty())
    throw UsageError("--remote-agent: the launcher handed over an empty token");
  return out;
}

std::optional<std::pair<int, std::string>> split_worker_line(const std::string& line,
                                                             const std::string& host) {
  const std::string head = "[" + host + ":";
  if (line.compare(0, head.size(), head) != 0) return std::nullopt;
  const size_t close = line.find("]:", head.size());
  if (close == std::string::npos) return std::nullopt;
  const auto rank = parse_integer(line.substr(head.size(), close - head.size()));
  if (!rank || *rank < 0 || *rank > 1 << 30) return std::nullopt;
  return std::make_pair(static_cast<int>(*rank), line.substr(close + 2));
}

}  // namespace trainrun::launch
