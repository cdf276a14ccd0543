package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestAccountNotesNameTheStep: the account splits the spill by series
// bucket, Result.Step wide, which is 100 ms only up to -duration ~31s
// (Duration/300 beyond); the notes said "by 100 ms step" whatever it was.
func TestAccountNotesNameTheStep(t *testing.T) {
	a := &Account{Bound: 1000, Admitted: 900, SpillIdle: 100}
	res := &Result{Step: 200 * time.Millisecond, AccountT: time.Minute, Account: a,
		Classes: []ClassResult{{Name: "tight300/over", Rate: 300, Burst: 50, Account: a}}}
	var out bytes.Buffer
	writeAccountTable(&out, res)
	if s := out.String(); !strings.Contains(s, "by 200ms step") || strings.Contains(s, "100 ms") {
		t.Errorf("the account's notes do not name the 200ms step:\n%s", s)
	}
}
