#include "trainrun/rendezvous/messages.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "message_json.hpp"
#include "trainrun/base/overloaded.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/base/wording.hpp"

namespace trainrun::rendezvous {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxTextLength = 64 * 1024;
constexpr int kMaxNesting = 16;
constexpr std::int64_t kMaxRound = std::int64_t{1} << 53;
// A stacks_end names at most one missing node per connection the server admits.
constexpr std::size_t kMaxStacksMissing = 1 << 16;

// nlohmann's parser keeps its own stack, but the tree it builds is walked recursively later;
// a cheap scan rejects absurd nesting before anything is built.
void check_nesting(std::string_view body) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxNesting) {
        throw ProtocolError(fmt::format("message nests deeper than {} levels", kMaxNesting));
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

json parse_object(std::string_view body) {
  check_nesting(body);
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ProtocolError("message is not valid JSON");
  if (!j.is_object()) throw ProtocolError("message is not a JSON object");
  return j;
}

const json& field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) throw ProtocolError(fmt::format("field \"{}\" is missing", key));
  return *it;
}

std::string get_string(const json& j, const char* key, std::size_t max_length) {
  const json& v = field(j, key);
  if (!v.is_string()) throw ProtocolError(fmt::format("field \"{}\" must be a string", key));
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() > max_length) {
    throw ProtocolError(fmt::format("field \"{}\" is {} bytes long, at most {} allowed", key,
                                    s.size(), max_length));
  }
  return s;
}

std::int64_t get_int(const json& j, const char* key, std::int64_t low, std::int64_t high) {
  const json& v = field(j, key);
  if (!v.is_number_integer()) {
    throw ProtocolError(fmt::format("field \"{}\" must be an integer", key));
  }
  bool in_range;
  std::int64_t x = 0;
  if (v.is_number_unsigned()) {
    auto u = v.get<std::uint64_t>();
    in_range = u <= static_cast<std::uint64_t>(high);
    x = in_range ? static_cast<std::int64_t>(u) : 0;
  } else {
    x = v.get<std::int64_t>();
    in_range = x >= low && x <= high;
  }
  if (!in_range || x < low) {
    throw ProtocolError(fmt::format("field \"{}\" must be in [{}, {}]", key, low, high));
  }
  return x;
}

int get_small(const json& j, const char* key, int low, int high) {
  return static_cast<int>(get_int(j, key, low, high));
}

double get_seconds(const json& j, const char* key) {
  const json& v = field(j, key);
  if (!v.is_number()) throw ProtocolError(fmt::format("field \"{}\" must be a number", key));
  double x = v.get<double>();
  if (!(x >= 0 && x <= 1e7)) {
    throw ProtocolError(fmt::format("field \"{}\" must be in [0, 1e7] seconds", key));
  }
  return x;
}

// Whole microseconds, so that a duration decoded, encoded and decoded again stays the same.
Clock::duration get_duration(const json& j, const char* key) {
  const auto exact = std::chrono::duration<double>(get_seconds(j, key));
  return std::chrono::round<std::chrono::microseconds>(exact);
}

bool get_bool(const json& j, const char* key) {
  const json& v = field(j, key);
  if (!v.is_boolean()) throw ProtocolError(fmt::format("field \"{}\" must be true or false", key));
  return v.get<bool>();
}

// An optional array of at most `max_count` strings of at most kMaxNameLength bytes; absent: none.
std::vector<std::string> optional_strings(const json& j, const char* key, int max_count) {
  std::vector<std::string> out;
  const auto it = j.find(key);
  if (it == j.end()) return out;
  if (!it->is_array() || it->size() > static_cast<std::size_t>(max_count))
    throw ProtocolError(
        fmt::format("field \"{}\" must be an array of at most {} strings", key, max_count));
  for (const json& v : *it) out.push_back(get_string(json{{key, v}}, key, kMaxNameLength));
  return out;
}

std::string get_hex(const json& j, const char* key, std::size_t length) {
  std::string s = get_string(j, key, length);
  bool ok = s.size() == length;
  for (char c : s) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!ok) {
    throw ProtocolError(fmt::format("field \"{}\" must be {} lowercase hex digits", key, length));
  }
  return s;
}

