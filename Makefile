# make demo   - run the simulator (embedded Redis) and write
#               leasequota-report.html
# make test   - make sure a Redis can be had, then vet and run every test
#               of every module (race detector on, integration tests
#               included), and each fuzz target briefly
# make bench  - run the benchmarks of every module, ending with issue
#               #16's comparison table (integration's BenchmarkCompare
#               families through integration/cmd/benchtable)
# make simulation-long - 20,000 scenarios of the deterministic simulation
#
# Modules: the library (this directory) and three nested modules with
# their own go.mod, so that the library requires only what its code
# imports: grpcquota (gRPC interceptors), integration (end-to-end tests
# and the Redis harness) and cmd/leasequota-sim (the simulator).
GO ?= go
# A count, not a duration: Go 1.26's fuzz coordinator can fail a target
# with "context deadline exceeded" when a duration ends while a starved
# worker is mid-call (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 20000x
# A race-enabled binary sleeps 1 s as it exits (the race runtime's
# atexit_sleep_ms, so that other threads finish their reports): about 25
# test binaries in make test, 25 s of its time. A race found while a test
# runs fails that test before then, so the sleep buys nothing here.
GORACE ?= atexit_sleep_ms=0
export GORACE
# -count of the comparison benchmarks that end make bench: the table
# gives the median of each figure over the runs.
COMPARECOUNT ?= 1

.PHONY: demo test prebuild redis vet unit simulation simulation-long simulation-fleet integration sim grpc fuzz benchsmoke bench

demo:
	cd cmd/leasequota-sim && $(GO) run . -report ../../leasequota-report.html

# The targets whose tests are timed run one after another (they share
# two cores), while a second line of work runs at nice 19, on what CPU
# they leave idle: prebuild compiles what the later targets need (a clean
# clone's race, plain and fuzzing builds of four modules, about 3
# minutes run in turn), then fuzz and benchsmoke run, which
# count executions rather than time (about 40 s, mostly beside the
# integration tests, which wait on Redis and the clock). The timed
# targets compile whatever prebuild has not, so its output and status do
# not count; fuzz's and benchsmoke's do, printed once the timed targets
# end. Then make test brings the second line back to the priority of the
# rest, every second until it ends (scripts/renice-tree.sh; as root
# only), so that beside a busy machine it does not crawl at nice 19, and
# waits for it.
test: redis
	@dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT; \
	( nice -n 19 $(MAKE) --no-print-directory prebuild > /dev/null 2>&1; \
	  nice -n 19 $(MAKE) --no-print-directory fuzz benchsmoke > "$$dir/out" 2>&1; \
	  echo $$? > "$$dir/status" ) & pid=$$!; \
	$(MAKE) --no-print-directory vet unit simulation integration sim grpc; status=$$?; \
	while [ ! -e "$$dir/status" ]; do bash scripts/renice-tree.sh 0 $$pid; sleep 1; done; \
	wait $$pid; cat "$$dir/out"; \
	if [ $$status -eq 0 ]; then status=$$(cat "$$dir/status"); fi; exit $$status

# Compiles, in the order make test needs them, the test binaries of its
# later targets into a directory it then removes (each target links its
# own again; what is saved is the compiling), and each fuzz target with
# its instrumentation, fuzzed for one execution. The library's plain
# builds (make simulation's, benchsmoke's) leave out cmd/leasequota,
# whose test binary would have the root package's name in one directory:
# go test -c refuses the two, and built nothing before it was left out.
prebuild:
	@dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
	$(GO) test -c -o "$$dir/" $$($(GO) list ./... | grep -v '/cmd/leasequota$$') ; \
	(cd integration && $(GO) test -race -c -o "$$dir/" ./... && $(GO) test -c -o "$$dir/" .) ; \
	(cd cmd/leasequota-sim && $(GO) test -race -c -o "$$dir/" ./...) ; \
	(cd grpcquota && $(GO) test -race -c -o "$$dir/" ./...) ; \
	$(GO) test -run '^$$' -fuzz '^FuzzKey$$' -fuzztime 1x ./lease ; \
	$(GO) test -run '^$$' -fuzz '^FuzzQuotaValidate$$' -fuzztime 1x . ; \
	$(GO) test -run '^$$' -fuzz '^FuzzIPv4Host$$' -fuzztime 1x ./middleware ; \
	$(GO) test -run '^$$' -fuzz '^FuzzPutDigits$$' -fuzztime 1x ./internal/sfield

redis:
	@bash scripts/ensure-redis.sh

