// tessel: deep-learning models as C++ expression trees, fused and compiled.
//
//   #include "dsl/tessel.h"
//   using namespace tessel;
//   Tensor x = rand({2, 20});
//   nn::Sequential net(nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
//   fmt::print("{}\n", net(x).shape());   // [2, 10]
#pragma once

#include "dsl/assign_all.h"
#include "dsl/attention.h"
#include "dsl/dist/collectives.h"
#include "dsl/convolution.h"
#include "dsl/expr.h"
#include "dsl/functional.h"
#include "dsl/indexing.h"
#include "dsl/nn/nn.h"
#include "dsl/normalization.h"
#include "dsl/ordered_dict.h"
#include "dsl/pooling.h"
#include "dsl/reductions.h"
#include "dsl/tensor.h"
