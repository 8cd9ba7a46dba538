// Mistakes with the module containers, the loss options and the LR
// schedulers: the exact error type and the parts of the message that say
// what went wrong, where, and what to do.
#include "error_testing.h"

#include "dsl/train/lr_scheduler.h"

using namespace tessel;

TEST_CASE("ModuleList index out of range", "[error]") {
  nn::ModuleList list{nn::ReLU(), nn::ReLU()};
  REQUIRE_ERROR(list[2], IndexError, "net[2]", "out of range", "ModuleList of 2 modules", "-2 to 1");
  REQUIRE_ERROR(list[-3], IndexError, "net[-3]", "out of range");
}

TEST_CASE("calling a ModuleList or a ModuleDict as a layer", "[error]") {
  nn::ModuleList list{nn::ReLU()};
  REQUIRE_ERROR(list(ones({2})), ModuleError, "net is a ModuleList", "no forward()", "loop over it");
  nn::ModuleDict dict;
  REQUIRE_ERROR(dict(ones({2})), ModuleError, "net is a ModuleDict", "no forward()", "pick a module by name");
}

TEST_CASE("ModuleDict lookup of a missing name", "[error]") {
  nn::ModuleDict heads;
  heads->insert("cls", nn::ReLU()).insert("box", nn::ReLU());
  REQUIRE_ERROR(heads->at("bbox"), IndexError, "no module named 'bbox'", "keys are [cls, box]");
}

TEST_CASE("ModuleDict insert of a name already present or with a dot", "[error]") {
  nn::ModuleDict heads;
  heads->insert("cls", nn::ReLU());
  REQUIRE_ERROR(heads->insert("cls", nn::ReLU()), ModuleError, "'cls' is already registered", "choose another name");
  REQUIRE_ERROR(heads->insert("a.b", nn::ReLU()), ModuleError, "'a.b' must not contain '.'");
  CHECK(heads->size() == 1);
}

TEST_CASE("a loss module called with one input", "[error]") {
  nn::CrossEntropyLoss ce;
  REQUIRE_ERROR(ce->forward(ones({2, 3})), ModuleError, "CrossEntropyLoss", "(input, target)");
  nn::MSELoss mse;
  REQUIRE_ERROR(mse->forward(ones({2})), ModuleError, "MSELoss", "(input, target)");
}

TEST_CASE("an unknown loss reduction", "[error]") {
  REQUIRE_ERROR(cross_entropy(zeros({2, 3}), tensor({0, 1}), {.reduction = "avg"}), ValueError, "cross_entropy",
                "reduction must be \"mean\", \"sum\" or \"none\"", "got \"avg\"");
  REQUIRE_ERROR(mse_loss(zeros({2}), zeros({2}), "average"), ValueError, "mse_loss", "got \"average\"");
  nn::MSELoss mse({.reduction = "elementwise"});
  REQUIRE_ERROR(mse(zeros({2}), zeros({2})), ValueError, "mse_loss", "got \"elementwise\"");
}

TEST_CASE("label_smoothing outside 0 to 1", "[error]") {
  REQUIRE_ERROR(cross_entropy(zeros({2, 3}), tensor({0, 1}), {.label_smoothing = 1.5}), ValueError,
                "label_smoothing must be in [0, 1]", "got 1.5");
  REQUIRE_ERROR(cross_entropy(zeros({2, 3}), tensor({0, 1}), {.label_smoothing = -0.1}), ValueError,
                "label_smoothing must be in [0, 1]");
}

TEST_CASE("a cross_entropy label outside the classes that is not ignore_index", "[error]") {
  REQUIRE_ERROR(cross_entropy(zeros({2, 3}), tensor({0, 3})), IndexError, "label 3 (at index 1)", "outside [0, 3)",
                "or ignore_index = -100");
  REQUIRE_ERROR(cross_entropy(zeros({2, 3}), tensor({-1, 0}), {.ignore_index = 5}), IndexError, "label -1",
                "or ignore_index = 5");
}

TEST_CASE("LR scheduler arguments that give no schedule", "[error]") {
  optim::SGD opt({nn::Parameter(ones({2}))}, {.lr = 0.1});
  REQUIRE_ERROR(optim::StepLR(opt, 0), ValueError, "StepLR", "step_size must be a positive", "got 0");
  REQUIRE_ERROR(optim::CosineAnnealingLR(opt, -1), ValueError, "CosineAnnealingLR", "T_max must be a positive",
                "got -1");
  REQUIRE_ERROR(optim::CosineWithWarmup(opt, 10, 10), ValueError, "CosineWithWarmup", "total_steps (10)",
                "greater than warmup_steps (10)");
  REQUIRE_ERROR(optim::CosineWithWarmup(opt, -1, 10), ValueError, "warmup_steps must be >= 0");
  CHECK(opt.lr() == 0.1);  // a rejected scheduler leaves the lr alone
}
