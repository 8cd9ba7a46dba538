// The program that builds the test programs' precompiled header
// (tests/CMakeLists.txt); it does nothing itself.
int main() { return 0; }
