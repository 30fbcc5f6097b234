# tally — developer entry points.
#
#   make deps    install the Debian packages below that are missing (apt-get; sudo when not root)
#   make run     deps + build, then run tallyd in the foreground on 127.0.0.1:6380
#   make test    deps + build, then every CTest test (unit and end-to-end)
#
# Other targets: build bench fuzz fuzz-smoke soak soak-crash soak-cluster check-sanitize check-asan check-tsan format format-check
# tidy clean help cluster cluster-stop. Every upper-case variable below can be overridden: make run PORT=7000.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# The client examples (examples/) and the tests of the API's description, the migration
# script and the package: each language's runtime and its Redis client, a JSON Schema
# validator, the PostgreSQL driver of the migration script, and what builds the .deb.
CLIENT_PACKAGES := \
	ruby ruby-redis php-cli php-redis golang-go default-jdk-headless libjackson2-databind-java \
	python3-jsonschema python3-psycopg2
PACKAGING_PACKAGES := debhelper dpkg-dev fakeroot help2man

# Every Debian 12 package the project needs to build, test, benchmark and lint. One list, so
# that a change which needs a new package adds it here and nowhere else.
DEPS_PACKAGES := \
	build-essential cmake pkg-config ccache clang libclang-rt-14-dev clang-format clang-tidy \
	librocksdb-dev libboost-dev libboost-system-dev libabsl-dev libfmt-dev libspdlog-dev \
	libcli11-dev libexpected-dev libgtest-dev libgmock-dev libbenchmark-dev libxxhash-dev \
	libsimdjson-dev libpq-dev libssl-dev openssl nats-server libnats-dev \
	postgresql-15 redis-server redis-tools python3 python3-redis \
	util-linux procps linux-perf nodejs chromium python3-matplotlib \
	$(CLIENT_PACKAGES) $(PACKAGING_PACKAGES)

# The dashboard (dashboard/) is built with node and tested in chromium. npm comes from
# Debian's `npm` package unless an npm is already on PATH (NodeSource's nodejs bundles one
# and conflicts with Debian's). The npm packages of each folder below, pinned by its
# package-lock.json, are installed by `make deps` with `npm ci`, again whenever the lock file
# changes: the dashboard's, the Node.js example's (ioredis) and the tests' (an OpenAPI
# validator).
DASHBOARD_DIR := dashboard
NPM_DIRS := $(DASHBOARD_DIR) examples/node tests/e2e

JOBS          ?= 2
BUILD_TYPE    ?= Release
BUILD_DIR     ?= build
CMAKE_FLAGS   ?=
PYTHON        ?= /usr/bin/python3

# make run
BIND ?= 127.0.0.1
PORT ?= 6380
HTTP_PORT ?= 6381
DATA ?= ./data
ARGS ?=

# make test / check-*: tests run two at a time (the e2e tests pick free ports), each test gets
# TEST_TIMEOUT seconds unless it sets its own, the whole run TEST_TOTAL_TIMEOUT seconds.
TEST_JOBS          ?= 2
TEST_TIMEOUT       ?= 600
TEST_TOTAL_TIMEOUT ?= 3000
# TSan runs the unit tests only: this excludes the end-to-end tests by name.
TSAN_CTEST_FILTER  ?= -E e2e_

# make bench: BENCH_ARGS go to bench/redis_compare.py (e.g. --quick, --repeats 5);
# BENCH_SCALE and MEM_KEYS are read from the environment by the script.
BENCH_ARGS        ?=
# make bench: DERIVED_BENCH_ARGS go to bench/derived_compare.py (e.g. --quick, --skip-postgres).
DERIVED_BENCH_ARGS ?=
# make bench: SOURCE_BENCH_ARGS go to bench/source_compare.py (e.g. --quick, --skip-half).
SOURCE_BENCH_ARGS ?=
# make bench: SUBSCRIBERS_BENCH_ARGS go to bench/subscribers_cost.py (e.g. --quick).
SUBSCRIBERS_BENCH_ARGS ?=
ENGINE_BENCH_ARGS ?= --benchmark_min_time=1

