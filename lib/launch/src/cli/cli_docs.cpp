#include "trainrun/launch/cli/cli_docs.hpp"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/launch/cli/command_line.hpp"
#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/version.hpp"

namespace trainrun::launch {

namespace {

std::string joined(const std::vector<std::string>& words, const std::string& sep = " ") {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : sep) + w;
  return out;
}

std::vector<std::string> all_names(bool valued_only) {
  std::vector<std::string> names;
  for (const auto& doc : option_docs())
    if (!valued_only || doc.takes_value)
      names.insert(names.end(), doc.names.begin(), doc.names.end());
  return names;
}

// The names a completion offers: with `underscored`, torchrun's spellings ("--nproc_per_node"),
// offered only to a word that has an underscore; else the others ("--nproc-per-node", "-m"), so
// that "--npr" completes to one option.
std::vector<std::string> offered_names(bool underscored) {
  std::vector<std::string> names;
  for (const auto& name : all_names(false))
    if ((name.find('_') != std::string::npos) == underscored) names.push_back(name);
  return names;
}

// The options whose value is one of a few words (or a list of them).
std::vector<OptionDoc> valued_docs() {
  std::vector<OptionDoc> out;
  for (auto& doc : option_docs())
    if (!doc.values.empty()) out.push_back(std::move(doc));
  return out;
}

// The spellings of the options whose value is a comma-separated list of words.
std::vector<std::string> list_names() {
  std::vector<std::string> names;
  for (const auto& doc : valued_docs())
    if (doc.value_list) names.insert(names.end(), doc.names.begin(), doc.names.end());
  return names;
}

// A shell `case` of the options with value words: `PATTERNS) ASSIGN WORDS ;;`.
std::string case_arms(const std::string& before, const std::string& after) {
  std::string arms;
  for (const auto& doc : valued_docs())
    arms += "    " + joined(doc.names, "|") + ") " + before + joined(doc.values) + after + " ;;\n";
  return arms;
}

// `text` in lines of at most `width` columns (a word longer than that stays whole): the first
// line starts with `first`, the others with `indent` spaces. The help text is ASCII, so a byte is
// a column.
std::string wrapped(const std::string& text, size_t width, const std::string& first,
                    size_t indent) {
  std::string out, line = first;
  bool line_has_word = false;
  for (const std::string& word : split(text, ' ')) {
    if (word.empty()) continue;
    if (line_has_word && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = std::string(indent, ' ');
      line_has_word = false;
    }
    line += (line_has_word ? " " : "") + word;
    line_has_word = true;
  }
  return out + line + "\n";
}

// The dashed long name ("--nproc-per-node" of "--nproc_per_node" too).
std::string long_name(const OptionDoc& doc) {
  return *std::find_if(doc.names.begin(), doc.names.end(),
                       [](const std::string& n) { return n.rfind("--", 0) == 0; });
}

// How --help names an option: its short name, then its dashed long name, "VALUE" if it takes one.
std::string shown_names(const OptionDoc& doc) {
  std::string names = doc.names.front().rfind("--", 0) == 0 ? "" : doc.names.front() + ", ";
  names += long_name(doc);
  return doc.takes_value ? names + " VALUE" : names;
}

// The groups in the table's order, each with its options.
std::vector<std::pair<std::string, std::vector<OptionDoc>>> grouped(std::vector<OptionDoc> docs) {
  std::vector<std::pair<std::string, std::vector<OptionDoc>>> groups;
  for (auto& doc : docs) {
    auto group = std::find_if(groups.begin(), groups.end(),
                              [&](const auto& g) { return g.first == doc.group; });
    if (group == groups.end()) group = groups.insert(groups.end(), {doc.group, {}});
    group->second.push_back(std::move(doc));
  }
  return groups;
}

// One option of --help: its names, then its summary in a column, or below them where they are
// too wide for it.
std::string summary_entry(const OptionDoc& doc, size_t column, size_t width) {
  const std::string names = "  " + shown_names(doc);
  if (names.size() + 2 <= column)
    return wrapped(doc.summary, width, names + std::string(column - names.size(), ' '), column);
  return names + "\n" + wrapped(doc.summary, width, std::string(column, ' '), column);
}

// One option of --help-all: its names and default, then its description below them.
std::string full_entry(const OptionDoc& doc, size_t width) {
  std::string head = shown_names(doc);
  if (!doc.default_value.empty()) head += " (default: " + doc.default_value + ")";
  return wrapped(head, width, "  ", 6) + wrapped(doc.help, width, "      ", 6);
}

std::string bash_completion() {
  return fmt::format(R"(# bash completion for trainrun, generated from its option table
_trainrun() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" word i j
  local options=" {} " underscored=" {} "
  local valued=" {} "
  local lists=" {} "
  COMPREPLY=()
  # trainrun --stacks[=RUN_ID|PID] is a mode of its own: nothing follows it but its selector.
  ((COMP_CWORD > 1)) && [[ "${{COMP_WORDS[1]}}" == --stacks ]] && return 0
  # Once the entrypoint is given, every later word belongs to it: files, as bash would. bash
  # splits a word at "=" and ":" (COMP_WORDBREAKS): "--tee=0:1" is five words.
  for ((i = 1; i < COMP_CWORD; i++)); do
    word="${{COMP_WORDS[i]}}"
    [[ "$word" == "--" ]] && return 0
    if [[ "$word" == ":" ]]; then
      ((i += 1))
    elif [[ "$word" == -* ]]; then
      if [[ "${{COMP_WORDS[i + 1]}}" == "=" ]]; then
        ((i += 2))
      elif [[ "$valued" == *" $word "* ]]; then
        ((i += 1))
      fi
    else
      return 0
    fi
  done
  # The first word of the value being typed (j), the pieces after it joined to it by ":".
  j=COMP_CWORD
  while ((j > 1)) && [[ "${{COMP_WORDS[j]}}" == ":" || "${{COMP_WORDS[j - 1]}}" == ":" ]]; do
    ((j--))
  done
  # The option it is the value of: --opt VALUE, or --opt=VALUE (bash splits at "=").
  local option=""
  if [[ "${{COMP_WORDS[j]}}" == "=" ]]; then
    option="${{COMP_WORDS[j - 1]}}"
  elif ((j > 1)) && [[ "${{COMP_WORDS[j - 1]}}" == "=" ]]; then
    option="${{COMP_WORDS[j - 2]}}"
  elif ((j > 1)) && [[ "$valued" == *" ${{COMP_WORDS[j - 1]}} "* ]]; then
    option="${{COMP_WORDS[j - 1]}}"
  fi
  [[ "$cur" == "=" || "$cur" == ":" ]] && cur=""
  if [[ -n "$option" ]]; then
    # Its words, else files. A list's words follow the last comma typed.
    local words="" before=""
    case "$option" in
{}    esac
    if [[ "$lists" == *" $option "* && "$cur" == *,* ]]; then
      before="${{cur%,*}},"
      cur="${{cur##*,}}"
    fi
    [[ -n "$words" ]] && mapfile -t COMPREPLY < <(compgen -P "$before" -W "$words" -- "$cur")
    return 0
  fi
  if [[ "$cur" == -*_* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$underscored" -- "$cur")
  elif [[ "$cur" == -* ]]; then
    ((COMP_CWORD == 1)) && options+="--stacks "
    mapfile -t COMPREPLY < <(compgen -W "$options" -- "$cur")
  fi
  return 0
}}
complete -o default -F _trainrun trainrun
)",
                     joined(offered_names(false)), joined(offered_names(true)),
                     joined(all_names(true)), joined(list_names()), case_arms("words=\"", "\""));
}

