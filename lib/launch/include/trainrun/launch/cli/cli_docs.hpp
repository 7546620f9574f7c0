#pragma once

#include <string>

namespace trainrun::launch {

// What is generated from trainrun's option table (option_docs() in cli/command_line.hpp), so that
// --help, the man page and the completion scripts list the same options with the same words.

// A shell completion script for trainrun's options (bash, zsh or tcsh); throws UsageError naming
// `what` for another shell. The bash one defines _trainrun: options after "-", files elsewhere,
// and only files once the entrypoint is given (what follows belongs to it).
std::string completion_script(const std::string& shell, const std::string& what);

// trainrun(1) in troff (`man -l` reads it): every option of --help with its help text and
// default, by group, then the environment, error files and exit statuses.
std::string manual_page();

}  // namespace trainrun::launch
