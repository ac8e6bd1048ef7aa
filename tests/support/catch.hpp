// Lets the suite build against Catch2 v2 (Debian 12's catch2) or v3.
#pragma once
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define SPANPROF_CATCH3 1
#else
#include <catch2/catch.hpp>
#endif
