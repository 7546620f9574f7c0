#include "rendezvous_token.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "errors.hpp"

namespace trainrun::launch {
namespace {

constexpr std::size_t kMaxTokenBytes = 64 * 1024;

std::string trim_trailing(std::string s) {
  while (!s.empty() &&
         (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  return s;
}

}  // namespace

std::optional<std::string> load_token(const std::optional<std::string>& token_file,
                                      const std::map<std::string, std::string>& env) {
  if (token_file) {
    std::ifstream in(*token_file, std::ios::binary);
    if (!in) {
      throw UsageError(fmt::format("--rdzv-conf token_file={}: cannot read it: {}", *token_file,
                                   std::strerror(errno)));
    }
    std::string text(kMaxTokenBytes + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxTokenBytes) {
      throw UsageError(
          fmt::format("--rdzv-conf token_file={}: larger than {} bytes; is it the right file?",
                      *token_file, kMaxTokenBytes));
    }
    text = trim_trailing(std::move(text));
    if (text.empty()) {
      throw UsageError(fmt::format(
          "--rdzv-conf token_file={}: the file is empty; put the shared token in it", *token_file));
    }
    return text;
  }
  if (auto it = env.find("TRAINRUN_RDZV_TOKEN"); it != env.end() && !it->second.empty()) {
    std::string token = trim_trailing(it->second);
    if (token.empty())
      throw UsageError("TRAINRUN_RDZV_TOKEN is blank; set the shared token or unset it");
    return token;
  }
  return std::nullopt;
}

}  // namespace trainrun::launch
