# make test   - make sure a Redis can be had, then vet and run every test
#               (race detector on, integration tests included)
# make bench  - run the benchmarks
GO ?= go

.PHONY: test redis vet bench

test: redis vet
	$(GO) test -race -count=1 ./...

redis:
	@bash scripts/ensure-redis.sh

vet:
	$(GO) vet ./...

bench: redis
	$(GO) test -run '^$$' -bench . -benchmem ./...
