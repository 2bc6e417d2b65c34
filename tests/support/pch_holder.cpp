// The executable that owns the test executables' precompiled header (tests/CMakeLists.txt,
// dpcore_test_pch): it has no tests of its own; GoogleTest's main runs none.