# make bench: CLUSTER_BENCH_ARGS go to bench/cluster_compare.py (e.g. --quick, --no-failover).
CLUSTER_BENCH_ARGS ?=
# make bench: RECOVERY_BENCH_ARGS go to bench/cluster_recovery.py (a node's recovery with
# snapshots against full replay; 10M counters by default, about 25 minutes).
RECOVERY_BENCH_ARGS ?=
# make bench: REBALANCE_BENCH_ARGS go to bench/cluster_rebalance.py (a partition of 1M
# counters handed over under writes, against one of 1,000; about 6 minutes).
REBALANCE_BENCH_ARGS ?=

# make cluster: a local cluster in the background (tools/cluster.py): 3 nats-servers and
# CLUSTER_NODES tallyd in cluster mode on 127.0.0.1 (Redis ports from 7001, HTTP from 7101,
# NATS from 4222); pids, ports, data and logs in CLUSTER_DIR. CLUSTER_ARGS go to
# `tools/cluster.py start` (e.g. --fresh, or -- --cluster-partitions 8).
CLUSTER_DIR   ?= $(BUILD_DIR)/cluster
CLUSTER_NODES ?= 3
CLUSTER_ARGS  ?=

# make deb: the Debian package (debian/), built by dpkg-buildpackage in a copy of the source
# tree under DEB_DIR, where the .deb lands. make deb-test installs it on this machine (root),
# runs tallyd as its systemd unit would, and removes it again (tests/packaging/test_deb.py).
DEB_DIR ?= $(BUILD_DIR)/deb

# make fuzz: each target in FUZZ_TARGETS (fuzz/<name>_fuzz.cc) for FUZZ_SECONDS, one after
# the other, e.g. make fuzz FUZZ_SECONDS=1800 FUZZ_TARGETS="pgoutput pg_text"; FUZZ_ARGS go
# to every libFuzzer run (e.g. -max_len=65536).
FUZZ_DIR     ?= build-fuzz
FUZZ_SECONDS ?= 600
FUZZ_ARGS    ?=
FUZZ_TARGETS ?= resp_parser timestamp sql_definitions key_spelling change_json pgoutput pg_text \
	http_request websocket tallyd_config cluster_record cluster_member cluster_stream

# make soak: SOAK_SECONDS of mixed load with a kill -9 and restart every SOAK_KILL_EVERY
# seconds, samples of tallyd's RSS, fds and threads every SOAK_SAMPLE_EVERY seconds; the plot,
# figures and samples go to SOAK_OUT. SOAK_ARGS go to tests/soak/soak.py.
SOAK_SECONDS      ?= 3600
SOAK_KILL_EVERY   ?= 300
SOAK_SAMPLE_EVERY ?= 10
SOAK_OUT          ?= $(BUILD_DIR)/soak
SOAK_ARGS         ?=
# make soak-crash
CRASH_KILLS   ?= 200
CRASH_SECONDS ?= 1200
# make soak-cluster: QUORUM_CYCLES quorum losses in one cluster (tests/e2e/stress_quorum.py),
# about 20 s each; QUORUM_SEED picks the waits and the servers killed.
QUORUM_CYCLES ?= 40
QUORUM_SEED   ?= 7

FORMAT_DIRS := src tests bench fuzz

ifeq ($(shell id -u),0)
SUDO :=
else
SUDO := sudo
endif

.PHONY: help deps configure build run test bench fuzz fuzz-smoke soak soak-crash soak-cluster check-sanitize check-asan check-tsan \
	deb deb-test format format-check tidy clean cluster cluster-stop

