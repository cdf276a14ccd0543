package leasequota_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota"
)

// The examples need a Redis at localhost:6379, so they compile but do not
// run as tests (no Output comment).

func Example() {
	// ContextTimeoutEnabled lets WithRedisTimeout bound every Redis call.
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := leasequota.New(rdb,
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 200}),
		leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
			if tenant == "big-customer" {
				return leasequota.Quota{Rate: 5000, Burst: 10000}
			}
			return leasequota.Quota{Rate: 100, Burst: 200}
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background()) // returns unused leased tokens

	http.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		d := lim.AllowN(r.Context(), r.Header.Get("X-Tenant"), 1)
		if !d.Allowed {
			w.Header().Set("Retry-After", strconv.Itoa(int(d.RetryAfter.Seconds())+1))
			http.Error(w, "quota exceeded: "+d.Reason.String(), http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "done")
	})
}

func ExampleLimiter_WaitN() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	// A global cap on a downstream dependency, shared by every worker.
	lim, err := leasequota.New(rdb,
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 10, MaxLease: 2}),
		leasequota.WithFailureMode(leasequota.FailClosed))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := lim.WaitN(ctx, "payments", 1); err != nil {
		switch {
		case errors.Is(err, leasequota.ErrUnavailable):
			log.Print("Redis is down and the quota fails closed: try later")
		case errors.Is(err, context.DeadlineExceeded):
			log.Print("no token within 2s")
		}
		return
	}
	// call the payment provider
}

func ExampleLimiter_SetQuota() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := leasequota.New(rdb, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 200}))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	// Every instance applies the new quota within about a refresh interval.
	ctx := context.Background()
	if err := lim.SetQuota(ctx, "tenant-42", leasequota.Quota{Rate: 1000, Burst: 2000}); err != nil {
		log.Fatal(err)
	}
	q, ok, err := lim.GetQuota(ctx, "tenant-42")
	fmt.Println(q.Rate, ok, err)
}
