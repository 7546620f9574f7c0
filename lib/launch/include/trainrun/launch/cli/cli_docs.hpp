#pragma once

#include <string>
#include <vector>

namespace trainrun::launch {

// What is generated from trainrun's option table (option_docs() in cli/command_line.hpp), so that
// --help, the man page and the completion scripts list the same options with the same words.

// A shell completion script for trainrun's options (bash, zsh or tcsh); throws UsageError naming
// `what` for another shell. The bash one defines _trainrun: options after "-", the values of an
// option that takes one of a few words (completion_values), files elsewhere, and only files once
// the entrypoint is given (what follows belongs to it).
std::string completion_script(const std::string& shell, const std::string& what);

// The words an option's value is completed from ("rdzv-backend": static c10d etcd etcd-v2), by
// its dashed long name; empty for an option whose value is a path or a free text.
std::vector<std::string> completion_values(const std::string& option);

// trainrun(1) in troff (`man -l` reads it): every option of --help with its help text and
// default, by group, then the environment, error files and exit statuses.
std::string manual_page();

}  // namespace trainrun::launch