help:
	@echo "make deps            install missing Debian packages (apt-get; sudo when not root)"
	@echo "make build           configure ($(BUILD_DIR), $(BUILD_TYPE)) and build with -j$(JOBS)"
	@echo "make run             build, then run tallyd on $(BIND):$(PORT) (PORT= DATA= ARGS=)"
	@echo "make cluster         build, then 3 nats-servers + $(CLUSTER_NODES) tallyd in cluster mode, in the background (7001-...)"
	@echo "make cluster-stop    stop what make cluster started"
	@echo "make test            build, then ctest: unit and end-to-end tests"
	@echo "make bench           tallyd vs redis-server side by side, then engine_bench"
	@echo "make fuzz            every libFuzzer target for FUZZ_SECONDS=$(FUZZ_SECONDS) each"
	@echo "make soak            $(SOAK_SECONDS) s of mixed load, kill -9 every $(SOAK_KILL_EVERY) s, exact values, flat RSS/fds/threads"
	@echo "make soak-crash      kill -9 soak: tests/e2e/test_crash.py, $(CRASH_KILLS) kills"
	@echo "make soak-cluster    $(QUORUM_CYCLES) quorum losses in one cluster under writers, copies checked"
	@echo "make check-sanitize  ASan+UBSan (all tests) and TSan (unit tests) builds and runs"
	@echo "make deb             the Debian package (tallyd.service, /etc/tally/tally.conf) in $(DEB_DIR)"
	@echo "make deb-test        deb, then install it here (root), run and restart tallyd, remove it"
	@echo "make format          clang-format -i on $(FORMAT_DIRS) (format-check: verify only)"
	@echo "make tidy            clang-tidy over the compilation database"
	@echo "make clean           remove the build directories"

# Instant when everything is installed: one dpkg-query call, no apt-get update.
deps:
	@missing="$$(comm -23 \
	    <(printf '%s\n' $(DEPS_PACKAGES) | sort -u) \
	    <(dpkg-query -W -f='$${db:Status-Abbrev}$${Package}\n' $(DEPS_PACKAGES) 2>/dev/null \
	        | awk '$$1 == "ii" { print $$2 }' | sort -u))"; \
	if ! command -v npm >/dev/null; then missing="$${missing:+$$missing }npm"; fi; \
	if [ -z "$$missing" ]; then \
	  echo "deps: all $(words $(DEPS_PACKAGES)) packages installed"; exit 0; \
	fi; \
	echo "deps: installing" $$missing; \
	if [ -n "$(SUDO)" ] && ! command -v $(firstword $(SUDO)) >/dev/null; then \
	  echo "deps: not root and no sudo; install as root: apt-get install" $$missing >&2; exit 1; \
	fi; \
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -q; \
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
	  --no-install-recommends $$missing
	@for dir in $(NPM_DIRS); do \
	  lock=$$dir/package-lock.json; installed=$$dir/node_modules/.package-lock.json; \
	  if [ -f "$$installed" ] && [ ! "$$lock" -nt "$$installed" ]; then \
	    echo "deps: $$dir/node_modules up to date"; continue; \
	  fi; \
	  echo "deps: npm ci in $$dir"; \
	  (cd $$dir && npm ci --no-audit --no-fund); \
	done

configure: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR) -j$(JOBS)

run: build
	@test -x $(BUILD_DIR)/bin/tallyd || { echo "no $(BUILD_DIR)/bin/tallyd after the build" >&2; exit 1; }
	@mkdir -p $(DATA)
	@echo
	@echo "tallyd on $(BIND):$(PORT), data in $(DATA). Ctrl-C stops it."
	@echo "Connect from another terminal with:  redis-cli -p $(PORT)"
	@echo "Then try:"
	@echo "  INCR likes:post:1"
	@echo "  INCRBY likes:post:1 10"
	@echo "  DECRBY likes:post:1 3"
	@echo "  GET likes:post:1"
	@echo "  MGET likes:post:1 likes:post:2"
	@echo "Values survive a restart (even kill -9): stop tallyd, make run again, GET likes:post:1."
	@echo "Dashboard (live values, rates, top and hot counters): http://$(BIND):$(HTTP_PORT)/"
	@echo "Derived counters and the HTTP API (docs/derived-counters.md, docs/http-api.md):"
	@echo "  curl -X POST $(BIND):$(HTTP_PORT)/v1/definitions --data-binary @counters.sql"
	@echo
	exec $(BUILD_DIR)/bin/tallyd --bind $(BIND) --port $(PORT) --http-port $(HTTP_PORT) --data-dir $(DATA) $(ARGS)

