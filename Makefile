# Osprey developer targets. `make test` is what CI runs (through .ci/run).
GO ?= go
PKGS ?= ./...
TAGS ?= rdma
# `make test` adds the invariant checks (msgr/internal/invariants).
comma := ,
TEST_TAGS ?= $(TAGS)$(if $(TAGS),$(comma))invariants

.PHONY: all build deps run test race proto bench lint fuzz fmt

all: build

# Debian packages the build and tests need: protoc for `make proto`,
# libfabric for the RDMA transport (-tags rdma) and fi_info/fi_pingpong,
# etcd-server for the mon's test on a real three-member etcd cluster,
# etcd-client for etcdctl (the map's backup and restore, docs/mon.md),
# awscli, s3cmd and python3-boto3 for the S3 gateway's tests with real clients,
# prometheus for promtool, which lints every daemon's /metrics in the tests,
# chromium for the mon dashboard's tests in a real browser (mon/dashboard),
# iproute2 (ip, tc) for the multi-host tests in network namespaces.
DEBS := protobuf-compiler libfabric-dev libfabric-bin etcd-server etcd-client awscli s3cmd python3-boto3 prometheus chromium iproute2
deps:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	$(GO) mod download

# The embedded default: a 3-OSD cluster in this process on free loopback
# ports, a demo workload through the SDK (every byte read back and
# verified), then a clean stop; its data lives in a temporary directory
# that is removed. `go run ./cmd/osprey up` keeps a cluster running instead.
run: deps
	$(GO) run ./cmd/osprey up --demo --temp

# bin/osprey names the commit it was built from (`osprey version`, and
# `osprey versions` for the daemons) even where the toolchain records
# none (GOFLAGS=-buildvcs=false, a tree without .git metadata).
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
build:
	$(GO) build $(if $(TAGS),-tags $(TAGS)) ./...
	$(GO) build $(if $(TAGS),-tags $(TAGS)) $(if $(REVISION),-ldflags '-X github.com/ospreystore/osprey/internal/buildinfo.Revision=$(REVISION)') -o bin/osprey ./cmd/osprey

# The whole suite, as the README's quick start runs it: race detector on.
# deps installed etcd-server, awscli, s3cmd, boto3, promtool, chromium and
# iproute2: their tests must run, not skip (CI runs as root, which tmpfs
# mounts and network namespaces need).
#
# A few tests run in a second pass, without the race detector: those whose
# cost under it is the bytes it shadows (bodies of 64 MiB and more, disks
# filled, crash clones of in-memory file systems, multi-process clusters
# moving data), 5 to 100 times their plain run, or that run on one
# goroutine (the credit protocol's simulations): NORACE names them, and
# each runs in exactly one of the two passes. The code they drive runs
# under the race detector in the other tests (the messenger's conformance
# suites, the client's and OSD's concurrency tests). The attack test's
# memory bounds mean something only without the race detector (its shadow
# memory swamps RSS), so it runs in both.
# `make test NORACE=` runs everything under the race detector (about 21
# minutes on 2 cores, against 14).
NORACE ?= TestLargePut|TestLargePart|TestS3Tests|TestInternalUploads|TestUploadPartCopy|$\
	TestAckedPutsSurvivePowerLoss|TestFullDisk|TestMonAddOSD|TestClusterProcessesSurviveKills|TestFrozenPrimaryBlamesNoReplica|$\
	TestClusterProcessesSurviveKillsRDMA|TestCachedGetsOverRDMAAreNotCopied|$\
	TestReadSharedRanges|TestFillingTheDisk|$\
	TestOverwriteAtomicityLarge|TestGetOverRDMAKeepsRegisteredWindows|TestFailedPartRemovesItsPieces|$\
	TestGetHandsOverAndReleasesReplies|TestOpenObjectsHoldNoCredit|TestPartInPieces|$\
	TestAutomaticMultipartAndStreaming|TestCompleteRemovesUnlistedParts|TestETags|$\
	TestGC|TestRDMAMemBudgetMetrics|TestCreditSimulation|TestCreditSimulationKeepalives
