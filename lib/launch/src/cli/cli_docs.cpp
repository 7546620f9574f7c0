#include "trainrun/launch/cli/cli_docs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

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

const std::map<std::string, std::vector<std::string>>& value_words() {
  static const std::map<std::string, std::vector<std::string>> words = {
      {"nproc-per-node", {"cpu", "gpu", "xpu", "auto"}},
      {"rdzv-backend", {"static", "c10d", "etcd", "etcd-v2"}},
      {"start-method", {"spawn", "fork", "forkserver"}},
      {"event-log-handler", {"null", "console", "dynamic_rendezvous"}},
      {"redirects", {"0", "1", "2", "3"}},
      {"tee", {"0", "1", "2", "3"}},
      {"numa-binding", {"node", "socket", "exclusive", "core-complex"}},
      {"print-completion", {"bash", "zsh", "tcsh"}},
  };
  return words;
}

// Each option with value words: its spellings ("-r", "--redirects") and its words.
std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> valued_words() {
  std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> out;
  for (const auto& doc : option_docs()) {
    auto long_name = std::find_if(doc.names.begin(), doc.names.end(),
                                  [](const std::string& n) { return n.rfind("--", 0) == 0; });
    if (long_name == doc.names.end()) continue;
    const std::vector<std::string> words = completion_values(long_name->substr(2));
    if (!words.empty()) out.emplace_back(doc.names, words);
  }
  return out;
}

// A shell `case` of the options with value words: `PATTERNS) ASSIGN WORDS ;;`.
std::string case_arms(const std::string& before, const std::string& after) {
  std::string arms;
  for (const auto& [names, words] : valued_words())
    arms += "    " + joined(names, "|") + ") " + before + joined(words) + after + " ;;\n";
  return arms;
}

std::string bash_completion() {
  return fmt::format(R"(# bash completion for trainrun, generated from its option table
_trainrun() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="" word i
  local options=" {} "
  local valued=" {} "
  ((COMP_CWORD > 0)) && prev="${{COMP_WORDS[COMP_CWORD - 1]}}"
  COMPREPLY=()
  # Once the entrypoint is given, every later word belongs to it: files, as bash would.
  for ((i = 1; i < COMP_CWORD; i++)); do
    word="${{COMP_WORDS[i]}}"
    [[ "$word" == "--" ]] && return 0
    if [[ "$word" == -* ]]; then
      if [[ "${{COMP_WORDS[i + 1]}}" == "=" ]]; then
        ((i += 2))
      elif [[ "$valued" == *" $word "* ]]; then
        ((i += 1))
      fi
      continue
    fi
    return 0
  done
  # A value (--opt VALUE or --opt=VALUE; bash splits at "="): its words, else files.
  local option=""
  if [[ "$cur" == "=" ]]; then
    option="$prev" cur=""
  elif [[ "$prev" == "=" ]]; then
    option="${{COMP_WORDS[COMP_CWORD - 2]}}"
  elif [[ "$valued" == *" $prev "* ]]; then
    option="$prev"
  fi
  if [[ -n "$option" ]]; then
    local words=""
    case "$option" in
{}    esac
    [[ -n "$words" ]] && mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
    return 0
  fi
  if [[ "$cur" == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$options" -- "$cur")
  fi
  return 0
}}
complete -o default -F _trainrun trainrun
)",
                     joined(all_names(false)), joined(all_names(true)),
                     case_arms("words=\"", "\""));
}

std::string zsh_completion() {
  // zsh keeps "--opt=VALUE" one word: the value words follow the "=" there, or the option word.
  return "#compdef trainrun\nlocal -a reply\n_trainrun_values() {\n  reply=()\n  case $1 in\n" +
         case_arms("reply=(", ")") +
         "  esac\n}\n"
         "if [[ $words[CURRENT] == -*=* ]]; then\n"
         "  _trainrun_values ${words[CURRENT]%%=*}\n"
         "  compset -P '*='\n"
         "  if (( $#reply )); then compadd -- $reply; else _files; fi\n"
         "elif _trainrun_values $words[CURRENT-1]; (( $#reply )); then\n"
         "  compadd -- $reply\n"
         "elif [[ $words[CURRENT] == -* ]]; then\n  compadd -- " +
         joined(all_names(false)) + "\nelse\n  _files\nfi\n";
}

std::string tcsh_completion() {
  std::vector<std::string> bare;  // tcsh completes the word after the "--" it matched
  for (const auto& name : all_names(false))
    if (name.rfind("--", 0) == 0) bare.push_back(name.substr(2));
  std::string value_rules;
  for (const auto& [names, words] : valued_words())
    for (const auto& name : names) value_rules += " 'n/" + name + "/(" + joined(words) + ")/'";
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
\fBtrainrun \-\-help\fR. The guides install.md, cli.md, multinode.md, slurm.md, kubernetes.md and
hangs.md, in \fIshare/doc/trainrun\fR under the installation prefix: \fI/usr/share/doc/trainrun\fR
from the .deb, \fBcmake \-\-install\fR's prefix from a build, the environment's from the wheel
(\fBpython \-c 'import sys; print(sys.prefix)'\fR in it).
)";

}  // namespace

std::vector<std::string> completion_values(const std::string& option) {
  auto it = value_words().find(option);
  return it == value_words().end() ? std::vector<std::string>{} : it->second;
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
