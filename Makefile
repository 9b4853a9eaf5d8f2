# Developer shortcuts. `make build` compiles pycomm._C in place (no install), for worktrees and tests.
PYTHON ?= python3
BUILD_DIR ?= build/inplace

.PHONY: build clean test

build:
	@command -v cmake >/dev/null && command -v ninja >/dev/null || { echo "make build needs cmake (>= 3.18), \
	ninja and pybind11: $(PYTHON) -m pip install cmake ninja pybind11 (or apt-get install cmake ninja-build)" >&2; exit 1; }
	cmake -S . -B $(BUILD_DIR) -GNinja -DPython_EXECUTABLE=$$(which $(PYTHON)) $(CMAKE_ARGS) >/dev/null
	cmake --build $(BUILD_DIR) -j $$(nproc)

test: build
	$(PYTHON) -m pytest -q

clean:
	rm -rf build pycomm/_C*.so