lparen := (
# dirs_of is the directories of the files $(1), each once, without a slash.
dirs_of = $(sort $(patsubst %/,%,$(dir $(1))))
# The second pass builds only the packages (of PKGS) that define its tests.
PLAIN = $(if $(NORACE),$(NORACE)|)TestDaemonUnderAttack
PLAIN_PKGS = $(call dirs_of,$(shell grep -rlE '^func ($(PLAIN))[$(lparen)]' --include='*_test.go' $(patsubst %/...,%,$(PKGS))))
REQUIRE := OSPREY_REQUIRE_ETCD=1 OSPREY_REQUIRE_AWSCLI=1 OSPREY_REQUIRE_S3CMD=1 OSPREY_REQUIRE_BOTO3=1 OSPREY_REQUIRE_SMALLFS=1 OSPREY_REQUIRE_PROMTOOL=1 OSPREY_REQUIRE_CHROMIUM=1 OSPREY_REQUIRE_NETNS=1
# go test starts packages' test binaries in the order it is given them, two
# at a time on two cores: the longest start first, so that the short ones
# fill in around them instead of one long package running alone at the end
# (the OSD's, a quarter of the race pass, came last but one by name).
LONG_PKGS := ./osd ./msgr/rdma ./cmd/osprey ./msgr/msgrtest ./client/s3gw ./client ./internal/multihost ./mon ./msgr
ALL_PKGS = $(shell $(GO) list -tags $(TEST_TAGS) -f '{{.Dir}}' ./... | sed 's|^$(CURDIR)|.|')
# long_first orders the packages $(1) (one go list, expanded once by call); a
# package of LONG_PKGS that no longer exists is left out, not an error.
long_first = $(filter $(1),$(LONG_PKGS)) $(filter-out $(LONG_PKGS),$(1))
ORDERED_PKGS = $(if $(filter ./...,$(PKGS)),$(call long_first,$(ALL_PKGS)),$(PKGS))
test: deps
	$(REQUIRE) $(GO) test -race -count=1 -timeout 20m -tags $(TEST_TAGS) $(if $(NORACE),-skip '^($(NORACE))$$') $(ORDERED_PKGS)
	$(REQUIRE) $(GO) test -count=1 -timeout 10m -tags $(TEST_TAGS) -run '^($(PLAIN))$$' $(PLAIN_PKGS)

# Regenerate the committed protobuf code; protoc-gen-go is pinned in go.mod.
proto:
	$(GO) build -o bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	protoc --plugin=protoc-gen-go=bin/protoc-gen-go -I proto \
		--go_out=proto --go_opt=module=github.com/ospreystore/osprey/proto proto/*.proto

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(if $(TAGS),-tags $(TAGS)) ./msgr/...

# gofmt, then vet with the tests' tags (which compiles what the tests'
# second pass reuses), and again without tags only the packages that have
# files those tags leave out (//go:build !rdma, !invariants): a whole second
# vet recompiles everything above msgr/transports for nothing.
UNTAGGED_PKGS = $(call dirs_of,$(shell grep -rlE '^//go:build.*!(rdma|invariants)' --include='*.go' .))
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet -tags $(TEST_TAGS) ./...
	$(if $(UNTAGGED_PKGS),$(GO) vet $(UNTAGGED_PKGS))

# A short run of every fuzz target (FUZZTIME=1m for longer).
FUZZTIME ?= 10s
# Minimizing a new input is capped so the budget goes to finding new ones
# (Go's default, 60s, can eat a short run whole).
FUZZMINTIME ?= 1s
# Every fuzz target in the tree (every parser has one), FUZZTIME each,
# found by their names, so a new one is never left out. They run with TAGS
# (rdma), so the RDMA link's parsers are fuzzed too. A target that fails
# without writing an input under testdata/fuzz/ hit Go's own race at the
# end of a timed run (golang/go#75804, "context deadline exceeded", fixed
# in Go 1.27), not a crasher: it runs once more, and only a second such
# failure, or any failure that wrote an input, fails.
fuzz:
	@grep -rlE '^func Fuzz' --include='*_test.go' $(patsubst %/...,%,$(PKGS)) | sort | while read -r f; do \
		d=$$(dirname "$$f"); \
		for n in $$(sed -nE 's/^func (Fuzz[A-Za-z0-9_]+)\(.*/\1/p' "$$f"); do \
			echo "== $$n ($$d)"; \
			for try in 1 2; do \
				before=$$(ls "$$d/testdata/fuzz/$$n" 2>/dev/null | wc -l); \
				if $(GO) test $(if $(TAGS),-tags $(TAGS)) -run '^$$$$' -fuzz "^$$n\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) "$$d"; then break; fi; \
				after=$$(ls "$$d/testdata/fuzz/$$n" 2>/dev/null | wc -l); \
				if [ "$$after" != "$$before" ] || [ $$try = 2 ]; then exit 1; fi; \
				echo "$$n failed without an input (golang/go#75804): once more"; \
			done; \
		done; \
	done

fmt:
	gofmt -w $$(git ls-files '*.go')
