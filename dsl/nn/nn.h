// The module system: Module, Parameter, layers, containers, initializers.
#pragma once

#include "dsl/nn/batch_norm.h"
#include "dsl/nn/conv.h"
#include "dsl/nn/embedding.h"
#include "dsl/nn/layer_norm.h"
#include "dsl/nn/init.h"
#include "dsl/nn/layers.h"
#include "dsl/nn/linear.h"
#include "dsl/nn/loss.h"
#include "dsl/nn/module.h"
#include "dsl/nn/module_dict.h"
#include "dsl/nn/module_list.h"
#include "dsl/nn/parameter.h"
#include "dsl/nn/pooling.h"
#include "dsl/nn/sequential.h"
#include "dsl/nn/symbolic.h"
#include "dsl/nn/transformer.h"
