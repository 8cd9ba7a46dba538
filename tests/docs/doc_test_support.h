// Support for the programs tests/docs extracts from the Markdown: a print that
// tags its output with the doc comment it must match, a statement that must
// raise a given error, and block boundaries for a ```text block's output. The
// tags are control characters that check_snippet_output.py strips.
#pragma once

#include <cstdio>
#include <exception>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace tessel_doc {

inline void tagged(char kind, int id, std::string_view text) {
  std::fprintf(stdout, "\x01%c%d\x02", kind, id);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputs("\x03", stdout);
}

/// fmt::print for a call whose output the document shows (expectation `id`).
template <class... T>
void print(int id, fmt::format_string<T...> format, T&&... args) {
  tagged('P', id, fmt::format(format, std::forward<T>(args)...));
}

/// Runs a statement the document says raises E; what it raised is the output.
template <class E, class F>
void expect_error(int id, const char* name, F&& statement) {
  try {
    statement();
  } catch (const E& e) {
    tagged('P', id, fmt::format("{}: {}\n", name, e.what()));
    return;
  }
  tagged('P', id, fmt::format("(no {} was raised)\n", name));
}

/// Starts the output of a block; `shown` is the expectation of a ```text block after it, or -1.
inline void block(int index, int shown) { tagged('B', shown, std::to_string(index)); }

struct Program {
  const char* name;
  void (*run)();
};

/// `program NAME` runs one program; without arguments, lists them.
inline int main(int argc, char** argv, std::initializer_list<Program> programs) {
  if (argc != 2) {
    for (const Program& p : programs) std::printf("%s\n", p.name);
    return argc == 1 ? 0 : 2;
  }
  for (const Program& p : programs) {
    if (std::string_view(argv[1]) != p.name) continue;
    try {
      p.run();
    } catch (const std::exception& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "%s: uncaught exception: %s\n", p.name, e.what());
      return 1;
    }
    return 0;
  }
  std::fprintf(stderr, "no program named %s\n", argv[1]);
  return 2;
}

}  // namespace tessel_doc
