// A native process that waits in demo::stuck_here() until its stdin is closed, with a second
// thread asleep: the target of tests/stacks/process_test.cpp.
#include <unistd.h>

#include <cstdio>
#include <thread>

namespace demo {

__attribute__((noinline)) long stuck_here() {
  char c;
  return read(0, &c, 1);
}

}  // namespace demo

int main() {
  std::thread([] { sleep(100000); }).detach();
  std::printf("ready\n");
  std::fflush(stdout);
  return demo::stuck_here() < 0 ? 1 : 0;
}