test: build
	timeout --kill-after=60 $(TEST_TOTAL_TIMEOUT) \
	  ctest --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error \
	    -j$(TEST_JOBS) --timeout $(TEST_TIMEOUT)
	$(MAKE) --no-print-directory fuzz-smoke

# A short, bounded run of every fuzz target (part of make test): libFuzzer needs clang, so the
# fuzzers have their own build directory; only they are built there. CTest runs them two at a
# time (TALLY_FUZZ_SMOKE_SECONDS each, in fuzz/CMakeLists.txt).
SPACE := $(subst ,, )
FUZZ_CONFIGURE = cmake -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DCMAKE_CXX_COMPILER=clang++ -DTALLY_FUZZ=ON -DTALLY_BENCH=OFF

fuzz-smoke: deps
	$(FUZZ_CONFIGURE) >/dev/null
	cmake --build $(FUZZ_DIR) -j$(JOBS) --target $(addsuffix _fuzz,$(FUZZ_TARGETS))
	ctest --test-dir $(FUZZ_DIR) --output-on-failure --no-tests=error -j$(TEST_JOBS) \
	  -R '^($(subst $(SPACE),|,$(strip $(FUZZ_TARGETS))))_fuzz_smoke$$'

# The engine_bench target is built only once bench/CMakeLists.txt defines it.
bench: build
	@if cmake --build $(BUILD_DIR) --target help | grep -w engine_bench >/dev/null; then \
	  cmake --build $(BUILD_DIR) -j$(JOBS) --target engine_bench; \
	fi
	$(PYTHON) bench/redis_compare.py --tally-binary $(BUILD_DIR)/bin/tallyd $(BENCH_ARGS)
	$(PYTHON) bench/derived_compare.py --tally-binary $(BUILD_DIR)/bin/tallyd $(DERIVED_BENCH_ARGS)
	$(PYTHON) bench/source_compare.py --tally-binary $(BUILD_DIR)/bin/tallyd $(SOURCE_BENCH_ARGS)
	$(PYTHON) bench/subscribers_cost.py --tally-binary $(BUILD_DIR)/bin/tallyd $(SUBSCRIBERS_BENCH_ARGS)
	$(PYTHON) bench/cluster_compare.py --tally-binary $(BUILD_DIR)/bin/tallyd $(CLUSTER_BENCH_ARGS)
	$(PYTHON) bench/cluster_recovery.py --tally-binary $(BUILD_DIR)/bin/tallyd $(RECOVERY_BENCH_ARGS)
	$(PYTHON) bench/cluster_rebalance.py --tally-binary $(BUILD_DIR)/bin/tallyd $(REBALANCE_BENCH_ARGS)
	@if [ -x $(BUILD_DIR)/bin/engine_bench ]; then \
	  echo "+ $(BUILD_DIR)/bin/engine_bench $(ENGINE_BENCH_ARGS)"; \
	  $(BUILD_DIR)/bin/engine_bench $(ENGINE_BENCH_ARGS); \
	else \
	  echo "bench: no $(BUILD_DIR)/bin/engine_bench yet, engine benchmarks skipped"; \
	fi

cluster: build
	$(PYTHON) tools/cluster.py start --dir $(CLUSTER_DIR) --nodes $(CLUSTER_NODES) \
	  --tallyd $(BUILD_DIR)/bin/tallyd $(CLUSTER_ARGS)

cluster-stop:
	$(PYTHON) tools/cluster.py stop --dir $(CLUSTER_DIR)

