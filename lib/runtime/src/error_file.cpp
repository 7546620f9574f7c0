#include <c10/util/Exception.h>
#include <cxxabi.h>
#include <execinfo.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <exception>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <system_error>
#include <type_traits>
#include <trainrun/runtime/error_file.hpp>
#include <trainrun/runtime/errors.hpp>
#include <typeinfo>

namespace trainrun::runtime {
namespace {

std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                             std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

// Frames as "  #N symbol+offset (binary)", with C++ names demangled.
std::string current_stack() {
  void* frames[64];
  const int count = ::backtrace(frames, 64);
  std::unique_ptr<char*, void (*)(void*)> symbols(::backtrace_symbols(frames, count), std::free);
  std::string out;
  for (int i = 1; i < count; ++i) {
    std::string line = symbols ? symbols.get()[i] : "?";
    const auto open = line.find('(');
    const auto plus = line.find('+', open == std::string::npos ? 0 : open);
    if (open != std::string::npos && plus != std::string::npos && plus > open + 1) {
      const std::string mangled = line.substr(open + 1, plus - open - 1);
      line = demangle(mangled.c_str()) + line.substr(plus, line.find(')', plus) - plus) + " (" +
             line.substr(0, open) + ")";
    }
    out += "  #" + std::to_string(i - 1) + " " + line + "\n";
  }
  return out;
}

}  // namespace

std::string format_error_record(const std::string& message, const std::string& stack,
                                std::time_t timestamp) {
  nlohmann::json record;
  record["message"]["message"] = message;
  record["message"]["extraInfo"]["py_callstack"] = stack;
  record["message"]["extraInfo"]["timestamp"] = std::to_string(static_cast<long long>(timestamp));
  return record.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

void write_error_file(const std::filesystem::path& path, const std::string& message,
                      const std::string& stack) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), error);
  const fs::path temp = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << format_error_record(message, stack, std::time(nullptr)) << "\n";
    out.flush();
    if (!out) {
      throw RuntimeError("cannot write the error file " + temp.string() +
                         "; check TORCHELASTIC_ERROR_FILE points to a writable place");
    }
  }
  fs::rename(temp, path, error);
  if (error) {
    fs::remove(temp, error);
    throw RuntimeError("cannot write the error file " + path.string() + ": " + error.message());
  }
}

namespace {

// c10::Error::backtrace() is a string in LibTorch 1.x and a lazily formatted value (a shared
// pointer to something with get()) from 2.2 on.
template <typename Backtrace>
std::string backtrace_text(const Backtrace& backtrace) {
  if constexpr (std::is_convertible_v<Backtrace, std::string>) {
    return backtrace;
  } else {
    return backtrace ? std::string(backtrace->get()) : std::string();
  }
}

}  // namespace

ExceptionReport describe_current_exception() {
  ExceptionReport report;
  if (!std::current_exception()) {
    report.message = "no exception is being handled";
    return report;
  }
  const std::type_info* type = abi::__cxa_current_exception_type();
  const std::string type_name = type != nullptr ? demangle(type->name()) : "unknown exception";
  try {
    throw;
  } catch (const c10::Error& e) {
    report.message = type_name + ": " + e.what_without_backtrace();
    report.stack = backtrace_text(e.backtrace());
  } catch (const std::exception& e) {
    report.message = type_name + ": " + e.what();
    report.stack = "C++ stack where the exception was caught:\n" + current_stack();
  } catch (...) {
    report.message = type_name;
    report.stack = "C++ stack where the exception was caught:\n" + current_stack();
  }
  return report;
}

}  // namespace trainrun::runtime