std::string zsh_completion() {
  // zsh keeps "--opt=VALUE" one word: the value words follow the "=" there, or the option word;
  // in a list (-r 0:1,1:3) they follow the last "," or ":".
  return "#compdef trainrun\nlocal -a reply\n_trainrun_values() {\n  reply=()\n  case $1 in\n" +
         case_arms("reply=(", ")") +
         "  esac\n}\n"
         "if (( CURRENT > 2 )) && [[ $words[2] == --stacks* ]]; then\n"
         "  return 0\n"
         "elif [[ $words[CURRENT] == -*=* ]]; then\n"
         "  _trainrun_values ${words[CURRENT]%%=*}\n"
         "  compset -P '*='\n"
         "  compset -P '*[,:]'\n"
         "  if (( $#reply )); then compadd -- $reply; else _files; fi\n"
         "elif _trainrun_values $words[CURRENT-1]; (( $#reply )); then\n"
         "  compset -P '*[,:]'\n"
         "  compadd -- $reply\n"
         "elif [[ $words[CURRENT] == -*_* ]]; then\n  compadd -- " +
         joined(offered_names(true)) + "\nelif [[ $words[CURRENT] == -* ]]; then\n  compadd -- " +
         joined(offered_names(false)) +
         "\n  (( CURRENT == 2 )) && compadd -- --stacks\nelse\n  _files\nfi\n";
}

