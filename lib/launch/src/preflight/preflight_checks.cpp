#include "trainrun/launch/preflight/preflight_checks.hpp"

#include <fmt/format.h>

#include <boost/asio/ip/address.hpp>
#include <cmath>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/base/wording.hpp"

namespace trainrun::launch {

namespace {

constexpr std::string_view kGreeting = "trainrun-preflight";

std::string node_name(const std::string& host, int group_rank) {
  return fmt::format("{} (group rank {})", escape_control(host), group_rank);
}

std::string short_hash(const std::string& sha256) {
  return sha256.empty() ? "no file" : "SHA-256 " + sha256.substr(0, 12);
}

PreflightFinding finding(PreflightMode mode, std::string line) {
  const bool error = mode != PreflightMode::warn;
  if (!error) line += " (a warning with --preflight=warn)";
  return PreflightFinding{error, std::move(line)};
}

}  // namespace

std::string preflight_greeting(const std::string& id, double now) {
  return fmt::format("{} {} {:.6f}\n", kGreeting, id, now);
}

std::optional<PreflightGreeting> parse_preflight_greeting(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  const std::vector<std::string> words = split(line, ' ');
  if (words.size() != 3 || words[0] != kGreeting) return std::nullopt;
  const std::optional<double> time = parse_number(words[2]);
  if (!time || !std::isfinite(*time)) return std::nullopt;
  return PreflightGreeting{words[1], *time};
}

double clock_offset(double peer_time, double sent, double received) {
  return peer_time - (sent + received) / 2;
}

std::vector<PreflightFinding> consistency_findings(
    const PreflightNode& me, const rendezvous::PreflightOffer& mine,
    const std::vector<rendezvous::PreflightPeer>& peers, PreflightMode mode) {
  std::vector<PreflightFinding> out;
  const std::string self = escape_control(me.host);
  for (const auto& p : peers) {
    const rendezvous::PreflightOffer& theirs = p.offer;
    const std::string other = node_name(p.host, p.group_rank);
    if (theirs.trainrun != mine.trainrun)
      out.push_back(finding(
          mode, fmt::format("{} runs trainrun {}, {} trainrun {}: install the same version on "
                            "every node",
                            self, escape_control(mine.trainrun), other,
                            escape_control(theirs.trainrun))));
    if (theirs.entrypoint != mine.entrypoint || theirs.sha256 != mine.sha256)
      out.push_back(finding(
          mode,
          fmt::format("{} runs {} ({}), {} runs {} ({}): the entrypoint differs between the "
                      "nodes; put the same file on every node (a shared file system, or copy it)",
                      self, escape_control(mine.entrypoint), short_hash(mine.sha256), other,
                      escape_control(theirs.entrypoint), short_hash(theirs.sha256))));
    if (theirs.python != mine.python)
      out.push_back(finding(
          mode,
          fmt::format("{}'s workers run Python {}, {}'s Python {}: use the same "
                      "environment on every node (PYTHON_EXEC)",
                      self, escape_control(mine.python), other, escape_control(theirs.python))));
    if (theirs.torch != mine.torch)
      out.push_back(finding(
          mode, fmt::format("{}'s workers import torch {}, {}'s torch {}: install the same "
                            "torch on every node",
                            self, mine.torch.empty() ? "(none)" : escape_control(mine.torch), other,
                            theirs.torch.empty() ? "(none)" : escape_control(theirs.torch))));
  }
  return out;
}

bool is_loopback_address(std::string_view address) {
  boost::system::error_code ec;
  auto a = boost::asio::ip::make_address(std::string(address), ec);
  if (ec) return false;
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6()).is_loopback();
  return a.is_loopback();
}

std::optional<PreflightFinding> master_addr_finding(const PreflightNode& me,
                                                    const std::string& master_addr,
                                                    const std::vector<std::string>& resolved,
                                                    const std::string& problem,
                                                    bool master_elsewhere) {
  const std::string self = escape_control(me.host);
  const std::string name = escape_control(master_addr);
  if (resolved.empty())
    return PreflightFinding{
        true, fmt::format("MASTER_ADDR {} does not resolve on {}: {}; every worker connects to "
                          "it: fix the name (/etc/hosts, DNS) or give an address (--master-addr, "
                          "--local-addr on group rank 0)",
                          name, self, problem.empty() ? "no address" : problem)};
  if (!master_elsewhere) return std::nullopt;
  for (const std::string& a : resolved) {
    if (!is_loopback_address(a)) continue;
    const std::string why =
        me.group_rank == 0
            ? "the other nodes run on other machines: the workers here would offer it to them, "
              "who cannot reach it"
            : "group rank 0 runs on another machine: the workers here would not reach its store";
    return PreflightFinding{
        true,
        fmt::format("MASTER_ADDR {} resolves to {} on {}, a loopback address, but {}; map "
                    "{} to the address the nodes share in /etc/hosts (Debian maps the host's own "
                    "name to 127.0.1.1), or give that address (--master-addr, --local-addr)",
                    name, a, self, why, name)};
  }
  return std::nullopt;
}

