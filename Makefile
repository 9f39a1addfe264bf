# The two commands of the README: `make run` and `make test`. Both install what they need.
SHELL := /bin/bash
CARGO ?= cargo
BIN := target/release/ipsec-lab
# The main use; --vm auto boots a stock kernel only where this one has no ESP.
RUN_ARGS ?= --key-bits 256 --hmac sha256 --vm auto

.PHONY: setup build run matrix test lint bench-plain bench-userspace bench-threads clean

setup:
	@bash lab/setup.sh

build:
	$(CARGO) build --release

# The main job: a verified 100 MB transfer between two namespaces, printed as a table.
run: setup build
	$(BIN) run $(RUN_ARGS)

# Every backend x the six cipher configurations; kernel rows in a VM where the host lacks ESP.
matrix: setup build
	$(BIN) matrix --vm --vm-bytes 10MB --out results

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	python3 lab/import-circles.py src crates/*/src

# Every test, including the root-only end-to-end ones (CI runs as root).
test: setup lint
	$(CARGO) test --workspace

# The lab's sender/receiver against iperf3 on the same fresh veth pair.
bench-plain: setup build
	$(BIN) run --backend plain --bytes 1GB --repeat 5 --with-iperf3

# Plain, the lab's userspace tunnel and real OpenVPN on identical fresh veth pairs, with ratios.
bench-userspace: setup build
	bash lab/bench-userspace.sh

# The userspace tunnel at 1 and 2 tunnel threads with -P 2, OpenVPN beside, CPU per thread.
bench-threads: setup build
	bash lab/bench-threads.sh

clean:
	-$(BIN) clean