std::string tcsh_completion() {
  std::vector<std::string> bare;  // tcsh completes the word after the "--" it matched
  for (const auto& name : offered_names(false))
    if (name.rfind("--", 0) == 0) bare.push_back(name.substr(2));
  std::string value_rules;
  for (const auto& doc : valued_docs())
    for (const auto& name : doc.names)
      value_rules += " 'n/" + name + "/(" + joined(doc.values) + ")/'";
  return "complete trainrun 'c/--/(" + joined(bare) + ")/'" + value_rules + " 'p/*/f/'\n";
}

// Text as troff prints it: backslashes and hyphens escaped (an option stays "--x" in the output,
// never a typographic dash), a leading dot or quote made literal.
std::string troff(const std::string& text) {
  std::string out;
  bool line_start = true;
  for (char c : text) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    if (c == '\\')
      out += "\\e";
    else if (c == '-')
      out += "\\-";
    else
      out += c;
    line_start = c == '\n';
  }
  return out;
}

std::string option_entry(const OptionDoc& doc) {
  std::vector<std::string> names;
  for (const auto& n : doc.names) names.push_back("\\fB" + troff(n) + "\\fR");
  std::string entry = ".TP\n" + joined(names, ", ");
  if (doc.takes_value) entry += " \\fIVALUE\\fR";
  entry += "\n" + troff(doc.help);
  if (!doc.default_value.empty()) entry += " (default: " + troff(doc.default_value) + ")";
  return entry + "\n";
}

// --stacks is not a launch option (main reads it before the option table), so it is told here.
constexpr const char* kManualTail = R"(.SH A RUNNING JOB'S STACKS
.TP
\fBtrainrun \-\-stacks\fR[\fB=\fR\fIRUN_ID\fR|\fIPID\fR]
Prints the stack of every worker of a running job of this user, grouped by identical stacks with
the odd ranks named, without stopping it; the raw dumps go to the job's log directory. On a
multi\-node job with the built\-in rendezvous the agent asked gathers the other nodes' stacks
through it; a node that does not answer within 15 s is named. See hangs.md (SEE ALSO).
.SH ENVIRONMENT
.TP
\fBPET_\fR\fINAME\fR
The value of option \fB\-\-\fR\fIname\fR when the command line does not give it (flags: 0 or 1),
as in torchrun: \fBPET_NPROC_PER_NODE=8\fR.
.TP
\fBTRAINRUN_LOG_FORMAT\fR
\fBtimestamps\fR: as \fB\-\-log\-timestamps\fR; \fBplain\fR: without.
.TP
\fBTRAINRUN_RDZV_TOKEN\fR
The rendezvous' shared token, when \fB\-\-rdzv\-conf token_file=\fR\fIPATH\fR is not given.
.TP
\fBTORCHELASTIC_ENABLE_FILE_TIMER\fR, \fBTORCHELASTIC_TIMER_FILE\fR
With the first set to 1, trainrun serves TorchElastic's file timer at the FIFO the second names
(else a new one under $TMPDIR): an expired scope's worker has its stack written, then gets the
signal it asked for. See cli.md (SEE ALSO), section "Supervision".
.TP
\fBPYTHON_EXEC\fR
The Python that runs a script or module entrypoint (default: python3 on PATH).
.SH ERROR FILES
Each worker finds in \fBTORCHELASTIC_ERROR_FILE\fR the path of a JSON file where it can record
why it failed: a message and a traceback (PyTorch's
\fBtorch.distributed.elastic.multiprocessing.errors.record\fR decorator writes it; so does
trainrun's C++ runtime). The failure summary shows it as the worker's traceback, and the earliest
timestamp among them names the root cause. A worker that writes none is shown with
\fIerror_file: <N/A>\fR, with the last lines of its stderr when there are any. See cli.md (SEE
ALSO), section "Error files".
.SH EXIT STATUS
0 when every worker exited 0; the root-cause worker's exit code (128+N for signal N) when the job
failed; 2 for a bad command line; 126 or 127 for an entrypoint that cannot run; 128+N when
trainrun was stopped by signal N; 1 for anything else.
.SH SEE ALSO
\fBtrainrun \-\-help\fR, \fBtrainrun \-\-help\-all\fR. The guides install.md, cli.md,
multinode.md, slurm.md, kubernetes.md and hangs.md, in \fIshare/doc/trainrun\fR under the
installation prefix: \fI/usr/share/doc/trainrun\fR from the .deb, \fBcmake \-\-install\fR's
prefix from a build, the environment's from the wheel (\fBpython \-c 'import sys;
print(sys.prefix)'\fR in it).
)";

}  // namespace

