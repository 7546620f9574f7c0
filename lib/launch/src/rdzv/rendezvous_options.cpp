#include "trainrun/launch/rdzv/rendezvous_options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "trainrun/base/numbers.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/launch/rdzv/rendezvous_token.hpp"
#include "trainrun/rendezvous/etcd.hpp"

namespace trainrun::launch {

using rendezvous::Clock;
using rendezvous::kEtcdPort;
using rendezvous::Refusal;
using RendezvousOptions = rendezvous::TcpRendezvousOptions;

namespace {

const std::set<std::string> kKnownKeys = {
    "join_timeout",      "last_call_timeout",   "close_timeout",
    "heartbeat_timeout", "keep_alive_interval", "keep_alive_max_attempt",
    "is_host",           "token_file",          "token_file_mode",
    "rdzv_port",         "read_timeout",        "timeout"};

[[noreturn]] void refuse(const std::string& key, const std::string& text, const std::string& rule) {
  throw UsageError(fmt::format("--rdzv-conf {}={}: {}", key, text, rule));
}

// The shortest duration a key may give: keep-alives more often than this would keep a core busy
// on the host (clients already never send them more often), and no network answers sooner.
constexpr double kMinSeconds = 0.01;

Clock::duration conf_seconds(const std::string& key, const std::string& text) {
  const std::optional<double> s = trainrun::parse_number(text);
  if (!s || *s < kMinSeconds || *s > 1e7)
    refuse(key, text, fmt::format("expected a number of seconds from {} to 1e7", kMinSeconds));
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*s));
}

// The keys torchrun knows and this rendezvous does not use: checked, then ignored.
void check_unused_seconds(const std::string& key, const std::string& text) {
  const std::optional<double> s = trainrun::parse_number(text);
  if (!s || *s < 0 || *s > 1e9) refuse(key, text, "expected a number of seconds >= 0");
}

int conf_integer(const std::string& key, const std::string& text, int low, int high) {
  const std::optional<long long> v = trainrun::parse_integer(text);
  if (!v || *v < low || *v > high) {
    refuse(key, text, fmt::format("expected an integer in {}..{}", low, high));
  }
  return static_cast<int>(*v);
}

bool conf_flag(const std::string& key, const std::string& text) {
  static const std::set<std::string> yes = {"1", "true", "True"};
  static const std::set<std::string> no = {"0", "false", "False"};
  if (yes.count(text)) return true;
  if (no.count(text)) return false;
  refuse(key, text, "expected 1 or 0");
}

// Whether a token file others may read is accepted: "private" (the default) or "any".
bool parse_token_file_mode(const std::string& key, const std::string& text) {
  if (text == "private") return false;
  if (text == "any") return true;
  refuse(key, text, "expected private or any");
}

// keep_alive_interval, heartbeat_timeout and keep_alive_max_attempt describe one thing.
rendezvous::LivenessOptions liveness(const std::map<std::string, std::string>& entries) {
  auto get = [&](const char* key) -> const std::string* {
    auto it = entries.find(key);
    return it == entries.end() ? nullptr : &it->second;
  };
  rendezvous::LivenessOptions l;
  if (const auto* v = get("keep_alive_interval")) {
    l.keep_alive_interval = conf_seconds("keep_alive_interval", *v);
  }
  if (const auto* v = get("heartbeat_timeout")) {
    l.heartbeat_timeout = conf_seconds("heartbeat_timeout", *v);
    // With only the timeout given, keep at least three keep-alives inside it.
    if (!get("keep_alive_interval")) {
      l.keep_alive_interval = std::max<Clock::duration>(
          std::min(l.keep_alive_interval, l.heartbeat_timeout / 3),
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kMinSeconds)));
    }
  } else if (const auto* n = get("keep_alive_max_attempt")) {
    const int attempts = conf_integer("keep_alive_max_attempt", *n, 1, 1000);
    // Within the range of every other duration, and of the clock's count.
    if (std::chrono::duration<double>(l.keep_alive_interval).count() * attempts > 1e7) {
      refuse("keep_alive_max_attempt", *n, "keep_alive_interval times this exceeds 1e7 seconds");
    }
    l.heartbeat_timeout = l.keep_alive_interval * attempts;
  }
  if (l.heartbeat_timeout <= l.keep_alive_interval) {
    throw UsageError(fmt::format(
        "--rdzv-conf: heartbeat_timeout ({:.3g} s) must exceed keep_alive_interval ({:.3g} s)",
        std::chrono::duration<double>(l.heartbeat_timeout).count(),
        std::chrono::duration<double>(l.keep_alive_interval).count()));
  }
  return l;
}

