package syncer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/leasequota/leasequota/lease"
)

// replyError is an error reply as go-redis gives it (a redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestUnavailableReplies: the replies by which Redis says it runs no
// command are whole failures, wrapped as lease wraps them; replies about
// one command (OOM, as docs/failure-modes.md says, BUSYKEY, a script's
// own error) are not. The integration module's TestReadOnlyRedisIsAnOutage
// and TestBusyRedisIsAnOutage run READONLY and BUSY on real Redis;
// LOADING and MASTERDOWN are told by the same prefixes.
func TestUnavailableReplies(t *testing.T) {
	for _, tc := range []struct {
		reply string
		whole bool
	}{
		{"LOADING Redis is loading the dataset in memory", true},
		{"READONLY You can't write against a read only replica.", true},
		{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", true},
		{"NOREPLICAS Not enough good replicas to write.", true},
		{"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", true},
		{"OOM command not allowed when used memory > 'maxmemory'.", false},
		{"BUSYKEY Target key name already exists.", false},
		{"ERR user_script:1: leasequota: something", false},
	} {
		err := fmt.Errorf("lease: acquire: %w", replyError(tc.reply))
		if got := wholeFailure(err) != nil; got != tc.whole {
			t.Errorf("wholeFailure(%q) = %v, want %v", tc.reply, got, tc.whole)
		}
	}
	loading := fmt.Errorf("lease: acquire: %w", replyError("LOADING Redis is loading the dataset in memory"))
	oom := fmt.Errorf("lease: acquire: %w", replyError("OOM command not allowed"))
	if err := allUnavailable([]lease.Result{{Err: loading}, {Err: loading}}); !errors.Is(err, loading) {
		t.Errorf("a pipeline answered LOADING throughout: %v, want its LOADING", err)
	}
	if err := allUnavailable([]lease.Result{{Err: loading}, {Err: oom}}); err != nil {
		t.Errorf("a pipeline answered LOADING and OOM: %v, want nil (an OOM is about its command)", err)
	}
	if err := allUnavailable([]lease.Result{{Err: loading}, {}}); err != nil {
		t.Errorf("a pipeline answered LOADING and a grant: %v, want nil", err)
	}
	if err := allUnavailable(nil); err != nil {
		t.Errorf("no results: %v, want nil", err)
	}
}
