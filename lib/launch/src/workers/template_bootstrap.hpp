#pragma once

#include <string>

namespace trainrun::launch {

// The Python programs trainrun runs in a worker's interpreter, kept in the binary, which needs no
// file beside it.
// The --preload template: `python -c kTemplateLoader SIZE ARGS...` reads SIZE bytes of
// template_bootstrap() from its standard input and runs them with ARGS (warm_start.cpp gives
// them).
extern const char* const kTemplateLoader;
const std::string& template_bootstrap();
// A Python worker of torch 2.x started the ordinary way: its diagnosis channel's server, then
// its command, as `python COMMAND...` runs it (diagnosis.hpp).
extern const char* const kDiagnosisLoader;
const std::string& diagnosis_bootstrap();

}  // namespace trainrun::launch
