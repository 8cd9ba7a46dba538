# The README's Quick start: `make demo` and `make test` on a fresh Debian 12 machine.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps configure build demo test fuzz bench clean

deps:
	@bash scripts/setup-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

# The main job: train the chapter's MLP on Fashion-MNIST, save, reload, re-evaluate.
# Outputs (mlp.params, fashion_mnist_curves.png) go to $(BUILD)/demo.
demo: build
	@mkdir -p $(BUILD)/demo && cd $(BUILD)/demo && ../samples/train_fashion_mnist

test: build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 900

# The checkpoint loader under libFuzzer with ASan+UBSan, for a bounded time.
fuzz: deps
	@bash scripts/fuzz-checkpoint.sh $(or $(FUZZ_SECONDS),45)

bench: deps
	@bash scripts/setup-deps.sh --bench
	@cmake -S . -B $(BUILD)-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSEL_BUILD_BENCH=ON >/dev/null
	@cmake --build $(BUILD)-bench -j$(JOBS)
	@cd $(BUILD)-bench && bench/run_benchmarks

clean:
	@rm -rf $(BUILD) $(BUILD)-bench
