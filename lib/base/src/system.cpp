#include "trainrun/base/system.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace trainrun {

std::string host_name() {
  char buffer[256] = {};
  if (::gethostname(buffer, sizeof(buffer) - 1) != 0) return "localhost";
  return buffer;
}

namespace {

// The first address `host` resolves to, as Python's setipaddr takes it.
bool first_address(const std::string& host, sockaddr_storage& out, socklen_t& length) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || !found) return false;
  std::memcpy(&out, found->ai_addr, found->ai_addrlen);
  length = found->ai_addrlen;
  ::freeaddrinfo(found);
  return true;
}

}  // namespace

std::string fully_qualified_host_name() {
  const std::string name = host_name();
  sockaddr_storage address{};
  socklen_t length = 0;
  if (!first_address(name, address, length)) return name;
  const void* raw =
      address.ss_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6&>(address).sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in&>(address).sin_addr);
  const socklen_t raw_length = address.ss_family == AF_INET6 ? sizeof(in6_addr) : sizeof(in_addr);
  hostent entry{};
  hostent* result = nullptr;
  std::vector<char> buffer(16384);
  int error = 0;
  if (::gethostbyaddr_r(raw, raw_length, address.ss_family, &entry, buffer.data(), buffer.size(),
                        &result, &error) != 0 ||
      !result || !result->h_name) {
    return name;
  }
  std::vector<std::string> candidates = {result->h_name};
  for (char** alias = result->h_aliases; alias && *alias; ++alias) candidates.emplace_back(*alias);
  for (const std::string& candidate : candidates) {
    if (candidate.find('.') != std::string::npos) return candidate;
  }
  return candidates.front();
}

bool names_this_machine(const std::string& host) {
  sockaddr_storage address{};
  socklen_t length = 0;
  if (!first_address(host, address, length)) return false;
  // Port 0: any free one, so that the test binds nothing anybody wants.
  if (address.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6&>(address).sin6_port = 0;
  else
    reinterpret_cast<sockaddr_in&>(address).sin_port = 0;
  const int fd = ::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), length) == 0;
  ::close(fd);
  return bound;
}

std::vector<std::string> this_machine_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* bytes = nullptr;
    if (i->ifa_addr->sa_family == AF_INET)
      bytes = &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
    else if (i->ifa_addr->sa_family == AF_INET6)
      bytes = &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr;
    if (bytes && ::inet_ntop(i->ifa_addr->sa_family, bytes, text, sizeof text))
      out.emplace_back(text);
  }
  ::freeifaddrs(list);
  return out;
}

std::string random_hex(std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::vector<std::uint8_t> bytes((n + 1) / 2);
  std::size_t filled = 0;
  while (filled < bytes.size()) {
    const ssize_t got = ::getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("cannot read random bytes: ") + std::strerror(errno));
    }
    filled += static_cast<std::size_t>(got);
  }
  std::string out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out += digits[(bytes[i / 2] >> (i % 2 ? 0 : 4)) & 0xf];
  return out;
}

std::string random_run_id() {
  const std::string h = random_hex(32);
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20);
}

double unix_time() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

bool read_exactly(int fd, void* data, std::size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

std::string read_small_file(const std::string& path) {
  try {
    return read_regular_file(path, std::size_t{64} << 20);
  } catch (const std::runtime_error&) {
    return {};
  }
}

std::string read_regular_file(const std::string& path, std::size_t max_bytes) {
  // Non-blocking: opening a FIFO for reading would wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw std::runtime_error(std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw std::runtime_error(std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw std::runtime_error("a directory");
  if (!S_ISREG(st.st_mode)) throw std::runtime_error("not a regular file");
  std::string text;
  char buffer[65536];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::strerror(errno));
    if (n == 0) return text;
    if (text.size() + static_cast<std::size_t>(n) > max_bytes)
      throw std::runtime_error("longer than " + std::to_string(max_bytes) + " bytes");
    text.append(buffer, static_cast<std::size_t>(n));
  }
}

}  // namespace trainrun