std::string help_text(bool all, int width, const std::optional<std::string>& manual) {
  const size_t columns = static_cast<size_t>(std::max(width, 1));
  std::string text =
      wrapped("Usage: trainrun [OPTIONS] ENTRYPOINT [ARGS...]", columns, "", 7) +
      wrapped("or: trainrun --stacks[=RUN_ID|PID] (a running job's stacks)", columns, "   ", 7) +
      wrapped("Launch and supervise distributed PyTorch training workers, as torchrun does.",
              columns, "", 0) +
      wrapped("Each option is accepted as --a-b and as --a_b; PET_A_B gives its default.", columns,
              "", 0);
  const auto groups = grouped(option_docs());
  // The summaries' column: past the widest names it fits, within reason.
  size_t column = 0;
  for (const auto& [group, docs] : groups)
    for (const auto& doc : docs)
      if (!doc.summary.empty()) column = std::max(column, shown_names(doc).size() + 4);
  column = std::min({column, size_t{30}, columns / 2});
  // Too narrow a column for a summary: each goes below its names instead.
  if (columns < column + 28) column = 6;
  for (const auto& [group, docs] : groups) {
    text += "\n" + group + ":\n";
    std::string others;
    for (const auto& doc : docs) {
      if (all)
        text += full_entry(doc, columns);
      else if (!doc.summary.empty())
        text += summary_entry(doc, column, columns);
      else
        others += (others.empty() ? "" : ", ") + long_name(doc);
    }
    if (!others.empty()) text += wrapped("Also: " + others, columns, "  ", 8);
  }
  text += "\n";
  if (!all) return text + wrapped("All options in full: trainrun --help-all", columns, "", 0);
  return manual ? text + wrapped(*manual, columns, "", 0) : text;
}

int help_width(const std::map<std::string, std::string>& env, std::optional<int> terminal_width) {
  int width = terminal_width.value_or(80);
  auto columns = env.find("COLUMNS");
  if (columns != env.end())
    if (const auto n = parse_integer(columns->second); n && *n > 0 && *n < 100000)
      width = static_cast<int>(*n);
  width = std::clamp(width, 40, 100);
  return terminal_width && *terminal_width > 0 ? std::min(width, *terminal_width) : width;
}

std::optional<int> terminal_width(int fd) {
  struct winsize size {};
  if (::isatty(fd) == 0 || ::ioctl(fd, TIOCGWINSZ, &size) != 0 || size.ws_col == 0)
    return std::nullopt;
  return size.ws_col;
}

std::vector<std::string> completion_shells() { return {"bash", "zsh", "tcsh"}; }

std::vector<std::string> completion_values(const std::string& option) {
  for (const auto& doc : option_docs())
    if (std::find(doc.names.begin(), doc.names.end(), "--" + option) != doc.names.end())
      return doc.values;
  return {};
}

std::string completion_script(const std::string& shell, const std::string& what) {
  if (shell == "bash") return bash_completion();
  if (shell == "zsh") return zsh_completion();
  if (shell == "tcsh") return tcsh_completion();
  throw UsageError(fmt::format("{}: use bash, zsh or tcsh", what));
}

std::string manual_page() {
  std::string page = fmt::format(
      ".TH TRAINRUN 1 \"\" \"trainrun {}\" \"User Commands\"\n"
      // No hyphenation, no justification: option and variable names stay whole, as typed.
      ".nh\n.ad l\n"
      ".SH NAME\ntrainrun \\- launch and supervise distributed PyTorch training workers\n"
      ".SH SYNOPSIS\n.B trainrun\n[\\fIOPTIONS\\fR] \\fIENTRYPOINT\\fR [\\fIARGS\\fR...]\n"
      ".SH DESCRIPTION\nA drop\\-in replacement for \\fBtorchrun\\fR: starts \\fI\\-\\-nproc\\-per"
      "\\-node\\fR workers of \\fIENTRYPOINT\\fR on this node (a Python script, \\fB\\-m\\fR "
      "module, or program), gives them torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, "
      "...), meets the other nodes at a rendezvous, and stops, restarts or reports the job when a "
      "worker fails. Everything after \\fIENTRYPOINT\\fR is passed to it untouched.\n"
      ".SH OPTIONS\n",
      kVersion);
  std::vector<std::string> groups;
  const std::vector<OptionDoc> docs = option_docs();
  for (const auto& doc : docs)
    if (std::find(groups.begin(), groups.end(), doc.group) == groups.end())
      groups.push_back(doc.group);
  for (const auto& group : groups) {
    page += ".SS " + troff(group) + "\n";
    for (const auto& doc : docs)
      if (doc.group == group) page += option_entry(doc);
  }
  return page + kManualTail;
}

}  // namespace trainrun::launch
