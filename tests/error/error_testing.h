// Asserts that `expr` throws exactly `Type` and that its message contains
// each of the given fragments.
#pragma once

#include "tests/support/tensor_testing.h"

#include <initializer_list>
#include <string>
#include <typeinfo>

#define REQUIRE_ERROR(expr, Type, ...)                                                     \
  do {                                                                                     \
    bool thrown_ = false;                                                                  \
    try {                                                                                  \
      (void)(expr);                                                                        \
    } catch (const Type& e_) {                                                             \
      thrown_ = true;                                                                      \
      CHECK(typeid(e_) == typeid(Type));                                                   \
      std::string msg_ = e_.what();                                                        \
      INFO("message: " << msg_);                                                           \
      for (const char* part_ : std::initializer_list<const char*>{__VA_ARGS__})            \
        CHECK(msg_.find(part_) != std::string::npos);                                      \
    }                                                                                      \
    if (!thrown_) FAIL("expected " #Type " from: " #expr);                                 \
  } while (0)