std::optional<PreflightFinding> link_finding(const PreflightNode& me, const LinkCheck& link,
                                             const std::string& port_range) {
  if (link.outcome == LinkOutcome::ok) return std::nullopt;
  const std::string self = fmt::format("{} (group rank {}, {})", escape_control(me.host),
                                       me.group_rank, escape_control(me.addr));
  const std::string other = node_name(link.peer.host, link.peer.group_rank);
  const std::string where = fmt::format("{}:{}{}", escape_control(link.target), link_port(link),
                                        link.master_port       ? " (MASTER_PORT)"
                                        : link.via_master_addr ? " (MASTER_ADDR)"
                                                               : "");
  std::string what;
  switch (link.outcome) {
    case LinkOutcome::timed_out:
      what = "no answer";
      break;
    case LinkOutcome::refused:
      what = "connection refused";
      break;
    case LinkOutcome::unreachable:
      what = "unreachable";
      break;
    case LinkOutcome::resolve:
      what = "the address does not resolve here";
      break;
    case LinkOutcome::wrong_peer:
      what = "another program answered, not its trainrun";
      break;
    default:
      what = "failed";
  }
  if (!link.detail.empty()) what += " (" + escape_control(link.detail) + ")";
  const std::string firewall = fmt::format(
      "let TCP from {} to {} through on the ports the process group uses (the ephemeral range{}) "
      "— a firewall rule",
      escape_control(me.addr), escape_control(link.target),
      port_range.empty() ? "" : ", " + port_range + " here");
  const std::string interface = fmt::format(
      "if {} is not the address {} is reached by from {}, make it advertise one that is "
      "(--local-addr) and set GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME to the interface of the "
      "network the nodes share",
      escape_control(link.target), escape_control(link.peer.host), escape_control(me.host));
  std::string fix;
  // On MASTER_PORT the port is the suspect: the link to the preflight port at the same address
  // speaks for the address and the interface.
  if (link.master_port)
    fix = fmt::format(
        "let TCP from {} to {} through on port {}, MASTER_PORT, where every worker connects to "
        "the store of group rank 0 — a firewall rule; or choose a MASTER_PORT it lets through "
        "(--master-port, with a static rendezvous; a dynamic one takes a free port of group rank "
        "0's ephemeral range)",
        escape_control(me.addr), escape_control(link.target), link.master_port);
  else
    switch (link.outcome) {
      case LinkOutcome::timed_out:
      case LinkOutcome::refused:
        fix = firewall + ", or, " + interface;
        break;
      case LinkOutcome::unreachable:
      case LinkOutcome::wrong_peer:
        fix = interface + "; else " + firewall;
        break;
      default:
        fix = interface;
    }
  return PreflightFinding{
      true, fmt::format("{} cannot open a TCP connection to {} at {}: {}; the workers would hang "
                        "in init_process_group. Likely fix: {}",
                        self, other, where, what, fix)};
}

int link_port(const LinkCheck& link) {
  return link.master_port ? link.master_port : link.peer.offer.port;
}

std::optional<PreflightFinding> master_port_finding(const PreflightNode& me,
                                                    const std::string& master_addr, int port,
                                                    int expected, int checked, double waited_s,
                                                    const std::string& problem) {
  const std::string self = fmt::format("{} (group rank {}, {})", escape_control(me.host),
                                       me.group_rank, escape_control(me.addr));
  const std::string where = fmt::format("{}:{} (MASTER_PORT)", escape_control(master_addr), port);
  if (!problem.empty())
    return PreflightFinding{
        true, fmt::format("{} cannot listen on {} for the other nodes to check it: {}; worker "
                          "RANK 0's store could not either. Likely fix: stop what holds port {} "
                          "here, or choose another MASTER_PORT (--master-port)",
                          self, where, escape_control(problem), port)};
  if (checked >= expected) return std::nullopt;
  return PreflightFinding{
      true, fmt::format("{}: {} of {} did not open a TCP connection to {} within {:g} s; the "
                        "workers would hang in init_process_group. Likely fix: let TCP from the "
                        "other nodes to {} through on port {}, MASTER_PORT — a firewall rule",
                        self, expected - checked, count_of(expected, "other node"), where, waited_s,
                        escape_control(master_addr), port)};
}

std::optional<PreflightFinding> clock_finding(const PreflightNode& me, const LinkCheck& link) {
  if (!link.clock_offset_s || std::fabs(*link.clock_offset_s) <= kPreflightClockBound)
    return std::nullopt;
  const double d = *link.clock_offset_s;
  return PreflightFinding{
      false, fmt::format("the clock of {} is {:.1f} s {} that of {}: the root cause of a failure "
                         "is the earliest failure by the nodes' clocks; synchronize them (chrony, "
                         "NTP)",
                         node_name(link.peer.host, link.peer.group_rank), std::fabs(d),
                         d > 0 ? "ahead of" : "behind", escape_control(me.host))};
}

std::string preflight_failure(const PreflightNode& me,
                              const std::vector<PreflightFinding>& findings) {
  std::string out = fmt::format("preflight failed on {}:", escape_control(me.host));
  bool first = true;
  for (const auto& f : findings) {
    if (!f.error) continue;
    out += (first ? " " : "; ") + f.line;
    first = false;
  }
  return out;
}

}  // namespace trainrun::launch
