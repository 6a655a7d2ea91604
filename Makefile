# The two commands of the README: `make run` and `make test`. Each sets up what is
# missing (scripts/setup.sh), then configures and builds incrementally.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)

.PHONY: run test build configure clean

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

configure:
	@python=$$(scripts/setup.sh) && \
	if [ ! -f $(BUILD_DIR)/build.ninja ] || [ "$$(cat $(BUILD_DIR)/.python 2>/dev/null)" != "$$python" ]; then \
	  cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	    -DSTRATUM_PYTHON=$$python && echo "$$python" > $(BUILD_DIR)/.python; \
	fi

run: build
	@scripts/run_main.sh $(BUILD_DIR)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 600 -j $(JOBS)

clean:
	rm -rf $(BUILD_DIR)
