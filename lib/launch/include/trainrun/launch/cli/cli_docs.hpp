#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trainrun::launch {

// What is generated from trainrun's option table (option_docs() in cli/command_line.hpp), so that
// --help, the man page and the completion scripts list the same options with the same words.

// `trainrun --help` (`all`: --help-all) laid out for `width` columns: the options by group, each
// once by its dashed name. --help gives each option's summary in one line and names the rest at
// the end of their group; --help-all gives every option with its full description and default,
// then `manual`: where the installed manual is (manual_line), when there is one.
std::string help_text(bool all, int width, const std::optional<std::string>& manual = {});

// The width --help is laid out for: $COLUMNS when it is a number, else the terminal's width (of
// stdout, when it is one), else 80; kept within 40..100 (longer lines read badly), and never
// wider than that terminal.
int help_width(const std::map<std::string, std::string>& env, std::optional<int> terminal_width);

// The width of the terminal `fd` is, or nothing when it is not one.
std::optional<int> terminal_width(int fd);

// The shells --print-completion writes a script for.
std::vector<std::string> completion_shells();

// A shell completion script for trainrun's options (bash, zsh or tcsh); throws UsageError naming
// `what` for another shell. The bash one defines _trainrun: options after "-", the values of an
// option that takes one of a few words (completion_values), files elsewhere, and only files once
// the entrypoint is given (what follows belongs to it); `--stacks` as the first word.
std::string completion_script(const std::string& shell, const std::string& what);

// The words an option's value is completed from ("rdzv-backend": static c10d etcd etcd-v2), by
// its dashed long name; empty for an option whose value is a path or a free text.
std::vector<std::string> completion_values(const std::string& option);

// trainrun(1) in troff (`man -l` reads it): every option of --help with its help text and
// default, by group, then the environment, error files and exit statuses.
std::string manual_page();

}  // namespace trainrun::launch