vet:
	$(GO) vet ./...
	cd grpcquota && $(GO) vet ./...
	cd integration && $(GO) vet ./...
	cd cmd/leasequota-sim && $(GO) vet ./...

# Every package under the race detector but internal/doccheck, which
# reads Markdown and Go source on one goroutine: 2 s without the race
# detector, 16 s with it. scripts/pkgtest.sh runs the packages one at a
# time, as go test -p 1 would, and builds their test binaries ahead while
# the root package's tests run (go test -p 1 builds each only when its
# turn comes: 295 s for this target on the 2-core development machine,
# against 248 s).
unit:
	GO=$(GO) bash scripts/pkgtest.sh -race -- -- $$($(GO) list ./... | grep -v '/internal/doccheck$$')
	$(GO) test -count=1 ./internal/doccheck

# The deterministic simulation of whole Limiters (sim_test.go), without
# the race detector so that thousands of scenarios fit, and 40 of them
# twice, to compare their traces; unit runs 40 with it, and 8 twice. Then the fleet simulation, its shapes, its comparison
# of reservations, its tenants within quota and its sparse tenants
# (sim_fleet_test.go; 100 s under the race detector, which unit skips:
# a test of it left out of this list runs nowhere in make test),
# syncer's simulations at their full simulated length, which unit runs
# for a quarter of it under the race detector, and syncer's queue models of
# a saturated Redis (80 s each under the race detector, which unit skips).
simulation:
	$(GO) test -count=1 -run '^TestSimulation$$|^TestSimulationReplay$$' -sim.seeds=1000 .
	$(GO) test -count=1 -run '^TestReservationsCutFleetCalls$$|^TestFleetSimulation$$|^TestFleetShapes$$|^TestFleetUnderQuotaCalls$$|^TestFleetSparseTenants$$' .
	$(GO) test -count=1 -run '^TestSim|^TestSaturated' ./syncer

simulation-long:
	$(GO) test -count=1 -timeout 30m -run '^TestSimulation$$' -sim.seeds=20000 .

# The fleet-scale simulation at full size, and the shapes 16 x 1,000 and
# 32 x 2,000, priced by internal/costmodel (a few GiB, a few minutes).
simulation-fleet:
	$(GO) test -count=1 -timeout 30m -run '^TestFleet' -sim.fleet -v .

# The two tests of a million and of 100,000 tenants check memory and
# scale, not races, and take 2 of the integration suite's 4 minutes under
# the race detector (15-75 s each, against 6 s without): they run in a
# second pass without it.
integration:
	cd integration && $(GO) test -race -count=1 -p 1 -skip '^TestManyTenants' ./...
	cd integration && $(GO) test -count=1 -run '^TestManyTenants' .

sim:
	cd cmd/leasequota-sim && $(GO) test -race -count=1 ./...

grpc:
	cd grpcquota && $(GO) test -race -count=1 ./...

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzKey$$' -fuzztime $(FUZZTIME) ./lease
	$(GO) test -run '^$$' -fuzz '^FuzzQuotaValidate$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzIPv4Host$$' -fuzztime $(FUZZTIME) ./middleware
	$(GO) test -run '^$$' -fuzz '^FuzzPutDigits$$' -fuzztime $(FUZZTIME) ./internal/sfield

# Every benchmark of the library's module once (-benchtime 1x), so that
# one that no longer runs fails make test rather than the next make bench;
# its figures mean nothing. Left out: BenchmarkTenantMemory (17 s a run)
# and the integration module's (minutes, and make bench's table).
benchsmoke:
	@out=$$(mktemp) && if $(GO) test -count=1 -run '^$$' -bench . -benchtime 1x -skip '^(BenchmarkTenantMemory|BenchmarkIdleTenantsCPU)$$' ./... > $$out 2>&1; \
		then rm -f $$out; echo "benchsmoke: every benchmark ran"; else cat $$out; rm -f $$out; exit 1; fi

bench: redis
	$(GO) test -run '^$$' -bench . -benchmem ./...
	cd grpcquota && $(GO) test -run '^$$' -bench . -benchmem ./...
	cd integration && $(GO) test -run '^$$' -bench . -skip '^BenchmarkCompare' -benchmem ./...
	cd cmd/leasequota-sim && $(GO) test -run '^$$' -bench . -benchmem ./...
	cd integration && $(GO) test -run '^$$' -bench '^BenchmarkCompare' -benchmem -count $(COMPARECOUNT) . | $(GO) run ./cmd/benchtable -echo
