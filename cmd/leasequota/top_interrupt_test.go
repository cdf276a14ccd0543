package main

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/redisserver"
	"github.com/leasequota/leasequota/lease"
)

// blockHook holds every Redis call (or pipeline) while block is set, until
// the call's context ends, and says on entered that one is held: a refresh
// in progress when the interrupt lands.
type blockHook struct {
	block   atomic.Bool
	entered chan struct{}
	once    sync.Once
}

func (h *blockHook) hold(ctx context.Context) (bool, error) {
	if !h.block.Load() {
		return false, nil
	}
	h.once.Do(func() { close(h.entered) })
	<-ctx.Done()
	return true, ctx.Err()
}

func (h *blockHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *blockHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if held, err := h.hold(ctx); held {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *blockHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if held, err := h.hold(ctx); held {
			return err
		}
		return next(ctx, cmds)
	}
}

// frameWriter is top's stdout: each frame (-json: one Write a frame) is
// counted and, when onFrame is set, handed to it before the Write returns,
// so before the next refresh starts.
type frameWriter struct {
	buf     bytes.Buffer
	frames  int
	onFrame func(n int)
}

func (w *frameWriter) Write(p []byte) (int, error) {
	w.frames++
	if w.onFrame != nil {
		w.onFrame(w.frames)
	}
	return w.buf.Write(p)
}

// TestTopInterruptEndsWithOneStatus: an interrupt (main's SIGINT context
// canceled) ends top with exit status 0 whichever moment it lands: during
// a refresh (a Redis call held by a hook until the cancel) or between two
// (top waiting out -interval), with -iterations N as without. With
// -iterations 3, an interrupt during a refresh exited 1 ("top: context
// canceled") and one between refreshes 0.
func TestTopInterruptEndsWithOneStatus(t *testing.T) {
	for _, iterations := range []int{3, 0} {
		for _, moment := range []string{"during the first refresh", "during the second refresh", "between refreshes"} {
			t.Run(moment+"/iterations "+strconv.Itoa(iterations), func(t *testing.T) {
				rdb := redisserver.Client(t)
				h := &blockHook{entered: make(chan struct{})}
				rdb.AddHook(h)
				lc, err := lease.NewClient(rdb, redisserver.Prefix(t))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				out := &frameWriter{}
				var stderr bytes.Buffer
				e := &env{client: lc, json: true, timeout: time.Minute, stdout: out, stderr: &stderr}
				interval := "10ms"
				landed := h.entered // closed once the interrupt can land
				switch moment {
				case "during the first refresh":
					h.block.Store(true)
				case "during the second refresh":
					out.onFrame = func(n int) { h.block.Store(n == 1) }
				case "between refreshes":
					// The first frame is printed, and the next refresh an
					// hour away: the cancel lands in top's wait.
					interval = "1h"
					betweenRefreshes := make(chan struct{})
					out.onFrame = func(n int) {
						if n == 1 {
							close(betweenRefreshes)
						}
					}
					landed = betweenRefreshes
				}
				done := make(chan int, 1)
				go func() {
					done <- report(&stderr, topCmd(ctx, e, []string{"-interval", interval, "-iterations", strconv.Itoa(iterations)}))
				}()
				select {
				case <-landed:
				case code := <-done:
					t.Fatalf("top ended with exit %d before the interrupt; stdout %q, stderr %q", code, out.buf.String(), stderr.String())
				}
				cancel()
				code := <-done
				if code != exitOK {
					t.Errorf("interrupted %s: exit %d, stderr %q; want %d", moment, code, stderr.String(), exitOK)
				}
				wantFrames := map[string]int{"during the first refresh": 0, "during the second refresh": 1, "between refreshes": 1}[moment]
				if out.frames != wantFrames {
					t.Errorf("interrupted %s: %d frames printed, want %d", moment, out.frames, wantFrames)
				}
			})
		}
	}
}