RendezvousOptions static_options(const LaunchConfig& config, const RendezvousConf& conf) {
  RendezvousOptions o;
  if (config.min_nodes != config.max_nodes) {
    throw UsageError(fmt::format(
        "--nnodes={}:{}: the static backend needs a fixed node count; use --rdzv-backend=c10d "
        "with --rdzv-endpoint for elastic jobs",
        config.min_nodes, config.max_nodes));
  }
  if (config.node_rank < 0 || config.node_rank >= config.max_nodes) {
    throw UsageError(fmt::format("--node-rank={}: out of range for --nnodes={} (use 0..{})",
                                 config.node_rank, config.max_nodes, config.max_nodes - 1));
  }
  o.node_rank = config.node_rank;
  o.round.static_ranks = true;
  o.round.static_master = rendezvous::MasterEndpoint{config.master_addr, config.master_port};
  if (config.master_port <= 0) {
    throw UsageError(
        "--master-port=0: a multi-node static job needs a fixed --master-port that every node "
        "knows");
  }
  if (!conf.rdzv_port && config.master_port + 1 > 65535) {
    throw UsageError(
        "--master-port=65535: the rendezvous needs MASTER_PORT + 1; give --rdzv-conf "
        "rdzv_port=N");
  }
  o.endpoint =
      rendezvous::HostPort{config.master_addr, conf.rdzv_port.value_or(config.master_port + 1)};
  return o;
}

RendezvousOptions dynamic_options(const LaunchConfig& config) {
  if (config.rdzv_endpoint.empty()) {
    throw UsageError(
        fmt::format("--rdzv-backend={} needs --rdzv-endpoint=HOST[:PORT] (the same "
                    "on every node)",
                    backend_name(config.rdzv_backend)));
  }
  // A preference no round of this job could honour is a mistake in the command line.
  if (config.node_rank_given && config.node_rank >= config.max_nodes) {
    throw UsageError(fmt::format(
        "--node-rank={}: out of range for --nnodes={} (use 0..{}); in a dynamic job it is the "
        "node rank this node asks for",
        config.node_rank,
        config.min_nodes == config.max_nodes
            ? std::to_string(config.max_nodes)
            : fmt::format("{}:{}", config.min_nodes, config.max_nodes),
        config.max_nodes - 1));
  }
  RendezvousOptions o;
  try {
    o.endpoint = is_etcd(config.rdzv_backend)
                     ? rendezvous::parse_endpoint(config.rdzv_endpoint, kEtcdPort)
                     : rendezvous::parse_endpoint(config.rdzv_endpoint);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--rdzv-endpoint={}", e.what()));
  }
  return o;
}

}  // namespace

RendezvousConf check_rdzv_conf(const std::map<std::string, std::string>& entries) {
  for (const auto& [key, value] : entries) {
    if (!kKnownKeys.count(key)) {
      std::string known;
      for (const auto& k : kKnownKeys) known += (known.empty() ? "" : ", ") + k;
      refuse(key, value, fmt::format("unknown key (known: {})", known));
    }
  }
  RendezvousConf conf;
  for (const auto& [key, value] : entries) {
    if (key == "join_timeout") conf.join_timeout = conf_seconds(key, value);
    if (key == "last_call_timeout") conf.last_call_timeout = conf_seconds(key, value);
    if (key == "is_host") conf.is_host = conf_flag(key, value);
    if (key == "token_file") conf.token.file = value;
    if (key == "token_file_mode") conf.token.any_mode = parse_token_file_mode(key, value);
    if (key == "rdzv_port") conf.rdzv_port = conf_integer(key, value, 1, 65535);
    if (key == "close_timeout" || key == "timeout") check_unused_seconds(key, value);
  }
  if (entries.count("token_file_mode") && !conf.token.file) {
    refuse("token_file_mode", entries.at("token_file_mode"), "applies only with token_file=PATH");
  }
  conf.liveness = liveness(entries);
  return conf;
}

RendezvousBackend parse_rdzv_backend(const std::string& name, const std::string& what) {
  for (const RendezvousBackend backend : kRendezvousBackends)
    if (name == backend_name(backend)) return backend;
  throw UsageError(
      fmt::format("{}: unknown rendezvous backend; use static, c10d, etcd or etcd-v2", what));
}

bool uses_rendezvous(const LaunchConfig& config) {
  return !config.standalone &&
         (config.max_nodes > 1 || config.rdzv_backend != RendezvousBackend::static_);
}

