# The two commands of the README: `make run` and `make test`. Both install what they need.
SHELL := /bin/bash
CARGO ?= cargo
BIN := target/release/ipsec-lab
# 64-bit ARM: `make deb ARCH=arm64` packages this cross-built binary (lab/arm64-cargo.sh).
ARCH ?= amd64
ARM64_BIN := target/arm64/aarch64-unknown-linux-gnu/release/ipsec-lab
# The main use; --vm auto boots a stock kernel only where this one has no ESP.
RUN_ARGS ?= --key-bits 256 --hmac sha256 --vm auto

.PHONY: setup setup-test build run matrix test lint bench-plain bench-userspace bench-threads bench-packets bench-datagrams clean deb deb-arch install uninstall build-arm64 test-arm64
# make install / uninstall: where (PREFIX) and into which staging root (DESTDIR).
PREFIX ?= /usr/local
DESTDIR ?=
# What `make install` builds first; `make install INSTALL_BUILD= BIN=...` installs a given binary.
INSTALL_BUILD ?= build
# The strip `make install` runs on the installed copy (a cross toolchain's for a cross build).
STRIP ?= strip

setup:
	@bash lab/setup.sh

# The tests also boot a second kernel (tests/kernels_vm.rs: kernel rows per kernel).
setup-test:
	@bash lab/setup.sh --second-kernel

build:
	$(CARGO) build --release

# The main job: a verified 2 s transfer between two namespaces through kernel IPsec (in
# user-mode Linux or a VM where this kernel has no ESP), against its crypto ceiling and the
# line rate, printed as a table.
run: setup build
	$(BIN) run $(RUN_ARGS)

# Every backend x the six cipher configurations; kernel rows in a VM where the host lacks ESP.
matrix: setup build
	$(BIN) matrix --vm --vm-bytes 10MB --out results

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	python3 -B -m unittest discover -s lab -p 'test_*.py'
	python3 lab/import-circles.py src crates/*/src

# Every test, including the root-only end-to-end ones (CI runs as root). Lint and every
# test binary run even where one fails (--no-fail-fast), so no failure hides another; the
# target fails if either did.
test: setup-test
	@lint=0; $(MAKE) --no-print-directory lint || lint=$$?; \
	arm64=0; CARGO=$(CARGO) bash lab/arm64-check.sh || arm64=$$?; \
	tests=0; CARGO=$(CARGO) python3 lab/run-tests.py || tests=$$?; \
	if [ $$lint -ne 0 ] || [ $$arm64 -ne 0 ] || [ $$tests -ne 0 ]; then \
		echo "make test: lint exited $$lint, the aarch64 check $$arm64, tests $$tests" >&2; exit 1; \
	fi

# The arm64 build under qemu-user (tests/arm64.rs): --version, speed, plain and userspace
# runs between two namespaces, the .deb in a Debian 12 arm64 root. Not in `make test`, which
# only type-checks the aarch64 target: the cross toolchain and build take about half an hour.
test-arm64: build-arm64
	@bash lab/deb/cargo-deb.sh
	$(CARGO) test --test arm64 -- --ignored --test-threads 1

build-arm64:
	@bash lab/arm64-toolchain.sh
	bash lab/arm64-cargo.sh build --release --locked

# The lab's sender/receiver against iperf3 on the same fresh veth pair.
bench-plain: setup build
	$(BIN) run --backend plain --bytes 1GB --repeat 5 --with-iperf3

# Plain (and iperf3), the lab's userspace tunnel (GCM, ChaCha20, CBC+HMAC), wireguard-go and real
# OpenVPN on identical fresh veth pairs, with ratios and each tunnel thread's time.
bench-userspace: setup build
	bash lab/bench-userspace.sh

# The userspace tunnel at 1 and 2 tunnel threads with -P 2, OpenVPN beside, CPU per thread.
bench-threads: setup build
	bash lab/bench-threads.sh

# Packets/s and the zero-loss rate (NDR, PDR) of plain and the userspace tunnel at 64 and 1400 B.
bench-packets: setup build
	bash lab/bench-packets.sh

# 64-byte datagrams: the lab's UDP sender/receiver against iperf3 -u on one namespace pair.
bench-datagrams: setup build
	bash lab/bench-datagrams.sh

clean:
	-$(BIN) clean

# The Debian package (target/debian/ipsec-lab_VERSION-1_ARCH.deb): binary, man pages,
# completions, ipsec-lab-serve.service. Installs the pinned cargo-deb on first use.
# ARCH=arm64: the same package for 64-bit ARM, cross-built.
deb: deb-arch $(if $(filter arm64,$(ARCH)),build-arm64,build)
	@bash lab/deb/cargo-deb.sh
	bash lab/deb/build.sh $(if $(filter arm64,$(ARCH)),$(ARM64_BIN) target/debian aarch64-unknown-linux-gnu,$(BIN) target/debian)

deb-arch:
	@case "$(ARCH)" in amd64|arm64) ;; *) echo "make deb: ARCH=$(ARCH): amd64 (the default) or arm64" >&2; exit 2;; esac

# From source: the binary (stripped, as the .deb's: symbols and debug info are most of its
# size), its man pages and completions, and the service unit.
install: $(INSTALL_BUILD)
	install -Dm755 -s --strip-program=$(STRIP) $(BIN) $(DESTDIR)$(PREFIX)/bin/ipsec-lab
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d \
		$(DESTDIR)$(PREFIX)/lib/systemd/system
	$(BIN) man --out $(DESTDIR)$(PREFIX)/share/man/man1
	$(BIN) completions bash >$(DESTDIR)$(PREFIX)/share/bash-completion/completions/ipsec-lab
	$(BIN) completions zsh >$(DESTDIR)$(PREFIX)/share/zsh/site-functions/_ipsec-lab
	$(BIN) completions fish >$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/ipsec-lab.fish
	sed 's|/usr/bin/ipsec-lab|$(PREFIX)/bin/ipsec-lab|' debian/ipsec-lab-serve.service \
		>$(DESTDIR)$(PREFIX)/lib/systemd/system/ipsec-lab-serve.service
	@echo "installed under $(DESTDIR)$(PREFIX); for the service: ipsec-lab psk generate > /etc/ipsec-lab/psk"

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/ipsec-lab $(DESTDIR)$(PREFIX)/share/man/man1/ipsec-lab.1 \
		$(DESTDIR)$(PREFIX)/share/man/man1/ipsec-lab-*.1 \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions/ipsec-lab \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions/_ipsec-lab \
		$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/ipsec-lab.fish \
		$(DESTDIR)$(PREFIX)/lib/systemd/system/ipsec-lab-serve.service
