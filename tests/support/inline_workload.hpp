// The source-lines test's workload (inline_workload.cpp), built -O2 -g whatever the
// build type: a noinline handler whose hot loop is an always_inline function.
#pragma once

namespace inline_workload {
// Runs the handler for `cpu_seconds` of thread CPU.
double handle_inline_request(double cpu_seconds);
// The line of the hot loop's body in inline_workload.cpp.
int hot_loop_line();
}  // namespace inline_workload