# The source is copied without build trees, data and the npm folders the package does not
# need (the dashboard's node_modules stays: the build runs esbuild). debhelper sets HOME to a
# directory of its own, so ccache is told where its cache is.
deb: deps
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)/tally
	tar -c --exclude-vcs --exclude='./build*' --exclude=./data --exclude=./fuzz/corpus-run \
	  --exclude=./examples/node/node_modules --exclude=./tests/e2e/node_modules . \
	  | tar -x -C $(DEB_DIR)/tally
	cd $(DEB_DIR)/tally && CCACHE_DIR="$$(ccache -k cache_dir 2>/dev/null || true)" \
	  dpkg-buildpackage -b -us -uc -j$(JOBS)
	@ls -l $(DEB_DIR)/*.deb

deb-test: deb
	cd tests/packaging && TALLY_DEB_DIR=$(abspath $(DEB_DIR)) PYTHONDONTWRITEBYTECODE=1 \
	  timeout --kill-after=30 600 $(PYTHON) -m unittest -v test_deb

# New corpus entries go to fuzz/corpus-run/<target>/, crash artifacts to
# fuzz/corpus-run/<target>-crash-<sha1> (both ignored by git); the checked-in seeds
# fuzz/corpus/<target> are only read. Each run's output is kept in fuzz/corpus-run/<target>.log,
# and fuzz/fuzz_summary.py makes the table at the end from them (executions, coverage, corpus,
# findings). Every target runs even when one finds a crash; the
# run fails at the end, naming them.
fuzz: deps
	$(FUZZ_CONFIGURE)
	cmake --build $(FUZZ_DIR) -j$(JOBS) --target $(addsuffix _fuzz,$(FUZZ_TARGETS))
	@failed=""; logs=""; \
	for target in $(FUZZ_TARGETS); do \
	  mkdir -p fuzz/corpus-run/$$target; \
	  dict=""; if [ -f fuzz/dict/$$target.dict ]; then dict="-dict=fuzz/dict/$$target.dict"; fi; \
	  echo "+ $(FUZZ_DIR)/fuzz/$${target}_fuzz ($(FUZZ_SECONDS) s)"; \
	  $(FUZZ_DIR)/fuzz/$${target}_fuzz -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=fuzz/corpus-run/$$target- $$dict $(FUZZ_ARGS) \
	    fuzz/corpus-run/$$target fuzz/corpus/$$target 2>&1 | tee fuzz/corpus-run/$$target.log \
	    || failed="$$failed $$target"; \
	  logs="$$logs fuzz/corpus-run/$$target.log"; \
	done; \
	echo; $(PYTHON) fuzz/fuzz_summary.py $$logs; \
	if [ -n "$$failed" ]; then echo "fuzz: crashes in:$$failed (see fuzz/corpus-run/)" >&2; exit 1; fi

# The soak (tests/soak/soak.py; docs/testing.md): niced, so that the machine stays usable;
# stopped after SOAK_SECONDS + 900 s at the latest.
soak: build
	TALLYD=$(abspath $(BUILD_DIR))/bin/tallyd PYTHONDONTWRITEBYTECODE=1 \
	  timeout --kill-after=60 $$(( $(SOAK_SECONDS) + 900 )) \
	  nice -n 10 $(PYTHON) tests/soak/soak.py --seconds $(SOAK_SECONDS) \
	    --kill-every $(SOAK_KILL_EVERY) --sample-every $(SOAK_SAMPLE_EVERY) \
	    --out $(SOAK_OUT) $(SOAK_ARGS)

# The crash test, run long: CRASH_KILLS kill -9 cycles (test_crash.py reads E2E_CRASH_CYCLES),
# the run stopped after CRASH_SECONDS + 600 s at the latest; run the way CTest runs it.
soak-crash: build
	cd tests/e2e && \
	E2E_CRASH_CYCLES=$(CRASH_KILLS) \
	TALLYD=$(abspath $(BUILD_DIR))/bin/tallyd PYTHONDONTWRITEBYTECODE=1 \
	  timeout --kill-after=60 $$(( $(CRASH_SECONDS) + 600 )) \
	  $(PYTHON) -m unittest -v test_crash

# Quorum losses one after the other in one cluster under writers (docs/testing.md, Cluster):
# bounds and every node's copy checked after each; stopped after 60 s a cycle at the latest.
soak-cluster: build
	cd tests/e2e && \
	TALLYD=$(abspath $(BUILD_DIR))/bin/tallyd TALLY_CLI=$(abspath $(BUILD_DIR))/bin/tally \
	PYTHONDONTWRITEBYTECODE=1 \
	  timeout --kill-after=60 $$(( $(QUORUM_CYCLES) * 60 + 120 )) \
	  $(PYTHON) stress_quorum.py --cycles $(QUORUM_CYCLES) --seed $(QUORUM_SEED)

check-sanitize: check-asan check-tsan

check-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTALLY_SANITIZE=address,undefined -DTALLY_BENCH=OFF
	cmake --build build-asan -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1:strict_init_order=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  timeout --kill-after=60 $(TEST_TOTAL_TIMEOUT) \
	  ctest --test-dir build-asan --output-on-failure --no-tests=error \
	    -j$(TEST_JOBS) --timeout $$(( $(TEST_TIMEOUT) * 3 ))

# tests/tsan.supp names the races inside uninstrumented RocksDB that TSan cannot judge.
# TSan's deadlock detector tracks at most 64 held locks and aborts on Keyspace::LockAll (128
# stripe locks, always taken in ascending order), hence detect_deadlocks=0.
# setarch -R (no ASLR) keeps TSan working on kernels with high mmap randomisation; it is skipped
# where the sandbox forbids it.
check-tsan: deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTALLY_SANITIZE=thread -DTALLY_BENCH=OFF
	cmake --build build-tsan -j$(JOBS)
	noaslr=""; \
	if setarch "$$(uname -m)" -R true 2>/dev/null; then noaslr="setarch $$(uname -m) -R"; fi; \
	TSAN_OPTIONS=halt_on_error=1:detect_deadlocks=0:suppressions=$(CURDIR)/tests/tsan.supp \
	  timeout --kill-after=60 $(TEST_TOTAL_TIMEOUT) \
	  $$noaslr ctest --test-dir build-tsan --output-on-failure --no-tests=error \
	    -j$(TEST_JOBS) --timeout $$(( $(TEST_TIMEOUT) * 3 )) $(TSAN_CTEST_FILTER)

# C and C++ sources only; fuzz corpora are data.
FORMAT_FIND = find $(FORMAT_DIRS) -path fuzz/corpus -prune -o -path fuzz/corpus-run -prune -o \
	-type f \( -name '*.cc' -o -name '*.h' \) -print0

format:
	$(FORMAT_FIND) | xargs -0 -r clang-format -i

format-check:
	$(FORMAT_FIND) | xargs -0 -r clang-format --dry-run --Werror

# Fails when clang-tidy reports anything in our own files; the log is kept in $(BUILD_DIR).
# (run-clang-tidy 14 always asks for colour, hence the sed before counting.)
tidy: configure
	run-clang-tidy -p $(BUILD_DIR) -quiet -j $(JOBS) '$(CURDIR)/(src|tests|bench|fuzz)/.*\.cc$$' \
	  2>&1 | tee $(BUILD_DIR)/tidy.log
	@n="$$(sed 's/\x1b\[[0-9;]*m//g' $(BUILD_DIR)/tidy.log \
	      | grep -cE '^$(CURDIR)/.*: (warning|error):' || true)"; \
	if [ "$$n" != 0 ]; then echo "tidy: $$n findings (see $(BUILD_DIR)/tidy.log)" >&2; exit 1; fi; \
	echo "tidy: clean"

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_DIR) build-asan build-tsan
