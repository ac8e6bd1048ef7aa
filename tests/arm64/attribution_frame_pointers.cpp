// tests/arm64/attribution.cpp built with frame pointers (scripts/arm64.sh reads
// the flags below): the walk then has them and the call frame information both.
// arm64-cxxflags: -fno-omit-frame-pointer
#include "attribution.cpp"