constexpr std::size_t kHexDigest = 64;

json to_json(const PreflightOffer& o) {
  return json{{"v", kPreflightVersion},
              {"id", o.id},
              {"port", o.port},
              {"trainrun", o.trainrun},
              {"entrypoint", o.entrypoint},
              {"sha256", o.sha256},
              {"python", o.python},
              {"torch", o.torch},
              {"network", o.network},
              {"master_check", o.master_check}};
}

// An offer of another preflight version is ignored (the node is not checked), not refused: the
// join it came with is still good.
std::optional<PreflightOffer> optional_offer(const json& j) {
  auto it = j.find("preflight");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) throw ProtocolError("field \"preflight\" must be an object");
  if (get_int(*it, "v", 0, 1 << 20) != kPreflightVersion) return std::nullopt;
  PreflightOffer o;
  o.id = get_hex(*it, "id", 16);
  o.port = get_small(*it, "port", 1, 65535);
  o.trainrun = get_string(*it, "trainrun", kMaxPreflightText);
  o.entrypoint = get_string(*it, "entrypoint", kMaxPreflightText);
  o.sha256 = get_string(*it, "sha256", 64);
  if (!o.sha256.empty()) o.sha256 = get_hex(*it, "sha256", kHexDigest);
  o.python = get_string(*it, "python", kMaxPreflightText);
  o.torch = get_string(*it, "torch", kMaxPreflightText);
  o.network = get_hex(*it, "network", 16);
  // Absent from an older agent's offer: it neither checks MASTER_PORT nor opens it.
  if (it->contains("master_check")) o.master_check = get_bool(*it, "master_check");
  return o;
}

json to_json(const NodeDescriptor& n) {
  json j{{"host", n.host},   {"addr", n.addr},           {"pid", n.pid},
         {"nproc", n.nproc}, {"node_rank", n.node_rank}, {"master_port", n.master_port}};
  // Only when they say something: a join stays as an agent that knows neither sends it.
  if (n.last_rank >= 0) j["last_rank"] = n.last_rank;
  if (n.at_endpoint) j["at_endpoint"] = true;
  if (n.preflight) j["preflight"] = to_json(*n.preflight);
  return j;
}

json to_json(const std::vector<PreflightPeer>& peers) {
  json list = json::array();
  for (const auto& p : peers)
    list.push_back(json{{"group_rank", p.group_rank},
                        {"host", std::string(utf8_prefix(p.host, kMaxNameLength))},
                        {"addr", std::string(utf8_prefix(p.addr, kMaxNameLength))},
                        {"offer", to_json(p.offer)}});
  return list;
}

std::vector<PreflightPeer> optional_peers(const json& j, int group_world_size) {
  std::vector<PreflightPeer> out;
  auto it = j.find("preflight");
  if (it == j.end()) return out;
  if (!it->is_array()) throw ProtocolError("field \"preflight\" must be an array");
  if (it->size() > kMaxPreflightPeers)
    throw ProtocolError(fmt::format("field \"preflight\" holds {} peers, at most {} allowed",
                                    it->size(), kMaxPreflightPeers));
  for (const json& p : *it) {
    if (!p.is_object()) throw ProtocolError("each of \"preflight\" must be an object");
    PreflightPeer peer;
    peer.group_rank = get_small(p, "group_rank", 0, group_world_size - 1);
    peer.host = get_string(p, "host", kMaxNameLength);
    peer.addr = get_string(p, "addr", kMaxNameLength);
    auto offer = optional_offer(json{{"preflight", field(p, "offer")}});
    if (!offer) continue;  // another preflight version: not checked
    peer.offer = std::move(*offer);
    out.push_back(std::move(peer));
  }
  return out;
}

