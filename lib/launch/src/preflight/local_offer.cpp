#include "trainrun/launch/preflight/local_offer.hpp"

#include <sys/stat.h>

#include <sstream>

#include "trainrun/base/files.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/launch/version.hpp"
#include "trainrun/rendezvous/crypto.hpp"

namespace trainrun::launch {

namespace {

// A program larger than this is not hashed (its name is still compared).
constexpr std::size_t kMaxHashedBytes = std::size_t{1} << 30;

std::string file_sha256(const std::string& path) {
  if (path.empty()) return "";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || st.st_size < 0 ||
      static_cast<std::size_t>(st.st_size) > kMaxHashedBytes)
    return "";
  const std::optional<std::string> data = read_file_prefix(path, kMaxHashedBytes + 1);
  if (!data || data->size() > kMaxHashedBytes) return "";
  return rendezvous::to_hex(rendezvous::sha256(*data));
}

}  // namespace

std::string network_identity() {
  struct stat st {};
  const std::string ns = ::stat("/proc/self/ns/net", &st) == 0 ? std::to_string(st.st_ino) : "";
  const std::string seed =
      trim(read_small_file("/proc/sys/kernel/random/boot_id")) + " " + ns + " " + host_name();
  return rendezvous::to_hex(rendezvous::sha256(seed)).substr(0, 16);
}

std::string ephemeral_port_range() {
  std::istringstream in(read_small_file("/proc/sys/net/ipv4/ip_local_port_range"));
  std::string low, high;
  if (!(in >> low >> high)) return "";
  return low + "-" + high;
}

rendezvous::PreflightOffer local_offer(int port, const LocalRun& run) {
  rendezvous::PreflightOffer o;
  o.id = random_hex(16);
  o.port = port;
  o.trainrun = kVersion;
  o.entrypoint = std::string(utf8_prefix(run.entrypoint, rendezvous::kMaxPreflightText));
  o.sha256 = file_sha256(run.entrypoint_file);
  o.python = std::string(utf8_prefix(run.python, rendezvous::kMaxPreflightText));
  o.torch = std::string(utf8_prefix(run.torch, rendezvous::kMaxPreflightText));
  o.network = network_identity();
  o.master_check = true;
  return o;
}

}  // namespace trainrun::launch
