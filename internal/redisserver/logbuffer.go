package redisserver

import (
	"bytes"
	"sync"
)

// LogBuffer collects a test logger's output: a bytes.Buffer that is safe
// for the concurrent writes of a limiter's goroutines. The zero value is
// ready to use.
type LogBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