NodeDescriptor node_from_json(const json& j) {
  if (!j.is_object()) throw ProtocolError("field \"node\" must be an object");
  NodeDescriptor n;
  n.host = get_string(j, "host", kMaxNameLength);
  n.addr = get_string(j, "addr", kMaxNameLength);
  n.pid = get_int(j, "pid", 0, std::numeric_limits<std::int32_t>::max());
  n.nproc = get_small(j, "nproc", 1, kMaxNproc);
  n.node_rank = get_small(j, "node_rank", -1, 1 << 20);
  n.master_port = get_small(j, "master_port", 0, 65535);
  if (j.contains("last_rank")) n.last_rank = get_small(j, "last_rank", -1, 1 << 20);
  if (j.contains("at_endpoint")) n.at_endpoint = get_bool(j, "at_endpoint");
  n.preflight = optional_offer(j);
  return n;
}

json to_json(const FailureReport& f) {
  return json{{"host", std::string(utf8_prefix(f.host, kMaxNameLength))},
              {"rank", f.rank},
              {"local_rank", f.local_rank},
              {"exit_code", f.exit_code},
              {"summary", std::string(utf8_prefix(f.summary, kMaxSummaryBytes))}};
}

FailureReport failure_from_json(const json& j) {
  if (!j.is_object()) throw ProtocolError("field \"failure\" must be an object");
  FailureReport f;
  f.host = get_string(j, "host", kMaxNameLength);
  f.rank = get_small(j, "rank", -1, std::numeric_limits<int>::max());
  f.local_rank = get_small(j, "local_rank", -1, 1 << 16);
  f.exit_code = get_small(j, "exit_code", -1024, 1024);
  f.summary = get_string(j, "summary", kMaxTextLength);
  return f;
}

json to_json(const WorkerFailure& f) {
  return json{{"host", std::string(utf8_prefix(f.host, kMaxNameLength))},
              {"rank", f.rank},
              {"local_rank", f.local_rank},
              {"pid", f.pid},
              {"exit_code", f.exit_code},
              {"signal", f.signal},
              {"timestamp", f.timestamp},
              {"error_file", std::string(utf8_prefix(f.error_file, kMaxTextLength))},
              {"message", std::string(utf8_prefix(f.message, kMaxTextLength))},
              {"traceback", std::string(utf8_prefix(f.traceback, kMaxTextLength))},
              {"stderr_tail", std::string(utf8_prefix(f.stderr_tail, kMaxTextLength))}};
}

WorkerFailure worker_failure_from_json(const json& j) {
  if (!j.is_object()) throw ProtocolError("each of \"failures\" must be an object");
  WorkerFailure f;
  f.host = get_string(j, "host", kMaxNameLength);
  f.rank = get_small(j, "rank", -1, std::numeric_limits<int>::max());
  f.local_rank = get_small(j, "local_rank", -1, 1 << 16);
  f.pid = get_int(j, "pid", 0, std::numeric_limits<std::int32_t>::max());
  f.exit_code = get_small(j, "exit_code", -1024, 1024);
  f.signal = get_small(j, "signal", 0, 1024);
  const json& t = field(j, "timestamp");
  if (!t.is_number() || !(std::fabs(t.get<double>()) <= 1e12))
    throw ProtocolError("field \"timestamp\" must be a number of unix seconds");
  f.timestamp = t.get<double>();
  f.error_file = get_string(j, "error_file", kMaxTextLength);
  f.message = get_string(j, "message", kMaxTextLength);
  f.traceback = get_string(j, "traceback", kMaxTextLength);
  if (j.contains("stderr_tail")) f.stderr_tail = get_string(j, "stderr_tail", kMaxTextLength);
  return f;
}

void put_failures(json& j, const std::vector<WorkerFailure>& failures, int not_relayed) {
  if (failures.empty() && not_relayed == 0) return;
  json list = json::array();
  for (const auto& f : failures) list.push_back(to_json(f));
  j["failures"] = std::move(list);
  j["not_relayed"] = not_relayed;
}

// Absent in messages of nodes without failures.
std::vector<WorkerFailure> optional_failures(const json& j, int* not_relayed) {
  std::vector<WorkerFailure> out;
  auto it = j.find("failures");
  if (it == j.end()) return out;
  if (!it->is_array()) throw ProtocolError("field \"failures\" must be an array");
  if (it->size() > kMaxRelayedFailures)
    throw ProtocolError(fmt::format("field \"failures\" holds {}, at most {} allowed",
                                    count_of(static_cast<long long>(it->size()), "failure"),
                                    kMaxRelayedFailures));
  for (const json& f : *it) out.push_back(worker_failure_from_json(f));
  *not_relayed = get_small(j, "not_relayed", 0, std::numeric_limits<int>::max());
  return out;
}

