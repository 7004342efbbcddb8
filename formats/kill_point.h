// A test hook, not a feature: with BONSAI_TEST_KILL_AT=<point>:<n> in the environment the process
// raises SIGKILL the n-th time (counting from 1) it passes kill_point(<point>), so tests can check
// what a job killed at exactly that moment leaves on disk (tests/quantize/job_test.cpp). A killed
// process runs no destructor and no handler, as with `kill -9` or the OOM killer.
// Points: "calibrate" (one window entering a block), "block" (a block's checkpoint committed),
// "write:<file name>" (one AtomicFile::write into the file of that name, e.g. write:out.gguf),
// "cell" (a cell of bonsai eval saved).
// Unset, each call is one load of a cached flag.
#pragma once
#include <string_view>

namespace bonsai {

bool kill_points_armed();
void kill_point(std::string_view point);

}  // namespace bonsai
