package lease

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// roundTenants is the tenants of one benchmarked pipeline: the syncer's
// batchSize.
const roundTenants = 1000

// BenchmarkAcquireRound measures the Go side of one pipeline of a sync
// round: AcquireMany of 1,000 tenants through a real go-redis client,
// whose connection goes to an in-process server that answers every
// script call at once with a canned reply of acquire.lua's shape. So it
// counts what a round costs the process — the arguments encoded, the
// commands built and written, the replies read and parsed — without
// Redis's time, whose noise would hide it; integration's
// BenchmarkSyncRound is the same round on a real Redis.
//
// "same" sends every tenant the same rate, burst, want and demand (the
// tenants of one quota); "distinct" gives each its own, so that no
// argument can be shared between tenants. "-batch8" sends 8 tenants per
// script call (WithBatch).
func BenchmarkAcquireRound(b *testing.B) {
	for _, batch := range []int{1, 8} {
		for _, shape := range []string{"same", "distinct"} {
			name := shape
			if batch > 1 {
				name += fmt.Sprintf("-batch%d", batch)
			}
			b.Run(name, func(b *testing.B) {
				c := fakeRoundClient(b, batch)
				reqs := make([]Request, roundTenants)
				for i := range reqs {
					reqs[i] = Request{Tenant: fmt.Sprintf("tenant-%05d", i), Limits: Limits{Rate: 1e9, Burst: 1 << 30}, Want: 10}
					if shape == "distinct" {
						reqs[i].Limits = Limits{Rate: 1000 + float64(i)/8, Burst: 2000 + int64(i)}
						reqs[i].Want, reqs[i].Demand = 300+int64(i), 500+float64(i)/3
					}
				}
				results := make([]Result, len(reqs))
				ctx := context.Background()
				round := func() {
					var err error
					if results, err = c.AcquireMany(ctx, reqs, results); err != nil {
						b.Fatal(err)
					}
					for _, r := range results {
						if r.Err != nil {
							b.Fatal(r.Err)
						}
					}
				}
				benchRounds(b, round)
			})
		}
	}
}

// BenchmarkReleaseRound is BenchmarkAcquireRound for ReleaseMany: the
// returns of a round, 1,000 tenants, "same" and "distinct" alike.
func BenchmarkReleaseRound(b *testing.B) {
	for _, shape := range []string{"same", "distinct"} {
		b.Run(shape, func(b *testing.B) {
			c := fakeRoundClient(b, 1)
			reqs := make([]ReleaseRequest, roundTenants)
			for i := range reqs {
				reqs[i] = ReleaseRequest{Tenant: fmt.Sprintf("tenant-%05d", i), Limits: Limits{Rate: 1e9, Burst: 1 << 30}, Amount: 5,
					Age: 1234 * time.Millisecond, Grant: GrantID(1e9 + i)}
				if shape == "distinct" {
					reqs[i].Limits = Limits{Rate: 1000 + float64(i)/8, Burst: 2000 + int64(i)}
					reqs[i].Amount = 300 + int64(i)
				}
			}
			ctx := context.Background()
			round := func() {
				for _, r := range c.ReleaseMany(ctx, reqs) {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			}
			benchRounds(b, round)
		})
	}
}

// benchRounds times round, one round of roundTenants tenants an op,
// after an untimed one that dials the connection, and reports ns/tenant.
func benchRounds(b *testing.B, round func()) {
	round()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/roundTenants, "ns/tenant")
}

// fakeRoundClient returns a Client with WithInstance and WithBatch(batch)
// on a go-redis client of a fake server (serveCanned).
func fakeRoundClient(b *testing.B, batch int) *Client {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serveCanned(conn)
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, DisableIdentity: true, PoolSize: 1})
	b.Cleanup(func() { rdb.Close() })
	c, err := NewClient(rdb, "bench:", WithInstance("bench", 2100*time.Millisecond), WithBatch(batch))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// cannedGrant is one tenant's reply of acquire.lua as a Redis sends it
// over RESP2, one bulk string: 10 granted, the tokens left, the time, 1
// instance, a share, nothing reserved, no pace, no wait, no rate share,
// no override.
const cannedGrant = "$48\r\n10 1073741814 1764633600123456 1 250000000 0  0 \r\n"

// cannedReturn is a reply of release.lua, one bulk string: the tokens
// after the return, the time, 5 credited.
const cannedReturn = "$29\r\n1073741819 1764633600123456 5\r\n"

// serveCanned answers conn's commands: EVALSHA with cannedGrant per
// tenant (numkeys/3 of them; an array of them for a batch), or with
// cannedReturn when its second key is a ReleasesKey; anything else
// (the connection's HELLO) with an error, which go-redis takes for a
// server of RESP2. It allocates nothing per command, so the benchmark's
// allocations are the client's.
func serveCanned(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReaderSize(conn, 64<<10)
	w := bufio.NewWriterSize(conn, 64<<10)
	var name [8]byte
	for {
		n, err := readRESPLen(r, '*')
		if err != nil {
			return
		}
		var nameLen, tenants int
		release := false
		for i := range n {
			l, err := readRESPLen(r, '$')
			if err != nil {
				return
			}
			arg, err := r.Peek(l)
			if err != nil {
				return
			}
			switch i {
			case 0:
				nameLen = copy(name[:], arg)
			case 2:
				keys := 0
				for _, c := range arg {
					keys = 10*keys + int(c-'0')
				}
				tenants = keys / 3
			case 4:
				release = len(arg) >= len(releasesSuffix) && string(arg[len(arg)-len(releasesSuffix):]) == releasesSuffix
			}
			if _, err := r.Discard(l + 2); err != nil {
				return
			}
		}
		switch {
		case string(name[:nameLen]) != "evalsha":
			w.WriteString("-ERR unknown command\r\n")
		case release:
			w.WriteString(cannedReturn)
		case tenants == 1:
			w.WriteString(cannedGrant)
		default:
			w.WriteString("*")
			w.WriteString(strconv.Itoa(tenants))
			w.WriteString("\r\n")
			for range tenants {
				w.WriteString(cannedGrant)
			}
		}
		if r.Buffered() == 0 {
			if w.Flush() != nil {
				return
			}
		}
	}
}

// readRESPLen reads a line "<kind><n>\r\n" and returns n.
func readRESPLen(r *bufio.Reader, kind byte) (int, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 4 || line[0] != kind || line[len(line)-2] != '\r' {
		return 0, io.ErrUnexpectedEOF
	}
	n := 0
	for _, c := range line[1 : len(line)-2] {
		if c < '0' || c > '9' {
			return 0, io.ErrUnexpectedEOF
		}
		n = 10*n + int(c-'0')
	}
	return n, nil
}