void put_failure(json& j, const std::optional<FailureReport>& f) {
  if (f) j["failure"] = to_json(*f);
}

std::optional<FailureReport> optional_failure(const json& j) {
  auto it = j.find("failure");
  if (it == j.end() || it->is_null()) return std::nullopt;
  return failure_from_json(*it);
}

constexpr std::string_view kStopCauses[] = {"finished",     "worker_failed",   "node_lost",
                                            "join_timeout", "rejected",        "server_lost",
                                            "left",         "preflight_failed"};
constexpr std::string_view kRestartCauses[] = {"worker_failed", "node_lost", "scale_up"};
constexpr std::string_view kRefusals[] = {
    "none",       "run_id",      "token",        "node_rank",     "rank_taken",   "port_held",
    "not_a_host", "unreachable", "no_handshake", "foreign_state", "state_version"};

template <class Enum, std::size_t N>
Enum get_enum(const json& j, const char* key, const std::string_view (&names)[N]) {
  std::string s = get_string(j, key, 64);
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == s) return static_cast<Enum>(i);
  }
  throw ProtocolError(fmt::format("field \"{}\" has unknown value \"{}\"", key, s));
}

std::string get_type(const json& j) { return get_string(j, "type", 32); }

// The answer as it travels: the object itself, or, when it is not one or is longer than a node
// may send, an object that says so (the host and the asking agent still get a valid answer).
json answer_to_json(const std::string& answer) {
  json a = json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (a.is_discarded() || !a.is_object())
    return json{{"error", "this node's answer was not a JSON object"}};
  if (answer.size() > kMaxStacksAnswerBytes)
    return json{{"error", fmt::format("this node's answer ({} bytes) was left out: a node sends at "
                                      "most {} bytes",
                                      answer.size(), kMaxStacksAnswerBytes)}};
  return a;
}

// A roll call's question: absent (the stacks), or an object of at most kMaxQuestionBytes.
std::string question_from_json(const json& j) {
  const auto it = j.find("question");
  if (it == j.end()) return {};
  if (!it->is_object()) throw ProtocolError("field \"question\" must be an object");
  std::string question = it->dump(-1, ' ', false, json::error_handler_t::replace);
  if (question.size() > kMaxQuestionBytes) {
    throw ProtocolError(fmt::format("field \"question\" is {} bytes long, at most {} allowed",
                                    question.size(), kMaxQuestionBytes));
  }
  return question;
}

// The question as it travels; one that is not an object is a caller's bug, sent as an empty one.
void put_question(json& j, const std::string& question) {
  if (question.empty()) return;
  json q = json::parse(question, nullptr, /*allow_exceptions=*/false);
  j["question"] = q.is_object() ? q : json::object();
}

StacksAnswer stacks_answer_from_json(const json& j) {
  StacksAnswer m;
  m.id = static_cast<std::uint64_t>(get_int(j, "id", 0, kMaxRound));
  const json& a = field(j, "answer");
  if (!a.is_object()) throw ProtocolError("field \"answer\" must be an object");
  m.answer = a.dump(-1, ' ', false, json::error_handler_t::replace);
  if (m.answer.size() > kMaxStacksAnswerBytes) {
    throw ProtocolError(fmt::format("field \"answer\" is {} bytes long, at most {} allowed",
                                    m.answer.size(), kMaxStacksAnswerBytes));
  }
  return m;
}

}  // namespace

std::string_view to_string(StopCause cause) { return kStopCauses[static_cast<int>(cause)]; }
std::string_view to_string(RestartCause cause) { return kRestartCauses[static_cast<int>(cause)]; }
std::string_view to_string(Refusal refusal) { return kRefusals[static_cast<int>(refusal)]; }