namespace {

// Everything but the token: from the command line alone.
RendezvousOptions layout_options(const LaunchConfig& config, const RendezvousConf& conf) {
  RendezvousOptions o = config.rdzv_backend == RendezvousBackend::static_
                            ? static_options(config, conf)
                            : dynamic_options(config);
  o.is_host = conf.is_host;
  o.local_addr = config.local_addr;
  o.credentials.run_id = config.rdzv_id;
  o.round.min_nodes = config.min_nodes;
  o.round.max_nodes = config.max_nodes;
  o.round.max_restarts = config.max_restarts;
  if (conf.join_timeout) o.round.join_timeout = *conf.join_timeout;
  if (conf.last_call_timeout) o.round.last_call_timeout = *conf.last_call_timeout;
  o.liveness = conf.liveness;
  if (o.endpoint.port == 0 && o.is_host != true) {
    throw UsageError(fmt::format(
        "rendezvous endpoint {}:0: every node needs the real port; port 0 only works with "
        "--rdzv-conf is_host=1",
        o.endpoint.host));
  }
  return o;
}

}  // namespace

void check_rendezvous_layout(const LaunchConfig& config,
                             const std::map<std::string, std::string>& env) {
  if (!uses_rendezvous(config)) return;
  const RendezvousConf& conf = config.rdzv_conf;
  layout_options(config, conf);
  // The etcd backend has no use for a token: refused rather than ignored, so that nobody
  // believes the job authenticates its nodes.
  if (is_etcd(config.rdzv_backend) && (conf.token.file || env.count(kTokenVariable))) {
    throw UsageError(fmt::format(
        "--rdzv-backend={}: the etcd backend does not use a rendezvous token ({} is set); secure "
        "etcd itself and drop the token, or use --rdzv-backend=c10d",
        backend_name(config.rdzv_backend),
        conf.token.file ? "--rdzv-conf token_file" : kTokenVariable));
  }
}

RendezvousOptions rendezvous_options(const LaunchConfig& config,
                                     const std::map<std::string, std::string>& env) {
  const RendezvousConf& conf = config.rdzv_conf;
  RendezvousOptions o = layout_options(config, conf);
  o.credentials.token = load_token(conf.token, env);
  return o;
}

std::unique_ptr<rendezvous::RendezvousHandler> make_rendezvous(
    boost::asio::io_context& io, const LaunchConfig& config,
    const rendezvous::TcpRendezvousOptions& options, const rendezvous::LogFunction& log) {
  if (!is_etcd(config.rdzv_backend)) return rendezvous::make_rendezvous_handler(io, options, log);
  const char* name = backend_name(config.rdzv_backend);
  const std::string_view note = rendezvous::etcd_alias_note(name);
  if (!note.empty()) log(fmt::format("--rdzv-backend={}: {}", name, note));
  return rendezvous::make_etcd_rendezvous_handler(io, options, log);
}

std::string rendezvous_hint(const rendezvous::Stop& stop) {
  // What the user acts on, by what the rendezvous refused: the one place that names options.
  static const std::map<Refusal, std::string> hints = {
      {Refusal::run_id, "check --rdzv-id"},
      {Refusal::token, fmt::format("give every node the same one with --rdzv-conf "
                                   "token_file=PATH or {}",
                                   kTokenVariable)},
      {Refusal::node_rank, "check --node-rank and --nnodes"},
      {Refusal::rank_taken, "check --node-rank"},
      {Refusal::port_held, "free it or choose another --rdzv-endpoint port"},
      {Refusal::not_a_host, "check --rdzv-endpoint, or free the port"},
      {Refusal::unreachable, "is the node that hosts it running, and is --rdzv-endpoint right?"},
      {Refusal::no_handshake,
       "is a trainrun agent of this job hosting it, and is --rdzv-endpoint right?"},
      {Refusal::foreign_state, "use another --rdzv-id"},
      {Refusal::state_version,
       "run every agent of the job with one version of trainrun, or use another --rdzv-id"},
  };
  const auto it = hints.find(stop.refusal);
  return it == hints.end() ? "" : it->second;
}

rendezvous::Stop with_hint(rendezvous::Stop stop) {
  const std::string hint = rendezvous_hint(stop);
  if (!hint.empty()) stop.reason += "; " + hint;
  return stop;
}

std::string hosting_hint(const LaunchConfig& config) {
  return config.rdzv_backend == RendezvousBackend::static_
             ? "free the port or choose another one with --rdzv-conf rdzv_port=N"
             : "free the port or choose another one in --rdzv-endpoint";
}

}  // namespace trainrun::launch
