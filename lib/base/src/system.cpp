#include "trainrun/base/system.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace trainrun {

std::string host_name() {
  char buffer[256] = {};
  if (::gethostname(buffer, sizeof(buffer) - 1) != 0) return "localhost";
  return buffer;
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

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace trainrun