std::string encode(const ClientMessage& message) {
  json j = std::visit(
      Overloaded{
          [](const Hello& m) {
            return json{{"type", "hello"},    {"magic", m.magic}, {"version", m.version},
                        {"run_id", m.run_id}, {"nonce", m.nonce}, {"auth", m.auth}};
          },
          [](const Auth& m) {
            return json{{"type", "auth"}, {"proof", m.proof}};
          },
          [](const Join& m) {
            return json{{"type", "join"}, {"node", to_json(m.node)}};
          },
          [](const Heartbeat&) {
            return json{{"type", "heartbeat"}};
          },
          [](const Failure& m) {
            json r{{"type", "failure"}, {"round", m.round}, {"failure", to_json(m.failure)}};
            put_failures(r, m.failures, m.not_relayed);
            return r;
          },
          [](const Ended& m) {
            json r{{"type", "ended"}, {"round", m.round}};
            put_failures(r, m.failures, m.not_relayed);
            return r;
          },
          [](const Done& m) {
            return json{{"type", "done"}, {"round", m.round}};
          },
          [](const Abort& m) {
            return json{{"type", "abort"}, {"round", m.round}, {"reason", m.reason}};
          },
          [](const Leave& m) {
            return json{{"type", "leave"}, {"reason", m.reason}};
          },
          [](const StacksRequest& m) {
            json r{{"type", "stacks_request"}, {"id", m.id}};
            put_question(r, m.question);
            return r;
          },
          [](const StacksAnswer& m) {
            return json{
                {"type", "stacks_answer"}, {"id", m.id}, {"answer", answer_to_json(m.answer)}};
          },
      },
      message);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string encode(const ServerMessage& message) {
  json j = std::visit(
      Overloaded{
          [](const Challenge& m) {
            return json{{"type", "challenge"}, {"nonce", m.nonce}, {"proof", m.proof}};
          },
          [](const Welcome& m) {
            return json{{"type", "welcome"},
                        {"keep_alive_interval_s", in_seconds(m.liveness.keep_alive_interval)},
                        {"heartbeat_timeout_s", in_seconds(m.liveness.heartbeat_timeout)}};
          },
          [](const Reject& m) {
            json j{{"type", "reject"}, {"reason", m.reason}};
            if (m.kind != Refusal::none) j["kind"] = to_string(m.kind);
            return j;
          },
          [](const Waiting& m) {
            return json{{"type", "waiting"},        {"round", m.round},
                        {"joined", m.joined},       {"min_nodes", m.min_nodes},
                        {"max_nodes", m.max_nodes}, {"waited_s", m.waited_s},
                        {"timeout_s", m.timeout_s}};
          },
          [](const Assignment& m) {
            json j{{"type", "assignment"},          {"round", m.round},
                   {"group_rank", m.group_rank},    {"group_world_size", m.group_world_size},
                   {"base_rank", m.base_rank},      {"local_world_size", m.local_world_size},
                   {"world_size", m.world_size},    {"master_addr", m.master_addr},
                   {"master_port", m.master_port},  {"restart_count", m.restart_count},
                   {"max_restarts", m.max_restarts}};
            if (!m.preflight.empty()) j["preflight"] = to_json(m.preflight);
            if (m.master_port_checks > 0) j["master_port_checks"] = m.master_port_checks;
            if (!m.node_addresses.empty()) j["node_addresses"] = m.node_addresses;
            return j;
          },
          [](const Restart& m) {
            json r{{"type", "restart"},
                   {"cause", to_string(m.cause)},
                   {"reason", m.reason},
                   {"restart_count", m.restart_count}};
            put_failure(r, m.failure);
            return r;
          },
          [](const Stop& m) {
            json r{{"type", "stop"},
                   {"cause", to_string(m.cause)},
                   {"reason", m.reason},
                   {"exit_code", m.exit_code}};
            put_failure(r, m.failure);
            put_failures(r, m.failures, m.not_relayed);
            return r;
          },
          [](const Halt& m) {
            return json{{"type", "halt"}, {"round", m.round}, {"reason", m.reason}};
          },
          [](const Heartbeat&) {
            return json{{"type", "heartbeat"}};
          },
          [](const StacksAsk& m) {
            json r{{"type", "stacks_ask"}, {"id", m.id}};
            put_question(r, m.question);
            return r;
          },
          [](const StacksAnswer& m) {
            return json{
                {"type", "stacks_answer"}, {"id", m.id}, {"answer", answer_to_json(m.answer)}};
          },
          [](const StacksEnd& m) {
            json missing = json::array();
            for (const auto& x : m.missing)
              missing.push_back({{"host", x.host}, {"reason", x.reason}});
            return json{
                {"type", "stacks_end"}, {"id", m.id}, {"missing", missing}, {"error", m.error}};
          },
      },
      message);
  // Text from peers (host names, summaries) may hold invalid UTF-8: replace, never throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

NodeDescriptor decode_join_node(const json& message) {
  if (!message.is_object()) throw ProtocolError("message is not a JSON object");
  const std::string type = get_type(message);
  if (type != "join")
    throw ProtocolError(fmt::format("a \"join\" message was due, not \"{}\"", type));
  return node_from_json(field(message, "node"));
}

ClientMessage decode_client_message(std::string_view body) {
  json j = parse_object(body);
  std::string type = get_type(j);
  if (type == "hello") {
    Hello m;
    m.magic = get_string(j, "magic", 64);
    m.version = get_small(j, "version", 0, 1 << 20);
    m.run_id = get_string(j, "run_id", kMaxNameLength);
    m.nonce = get_hex(j, "nonce", kHexDigest);
    m.auth = get_bool(j, "auth");
    return m;
  }
  if (type == "auth") return Auth{get_hex(j, "proof", kHexDigest)};
  if (type == "join") return Join{node_from_json(field(j, "node"))};
  if (type == "heartbeat") return Heartbeat{};
  if (type == "failure") {
    Failure m;
    m.round = static_cast<std::uint64_t>(get_int(j, "round", 0, kMaxRound));
    m.failure = failure_from_json(field(j, "failure"));
    m.failures = optional_failures(j, &m.not_relayed);
    return m;
  }
  if (type == "ended") {
    Ended m;
    m.round = static_cast<std::uint64_t>(get_int(j, "round", 0, kMaxRound));
    m.failures = optional_failures(j, &m.not_relayed);
    return m;
  }
  if (type == "done") return Done{static_cast<std::uint64_t>(get_int(j, "round", 0, kMaxRound))};
  if (type == "leave") return Leave{get_string(j, "reason", kMaxTextLength)};
  if (type == "abort")
    return Abort{static_cast<std::uint64_t>(get_int(j, "round", 0, kMaxRound)),
                 get_string(j, "reason", kMaxTextLength)};
  if (type == "stacks_request")
    return StacksRequest{static_cast<std::uint64_t>(get_int(j, "id", 0, kMaxRound)),
                         question_from_json(j)};
  if (type == "stacks_answer") return stacks_answer_from_json(j);
  throw ProtocolError(fmt::format("unknown message type \"{}\"", type));
}

ServerMessage decode_server_message(std::string_view body) {
  json j = parse_object(body);
  std::string type = get_type(j);
  if (type == "challenge")
    return Challenge{get_hex(j, "nonce", kHexDigest), get_hex(j, "proof", kHexDigest)};
  if (type == "welcome") {
    Welcome m;
    m.liveness.keep_alive_interval = get_duration(j, "keep_alive_interval_s");
    m.liveness.heartbeat_timeout = get_duration(j, "heartbeat_timeout_s");
    return m;
  }
  if (type == "reject") {
    Reject m{get_string(j, "reason", kMaxTextLength)};
    // A kind this version does not know (a newer peer) is only a hint the less.
    const auto kind = j.find("kind");
    if (kind != j.end() && kind->is_string()) {
      for (std::size_t i = 0; i < std::size(kRefusals); ++i)
        if (kRefusals[i] == kind->get<std::string>()) m.kind = static_cast<Refusal>(i);
    }
    return m;
  }
  if (type == "waiting") {
    Waiting m;
    m.round = static_cast<std::uint64_t>(get_int(j, "round", 0, kMaxRound));
    m.joined = get_small(j, "joined", 0, 1 << 20);
    m.min_nodes = get_small(j, "min_nodes", 1, 1 << 20);
    m.max_nodes = get_small(j, "max_nodes", 1, 1 << 20);
    m.waited_s = get_seconds(j, "waited_s");
    m.timeout_s = get_seconds(j, "timeout_s");
    return m;
  }
  if (type == "assignment") {
    Assignment m;
    m.round = static_cast<std::uint64_t>(get_int(j, "round", 0, kMaxRound));
    m.group_world_size = get_small(j, "group_world_size", 1, 1 << 20);
    m.group_rank = get_small(j, "group_rank", 0, m.group_world_size - 1);
    m.world_size = get_small(j, "world_size", 1, std::numeric_limits<int>::max());
    m.local_world_size = get_small(j, "local_world_size", 1, m.world_size);
    m.base_rank = get_small(j, "base_rank", 0, m.world_size - m.local_world_size);
    m.master_addr = get_string(j, "master_addr", kMaxNameLength);
    m.master_port = get_small(j, "master_port", 1, 65535);
    m.restart_count = get_small(j, "restart_count", 0, 1 << 20);
    m.max_restarts = get_small(j, "max_restarts", 0, 1 << 20);
    m.preflight = optional_peers(j, m.group_world_size);
    if (j.contains("master_port_checks"))
      m.master_port_checks = get_small(j, "master_port_checks", 0, m.group_world_size - 1);
    // Each node gives at most two: its advertised address and the one the server saw.
    m.node_addresses = optional_strings(j, "node_addresses", 2 * m.group_world_size);
    return m;
  }
  if (type == "restart") {
    Restart m;
    m.cause = get_enum<RestartCause>(j, "cause", kRestartCauses);
    m.reason = get_string(j, "reason", kMaxTextLength);
    m.restart_count = get_small(j, "restart_count", 0, 1 << 20);
    m.failure = optional_failure(j);
    return m;
  }
  if (type == "stop") {
    Stop m;
    m.cause = get_enum<StopCause>(j, "cause", kStopCauses);
    m.reason = get_string(j, "reason", kMaxTextLength);
    m.exit_code = get_small(j, "exit_code", -1024, 1024);
    m.failure = optional_failure(j);
    m.failures = optional_failures(j, &m.not_relayed);
    return m;
  }
  if (type == "halt") {
    Halt m;
    m.round = static_cast<std::uint64_t>(get_int(j, "round", 0, kMaxRound));
    m.reason = get_string(j, "reason", kMaxTextLength);
    return m;
  }
  if (type == "heartbeat") return Heartbeat{};
  if (type == "stacks_ask")
    return StacksAsk{static_cast<std::uint64_t>(get_int(j, "id", 0, kMaxRound)),
                     question_from_json(j)};
  if (type == "stacks_answer") return stacks_answer_from_json(j);
  if (type == "stacks_end") {
    StacksEnd m;
    m.id = static_cast<std::uint64_t>(get_int(j, "id", 0, kMaxRound));
    const json& missing = field(j, "missing");
    if (!missing.is_array() || missing.size() > kMaxStacksMissing)
      throw ProtocolError(
          fmt::format("field \"missing\" must be an array of at most {}", kMaxStacksMissing));
    for (const json& x : missing) {
      if (!x.is_object()) throw ProtocolError("field \"missing\" must hold objects");
      m.missing.push_back(
          {get_string(x, "host", kMaxTextLength), get_string(x, "reason", kMaxTextLength)});
    }
    m.error = get_string(j, "error", kMaxTextLength);
    return m;
  }
  throw ProtocolError(fmt::format("unknown message type \"{}\"", type));
}

std::string_view type_name(const ClientMessage& message) {
  static constexpr std::string_view kNames[] = {
      "hello", "auth",  "join",           "heartbeat",     "failure", "done",
      "leave", "ended", "stacks_request", "stacks_answer", "abort"};
  return kNames[message.index()];
}

std::string_view type_name(const ServerMessage& message) {
  static constexpr std::string_view kNames[] = {
      "challenge", "welcome",   "reject", "waiting",    "assignment",    "restart",
      "stop",      "heartbeat", "halt",   "stacks_ask", "stacks_answer", "stacks_end"};
  return kNames[message.index()];
}

}  // namespace trainrun::rendezvous
