#pragma once

#include <sys/types.h>

#include <functional>
#include <mutex>
#include <optional>

#include "trainrun/base/process.hpp"

// The process's one reaper: every child's end (and stop, and continuation) is collected here,
// and nowhere else, and goes to whoever started that child, whatever the thread. A child is
// registered as it is forked (spawn and run_in_child do it, under fork_lock), waited for by its
// starter (wait_for_exit, try_reap) until it is adopted by a handler; collect() (on SIGCHLD, by
// the thread that owns the signal) hands each adopted child's events to its handler, and those of
// children nobody started (orphans re-parented to a child subreaper) to the orphans' handler. A
// child waited for by its starter is never reaped by collect(): its status stays its starter's.
namespace trainrun::reaper {

using Handler = std::function<void(pid_t pid, const WaitEvent& event)>;

// Held across a fork and the registration of its child (started): collect() cannot take a child
// that exists for an instant unregistered for an orphan.
std::unique_lock<std::mutex> fork_lock();
// A child just forked by the holder of `lock`: its starter's to wait for.
void started(const std::unique_lock<std::mutex>& lock, pid_t pid);

// In the child of that fork (run_in_child's body may start children of its own): the lock its
// copy of the registry holds for a thread it does not have is made anew.
void forked(std::unique_lock<std::mutex>& lock);

// `pid`, a child of ours, is `handler`'s from now on: its events go to it from collect(). A child
// not forked here (a worker forked by the --preload template's child) may be adopted as well.
void adopt(pid_t pid, Handler handler);
// Where the events of children nobody started go (a child subreaper's orphans); none: reaped and
// dropped.
void set_orphans(Handler handler);

// Reaps every adopted child and orphan with an event to give (ended, stopped, continued; none
// waits) and hands each to its handler, after the registry's lock is let go: a handler may start
// or adopt children.
void collect();

// For a child its starter waits for: its end, reaped now, or `running`, or `gone` (not ours).
struct Reaped {
  enum class State { running, ended, gone };
  State state = State::gone;
  ExitStatus status;
};
Reaped try_reap(pid_t pid);
// Whether that child has ended, without reaping it (its pid and process group stay reserved
// until it is reaped).
bool has_ended(pid_t pid);

// Whether any child of ours is left, ended or not, other than those their starters wait for.
bool has_children();

}  // namespace trainrun::reaper
