#include "connection_owner.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
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

// The kernel's answer about the one socket whose own address is `own` and whose other end is
// `other` (sock_diag, an exact lookup in its hash of connections: the cost of one connection,
// whatever the number of sockets, where reading /proc/net/tcp costs every socket of the
// machine). nullopt: no such socket here; an error (no sock_diag in this kernel) too.
std::optional<unsigned long> diag_socket_inode(const tcp::endpoint& own, const tcp::endpoint& other,
                                               bool& unavailable) {
  const int fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) {
    unavailable = true;
    return std::nullopt;
  }
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST;
  inet_diag_req_v2& r = message.request;
  r.sdiag_protocol = IPPROTO_TCP;
  r.idiag_states = ~0u;
  r.id.idiag_sport = htons(own.port());
  r.id.idiag_dport = htons(other.port());
  r.id.idiag_cookie[0] = r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  const auto own_address = plain(own.address());
  const auto other_address = plain(other.address());
  if (own_address.is_v4() && other_address.is_v4()) {
    r.sdiag_family = AF_INET;
    const auto a = own_address.to_v4().to_bytes();
    const auto b = other_address.to_v4().to_bytes();
    std::memcpy(r.id.idiag_src, a.data(), 4);
    std::memcpy(r.id.idiag_dst, b.data(), 4);
  } else {
    r.sdiag_family = AF_INET6;
    const auto v6 = [](const asio::ip::address& x) {
      return x.is_v4() ? asio::ip::make_address_v6(asio::ip::v4_mapped, x.to_v4()) : x.to_v6();
    };
    const auto a = v6(own_address).to_bytes();
    const auto b = v6(other_address).to_bytes();
    std::memcpy(r.id.idiag_src, a.data(), 16);
    std::memcpy(r.id.idiag_dst, b.data(), 16);
  }
  std::optional<unsigned long> inode;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd, &message, sizeof message, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) == static_cast<ssize_t>(sizeof message)) {
    alignas(nlmsghdr) char reply[8192];
    const ssize_t n = ::recv(fd, reply, sizeof reply, 0);
    if (n > 0) {
      const auto* h = reinterpret_cast<const nlmsghdr*>(reply);
      if (NLMSG_OK(h, static_cast<unsigned>(n)) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
          h->nlmsg_len >= NLMSG_LENGTH(sizeof(inet_diag_msg)))
        inode = reinterpret_cast<const inet_diag_msg*>(NLMSG_DATA(h))->idiag_inode;
      else if (NLMSG_OK(h, static_cast<unsigned>(n)) && h->nlmsg_type == NLMSG_ERROR &&
               h->nlmsg_len >= NLMSG_LENGTH(sizeof(nlmsgerr))) {
        // ENOENT: no such socket here. Anything else: this kernel cannot answer.
        const int error = -reinterpret_cast<const nlmsgerr*>(NLMSG_DATA(h))->error;
        if (error != ENOENT) unavailable = true;
      }
    } else {
      unavailable = true;
    }
  } else {
    unavailable = true;
  }
  ::close(fd);
  return inode;
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
  bool unavailable = false;
  if (const auto inode = diag_socket_inode(peer, local, unavailable))
    return inode_owner(*inode, workers);
  if (!unavailable) return std::nullopt;
  // No sock_diag here: the kernel's tables, read whole.
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    const std::optional<std::string> text = read_file(table);
    if (!text) continue;
    if (const auto inode = client_socket_inode(*text, peer, local))
      return inode_owner(*inode, workers);
  }
  return std::nullopt;
}

}  // namespace trainrun::launch
