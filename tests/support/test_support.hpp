#pragma once

#include <string>

namespace trainrun::test {

// A TCP port free on 127.0.0.1 now and outside the kernel's ephemeral range, so that no other
// process's outgoing connection or bind(0) can take it before the test binds it (the same rule
// as tests/ports.py).
int free_port();

// A fresh directory under $TMPDIR (default /tmp) named after `tag`, removed with everything in it
// when the test process exits.
std::string make_temp_dir(const std::string& tag);

}  // namespace trainrun::test
