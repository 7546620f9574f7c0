#pragma once

namespace trainrun::launch {

// The Python program of the --preload template, kept in the binary, which needs no file beside
// it: `python -c kTemplateLoader SIZE ARGS...` reads SIZE bytes of kTemplateBootstrap from its
// standard input and runs them with ARGS (warm_start.cpp gives them).
extern const char* const kTemplateLoader;
extern const char* const kTemplateBootstrap;

}  // namespace trainrun::launch
