#include "connection_owner.hpp"

#include <dirent.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string>

#include "trainrun/base/system.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

asio::ip::address plain(asio::ip::address a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) return a.to_v6().to_v4();
  return a;
}

// The kernel prints each 32-bit word of the address as it lies in memory, read as a host-order
// number: copying the number back into memory gives the address' bytes on any host.
std::optional<tcp::endpoint> decode(std::string_view field) {
  const auto colon = field.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string_view hex = field.substr(0, colon);
  if (hex.size() != 8 && hex.size() != 32) return std::nullopt;
  std::array<unsigned char, 16> bytes{};
  for (std::size_t word = 0; word * 8 < hex.size(); ++word) {
    uint32_t value = 0;
    for (char c : hex.substr(word * 8, 8)) {
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                               : -1;
      if (digit < 0) return std::nullopt;
      value = value << 4 | static_cast<uint32_t>(digit);
    }
    std::memcpy(bytes.data() + word * 4, &value, 4);
  }
  unsigned long port = 0;
  try {
    port = std::stoul(std::string(field.substr(colon + 1)), nullptr, 16);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  asio::ip::address address;
  if (hex.size() == 8) {
    asio::ip::address_v4::bytes_type v4;
    std::memcpy(v4.data(), bytes.data(), 4);
    address = asio::ip::address_v4(v4);
  } else {
    asio::ip::address_v6::bytes_type v6;
    std::memcpy(v6.data(), bytes.data(), 16);
    address = asio::ip::address_v6(v6);
  }
  return tcp::endpoint(plain(address), static_cast<unsigned short>(port));
}

bool same(const tcp::endpoint& a, const tcp::endpoint& b) {
  return a.port() == b.port() && plain(a.address()) == plain(b.address());
}

std::optional<pid_t> inode_owner(unsigned long inode, const NodeWorkers& workers) {
  const std::string wanted = "socket:[" + std::to_string(inode) + "]";
  for (const auto& w : workers.workers) {
    const std::string dir = "/proc/" + std::to_string(w.pid) + "/fd";
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    bool found = false;
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char target[64];
      const std::string link = dir + "/" + e->d_name;
      const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
      if (n > 0 && wanted.compare(0, std::string::npos, target, static_cast<std::size_t>(n)) == 0) {
        found = true;
        break;
      }
    }
    ::closedir(d);
    if (found) return w.rank;
  }
  return std::nullopt;
}

}  // namespace

std::optional<unsigned long> client_socket_inode(std::string_view table, const tcp::endpoint& peer,
                                                 const tcp::endpoint& local) {
  std::size_t start = table.find('\n');  // the header
  while (start != std::string_view::npos && start < table.size()) {
    const std::size_t end = table.find('\n', start + 1);
    const std::string_view line =
        table.substr(start + 1, end == std::string_view::npos ? end : end - start - 1);
    start = end;
    // sl, local_address, rem_address, st, tx:rx queues, tr:tm, retrnsmt, uid, timeout, inode
    std::array<std::string_view, 10> fields;
    std::size_t n = 0, at = 0;
    while (n < fields.size()) {
      at = line.find_first_not_of(' ', at);
      if (at == std::string_view::npos) break;
      const std::size_t stop = line.find(' ', at);
      fields[n++] = line.substr(at, stop == std::string_view::npos ? stop : stop - at);
      at = stop;
    }
    if (n < fields.size()) continue;
    const auto own = decode(fields[1]);
    const auto other = decode(fields[2]);
    if (!own || !other || !same(*own, peer) || !same(*other, local)) continue;
    try {
      return std::stoul(std::string(fields[9]));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::optional<int> connection_rank(const tcp::endpoint& peer, const tcp::endpoint& local,
                                   const NodeWorkers& workers) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    const std::optional<std::string> text = read_file(table);
    if (!text) continue;
    if (const auto inode = client_socket_inode(*text, peer, local))
      return inode_owner(*inode, workers);
  }
  return std::nullopt;
}

}  // namespace trainrun::launch
