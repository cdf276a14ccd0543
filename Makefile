# make demo   - run the simulator (embedded Redis) and write
#               leasequota-report.html
# make test   - make sure a Redis can be had, then vet and run every test
#               (race detector on, integration tests included), the nested
#               grpcquota module's too, and each fuzz target briefly
# make bench  - run the benchmarks
GO ?= go
FUZZTIME ?= 10s

.PHONY: demo test redis vet unit grpc fuzz bench

demo:
	$(GO) run ./cmd/leasequota-sim -report leasequota-report.html

test: redis vet unit grpc fuzz

redis:
	@bash scripts/ensure-redis.sh

vet:
	$(GO) vet ./...
	cd grpcquota && $(GO) vet ./...

unit:
	$(GO) test -race -count=1 -p 1 ./...

grpc:
	cd grpcquota && $(GO) test -race -count=1 ./...

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzKey$$' -fuzztime $(FUZZTIME) ./lease
	$(GO) test -run '^$$' -fuzz '^FuzzQuotaValidate$$' -fuzztime $(FUZZTIME) .

bench: redis
	$(GO) test -run '^$$' -bench . -benchmem ./...
